// GatedDeltaNet on the CPU: the gated delta rule of tensor.h in two forms,
// each computing every head (h, sequence s) on its own:
//
//  - recurrent: token by token, as the rule is written. Each value
//    dimension j of a head's state evolves on its own (its delta d_j needs
//    only S[:, j], k, v_j and beta), so a work item is a block of state rows
//    of one head (the result holds the state transposed, as ggml's: row j
//    is S[:, j], adjacent floats over the key dimension), kept in cache over
//    all the tokens: a generated token's heads split into enough items for
//    every thread.
//  - chunked: tokens in chunks of C = 16, the rule's WY (UT-transform)
//    form, as llama.cpp's unfused graph computes it (build_delta_net_chunking,
//    chunks of 64, 16 with a per-key gate), here in float inside one work
//    item per head. Within a chunk, with G_t the gate's running sum (from the chunk's
//    start), Gamma_t = exp(G_t), and the state S0 at the chunk's start, the
//    deltas solve a unit lower-triangular system
//      d_t + sum_{u<t} A[t,u] d_u = beta_t (v_t - S0^T (Gamma_t k_t)),
//      A[t,u] = beta_t sum_i k_t[i] exp(G_t[i] - G_u[i]) k_u[i],
//    solved once for the right sides' two parts (U: the values, W: the keys
//    S0 multiplies) so that d = U - W S0; then
//      o_t    = scale (S0^T (Gamma_t q_t) + sum_{u<=t} P[t,u] d_u),
//      P[t,u] = sum_i q_t[i] exp(G_t[i] - G_u[i]) k_u[i],
//      S_C    = Gamma_C S0 + sum_u (exp(G_C - G_u) k_u) d_u^T
//    (for a scalar gate exp(G_t - G_u) is one number per pair). The products
//    with S0 are matrix products over the chunk (register tiles), where the
//    recurrent form's are matrix-vector products per token.
//
// The form depends on the node's shape only (chunked_is_faster), never the
// threads, so any thread count gives the same bits. Sums run in fixed
// orders: kLanes partial sums in dot products, the key dimension in order in
// the tiles.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "backend/cpu/delta_net.h"

