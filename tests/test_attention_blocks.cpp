// Attention blocks (src/model/attention.h): the standard block every
// architecture picks today, and two test doubles that show the interface
// carries the other kinds before their kernels exist:
//
// - a latent double: a cache of its own layout (one tensor per layer, each
//   position's normed input and roped keys in one row), values recomputed
//   from the cached inputs; it must give standard attention's logits;
// - a recurrent double: a fixed-size state per sequence (the sum of every
//   position's normed input so far), each position's output the mean of the
//   inputs up to it; it must give the same logits whatever the batching,
//   start from zero for a new sequence, and be left as it was by a stopped
//   batch.
//
// A hybrid model (recurrent layer 0, latent layer 1) mixes them per layer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "model/arch/architecture.h"
#include "model/sequence_state.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace qlens {
namespace {

// ---- the doubles

class LatentDouble final : public AttentionBlock {
 public:
  explicit LatentDouble(bool rope_keys = true) : rope_keys_(rope_keys) {}
  const char* kind() const override { return "latent"; }
  StateKind state_kind() const override { return StateKind::PerPosition; }

  std::vector<StateSpec> state(const HParams& hp, int il, int64_t n_ctx, DType cache_type) const override {
    return {{"cache_latent_l" + std::to_string(il), cache_type, {hp.n_embd + hp.n_embd_kv(), n_ctx, 1, 1}}};
  }

  Tensor* build(GraphBuilder& b, int il, Tensor* cur, std::span<Tensor* const> state) const override {
    const HParams& hp = b.hparams();
    Graph& g = b.graph();
    const int64_t N = b.n_tokens(), n_past = b.n_past(), n_kv = n_past + N, D = hp.head_dim, E = hp.n_embd;
    const int64_t KV = hp.n_embd_kv();
    Tensor* cache = state[0];
    const size_t es = type_traits(cache->type).block_bytes, row = cache->nb[1];
    auto roped = [&](Role w, int64_t heads) {
      Tensor* t = reshape(g, mul_mat(g, b.weight(w, il), cur), {D, heads, N});
      if (w == Role::AttnK && !rope_keys_) return t;
      return rope(g, t, b.inputs().positions, static_cast<int>(hp.n_rot), hp.rope_mode, hp.rope_freq_base,
                  hp.rope_freq_scale, nullptr);
    };
    Tensor* q = roped(Role::AttnQ, hp.n_head);
    Tensor* k = roped(Role::AttnK, hp.n_head_kv);
    Tensor* x_stored = cpy(g, cur, view(g, cache, {E, N}, {row}, n_past * row));
    Tensor* k_stored = cpy(g, reshape(g, k, {KV, N}), view(g, cache, {KV, N}, {row}, n_past * row + E * es));
    Tensor* latent = view(g, cache, {E, n_kv}, {row}, 0);
    Tensor* keys = view(g, cache, {D, n_kv, hp.n_head_kv}, {row, D * es}, E * es);
    latent->src[1] = x_stored;
    keys->src[1] = k_stored;
    Tensor* values = mul_mat(g, b.weight(Role::AttnV, il), latent);  // [KV, n_kv]
    values = reshape(g, cont(g, transpose(g, values)), {n_kv, D, hp.n_head_kv});
    Tensor* kq = mul_mat(g, keys, permute(g, q, 0, 2, 1, 3));
    kq = soft_max(g, kq, b.inputs().mask, 1.0f / std::sqrt(static_cast<float>(D)));
    Tensor* kqv = cont(g, permute(g, mul_mat(g, values, kq), 0, 2, 1, 3));
    return mul_mat(g, b.weight(Role::AttnOutput, il), reshape(g, kqv, {D * hp.n_head, N}));
  }

 private:
  bool rope_keys_;
};

class RecurrentDouble final : public AttentionBlock {
 public:
  const char* kind() const override { return "recurrent"; }
  StateKind state_kind() const override { return StateKind::Recurrent; }

  std::vector<StateSpec> state(const HParams& hp, int il, int64_t, DType) const override {
    return {{"state_sum_l" + std::to_string(il), DType::F32, {hp.n_embd, 1, 1, 1}}};
  }

