// Tensors, operations and graphs.
//
// Conventions follow ggml, which llama.cpp users know from node dumps: ne[0] is
// the row length (the fastest-moving dimension), nb[i] is the stride of
// dimension i in bytes. A tensor is either a leaf (its data is set from outside:
// weights, inputs, KV cache) or the result of an operation on its sources.
// Views (reshape, view, permute, transpose) share their source's memory.
//
// Operation semantics (all results F32 unless stated):
//   GetRows(a[K,R,..], idx:I32[N])       -> [K,N]      row idx[i] of a, converted to F32
//   MulMat(a[K,M,A2,A3], b[K,N,B2,B3])   -> [M,N,B2,B3] r[i,j] = dot(a row i, b row j);
//                                          a is broadcast: B2 % A2 == 0, B3 % A3 == 0
//   Add/Mul(a, b)                        -> shape of a; b broadcast (a.ne[i] % b.ne[i] == 0)
//   Scale(a; s)                          -> a * s
//   RmsNorm(a; eps)                      -> a / sqrt(mean(a^2 over dim 0) + eps)
//   Rope(a[D,H,N,1], pos:I32[N]; n_dims, mode, freq_base, freq_scale)
//                                         rotates the first n_dims of each row;
//                                         mode 0 pairs (2i, 2i+1), mode 2 (NeoX) pairs (i, i+n_dims/2);
//                                         modes 8, 40 (rope_multi): NeoX pairs, 4 positions per token
//   SoftMax(a[K,N,H,1], mask?[K,>=N]; scale)  softmax over dim 0 of a*scale + mask
//   Silu(a)                              -> a * sigmoid(a)
//   Tanh(a)                              -> tanh(a)
//   Gelu(a)                              -> 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
//                                          (ggml's tanh form); 0 at a = -inf
//   Cpy(a, b)                            -> writes a into b (same element count, b may be
//                                          F16/BF16/F32 and a view); the result is a view of b
//   Cont(a)                              -> a contiguous copy of a (any strides)
//   Reshape/View/Permute/Transpose       -> views, no computation
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <initializer_list>
#include <string>
#include <vector>

#include "qlens/pointer_map.h"
#include "qlens/types.h"

