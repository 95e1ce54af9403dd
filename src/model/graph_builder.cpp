// The blocks architectures are written with (norms, the layer's attention
// block, gated feed-forward, experts) and the inputs of a batch, with
// llama.cpp's node names.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "model/arch/architecture.h"
#include "model/graph_builder.h"
#include "model/sequence_state.h"
#include "qlens/error.h"
#include "qlens/model.h"

namespace qlens {

GraphInputs GraphInputs::make(Graph& g, int64_t n_tokens, int64_t n_kv, bool swa, int64_t pos_per_token) {
  GraphInputs in;
  in.tokens = g.new_tensor(DType::I32, {n_tokens}, "inp_tokens");
  in.positions = g.new_tensor(DType::I32, {n_tokens * pos_per_token}, "inp_pos");
  in.mask = g.new_tensor(DType::F32, {n_kv, n_tokens}, "KQ_mask");
  if (swa) in.mask_swa = g.new_tensor(DType::F32, {n_kv, n_tokens}, "KQ_mask_swa");
  for (Tensor* t : {in.tokens, in.positions, in.mask, in.mask_swa})
    if (t) t->flags |= kFlagInput;
  return in;
}

void GraphInputs::write(std::span<const Token> batch, int64_t n_past, int64_t n_swa) const {
  // An input the graph does not read (a graph of a layer range) is null.
  const int64_t N = static_cast<int64_t>(batch.size());
  const int64_t n_kv = n_past + N;
  const int64_t per_token = positions && N > 0 ? positions->ne[0] / N : 1;
  if ((tokens && tokens->ne[0] != N) || (positions && positions->ne[0] != N * per_token) ||
      (per_token != 1 && per_token != 4) || (mask && mask->ne[0] != n_kv))
    throw Error("graph inputs: a batch of " + std::to_string(N) + " at position " + std::to_string(n_past) +
                " does not fit the graph's inputs");
  if (tokens) tensor_write(*tokens, batch.data(), 0, N * sizeof(Token));
  if (positions) {
    // Section-major: entry k N + i is token i's k-th position; a text
    // token's fourth is 0 (llama.cpp's text positions for rope_multi).
    std::vector<int32_t> pos(N * per_token, 0);
    for (int64_t k = 0; k < std::min<int64_t>(per_token, 3); ++k)
      for (int64_t i = 0; i < N; ++i) pos[k * N + i] = static_cast<int32_t>(n_past + i);
    tensor_write(*positions, pos.data(), 0, pos.size() * sizeof(int32_t));
  }
  if (!mask && !mask_swa) return;
  constexpr float kHidden = -std::numeric_limits<float>::infinity();
  std::vector<float> m(N * n_kv);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < n_kv; ++j) m[i * n_kv + j] = j <= n_past + i ? 0.0f : kHidden;
  if (mask) tensor_write(*mask, m.data(), 0, m.size() * sizeof(float));
  if (!mask_swa) return;
  // llama.cpp's standard window: a key n_swa or more positions back is hidden.
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < n_kv; ++j)
      if (n_past + i - j >= n_swa) m[i * n_kv + j] = kHidden;
  tensor_write(*mask_swa, m.data(), 0, m.size() * sizeof(float));
}

GraphBuilder::GraphBuilder(const Context& ctx, Graph& g, const GraphInputs& in, bool all_logits)
    : ctx_(ctx), g_(g), in_(in), all_logits_(all_logits), n_tokens_(in.tokens->ne[0]) {
  if (in.mask->ne[0] != ctx.n_past() + n_tokens_)
    throw Error("graph inputs: the mask covers " + std::to_string(in.mask->ne[0]) + " positions, the context " +
                std::to_string(ctx.n_past() + n_tokens_));
  if (ctx.model().hparams().has_swa() && !in.mask_swa)
    throw Error("graph inputs: " + ctx.model().path() + " has sliding-window layers and needs KQ_mask_swa");
}

const HParams& GraphBuilder::hparams() const { return ctx_.model().hparams(); }

int64_t GraphBuilder::n_past() const { return ctx_.n_past(); }

Tensor* GraphBuilder::weight(Role role, int il) const { return ctx_.weight(ctx_.model().get(role, il)); }

Tensor* GraphBuilder::matmul(Role role, int il, Tensor* x) {
  Tensor* product = mul_mat(g_, weight(role, il), x);
  if (Tensor* scale = ctx_.model().scale_of(ctx_.model().get(role, il))) product = mul(g_, product, ctx_.weight(scale));
  return product;
}