  // y_t = (S + x_0 + ... + x_t) / (n_past + t + 1), S the sum of the inputs
  // before the batch. The causal mask's softmax is that average's weights:
  // 1 / (n_past + t + 1) on every position up to t.
  Tensor* build(GraphBuilder& b, int, Tensor* cur, std::span<Tensor* const> state) const override {
    Graph& g = b.graph();
    const int64_t N = b.n_tokens(), n_past = b.n_past(), E = b.hparams().n_embd;
    Tensor* sum_before = scale(g, state[0], 1.0f);  // a copy: the state is overwritten below
    Tensor* weights = soft_max(g, b.inputs().mask, nullptr, 1.0f);  // [n_kv, N]
    Tensor* x_t = cont(g, transpose(g, cur));                          // [N, E]
    Tensor* in_batch = cont(g, view(g, weights, {N, N}, {weights->nb[1]}, n_past * sizeof(float)));
    Tensor* first = cont(g, view(g, weights, {1, N}, {weights->nb[1]}, 0));
    Tensor* y = add(g, mul_mat(g, x_t, in_batch), mul_mat(g, reshape(g, sum_before, {1, E}), first));
    Tensor* sum_after = add(g, sum_before, reshape(g, sum_rows(g, x_t), {E}));
    g.build(cpy(g, sum_after, state[0]));
    return y;
  }
};

// llama's graph and tables with the attention blocks a function picks.
class WithBlocks final : public Architecture {
 public:
  using Pick = std::unique_ptr<AttentionBlock> (*)(int il);
  explicit WithBlocks(Pick pick) : pick_(pick) {}
  const char* name() const override { return "llama"; }
  void read_hparams(const gguf::File& f, HParams& hp) const override { llama().read_hparams(f, hp); }
  void write_hparams(gguf::Writer& w, const HParams& hp) const override { llama().write_hparams(w, hp); }
  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override { return llama().tensors(hp, il); }
  std::unique_ptr<AttentionBlock> attention(const HParams&, int il) const override { return pick_(il); }
  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override { return llama().layer(b, il, in); }

 private:
  static const Architecture& llama() { return llama_architecture(); }
  Pick pick_;
};

const WithBlocks kLatent([](int) -> std::unique_ptr<AttentionBlock> { return std::make_unique<LatentDouble>(); });
const WithBlocks kLatentKeysNotRoped([](int) -> std::unique_ptr<AttentionBlock> {
  return std::make_unique<LatentDouble>(/*rope_keys=*/false);
});
const WithBlocks kHybrid([](int il) -> std::unique_ptr<AttentionBlock> {
  if (il == 0) return std::make_unique<RecurrentDouble>();
  return std::make_unique<LatentDouble>();
});

// ---- helpers

using test::tiny_model_path;

std::vector<Token> some_tokens(const Model& m, size_t n) { return test::spread_tokens(m.hparams().n_vocab, n); }

ContextOptions options(int64_t n_batch) {
  ContextOptions o;
  o.n_ctx = 64;
  o.n_batch = n_batch;
  o.n_threads = 2;
  o.cpu = test::cpu_options();
  o.cache_type = DType::F32;  // the latent double multiplies cached inputs: keep them exact
  return o;
}

// Every token's logits, decoding `tokens` in one call.
std::vector<float> all_logits(Context& ctx, const std::vector<Token>& tokens) {
  EXPECT_TRUE(ctx.decode(tokens, true));
  std::vector<float> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto l = ctx.logits(static_cast<int64_t>(i));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

float max_abs(const std::vector<float>& a) {
  float m = 0;
  for (float v : a) m = std::max(m, std::abs(v));
  return m;
}

std::vector<float> read(const Tensor& t) { return tensor_to_f32(t); }

// ---- tests

// Every architecture but deepseek2 attends with the standard block, a K and
// a V cache per layer; deepseek2's latent block caches one row per token,
// the compressed kv and the shared rope key.
TEST(AttentionBlocks, EveryArchitecturePicksItsBlockAndItsCache) {
  HParams hp;
  hp.n_layer = 2;
  hp.n_embd = 256;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 64;
  hp.n_rot = 16;
  hp.n_lora_kv = 32;
  hp.n_swa = 8;
  hp.swa_layers = {true, false};
  for (const std::string& name : architecture_names()) {
    SCOPED_TRACE(name);
    hp.arch = name;
    const bool latent = name == "deepseek2";
    // The hybrids' layers are all full attention while no layer is marked
    // recurrent (AQwen35LayerIsDeltaNetOrGatedAttention covers the others).
    for (int il = 0; il < hp.n_layer; ++il) {
      const auto block = find_architecture(name)->attention(hp, il);
      EXPECT_STREQ(block->kind(), latent ? "latent" : "standard");
      EXPECT_EQ(block->state_kind(), StateKind::PerPosition);
      const std::vector<StateSpec> state = block->state(hp, il, 64, DType::F16);
      ASSERT_EQ(state.size(), latent ? 1u : 2u);
      EXPECT_EQ(state[0].name, "cache_k_l" + std::to_string(il));
      if (latent) {
        EXPECT_EQ(state[0].ne[0], (hp.n_lora_kv + hp.n_rot) * 64);
        continue;
      }
      EXPECT_EQ(state[1].name, "cache_v_l" + std::to_string(il));
      EXPECT_EQ(state[1].ne[0], hp.n_embd_kv() * 64);
    }
  }
}

TEST(AttentionBlocks, TheContextAllocatesTheStateItsBlocksDeclare) {
  auto m = Model::load(tiny_model_path());
  Context ctx(*m, options(8));
  const HParams& hp = m->hparams();
  for (int il = 0; il < hp.n_layer; ++il) {
    EXPECT_STREQ(m->attention_block(il).kind(), "standard");
    auto state = ctx.state().layer(il);
    ASSERT_EQ(state.size(), 2u);
    EXPECT_EQ(state[0]->name, "cache_k_l" + std::to_string(il));
    EXPECT_EQ(state[1]->name, "cache_v_l" + std::to_string(il));
    EXPECT_EQ(state[0]->ne[0], hp.n_embd_kv() * 64);
  }
}

TEST(AttentionBlocks, StandardOptionsWithoutOpsAreRefusedByName) {
  EXPECT_TRUE(test::contains(test::error_of([] { make_standard_attention({.softcap = 50}); }), "soft-capped"));
  // Sinks have their op now (SoftMax's src[2]): gpt-oss's block is made.
  EXPECT_NE(make_standard_attention({.sinks = true}), nullptr);
}

TEST(AttentionBlocks, ALatentCacheOfItsOwnLayoutGivesStandardAttentionsLogits) {
  auto standard = Model::load(tiny_model_path());
  auto latent = Model::load(tiny_model_path(), kLatent);
  const auto tokens = some_tokens(*standard, 19);
  Context a(*standard, options(8)), b(*latent, options(8));  // three batches: the caches carry positions
  const HParams& hp = latent->hparams();
  auto state = b.state().layer(1);
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0]->name, "cache_latent_l1");
  EXPECT_EQ(state[0]->ne[0], hp.n_embd + hp.n_embd_kv());
  EXPECT_EQ(state[0]->ne[1], 64);

