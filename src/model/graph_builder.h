// Building the graph of one batch: its inputs, and the blocks architectures
// are written with. Private to src/model: tools see a Model and a Context.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "qlens/model.h"

namespace qlens {

// The inputs of one batch's graph, shared by the models of a ContextPair.
struct GraphInputs {
  Tensor* tokens = nullptr;     // I32 [N]       "inp_tokens"
  Tensor* positions = nullptr;  // I32 [N]       "inp_pos" (I32 [4 N], section-major, for the multi-section rope)
  Tensor* mask = nullptr;       // F32 [n_kv, N] "KQ_mask": causal
  Tensor* mask_swa = nullptr;   // F32 [n_kv, N] "KQ_mask_swa": causal and sliding window (null when unused)

  // pos_per_token: HParams::n_pos_per_token() (1, or 4 for rope_multi).
  static GraphInputs make(Graph& g, int64_t n_tokens, int64_t n_kv, bool swa, int64_t pos_per_token = 1);
  // Writes tokens, positions n_past.. (four per token when the graph holds
  // four: p, p, p, 0 as llama.cpp gives a text token) and the masks (a query at position p
  // sees keys at positions <= p, and with the window only those > p - n_swa).
  void write(std::span<const Token> batch, int64_t n_past, int64_t n_swa) const;
};

// The keys and values a standard attention layer attends to: views of its
// cache over the batch's n_kv positions, K [D, n_kv, heads] and V
// transposed [n_kv, D, heads], which depend on the batch's stores.
struct LayerKv {
  Tensor* k = nullptr;
  Tensor* v = nullptr;
};

// Activation of a gated feed-forward: act(gate) * up; SwigluOai is
// gpt-oss's clamped SwiGLU (alpha 1.702, limit 7, as llama.cpp hard-codes).
enum class FfnActivation { Silu, Gelu, SwigluOai };

// Builds the graph of one batch for a context step by step (embedding, each
// layer, output), adding each step's nodes to the graph's order as it goes,
// so that the graphs of two models can be interleaved layer by layer in one
// Graph (qlens compare). The steps are the architecture's (src/model/arch/);
// the blocks below are what architectures are written with.
class GraphBuilder {
 public:
  // The batch goes at ctx.n_past(); the masks must cover n_past + N positions.
  GraphBuilder(const Context& ctx, Graph& g, const GraphInputs& in, bool all_logits);
  Tensor* embed();        // the embedded batch
  Tensor* layer(int il);  // returns "l_out-il"
  Tensor* output(int64_t first_row = 0);  // "result_output" (kFlagOutput) of rows first_row..
  // Starts from a given residual stream instead of the embedding: the input
  // "inp_residual", F32 [n_embd, N] (layer-range decoding).
  Tensor* residual_input();
  Tensor* current() const { return cur_; }

  // ---- for architecture files ----
  Graph& graph() const { return g_; }
  const HParams& hparams() const;
  const GraphInputs& inputs() const { return in_; }
  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_past() const;  // positions before this batch
  // The tensor the graph reads for a weight (a replacement, its device copy,
  // or the model's); null for an absent optional tensor.
  Tensor* weight(Role role, int il = -1) const;
  // weight(role, il) times x, times the weight's ".scale" where the model has
  // one (Model::scale_of; llama.cpp's build_lora_mm).
  Tensor* matmul(Role role, int il, Tensor* x);