Tensor* GraphBuilder::embed() {
  cur_ = ctx_.model().arch().embed(*this);
  g_.build(cur_);
  return cur_;
}

Tensor* GraphBuilder::residual_input() {
  cur_ = g_.new_tensor(DType::F32, {hparams().n_embd, n_tokens_}, "inp_residual");
  cur_->flags |= kFlagInput;
  return cur_;
}

Tensor* GraphBuilder::layer(int il) {
  cur_ = ctx_.model().arch().layer(*this, il, cur_);
  g_.build(cur_);
  return cur_;
}

Tensor* GraphBuilder::output(int64_t first_row) {
  if (first_row > 0)
    cur_ = view(g_, cur_, {cur_->ne[0], cur_->ne[1] - first_row}, {cur_->nb[1]}, first_row * cur_->nb[1]);
  cur_ = ctx_.model().arch().output(*this, cur_);
  cur_->flags |= kFlagOutput;
  g_.build(cur_);
  return cur_;
}

Tensor* GraphBuilder::token_embedding() {
  return named(get_rows(g_, weight(Role::TokenEmbd), in_.tokens), "inp_embd");
}

Tensor* GraphBuilder::norm(Tensor* x, Role role, int il, const std::string& name, int norm_layer) {
  Tensor* cur = named(rms_norm(g_, x, hparams().rms_eps), "norm", norm_layer);
  return named(mul(g_, cur, weight(role, il)), name, il);
}

Tensor* GraphBuilder::last_row_if_final(Tensor* t, int il) {
  if (il != hparams().n_layer - 1 || all_logits_ || n_tokens_ <= 1) return t;
  return view(g_, t, {t->ne[0]}, {}, static_cast<size_t>(n_tokens_ - 1) * t->nb[1]);
}

Tensor* GraphBuilder::residual_layer(Tensor* in, int il, const char* residual_name, Role ffn_norm,
                                     const char* ffn_norm_name, const std::function<Tensor*(Tensor*)>& ffn) {
  Tensor* cur = norm(in, Role::AttnNorm, il, "attn_norm");
  cur = attention(cur, il);
  cur = last_row_if_final(cur, il);
  in = last_row_if_final(in, il);
  Tensor* residual = named(add(g_, cur, in), residual_name, il);
  cur = ffn(norm(residual, ffn_norm, il, ffn_norm_name));
  return named(add(g_, cur, residual), "l_out", il);
}

Tensor* GraphBuilder::pre_norm_block(Tensor* in, int il, FfnActivation act) {
  return residual_layer(in, il, "ffn_inp", Role::FfnNorm, "ffn_norm", [&](Tensor* cur) {
    return weight(Role::FfnGateInp, il) ? moe_feed_forward(cur, il, act) : feed_forward(cur, il, act);
  });
}

Tensor* GraphBuilder::attention(Tensor* cur, int il) {
  return ctx_.model().attention_block(il).build(*this, il, cur, ctx_.state().layer(il));
}

void GraphBuilder::set_layer_kv(int il, const LayerKv& kv) {
  if (static_cast<int>(layer_kv_.size()) <= il) layer_kv_.resize(il + 1);
  layer_kv_[il] = kv;
}

LayerKv GraphBuilder::layer_kv(int il) const {
  if (il < 0 || il >= static_cast<int>(layer_kv_.size()) || !layer_kv_[il].k)
    throw Error("graph: a layer reads the KV cache of layer " + std::to_string(il) +
                ", which this graph does not run (a graph of a layer range must include it)");
  return layer_kv_[il];
}

Tensor* GraphBuilder::per_layer_inputs() const {
  if (!per_layer_inputs_)
    throw Error("graph: " + ctx_.model().path() + " needs its per-layer inputs, which only the embedding step makes");
  return per_layer_inputs_;
}

Tensor* GraphBuilder::feed_forward(Tensor* cur, int il, FfnActivation act, const FfnRoles& roles,
                                   const char* out_name) {
  Graph& g = g_;
  Tensor *gate, *up;
  const bool scaled = ctx_.model().arch().scales_feed_forward();
  auto project = [&](Role role, Tensor* x) { return scaled ? matmul(role, il, x) : mul_mat(g, weight(role, il), x); };
  if (weight(roles.gate, il)) {
    gate = named(project(roles.gate, cur), "ffn_gate", il);
    up = named(project(roles.up, cur), "ffn_up", il);
  } else {
    // ffn_up holds gate | up (Phi-3): the halves of one projection.
    Tensor* both = named(project(roles.up, cur), "ffn_up", il);
    const int64_t F = both->ne[0] / 2;
    gate = view(g, both, {F, both->ne[1]}, {both->nb[1]}, 0);
    up = view(g, both, {F, both->ne[1]}, {both->nb[1]}, F * sizeof(float));
  }
  gate = act == FfnActivation::Silu ? named(silu(g, gate), "ffn_silu", il) : named(gelu(g, gate), "ffn_gelu", il);
  // llama.cpp names the product ffn_geglu for GELU (ffn_gate_par in the
  // dumps our llama tests read).
  Tensor* par = named(mul(g, gate, up), act == FfnActivation::Silu ? "ffn_gate_par" : "ffn_geglu", il);
  return named(project(roles.down, par), out_name, il);
}