  const std::vector<float> want = all_logits(a, tokens), got = all_logits(b, tokens);
  EXPECT_LT(max_abs_difference(got, want), 1e-4f * max_abs(want));
  // The comparison can fail: the same double with its keys not rotated is
  // far off.
  auto unroped = Model::load(tiny_model_path(), kLatentKeysNotRoped);
  Context c(*unroped, options(8));
  EXPECT_GT(max_abs_difference(all_logits(c, tokens), want), 100 * 1e-4f * max_abs(want));
}

TEST(AttentionBlocks, AHybridModelGivesTheSameLogitsWhateverTheBatching) {
  auto m = Model::load(tiny_model_path(), kHybrid);
  EXPECT_STREQ(m->attention_block(0).kind(), "recurrent");
  EXPECT_STREQ(m->attention_block(1).kind(), "latent");
  const auto tokens = some_tokens(*m, 19);
  Context whole(*m, options(64)), batched(*m, options(8)), one_by_one(*m, options(1));
  EXPECT_EQ(whole.state().layer(0)[0]->ne[0], m->hparams().n_embd);  // fixed size, whatever n_ctx
  const std::vector<float> want = all_logits(whole, tokens);
  EXPECT_LT(max_abs_difference(all_logits(batched, tokens), want), 1e-4f * max_abs(want));
  EXPECT_LT(max_abs_difference(all_logits(one_by_one, tokens), want), 1e-4f * max_abs(want));

  // The state holds the sequence: it is not zero after it, and a new
  // sequence starts from zero.
  const std::vector<float> after = read(*whole.state().layer(0)[0]);
  EXPECT_GT(max_abs(after), 0.0f);
  whole.clear();
  EXPECT_EQ(max_abs(read(*whole.state().layer(0)[0])), 0.0f);
  EXPECT_EQ(all_logits(whole, tokens), want);
}

