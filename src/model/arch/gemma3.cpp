// Gemma 3: embeddings scaled by sqrt(n_embd); a norm before and after both
// attention and feed-forward; per-head RMS norms of q and k; queries scaled
// by 1/sqrt(head_dim) (27B: by 1/sqrt(n_embd / n_head)); GELU-gated
// feed-forward; sliding-window attention on the local layers (five of every
// six) with their own rope base; tied output. The norm weights are stored as
// llama.cpp's converter writes them (Gemma's 1 + w already added).
#include <cmath>

#include "model/arch/architecture.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class Gemma3 final : public Architecture {
 public:
  const char* name() const override { return "gemma3"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    const std::string a = hp.arch + ".";
    hp.rope_mode = RopeMode::NeoX;
    read_sliding_window(f, hp, 6);
    if (hp.n_swa > 0) {
      if (auto base = f.try_float(a + "rope.freq_base_swa")) hp.rope_freq_base_swa = static_cast<float>(*base);
      // llama.cpp reads no local rope scale: the local layers keep scale 1.
    }
    if (auto cap = f.try_float(a + "final_logit_softcapping"); cap && *cap != 0)
      throw Error(f.path() + ": final logit soft-capping is not supported yet");
  }

  void write_hparams(gguf::Writer& w, const HParams& hp) const override {
    if (hp.n_swa <= 0) return;
    write_sliding_window(w, hp);
    w.set(hp.arch + ".rope.freq_base_swa", gguf::Value::make_f32(hp.rope_freq_base_swa));
  }

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    const int64_t E = hp.n_embd;
    if (il < 0) return global_tensors(hp);
    std::vector<TensorSpec> t = attention_tensors(hp, /*qk_norm=*/true);
    t.push_back({Role::AttnPostNorm, {E, 1, 1, 1}});
    append(t, ffn_tensors(hp));
    t.push_back({Role::FfnPostNorm, {E, 1, 1, 1}});
    return t;
  }

  Tensor* embed(GraphBuilder& b) const override {
    Tensor* x = b.token_embedding();
    return named(scale(b.graph(), x, std::sqrt(static_cast<float>(b.hparams().n_embd))), "inp_scaled");
  }

  std::unique_ptr<AttentionBlock> attention(const HParams& hp, int il) const override {
    const bool is_27b = hp.n_layer == 62;  // llama.cpp's rule for the query scale
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(is_27b ? hp.n_embd / hp.n_head : hp.head_dim));
    return make_standard_attention({.qk_norm = true, .q_scale = q_scale, .sliding_window = hp.is_swa(il)});
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    Graph& g = b.graph();
    Tensor* cur = b.norm(in, Role::AttnNorm, il, "attn_norm");
    cur = b.attention(cur, il);
    cur = b.last_row_if_final(cur, il);
    in = b.last_row_if_final(in, il);
    cur = b.norm(cur, Role::AttnPostNorm, il, "attn_post_norm");
    Tensor* sa_out = named(add(g, cur, in), "sa_out", il);
    cur = b.norm(sa_out, Role::FfnNorm, il, "ffn_norm");
    cur = b.feed_forward(cur, il, FfnActivation::Gelu);
    // llama.cpp names this norm without a layer ("norm").
    cur = b.norm(cur, Role::FfnPostNorm, il, "ffn_post_norm", -1);
    return named(add(g, cur, sa_out), "l_out", il);
  }
};

}  // namespace

const Architecture& gemma3_architecture() {
  static const Gemma3 arch;
  return arch;
}

}  // namespace qlens