GraphBuilder::Routing GraphBuilder::route(Tensor* cur, int il) {
  return route_logits(mul_mat(g_, weight(Role::FfnGateInp, il), cur), il);
}

GraphBuilder::Routing GraphBuilder::route_logits(Tensor* logits, int il) {
  const HParams& hp = hparams();
  Graph& g = g_;
  const int64_t N = logits->ne[1], E = hp.n_expert, U = hp.n_expert_used;
  named(logits, "ffn_moe_logits", il);
  if (Tensor* bias = weight(Role::FfnGateInpBias, il)) logits = named(add(g, logits, bias), "ffn_moe_logits_biased", il);
  // SoftmaxWeight ranks the logits themselves (llama.cpp names them "ffn_moe_probs" then).
  Tensor* probs = logits;
  if (hp.expert_gating == ExpertGating::Softmax) probs = soft_max(g, logits, nullptr, 1.0f);
  if (hp.expert_gating == ExpertGating::Sigmoid) probs = sigmoid(g, logits);
  named(probs, "ffn_moe_probs", il);
  // The selection bias (DeepSeek V3) and the groups change which experts are
  // chosen, not their weights.
  Tensor* selection = probs;
  if (Tensor* bias = weight(Role::FfnExpProbsB, il)) selection = named(add(g, probs, bias), "ffn_moe_probs_biased", il);
  if (hp.n_expert_groups > 1) selection = best_groups_only(selection, il);
  Tensor* selected = named(top_k(g, selection, U), "ffn_moe_topk", il);
  named(selected->src[0], "ffn_moe_argsort", il);
  Tensor* weights = named(get_rows(g, reshape(g, probs, {1, E, N}), selected), "ffn_moe_weights", il);
  if (hp.expert_gating == ExpertGating::SoftmaxWeight)
    weights = reshape(g, named(soft_max(g, reshape(g, weights, {U, N}), nullptr, 1.0f), "ffn_moe_weights_softmax", il),
                      {1, U, N});
  if (hp.expert_weights_norm) {
    Tensor* w = reshape(g, weights, {U, N});
    Tensor* sum = named(sum_rows(g, w), "ffn_moe_weights_sum", il);
    // The smallest normal F16, as llama.cpp clamps: no division by zero.
    sum = named(clamp(g, sum, 6.103515625e-5f, std::numeric_limits<float>::infinity()), "ffn_moe_weights_sum_clamped",
                il);
    weights = reshape(g, named(div(g, w, sum), "ffn_moe_weights_norm", il), {1, U, N});
  }
  if (hp.expert_weights_scale != 0.0f && hp.expert_weights_scale != 1.0f)
    weights = named(scale(g, weights, hp.expert_weights_scale), "ffn_moe_weights_scaled", il);
  return {selected, weights};
}

Tensor* GraphBuilder::deepseek_moe_feed_forward(Tensor* cur, int il, const char* shared_name) {
  if (il < hparams().n_layer_dense_lead) return feed_forward(cur, il, FfnActivation::Silu);
  Tensor* moe = moe_feed_forward(cur, il, FfnActivation::Silu);
  if (hparams().n_expert_shared == 0) return moe;
  Tensor* shared = feed_forward(cur, il, FfnActivation::Silu,
                                {Role::FfnGateShexp, Role::FfnUpShexp, Role::FfnDownShexp}, shared_name);
  return named(add(g_, moe, shared), "ffn_out", il);
}