  // get_rows of the token embedding: "inp_embd".
  Tensor* token_embedding();
  // RMS norm ("norm", layer norm_layer) times the role's weight, named `name`.
  Tensor* norm(Tensor* x, Role role, int il, const std::string& name, int norm_layer);
  Tensor* norm(Tensor* x, Role role, int il, const std::string& name) { return norm(x, role, il, name, il); }
  // The attention block of layer il (the one the architecture picked) on
  // the normed input, with the layer's state ("kqv_out-il" for attention).
  Tensor* attention(Tensor* cur, int il);
  // The cache views layer il's attention built in this graph, for the layers
  // that share its KV cache (an error when layer il is not in this graph).
  void set_layer_kv(int il, const LayerKv& kv);
  LayerKv layer_kv(int il) const;
  // A stream of values beside the residual one, made by the embedding step
  // for the layers (Gemma 4's per-layer embeddings: [n_embd_per_layer, N,
  // n_layer]); null when the architecture has none.
  void set_per_layer_inputs(Tensor* t) { per_layer_inputs_ = t; }
  Tensor* per_layer_inputs() const;
  // Gated feed-forward: down(act(gate(x)) * up(x)), named `out_name`
  // ("ffn_out-il"), with the layer's dense matrices or others (the shared
  // experts' ffn_*_shexp).
  struct FfnRoles {
    Role gate = Role::FfnGate, up = Role::FfnUp, down = Role::FfnDown;
  };
  Tensor* feed_forward(Tensor* cur, int il, FfnActivation act, const FfnRoles& roles, const char* out_name);
  Tensor* feed_forward(Tensor* cur, int il, FfnActivation act) { return feed_forward(cur, il, act, {}, "ffn_out"); }
  // DeepSeek-style feed-forward (deepseek2, glm4moe): dense (SiLU) in the
  // leading layers, else the experts ("ffn_moe_out") plus the shared
  // experts, one dense feed-forward of the ffn_*_shexp matrices named
  // `shared_name`; their sum "ffn_out-il".
  Tensor* deepseek_moe_feed_forward(Tensor* cur, int il, const char* shared_name);
  // A mixture of experts: the router (with its bias where the model has
  // one) picks each token's experts and their weights by the model's
  // gating, its selection bias and its groups ("ffn_moe_topk",
  // "ffn_moe_weights..."); the experts' gated
  // feed-forwards of the token (with their rows' biases where the model has
  // them) are weighted and summed ("ffn_moe_out").
  // Shared experts (Qwen2-MoE, DeepSeek) are a dense feed_forward added to
  // that sum, with the router unchanged.
  struct Routing {
    Tensor* selected;  // I32 [n_expert_used, N]: expert ids, best first
    Tensor* weights;   // F32 [1, n_expert_used, N]
  };
  Routing route(Tensor* cur, int il);
  // The same from router logits computed otherwise (Gemma 4's router reads
  // its own norm of the residual): "ffn_moe_logits" onwards.
  Routing route_logits(Tensor* logits, int il);
  // Grouped routing: the scores of the experts outside the n_group_used
  // groups with the best two-expert sums set to -inf ("ffn_moe_probs_masked").
  Tensor* best_groups_only(Tensor* selection, int il);
  Tensor* experts(Tensor* cur, int il, const Routing& routing, FfnActivation act);
  Tensor* moe_feed_forward(Tensor* cur, int il, FfnActivation act) { return experts(cur, il, route(cur, il), act); }
  // On the last layer, when only the last token's logits are wanted, the
  // rest of the layer sees only the last row (as llama.cpp's inp_out_ids).
  Tensor* last_row_if_final(Tensor* t, int il);
  // The pre-norm residual layer most architectures share: attn_norm, the
  // layer's attention block, the residual (named `residual_name`: "ffn_inp"
  // in most graphs), the norm of `ffn_norm` (named `ffn_norm_name`), the
  // feed-forward `ffn`, the residual ("l_out").
  Tensor* residual_layer(Tensor* in, int il, const char* residual_name, Role ffn_norm, const char* ffn_norm_name,
                         const std::function<Tensor*(Tensor*)>& ffn);
  // The pre-norm block of llama and its descendants (Qwen 2/3, Phi-3):
  // attn_norm, attention, residual ("ffn_inp"), ffn_norm, feed-forward
  // (mixture of experts where the layer has a router), residual ("l_out").
  Tensor* pre_norm_block(Tensor* in, int il, FfnActivation act);

 private:
  const Context& ctx_;
  Graph& g_;
  GraphInputs in_;
  bool all_logits_;
  int64_t n_tokens_;
  Tensor* cur_ = nullptr;  // the result of the last step
  std::vector<LayerKv> layer_kv_;
  Tensor* per_layer_inputs_ = nullptr;
};


}  // namespace qlens