namespace qlens::cpu {

namespace {

// The chunked form's tokens per chunk. Per token and head it does about
// 3 S^2 multiply-adds in matrix products (the chunk's deltas, outputs and
// state update against the state) and 3 C S in the chunk's pair terms (A,
// P, the triangular solve), where the recurrent form does 4 S^2: short
// chunks do the least work (C = 64 took 1.1-1.7x C = 16's time at S = 64
// and 128, 64 and 512 tokens, bench_ops BM_GatedDeltaNet).
constexpr int64_t kChunkTokens = 16;

std::atomic<DeltaNetForm> g_form{DeltaNetForm::Measured};

// State rows (value dimensions) of one head per recurrent work item.
constexpr int64_t kRowsPerItem = 32;

// Partial sums of a dot product: the loop over them vectorizes without the
// compiler reordering float sums.
constexpr int kLanes = 8;

// Sums in kLanes partial sums (element i into lane i mod kLanes, lanes
// added pairwise at the end).
struct LaneSums {
  float lane[kLanes] = {};
  float total() {
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
    return lane[0];
  }
};

// sum_i a[i] b[i]
float dot(const float* a, const float* b, int64_t n) {
  LaneSums s;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) s.lane[l] += a[i + l] * b[i + l];
  for (int l = 0; i < n; ++i, ++l) s.lane[l] += a[i] * b[i];
  return s.total();
}

// m *= decay (one for all, or per element), returning sum_i m[i] k[i]
// after it: the recurrent form's first pass over a state row.
template <bool kPerKey>
float decay_and_dot(float* m, const float* decay, float scalar_decay, const float* k, int64_t n) {
  LaneSums s;
  const auto step = [&](int64_t i, int l) {
    m[i] *= kPerKey ? decay[i] : scalar_decay;
    s.lane[l] += m[i] * k[i];
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) step(i + l, l);
  for (int l = 0; i < n; ++i, ++l) step(i, l);
  return s.total();
}

// m += delta k, returning sum_i m[i] q[i] after it: the second pass.
float update_and_dot(float* m, const float* k, float delta, const float* q, int64_t n) {
  LaneSums s;
  const auto step = [&](int64_t i, int l) {
    m[i] += delta * k[i];
    s.lane[l] += m[i] * q[i];
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) step(i + l, l);
  for (int l = 0; i < n; ++i, ++l) step(i, l);
  return s.total();
}

// y += s x
void axpy(float* y, const float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

// A[r][l] read with any strides (the state update reads keys transposed).
struct Strided {
  const float* p;
  int64_t row, col;
  float operator()(int64_t r, int64_t l) const { return p[r * row + l * col]; }
};

// y[r][:] += sum_l a(r, l) x[l][:] for R rows and N columns held in
// registers over the whole sum (l in order).
template <int R, int N>
void product_tile(float* y, int64_t ldy, Strided a, const float* x, int64_t ldx, int64_t k) {
  float acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < N; ++c) acc[r][c] = y[r * ldy + c];
  for (int64_t l = 0; l < k; ++l) {
    const float* xl = x + l * ldx;
    for (int r = 0; r < R; ++r) {
      const float ar = a(r, l);
      for (int c = 0; c < N; ++c) acc[r][c] += ar * xl[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < N; ++c) y[r * ldy + c] = acc[r][c];
}

// y (m x n, row stride ldy) += a (m x k) x (k x n, row stride ldx), in
// tiles of 4 rows by 8 columns (then single rows and columns), a column of
// tiles at a time so that its part of x stays in cache. lower: a is lower
// triangular (a(r, l) = 0 for l > r), so a tile's sums stop at its last row.
void add_products(float* y, int64_t ldy, Strided a, const float* x, int64_t ldx, int64_t m, int64_t k, int64_t n,
                  bool lower = false) {
  constexpr int kTileRows = 4, kTileCols = 8;
  for (int64_t c = 0; c < n; c += kTileCols) {
    const bool full_width = c + kTileCols <= n;
    for (int64_t r = 0; r < m;) {
      const bool full_height = m - r >= kTileRows;
      const Strided ar{a.p + r * a.row, a.row, a.col};
      const int64_t depth = lower ? std::min(k, r + (full_height ? kTileRows : 1)) : k;
      float* yt = y + r * ldy + c;
      if (full_width) {
        if (full_height)
          product_tile<kTileRows, kTileCols>(yt, ldy, ar, x + c, ldx, depth);
        else
          product_tile<1, kTileCols>(yt, ldy, ar, x + c, ldx, depth);
      } else {
        for (int64_t j = 0; c + j < n; ++j)
          if (full_height)
            product_tile<kTileRows, 1>(yt + j, ldy, ar, x + c + j, ldx, depth);
          else
            product_tile<1, 1>(yt + j, ldy, ar, x + c + j, ldx, depth);
      }
      r += full_height ? kTileRows : 1;
    }
  }
}

float f32_at(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return *reinterpret_cast<const float*>(t.at(i0, i1, i2, i3));
}

// Row (i1, i2, i3) of an F32 tensor as adjacent floats: the row itself, or
// its copy in buf.
const float* f32_row(const Tensor& t, int64_t i1, int64_t i2, int64_t i3, float* buf) {
  const char* p = t.at(0, i1, i2, i3);
  if (t.nb[0] == sizeof(float)) return reinterpret_cast<const float*>(p);
  for (int64_t i = 0; i < t.ne[0]; ++i) buf[i] = *reinterpret_cast<const float*>(p + i * t.nb[0]);
  return buf;
}

// The node's sources and the two parts of its result.
struct DeltaNet {
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const Tensor& gate;
  const Tensor& beta;
  const Tensor& state;
  int64_t S, H, T, seqs;
  bool per_key_gate;
  float scale;    // 1 / sqrt(S), on the outputs (q's scale, as ggml's kernel applies it)
  float* out;     // o [S, H, T, seqs]
  float* states;  // the final states [S, S, H, seqs]: row j of head (h, s) is S[:, j]

  explicit DeltaNet(const Tensor& d)
      : q(*d.src[0]),
        k(*d.src[1]),
        v(*d.src[2]),
        gate(*d.src[3]),
        beta(*d.src[4]),
        state(*d.src[5]),
        S(v.ne[0]),
        H(v.ne[1]),
        T(v.ne[2]),
        seqs(v.ne[3]),
        per_key_gate(gate.ne[0] > 1),
        scale(1.0f / std::sqrt(static_cast<float>(S))),
        out(reinterpret_cast<float*>(d.data)),
        states(out + S * H * T * seqs) {}

  int64_t key_head(int64_t h) const { return h % q.ne[1]; }  // ggml's tiled broadcast
  float* out_row(int64_t h, int64_t t, int64_t s) const { return out + ((s * T + t) * H + h) * S; }
  float* state_of(int64_t h, int64_t s) const { return states + (s * H + h) * S * S; }
};

// The recurrent form: items are blocks of kRowsPerItem state rows of a head.
void recurrent(const DeltaNet& n, const KernelCtx& c) {
  const int64_t S = n.S;
  float* k_buf = reinterpret_cast<float*>(c.scratch);
  float* q_buf = k_buf + align_scratch(S * sizeof(float)) / sizeof(float);
  float* decay = q_buf + align_scratch(S * sizeof(float)) / sizeof(float);  // exp(g), per key with a per-key gate
  const int64_t blocks = (S + kRowsPerItem - 1) / kRowsPerItem;
  const int64_t items = blocks * n.H * n.seqs;
  for (int64_t item = c.next_item(); item < items; item = c.next_item()) {
    const int64_t block = item % blocks, h = item / blocks % n.H, s = item / blocks / n.H;
    const int64_t j0 = block * kRowsPerItem, j1 = std::min(S, j0 + kRowsPerItem);
    const int64_t hk = n.key_head(h);
    float* rows = n.state_of(h, s);
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t i = 0; i < S; ++i) rows[j * S + i] = f32_at(n.state, i, j, h, s);
    for (int64_t t = 0; t < n.T; ++t) {
      const float* kt = f32_row(n.k, hk, t, s, k_buf);
      const float* qt = f32_row(n.q, hk, t, s, q_buf);
      const float b = f32_at(n.beta, 0, h, t, s);
      if (n.per_key_gate)
        for (int64_t i = 0; i < S; ++i) decay[i] = std::exp(f32_at(n.gate, i, h, t, s));
      const float scalar_decay = n.per_key_gate ? 1.0f : std::exp(f32_at(n.gate, 0, h, t, s));
      float* o = n.out_row(h, t, s);
      for (int64_t j = j0; j < j1; ++j) {
        float* m = rows + j * S;  // S[:, j]
        const float predicted = n.per_key_gate ? decay_and_dot<true>(m, decay, scalar_decay, kt, S)
                                               : decay_and_dot<false>(m, decay, scalar_decay, kt, S);
        const float delta = b * (f32_at(n.v, j, h, t, s) - predicted);
        o[j] = update_and_dot(m, kt, delta, qt, S) * n.scale;
      }
    }
  }
}

// The chunked form's scratch, in floats from the thread's scratch.
struct ChunkScratch {
  float* st;  // the state S0, key-major: st[i S + j] = S[i, j]
  float* keys;     // C x S: the chunk's keys, then (state update) exp(G_C - G_u) k_u
  float* queries;  // C x S: the chunk's queries, then Gamma_t q_t
  float* u;        // C x S: beta_t v_t, then U, then the deltas d
  float* w;        // C x S: -beta_t Gamma_t k_t, then -W
  float* g;        // C x S (per-key gate) or C: the gate's running sum G
  float* a;        // C x C: A (strictly lower)
  float* p;        // C x C: P (lower, with the diagonal)
  float* betas;    // C
  float* row;      // S: a strided row's copy, decays per key

  static size_t floats(int64_t S, int64_t C) {
    return static_cast<size_t>(S * S + 5 * C * S + 2 * C * C + C + S);
  }
  ChunkScratch(char* scratch, int64_t S, int64_t C) {
    st = reinterpret_cast<float*>(scratch);
    keys = st + S * S;
    queries = keys + C * S;
    u = queries + C * S;
    w = u + C * S;
    g = w + C * S;
    a = g + C * S;
    p = a + C * C;
    betas = p + C * C;
    row = betas + C;
  }
};

// The chunked form: one head (h, s) per work item.
void chunked(const DeltaNet& n, const KernelCtx& c) {
  const int64_t S = n.S, C = kChunkTokens;
  const int64_t G_cols = n.per_key_gate ? S : 1;  // the gate's running sums per token
  ChunkScratch x(c.scratch, S, C);
  const int64_t items = n.H * n.seqs;
  for (int64_t item = c.next_item(); item < items; item = c.next_item()) {
    const int64_t h = item % n.H, s = item / n.H, hk = n.key_head(h);
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < S; ++j) x.st[i * S + j] = f32_at(n.state, i, j, h, s);
    for (int64_t t0 = 0; t0 < n.T; t0 += C) {
      const int64_t len = std::min(C, n.T - t0);
      // The chunk's rows, betas and the gate's running sums (in float, in order).
      for (int64_t t = 0; t < len; ++t) {
        std::memcpy(x.keys + t * S, f32_row(n.k, hk, t0 + t, s, x.row), S * sizeof(float));
        std::memcpy(x.queries + t * S, f32_row(n.q, hk, t0 + t, s, x.row), S * sizeof(float));
        const float* vt = f32_row(n.v, h, t0 + t, s, x.row);
        x.betas[t] = f32_at(n.beta, 0, h, t0 + t, s);
        for (int64_t j = 0; j < S; ++j) x.u[t * S + j] = x.betas[t] * vt[j];
        for (int64_t i = 0; i < G_cols; ++i)
          x.g[t * G_cols + i] = (t > 0 ? x.g[(t - 1) * G_cols + i] : 0.0f) + f32_at(n.gate, i, h, t0 + t, s);
      }
      // A and P: the keys' and queries' products with earlier keys, decayed
      // from u to t.
      for (int64_t t = 0; t < len; ++t) {
        const float* kt = x.keys + t * S;
        const float* qt = x.queries + t * S;
        for (int64_t u = 0; u <= t; ++u) {
          const float* ku = x.keys + u * S;
          float kk, qk;
          if (n.per_key_gate) {
            for (int64_t i = 0; i < S; ++i) x.row[i] = std::exp(x.g[t * S + i] - x.g[u * S + i]) * ku[i];
            kk = dot(kt, x.row, S);
            qk = dot(qt, x.row, S);
          } else {
            const float decay = std::exp(x.g[t] - x.g[u]);
            kk = decay * dot(kt, ku, S);
            qk = decay * dot(qt, ku, S);
          }
          x.a[t * C + u] = u < t ? x.betas[t] * kk : 0.0f;
          x.p[t * C + u] = qk;
        }
        for (int64_t u = t + 1; u < len; ++u) x.a[t * C + u] = x.p[t * C + u] = 0.0f;
      }
      // x.row[i] = exp(G_to[i] - G_from[i]) per key (G_from null: from 0),
      // one exp for all keys with a scalar gate.
      const auto decays = [&](const float* g_to, const float* g_from) {
        if (n.per_key_gate) {
          for (int64_t i = 0; i < S; ++i) x.row[i] = std::exp(g_to[i] - (g_from ? g_from[i] : 0.0f));
        } else {
          std::fill_n(x.row, S, std::exp(g_to[0] - (g_from ? g_from[0] : 0.0f)));
        }
      };
      // The right sides' key part, negated (-beta_t Gamma_t k_t), and the
      // queries' decay from the chunk's start (Gamma_t q_t).
      for (int64_t t = 0; t < len; ++t) {
        decays(x.g + t * G_cols, nullptr);
        for (int64_t i = 0; i < S; ++i) {
          x.w[t * S + i] = -x.betas[t] * x.row[i] * x.keys[t * S + i];
          x.queries[t * S + i] *= x.row[i];
        }
      }
      // (I + A) [U | -W] = [beta v | -beta Gamma k], by forward substitution.
      for (int64_t t = 1; t < len; ++t)
        for (int64_t u = 0; u < t; ++u) {
          const float a = x.a[t * C + u];
          axpy(x.u + t * S, x.u + u * S, -a, S);
          axpy(x.w + t * S, x.w + u * S, -a, S);
        }
      // The deltas: d = U - W S0.
      add_products(x.u, S, Strided{x.w, S, 1}, x.st, S, len, S, S);
      // The outputs: scale (Gamma q S0 + P d).
      for (int64_t t = 0; t < len; ++t) std::fill_n(n.out_row(h, t0 + t, s), S, 0.0f);
      float* o = n.out_row(h, t0, s);
      const int64_t ldo = n.H * S;
      add_products(o, ldo, Strided{x.queries, S, 1}, x.st, S, len, S, S);
      add_products(o, ldo, Strided{x.p, C, 1}, x.u, S, len, len, S, /*lower=*/true);
      for (int64_t t = 0; t < len; ++t)
        for (int64_t j = 0; j < S; ++j) o[t * ldo + j] *= n.scale;
      // The state at the chunk's end: Gamma_C S0 + sum_u (exp(G_C - G_u) k_u) d_u^T.
      const float* g_last = x.g + (len - 1) * G_cols;
      for (int64_t t = 0; t < len; ++t) {
        decays(g_last, x.g + t * G_cols);
        for (int64_t i = 0; i < S; ++i) x.keys[t * S + i] *= x.row[i];
      }
      decays(g_last, nullptr);
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) x.st[i * S + j] *= x.row[i];
      add_products(x.st, S, Strided{x.keys, 1, S}, x.u, S, S, len, S);
    }
    float* rows = n.state_of(h, s);
    for (int64_t j = 0; j < S; ++j)
      for (int64_t i = 0; i < S; ++i) rows[j * S + i] = x.st[i * S + j];
  }
}