// As llama.cpp's build_moe_ffn: a group's score is the sum of its two best
// experts' scores; the experts of the n_group_used best groups keep theirs,
// the others get -inf. The groups' rows are [P, G * N] while they are ranked
// (get_rows then takes 2-D ids), which gives llama.cpp's sums.
Tensor* GraphBuilder::best_groups_only(Tensor* selection, int il) {
  const HParams& hp = hparams();
  Graph& g = g_;
  const int64_t N = selection->ne[1], G = hp.n_expert_groups, P = hp.n_expert / G;
  Tensor* groups = reshape(g, selection, {P, G, N});
  Tensor* flat = reshape(g, selection, {P, G * N});
  Tensor* best_two = top_k(g, flat, 2);                                                 // [2, G N]
  Tensor* best_scores = get_rows(g, reshape(g, flat, {1, P, G * N}), best_two);        // [1, 2, G N]
  Tensor* group_scores = sum_rows(g, reshape(g, best_scores, {2, G * N}));             // [1, G N]
  Tensor* chosen = named(top_k(g, reshape(g, group_scores, {G, N}), hp.n_group_used), "ffn_moe_group_topk", il);
  Tensor* kept = get_rows(g, groups, chosen);                                          // [P, used, N]
  Tensor* masked = set_rows(g, fill(g, groups, -std::numeric_limits<float>::infinity()), kept, chosen);
  return named(reshape(g, masked, {hp.n_expert, N}), "ffn_moe_probs_masked", il);
}

Tensor* GraphBuilder::experts(Tensor* cur, int il, const Routing& routing, FfnActivation act) {
  Graph& g = g_;
  const int64_t n_embd = cur->ne[0], N = cur->ne[1], U = routing.selected->ne[0];
  Tensor* x = reshape(g, cur, {n_embd, 1, N});
  // An expert matrix's rows for each slot, times the expert's scale where
  // the model has one (Gemma 4's ffn_down_exps.scale), plus its bias row
  // where the model has biases (bias: a role, or null for none).
  auto project = [&](Role role, std::optional<Role> bias, Tensor* in, const std::string& name) {
    Tensor* t = named(mul_mat_id(g, weight(role, il), in, routing.selected), name, il);
    if (Tensor* s = ctx_.model().scale_of(ctx_.model().get(role, il))) {
      // Each slot's expert's scale: the [1, n_expert] row, seen once per
      // token (a stride of 0), indexed by the slots' ids.
      Tensor* w = ctx_.weight(s);
      Tensor* rows = view(g, w, {1, w->ne[0], N}, {w->nb[0], 0}, 0);
      t = named(mul(g, t, get_rows(g, rows, routing.selected)), name + "_scaled", il);
    }
    if (Tensor* b = bias ? weight(*bias, il) : nullptr)
      t = named(add_id(g, t, b, routing.selected), name + "_biased", il);
    return t;
  };
  Tensor *up, *gate;
  if (weight(Role::FfnGateUpExps, il)) {
    // gate | up rows per expert in one product, then the halves as views.
    Tensor* both = project(Role::FfnGateUpExps, std::nullopt, x, "ffn_moe_gate_up");
    const int64_t F = both->ne[0] / 2;
    gate = named(view(g, both, {F, both->ne[1], both->ne[2]}, {both->nb[1], both->nb[2]}, 0), "ffn_moe_gate", il);
    up = named(view(g, both, {F, both->ne[1], both->ne[2]}, {both->nb[1], both->nb[2]}, F * sizeof(float)),
               "ffn_moe_up", il);
  } else {
    up = project(Role::FfnUpExps, Role::FfnUpExpsBias, x, "ffn_moe_up");
    gate = project(Role::FfnGateExps, Role::FfnGateExpsBias, x, "ffn_moe_gate");
  }
  Tensor* par;
  if (act == FfnActivation::SwigluOai) {
    par = named(glu(g, GluKind::SwigluOai, gate, up, 1.702f, 7.0f), "ffn_moe_swiglu_oai", il);
  } else {
    gate = act == FfnActivation::Silu ? named(silu(g, gate), "ffn_moe_silu", il) : named(gelu(g, gate), "ffn_moe_gelu", il);
    par = named(mul(g, gate, up), act == FfnActivation::Silu ? "ffn_moe_swiglu" : "ffn_moe_geglu", il);
  }
  Tensor* down = project(Role::FfnDownExps, Role::FfnDownExpsBias, par, "ffn_moe_down");
  Tensor* weighted = named(mul(g, down, routing.weights), "ffn_moe_weighted", il);
  // The slots' rows summed in slot order, as llama.cpp adds its views.
  Tensor* out = nullptr;
  for (int64_t u = 0; u < U; ++u) {
    Tensor* slot = view(g, weighted, {n_embd, N}, {weighted->nb[2]}, u * weighted->nb[1]);
    out = out ? add(g, out, slot) : slot;
  }
  if (U == 1) out = cont(g, out);
  return named(out, "ffn_moe_out", il);
}

}  // namespace qlens