TEST(AttentionBlocks, AStoppedBatchLeavesTheRecurrentStateAsItWas) {
  auto m = Model::load(tiny_model_path(), kHybrid);
  const auto tokens = some_tokens(*m, 12);
  const std::vector<Token> first(tokens.begin(), tokens.begin() + 6), rest(tokens.begin() + 6, tokens.end());
  Context ref(*m, options(64));
  all_logits(ref, first);
  const std::vector<float> want = all_logits(ref, rest);

  Context ctx(*m, options(64));
  all_logits(ctx, first);
  const std::vector<float> before = read(*ctx.state().layer(0)[0]);
  // Stopped in layer 1, after layer 0 wrote its state.
  bool stop = true;
  ctx.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return t.name == "ffn_out-1";
    return !stop;
  });
  EXPECT_FALSE(ctx.decode(rest, true));
  EXPECT_EQ(read(*ctx.state().layer(0)[0]), before);
  stop = false;
  EXPECT_EQ(all_logits(ctx, rest), want);
}

// Qwen3.5's hybrids: the marked layers are gated DeltaNet (a conv state of
// the last d_conv - 1 inputs per channel and an S x S state per value head,
// both F32 and independent of n_ctx), the others gated full attention.
TEST(AttentionBlocks, AQwen35LayerIsDeltaNetOrGatedAttention) {
  HParams hp;
  hp.n_layer = 2;
  hp.n_embd = 64;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 32;
  hp.ssm_d_conv = 4;
  hp.ssm_d_state = 16;
  hp.ssm_dt_rank = 4;
  hp.ssm_n_group = 2;
  hp.ssm_d_inner = 64;
  hp.recurrent_layers = {true, false};
  for (const char* name : {"qwen35", "qwen35moe"}) {
    SCOPED_TRACE(name);
    hp.arch = name;
    const auto delta = find_architecture(name)->attention(hp, 0);
    EXPECT_STREQ(delta->kind(), "recurrent");
    EXPECT_EQ(delta->state_kind(), StateKind::Recurrent);
    const std::vector<StateSpec> state = delta->state(hp, 0, 64, DType::F16);
    ASSERT_EQ(state.size(), 2u);
    EXPECT_EQ(state[0].name, "cache_r_l0");
    EXPECT_EQ(state[0].type, DType::F32);
    EXPECT_EQ(state[0].ne[0], 3 * (2 * 2 * 16 + 4 * 16));  // (d_conv - 1) x (q, k: 2 heads; v: 4 heads) of 16
    EXPECT_EQ(state[1].name, "cache_s_l0");
    EXPECT_EQ(state[1].ne[0], 16 * 16 * 4);
    EXPECT_STREQ(find_architecture(name)->attention(hp, 1)->kind(), "standard");
  }
}

std::string qwen35_model(const std::string& preset) {
  static std::map<std::string, std::string> made;
  std::string& path = made[preset];
  if (path.empty()) {
    path = test::temp_dir() + "/" + preset + ".gguf";
    tools::SynthOptions o;
    o.preset = preset;
    o.type = DType::F32;
    o.seed = 7;
    tools::synth_model(o, path);
  }
  return path;
}

// The acceptance: a token's logits generated step by step equal
// those of the same sequence evaluated as one prompt, and so do batches of
// 2 (fewer inputs than the conv state holds: the new state takes some of
// the old) and of 5, for the dense and the MoE hybrid.
TEST(AttentionBlocks, Qwen35GivesTheSameLogitsWhateverTheBatching) {
  for (const char* preset : {"qwen35-tiny", "qwen35moe-tiny"}) {
    SCOPED_TRACE(preset);
    auto m = Model::load(qwen35_model(preset));
    ASSERT_STREQ(m->attention_block(0).kind(), "recurrent");
    ASSERT_STREQ(m->attention_block(3).kind(), "standard");
    const auto tokens = some_tokens(*m, 23);
    Context whole(*m, options(64));
    const std::vector<float> want = all_logits(whole, tokens);
    for (int64_t n_batch : {1, 2, 5}) {
      Context ctx(*m, options(n_batch));
      const float d = max_abs_difference(all_logits(ctx, tokens), want);
      std::printf("%s, batches of %lld: max |logit difference| %.3g of %.3g\n", preset,
                  static_cast<long long>(n_batch), d, max_abs(want));
      EXPECT_LT(d, 1e-4f * max_abs(want)) << "batches of " << n_batch;
    }
    // The state carries the sequence: the second half from a cleared state
    // is far from it, and a new sequence starts from zero.
    const std::vector<Token> first(tokens.begin(), tokens.begin() + 11), rest(tokens.begin() + 11, tokens.end());
    Context ctx(*m, options(64));
    const std::vector<float> with_state = [&] {
      all_logits(ctx, first);
      return all_logits(ctx, rest);
    }();
    EXPECT_LT(max_abs_difference(with_state, std::vector<float>(want.begin() + 11 * m->hparams().n_vocab, want.end())),
              1e-4f * max_abs(want));
    EXPECT_GT(max_abs(read(*ctx.state().layer(0)[1])), 0.0f);
    ctx.clear();
    EXPECT_EQ(max_abs(read(*ctx.state().layer(0)[0])), 0.0f);
    EXPECT_EQ(max_abs(read(*ctx.state().layer(0)[1])), 0.0f);
    EXPECT_GT(max_abs_difference(all_logits(ctx, rest), with_state), 100 * 1e-4f * max_abs(want));
  }
}