// Where the chunked form is the faster, as bench_ops' BM_GatedDeltaNet
// measured both (32 value heads, 1 thread, AMD EPYC, the plain kernels'
// SSE2 code; medians of 3): only with a scalar gate and a state that stays
// in L1 through the chunk's products (S <= 64: 16 KiB), from 64 tokens on
// (S = 64: 6.1 against 6.4 ms at 64 tokens, 46.7 against 52.4 ms at 512;
// at 8-32 tokens within 4%). Slower everywhere else: S = 128 (Qwen3.5's
// and Kimi's heads; 180 against 148 ms at 512 tokens, 1.5x at 64 tokens),
// any per-key gate (an exp per key for every pair of tokens: 1.3-1.6x at
// S = 64), and one token (1.6x).
bool chunked_is_faster(const DeltaNet& n) { return !n.per_key_gate && n.S <= 64 && n.T >= 64; }

}  // namespace

DeltaNetForm delta_net_set_form(DeltaNetForm form) { return g_form.exchange(form); }

size_t delta_net_scratch(const Tensor& d, int, const KernelOptions&) {
  const int64_t S = d.src[2]->ne[0];
  const size_t recurrent_bytes = 3 * align_scratch(S * sizeof(float));
  const size_t chunked_bytes = ChunkScratch::floats(S, kChunkTokens) * sizeof(float);
  return std::max(recurrent_bytes, chunked_bytes);
}

void op_gated_delta_net(const Tensor& d, const KernelCtx& c) {
  const DeltaNet n(d);
  const DeltaNetForm form = g_form.load(std::memory_order_relaxed);
  if (form == DeltaNetForm::Chunked || (form == DeltaNetForm::Measured && chunked_is_faster(n)))
    chunked(n, c);
  else
    recurrent(n, c);
}

}  // namespace qlens::cpu