namespace qlens {

class Buffer;

constexpr int kMaxDims = 4;
constexpr int kMaxSrc = 6;      // GatedDeltaNet's q, k, v, gate, beta and state
constexpr int kMaxParams = 12;  // Rope's: 8 and the 4 sections of its multi-section modes

enum class Op : uint8_t {
  None,  // leaf
  GetRows,
  MulMat,
  Add,
  Mul,
  Scale,
  RmsNorm,
  Rope,
  SoftMax,
  Silu,
  Gelu,
  Cpy,
  Cont,
  Reshape,
  View,
  Permute,
  Transpose,
  // Mixtures of experts: each token's rows multiplied by the matrices of its
  // selected experts, and the router's blocks.
  MulMatId,
  ArgSort,
  SumRows,
  Clamp,
  Div,
  Sigmoid,  // 1 / (1 + e^-x): the routers of DeepSeek V3, GLM-4.5, Qwen3.5
  // A gated linear unit of two halves, gate and value (ggml's GLU op with
  // its variant, GluKind, in params[0]): gpt-oss's clamped SwiGLU.
  Glu,
  AddId,  // rows plus the row of b each one's id selects: gpt-oss's expert biases
  // The gated DeltaNet layers' (Qwen3.5): ln(1 + e^x), rows scaled to unit
  // length, and two tensors joined along a dimension.
  Softplus,
  L2Norm,
  Concat,
  SsmConv,  // the short causal convolution of DeltaNet and Mamba layers
  // The gated delta rule over a sequence of tokens, state in and state out
  // (ggml's GATED_DELTA_NET): the recurrent core of the DeltaNet layers.
  GatedDeltaNet,
  // DeepSeek V3's grouped routing: a tensor of one value (ggml's FILL), and
  // a tensor's rows replaced by others at given row ids (SET_ROWS).
  Fill,
  SetRows,
  Tanh,  // Gemma 4's final logit soft-capping: cap tanh(x / cap)
};
constexpr int kOpCount = static_cast<int>(Op::Tanh) + 1;

const char* op_name(Op op);  // "MUL_MAT", ... as in ggml dumps
std::string op_lower_name(Op op);  // "mul_mat": builders' errors, Vulkan's shader names
// Ops whose result shares its source's memory and needs no computation.
bool op_is_view(Op op);

// ggml's rope types (GGML_ROPE_TYPE_*). MRope and IMRope (ggml_rope_multi:
// Qwen2-VL's and Qwen3-VL / Qwen3.5's) rotate NeoX pairs whose angles come
// from one of four positions per token (time, height, width, extra), by
// sections of pairs: MRope in runs ([t t t h h w w ...]), IMRope interleaved
// ([t h w t h w ...] while each section lasts).
enum class RopeMode : int32_t { Normal = 0, NeoX = 2, MRope = 8, IMRope = 40 };

// The four sections of a multi-section rope: how many rotated pairs take
// each position, in order time, height, width, extra (ggml's `sections`).
using RopeSections = std::array<int32_t, 4>;

// YaRN's context extension as ggml's rope_ext takes it: ext_factor 0 turns
// the blend of interpolated and extrapolated angles off; attn_factor scales
// cos and sin (ggml's mscale, further scaled by 1 + 0.1 ln(1 / freq_scale)
// when the blend is on); the blend ramps between the correction dims that
// beta_fast, beta_slow and the training context n_ctx_orig give.
struct RopeYarn {
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f, beta_slow = 1.0f;
  int n_ctx_orig = 0;
};

// The variants of Op::Glu, ggml's numbers (GGML_GLU_OP_*), on x (gate) and y:
// Swiglu x sigmoid(x) y; SwigluOai (gpt-oss) x' sigmoid(alpha x') (y' + 1),
// x' = min(x, limit), y' = clamp(y, -limit, limit).
enum class GluKind : int32_t { Swiglu = 2, SwigluOai = 3 };

enum TensorFlags : uint32_t {
  kFlagInput = 1u << 0,   // data written by the caller before each compute
  kFlagOutput = 1u << 1,  // must stay readable after compute (not reused)
  kFlagWeight = 1u << 2,  // model parameter
};

struct Tensor {
  DType type = DType::F32;
  std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};
  std::array<size_t, kMaxDims> nb{};
  Op op = Op::None;
  std::array<Tensor*, kMaxSrc> src{};
  std::array<int32_t, kMaxParams> params{};  // op parameters; floats stored bitwise
  Tensor* view_src = nullptr;                // for views: the tensor that owns the memory
  size_t view_offset = 0;                    // byte offset into view_src's data
  void* data = nullptr;
  Buffer* buffer = nullptr;                  // backend memory holding data; null: host memory
  std::string name;
  uint32_t flags = 0;

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes spanned from the first to one past the last element.
  size_t nbytes() const;
  // Rows are stored back to back with no gaps (and elements within rows too).
  bool is_contiguous() const;
  // Dims 0 and 1 are swapped (as after a transpose): nb[0] > nb[1].
  bool is_transposed() const { return nb[0] > nb[1]; }
  int n_dims() const;  // 1..4, ignoring trailing dims of size 1

  float param_f(int i) const {
    float f;
    std::memcpy(&f, &params[i], sizeof f);
    return f;
  }
  void set_param_f(int i, float f) { std::memcpy(&params[i], &f, sizeof f); }

  // Address of element (i0, i1, i2, i3).
  char* at(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return static_cast<char*>(data) + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
  }
};

// Strides of a contiguous tensor of this type and shape.
std::array<size_t, kMaxDims> contiguous_strides(DType type, const std::array<int64_t, kMaxDims>& ne);
bool same_shape(const Tensor& a, const Tensor& b);
std::string shape_string(const Tensor& t);  // "{64, 5, 1, 1}"
std::string describe(const Tensor& t);      // "'Qcur-0' {64, 5, 1, 1}", for errors

// A graph owns its tensors and records, in topological order, what to compute.
// Build functions below add tensors; `build(out)` adds `out` and everything it
// depends on to the order. Tensors live as long as the graph, or until clear().
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Tensor* new_tensor(DType type, std::initializer_list<int64_t> ne, const std::string& name = {});
  Tensor* new_tensor(DType type, const std::array<int64_t, kMaxDims>& ne, const std::string& name = {});
  // A leaf whose data lives elsewhere (e.g. a weight in a mapped file).
  Tensor* external(const Tensor& like, void* data);

  // Forgets every tensor and the order, keeping the memory for the next graph
  // (a context builds one per generated token: allocating its tensors again
  // each time was a tenth of the time outside the kernels).
  void clear();

  // Adds `out` and its dependencies to the execution order (idempotent).
  void build(Tensor* out);

  // Computed tensors (including views) in an order where sources come first.
  const std::vector<Tensor*>& nodes() const { return nodes_; }
  // Leaves reached by `build` (weights, inputs, caches).
  const std::vector<Tensor*>& leaves() const { return leaves_; }
  Tensor* find(const std::string& name) const;  // first node or leaf of that name

  // Keeps `t` readable until `reader` has been computed: memory planning
  // counts it as a source of `reader` (a tap on `reader` reads `t`).
  void keep_until(Tensor* t, Tensor* reader) { kept_.emplace_back(t, reader); }
  const std::vector<std::pair<Tensor*, Tensor*>>& kept() const { return kept_; }

 private:
  void visit(Tensor* t);
  Tensor& next_tensor();
  // Tensors in chunks that never move: [0, used_) belong to the graph.
  static constexpr size_t kChunk = 256;
  std::vector<std::unique_ptr<Tensor[]>> chunks_;
  size_t used_ = 0;
  std::vector<Tensor*> nodes_;
  std::vector<Tensor*> leaves_;
  PointerMap<char> visited_;  // a set
  std::vector<std::pair<Tensor*, Tensor*>> kept_;
};

