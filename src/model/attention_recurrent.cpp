// The gated DeltaNet block (Qwen3.5/3.6's linear-attention layers), as
// llama.cpp 0c1e570 builds it (llm_build_delta_net_base with the fused
// GATED_DELTA_NET op), with its node names. Per sequence a layer keeps two
// state tensors, as llama.cpp's recurrent memory does:
//   cache_r_l<il>: the short convolution's last d_conv - 1 inputs of every
//     channel ([d_conv - 1, conv_dim]: the inputs of a channel together),
//   cache_s_l<il>: the DeltaNet state, S x S per value head ([S, S, H_v]).
// A batch reads both, convolves [conv state | its inputs], runs the delta
// rule from the state, and writes the last d_conv - 1 inputs and the final
// state back: generation token by token and one prompt give the same state.
#include <cmath>

#include "model/attention.h"
#include "model/graph_builder.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class GatedDeltaNet final : public AttentionBlock {
 public:
  const char* kind() const override { return "recurrent"; }
  StateKind state_kind() const override { return StateKind::Recurrent; }

  // F32 whatever the cache type: the state sums every position so far, and
  // llama.cpp keeps it in F32 (type_r, type_s).
  std::vector<StateSpec> state(const HParams& hp, int il, int64_t, DType) const override {
    const Dims d = dims(hp);
    return {{"cache_r_l" + std::to_string(il), DType::F32, {(hp.ssm_d_conv - 1) * d.conv, 1, 1, 1}},
            {"cache_s_l" + std::to_string(il), DType::F32, {d.S * d.S * d.H_v, 1, 1, 1}}};
  }

  Tensor* build(GraphBuilder& b, int il, Tensor* cur, std::span<Tensor* const> state) const override {
    const HParams& hp = b.hparams();
    Graph& g = b.graph();
    const Dims d = dims(hp);
    const int64_t N = b.n_tokens(), S = d.S, H_k = d.H_k, H_v = d.H_v, C = d.conv, K = hp.ssm_d_conv;
    constexpr size_t fs = sizeof(float);
    Tensor* conv_state = state[0];
    Tensor* ssm_state = state[1];

    // The input projections: q | k | v for the convolution, the output gate
    // z, and per value head beta (the delta's step) and alpha (the decay).
    Tensor* qkv_mixed = named(b.matmul(Role::AttnQkv, il, cur), "linear_attn_qkv_mixed", il);  // [C, N]
    Tensor* z = named(b.matmul(Role::AttnGate, il, cur), "z", il);                            // [H_v S, N]
    Tensor* beta = named(reshape(g, b.matmul(Role::SsmBeta, il, cur), {1, H_v, N}), "beta", il);
    beta = named(sigmoid(g, beta), "beta_sigmoid", il);
    Tensor* alpha = named(reshape(g, b.matmul(Role::SsmAlpha, il, cur), {H_v, N}), "alpha", il);
    // The log-decay per head and token: -exp(A_log) (stored as ssm_a) times
    // softplus(alpha + dt_bias), always negative: the state fades.
    Tensor* alpha_softplus = named(softplus(g, add(g, alpha, b.weight(Role::SsmDt, il))), "a_softplus", il);
    Tensor* gate = named(mul(g, alpha_softplus, b.weight(Role::SsmA, il)), "gate", il);
    gate = reshape(g, gate, {1, H_v, N});

    // The causal convolution over [the last K - 1 inputs | this batch's N],
    // each channel's inputs along dimension 0.
    Tensor* conv_states = named(view(g, conv_state, {K - 1, C}, {(K - 1) * fs}, 0), "conv_states_reshaped", il);
    Tensor* qkv_t = named(transpose(g, qkv_mixed), "qkv_mixed_transposed", il);  // [N, C]
    Tensor* conv_input = named(concat(g, conv_states, qkv_t, 0), "conv_input", il);  // [K - 1 + N, C]
    // The new conv state: the last K - 1 inputs (from the old state when N < K - 1).
    Tensor* conv_state_last =
        named(view(g, conv_input, {K - 1, C}, {conv_input->nb[1]}, static_cast<size_t>(N) * fs), "conv_state_last", il);
    Tensor* conv_state_update = named(view(g, conv_state, {(K - 1) * C}, {}, 0), "conv_state_update", il);
    g.build(cpy(g, conv_state_last, conv_state_update));

    Tensor* conv_input_3d = reshape(g, conv_input, {K - 1 + N, C, 1});
    Tensor* conv = named(ssm_conv(g, conv_input_3d, b.weight(Role::SsmConv1d, il)), "conv_output_raw", il);  // [C, N, 1]
    conv = named(silu(g, conv), "conv_output_silu", il);
    const size_t row = static_cast<size_t>(C) * fs;
    Tensor* q = named(view(g, conv, {S, H_k, N}, {S * fs, row}, 0), "q_conv", il);
    Tensor* k = named(view(g, conv, {S, H_k, N}, {S * fs, row}, H_k * S * fs), "k_conv", il);
    Tensor* v = named(view(g, conv, {S, H_v, N}, {S * fs, row}, 2 * H_k * S * fs), "v_conv", il);
    // q and k to unit length per head, as llama.cpp computes it: an RMS norm
    // with eps / S, scaled by 1 / sqrt(S).
    auto l2 = [&](Tensor* t) {
      return scale(g, rms_norm(g, t, hp.rms_eps / static_cast<float>(S)), 1.0f / std::sqrt(static_cast<float>(S)));
    };
    q = named(l2(q), "q_conv_predelta", il);
    k = named(l2(k), "k_conv_predelta", il);
    named(v, "v_conv_predelta", il);

    // The delta rule from the stored state; its final state goes back.
    Tensor* s = named(view(g, ssm_state, {S, S, H_v, 1}, {S * fs, S * S * fs, S * S * H_v * fs}, 0), "state_predelta",
                      il);
    Tensor* result = gated_delta_net(g, q, k, v, gate, beta, s);
    Tensor* output = named(view(g, result, {S, H_v, N}, {S * fs, S * H_v * fs}, 0), "attn_output", il);
    Tensor* new_state = named(view(g, result, {S * S * H_v}, {}, static_cast<size_t>(S * H_v * N) * fs), "new_state", il);
    g.build(cpy(g, new_state, view(g, ssm_state, {S * S * H_v}, {}, 0)));

    // The gated RMS norm per head (ssm_norm, times silu(z)), the out projection.
    Tensor* z_heads = reshape(g, z, {S, H_v, N});
    Tensor* normed = b.norm(output, Role::SsmNorm, il, "norm_w");
    cur = mul(g, normed, silu(g, z_heads));
    cur = named(reshape(g, cur, {S * H_v, N}), "final_output", il);
    return named(b.matmul(Role::SsmOut, il, cur), "linear_attn_out", il);
  }

 private:
  struct Dims {
    int64_t S, H_k, H_v, conv;  // head size, key heads, value heads, channels of the convolution
  };
  static Dims dims(const HParams& hp) {
    const int64_t S = hp.ssm_d_state, H_k = hp.ssm_n_group, H_v = hp.ssm_dt_rank;
    return {S, H_k, H_v, 2 * H_k * S + H_v * S};
  }
};

}  // namespace

std::unique_ptr<AttentionBlock> make_gated_delta_net_block() { return std::make_unique<GatedDeltaNet>(); }

}  // namespace qlens