// A batch stopped after the DeltaNet layers wrote their states (in the
// full-attention layer 3) leaves both states of every DeltaNet layer as
// they were, and the batch decoded again gives the logits of one that never
// stopped.
TEST(AttentionBlocks, AStoppedQwen35BatchLeavesTheDeltaNetStatesAsTheyWere) {
  auto m = Model::load(qwen35_model("qwen35-tiny"));
  const auto tokens = some_tokens(*m, 12);
  const std::vector<Token> first(tokens.begin(), tokens.begin() + 6), rest(tokens.begin() + 6, tokens.end());
  Context ref(*m, options(64));
  all_logits(ref, first);
  const std::vector<float> want = all_logits(ref, rest);

  Context ctx(*m, options(64));
  all_logits(ctx, first);
  std::vector<std::vector<float>> before;
  for (int il = 0; il < 3; ++il)
    for (Tensor* t : ctx.state().layer(il)) before.push_back(read(*t));
  bool stop = true;
  ctx.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return t.name == "attn_output-3";
    return !stop;
  });
  EXPECT_FALSE(ctx.decode(rest, true));
  size_t i = 0;
  for (int il = 0; il < 3; ++il)
    for (Tensor* t : ctx.state().layer(il)) EXPECT_EQ(read(*t), before[i++]) << t->name;
  stop = false;
  EXPECT_EQ(all_logits(ctx, rest), want);
}

// A copy of qwen35-tiny with one metadata key set (value) or dropped (no
// value) and one tensor dropped.
std::string mutated_qwen35(const std::string& key, const gguf::Value* value, const std::string& drop,
                           const std::string& preset = "qwen35-tiny") {
  auto src = gguf::File::open(qwen35_model(preset));
  gguf::Writer w;
  for (const auto& kv : src->metadata())
    if (kv.key != key) w.set(kv.key, kv.value);
  if (value) w.set(key, *value);
  for (const auto& t : src->tensors()) {
    if (t.name == drop) continue;
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    w.add_tensor(t.name, t.type, ne, src->tensor_data(t), t.nbytes);
  }
  const std::string path = test::temp_dir() + "/qwen35-mutated.gguf";
  w.write(path);
  return path;
}