// ---- Build functions (src/ops/build.cpp): each infers its result's shape and
// type and checks the node by its op's rules (the op table's, which every
// backend checks too); a broken rule throws qlens::Error naming the tensors.
// Rows of `a` by index: idx [n] gives [a.ne0, n]; batched, idx [n, B] and a
// [K, R, B] give [K, n, B] (row idx[i, j] of a's slice j), as ggml's.
Tensor* get_rows(Graph& g, Tensor* a, Tensor* idx);
Tensor* mul_mat(Graph& g, Tensor* a, Tensor* b);
// The expert matmul (ggml's MUL_MAT_ID): as [K, M, E] holds E matrices, ids
// (I32 [U, N]) each token's U selected experts, b [K, U or 1, N] its rows
// (one per slot, or one for all slots); result [M, U, N]: row (u, t) is
// as[ids[u, t]] times b's row (u or 0, t).
Tensor* mul_mat_id(Graph& g, Tensor* as, Tensor* b, Tensor* ids);
Tensor* add(Graph& g, Tensor* a, Tensor* b);
Tensor* mul(Graph& g, Tensor* a, Tensor* b);
Tensor* div(Graph& g, Tensor* a, Tensor* b);  // a / b, b broadcast as in add
// Each row's element indices ordered by decreasing value (I32, a's shape);
// equal values keep no particular order.
Tensor* argsort_desc(Graph& g, Tensor* a);
// The indices of the k largest of each row, largest first: a view of the
// first k of argsort_desc (ggml_top_k).
Tensor* top_k(Graph& g, Tensor* a, int64_t k);
Tensor* sum_rows(Graph& g, Tensor* a);  // [1, ne1, ne2, ne3]
Tensor* clamp(Graph& g, Tensor* a, float lo, float hi);
Tensor* scale(Graph& g, Tensor* a, float s);
Tensor* rms_norm(Graph& g, Tensor* a, float eps);
// Rotary embedding of the first n_dims of each head; freq_factors (optional,
// F32, n_dims / 2 entries: Llama 3's rope_freqs) divide each frequency's angle;
// yarn: YaRN's extension (off by default). Parameters: n_dims, mode,
// freq_base, freq_scale, ext_factor, attn_factor, and the two correction dims.
Tensor* rope(Graph& g, Tensor* a, Tensor* pos, int n_dims, RopeMode mode, float freq_base, float freq_scale,
             Tensor* freq_factors = nullptr, const RopeYarn& yarn = {});
// Multi-section rope (ggml_rope_multi; mode MRope or IMRope): pos holds four
// positions per token, section-major (I32 [4 N]: entry k N + i is token i's
// k-th position; llama.cpp gives a text token at p the positions p, p, p, 0).
// Pair i (of n_dims / 2) turns by the position its section assigns, with
// the angle pair i has in rope (freq_base^(-2i / n_dims), not restarted per
// section); sections repeat when they cover fewer than n_dims / 2 pairs.
// Sections are params 8-11.
Tensor* rope_multi(Graph& g, Tensor* a, Tensor* pos, int n_dims, const RopeSections& sections, RopeMode mode,
                   float freq_base, float freq_scale, Tensor* freq_factors = nullptr, const RopeYarn& yarn = {});
// Softmax of each row of a * scale + mask (mask may be null). sinks (F32
// [a.ne2], one per head, optional: gpt-oss's attention sinks) join each row
// of head i2 as one more logit that takes its share of the sum and has no
// output (ggml_soft_max_add_sinks).
Tensor* soft_max(Graph& g, Tensor* a, Tensor* mask, float scale, Tensor* sinks = nullptr);
// A gated linear unit on gate x and value y of one shape (ggml's split form);
// alpha and limit are SwigluOai's (gpt-oss: 1.702 and 7).
Tensor* glu(Graph& g, GluKind kind, Tensor* x, Tensor* y, float alpha = 0.0f, float limit = 0.0f);
// a [n, U, T] plus row ids[u, t] of b [n, E] for each row (u, t) (ggml_add_id).
Tensor* add_id(Graph& g, Tensor* a, Tensor* b, Tensor* ids);
// An element-wise op of one F32 value per element (Silu, Gelu, ...): a's shape.
Tensor* unary(Graph& g, Op op, Tensor* a);
inline Tensor* silu(Graph& g, Tensor* a) { return unary(g, Op::Silu, a); }
inline Tensor* gelu(Graph& g, Tensor* a) { return unary(g, Op::Gelu, a); }
inline Tensor* sigmoid(Graph& g, Tensor* a) { return unary(g, Op::Sigmoid, a); }
inline Tensor* tanh(Graph& g, Tensor* a) { return unary(g, Op::Tanh, a); }
// ln(1 + e^x), and x itself above 20 (ggml's softplus).
inline Tensor* softplus(Graph& g, Tensor* a) { return unary(g, Op::Softplus, a); }
// Each row divided by its length, at least eps (ggml_l2_norm).
Tensor* l2_norm(Graph& g, Tensor* a, float eps);
// a and b joined along dim (0-3): every other dimension equal (ggml_concat).
Tensor* concat(Graph& g, Tensor* a, Tensor* b, int dim);
// A tensor of a's shape, every element c (F32; a gives only the shape).
Tensor* fill(Graph& g, Tensor* a, float c);
// a (F32 [n, ne1, ne2, ne3]) with rows replaced: row u of b (F32 [n, rows,
// ne2, ne3]) at (i2, i3) becomes row ids[u, i2 % ids.ne1, i3 % ids.ne2] (I32
// [rows, ne11, ne12]) of the result (ggml_set_rows, as a new tensor).
Tensor* set_rows(Graph& g, Tensor* a, Tensor* b, Tensor* ids);
// The short causal convolution (ggml_ssm_conv): sx [d_conv - 1 + T, d, S]
// (each channel's last d_conv - 1 inputs, then T new ones, for S sequences)
// and kernels c [d_conv, d] give y [d, T, S], y[i, t, s] = sum_k sx[t + k, i, s] c[k, i].
Tensor* ssm_conv(Graph& g, Tensor* sx, Tensor* c);
// The gated delta rule (ggml_gated_delta_net), per head h of H_v and sequence
// s, over tokens t in order, from the state S (S_v x S_v: S[i, j] with i a
// key dimension, j a value dimension):
//   S <- S * exp(g_t)                 (KDA: row i times exp(g_t[i]))
//   d  = beta_t (v_t - S^T k_t)       (the delta: what S predicts for k_t, corrected)
//   S <- S + k_t d^T
//   o_t = S^T q_t / sqrt(S_v)         (the op scales q, not the graph)
// Sources: q, k [S_v, H_k, T, n_seqs] (H_v % H_k == 0; head h reads q and k
// head h % H_k, ggml's tiled broadcast), v [S_v, H_v, T, n_seqs], g
// [1, H_v, T, n_seqs] (a scalar log-decay per head and token) or
// [S_v, H_v, T, n_seqs] (KDA: one per key dimension), beta [1, H_v, T, n_seqs],
// state [S_v, S_v, H_v, n_seqs] (element (i, j, h, s) is S[i, j] of head h,
// sequence s). The result packs, as ggml's, the outputs o [S_v, H_v, T, n_seqs]
// and then the final states [S_v, S_v, H_v, n_seqs] (same layout as state)
// into one F32 tensor [S_v H_v, T n_seqs + S_v n_seqs]. `snapshots` is ggml's
// K (the last K states kept); only 1, the final state, is supported.
Tensor* gated_delta_net(Graph& g, Tensor* q, Tensor* k, Tensor* v, Tensor* gate, Tensor* beta, Tensor* state,
                        int64_t snapshots = 1);
Tensor* cpy(Graph& g, Tensor* a, Tensor* b);
Tensor* cont(Graph& g, Tensor* a);
Tensor* reshape(Graph& g, Tensor* a, std::initializer_list<int64_t> ne);
// A view of `a` with shape ne, strides nb (nb[0] is the element size) at byte offset.
Tensor* view(Graph& g, Tensor* a, std::initializer_list<int64_t> ne,
             std::initializer_list<size_t> nb_upper, size_t offset);
// permute(a, p): source dim i becomes result dim p[i] (ggml's convention).
Tensor* permute(Graph& g, Tensor* a, int p0, int p1, int p2, int p3);
Tensor* transpose(Graph& g, Tensor* a);

// Names a tensor `base-layer` (llama.cpp's convention) or `base` when layer < 0.
Tensor* named(Tensor* t, const std::string& base, int layer = -1);

}  // namespace qlens