// Broken Qwen3.5 files are refused with the file and what is wrong named.
TEST(AttentionBlocks, BrokenQwen35FilesAreRefusedByName) {
  auto error_for = [](const std::string& path) { return test::error_of([&] { Model::load(path); }); };
  const std::string missing_a = error_for(mutated_qwen35("", nullptr, "blk.1.ssm_a"));
  EXPECT_TRUE(test::contains(missing_a, "blk.1.ssm_a")) << missing_a;  // the one role without a suffix
  const std::string missing_gate = error_for(mutated_qwen35("", nullptr, "blk.0.attn_gate.weight"));
  EXPECT_TRUE(test::contains(missing_gate, "blk.0.attn_gate.weight")) << missing_gate;
  const std::string no_conv = error_for(mutated_qwen35("qwen35.ssm.conv_kernel", nullptr, ""));
  EXPECT_TRUE(test::contains(no_conv, "qwen35.ssm.conv_kernel")) << no_conv;
  EXPECT_TRUE(test::contains(no_conv, "qwen35-mutated.gguf")) << no_conv;
  const gguf::Value inner = gguf::Value::make_u32(48);  // not 4 value heads x 16
  const std::string bad_inner = error_for(mutated_qwen35("qwen35.ssm.inner_size", &inner, ""));
  EXPECT_TRUE(test::contains(bad_inner, "ssm.inner_size 48")) << bad_inner;
  const gguf::Value marks = gguf::Value::make_i32_array({1, 1, 0});  // 4 layers
  const std::string short_marks = error_for(mutated_qwen35("qwen35.attention.recurrent_layers", &marks, ""));
  EXPECT_TRUE(test::contains(short_marks, "recurrent_layers")) << short_marks;
  const std::string no_sections = error_for(mutated_qwen35("qwen35.rope.dimension_sections", nullptr, ""));
  EXPECT_TRUE(test::contains(no_sections, "rope.dimension_sections")) << no_sections;
  // The marks decide the layers: layer 2 marked full attention wants attn_q,
  // which the file has only for layer 3.
  const gguf::Value other = gguf::Value::make_i32_array({1, 1, 0, 0});
  const std::string moved = error_for(mutated_qwen35("qwen35.attention.recurrent_layers", &other, ""));
  EXPECT_TRUE(test::contains(moved, "blk.2.")) << moved;
  // feed_forward_length: required for the dense model; the MoE one loads
  // without it (Qwen3.5-MoE converters write none), its shared expert's
  // width from its own key.
  const std::string no_ff = error_for(mutated_qwen35("qwen35.feed_forward_length", nullptr, ""));
  EXPECT_TRUE(test::contains(no_ff, "qwen35.feed_forward_length")) << no_ff;
  auto moe = Model::load(mutated_qwen35("qwen35moe.feed_forward_length", nullptr, "", "qwen35moe-tiny"));
  EXPECT_EQ(moe->hparams().n_ff_shexp, 32);
}

// The real-width presets have Qwen3.5-27B's and Qwen3.5-35B-A3B's shapes.
TEST(AttentionBlocks, Qwen35RealWidthPresetsHaveTheReleasedShapes) {
  auto shapes = [](const char* name) {
    const tools::SynthPreset& p = tools::find_synth_preset(name);
    std::map<std::string, std::array<int64_t, kMaxDims>> out;
    for (const auto& t : tools::synth_tensor_plan(tools::synth_hparams(p), p.tied_output)) out[t.name] = t.ne;
    return out;
  };
  using Shape = std::array<int64_t, kMaxDims>;
  const auto dense = shapes("qwen3.5-27b-2l");
  EXPECT_EQ(dense.at("blk.0.attn_qkv.weight"), (Shape{5120, 10240, 1, 1}));  // q, k: 16 x 128; v: 48 x 128
  EXPECT_EQ(dense.at("blk.0.attn_gate.weight"), (Shape{5120, 6144, 1, 1}));
  EXPECT_EQ(dense.at("blk.0.ssm_conv1d.weight"), (Shape{4, 10240, 1, 1}));
  EXPECT_EQ(dense.at("blk.0.ssm_a"), (Shape{48, 1, 1, 1}));
  EXPECT_EQ(dense.at("blk.0.ssm_out.weight"), (Shape{6144, 5120, 1, 1}));
  EXPECT_EQ(dense.at("blk.1.attn_q.weight"), (Shape{5120, 12288, 1, 1}));  // 24 heads of 256, each with its gate
  EXPECT_EQ(dense.at("blk.1.attn_k.weight"), (Shape{5120, 1024, 1, 1}));
  EXPECT_EQ(dense.at("blk.1.attn_output.weight"), (Shape{6144, 5120, 1, 1}));
  EXPECT_EQ(dense.at("blk.1.ffn_up.weight"), (Shape{5120, 17408, 1, 1}));
  const auto moe = shapes("qwen3.5-35b-a3b-2l");
  EXPECT_EQ(moe.at("blk.0.attn_qkv.weight"), (Shape{2048, 8192, 1, 1}));  // v: 32 x 128
  EXPECT_EQ(moe.at("blk.1.attn_q.weight"), (Shape{2048, 8192, 1, 1}));
  EXPECT_EQ(moe.at("blk.1.ffn_gate_exps.weight"), (Shape{2048, 512, 256, 1}));
  EXPECT_EQ(moe.at("blk.1.ffn_gate_inp_shexp.weight"), (Shape{2048, 1, 1, 1}));
  EXPECT_EQ(moe.at("blk.1.ffn_down_shexp.weight"), (Shape{512, 2048, 1, 1}));
  EXPECT_EQ(moe.at("output.weight"), (Shape{2048, 248320, 1, 1}));
}

}  // namespace
}  // namespace qlens
