// The reference kernels: the semantics of each op (tensor.h) written out as
// plainly as possible, one thread, element by element, sums and
// transcendental functions in double. Slow on purpose: the oracle of the
// kernel tests. The op table (op_table.cpp) names one per op.
#include "ops/reference.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "ops/op_table.h"
#include "qlens/error.h"

namespace qlens::reference {

namespace {

// Element (i0, i1, i2, i3) of a tensor of a plain type.
double get(const Tensor& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
  const char* p = t.at(i0, i1, i2, i3);
  switch (t.type) {
    case DType::F32: return *reinterpret_cast<const float*>(p);
    case DType::F16: return fp16_to_fp32(*reinterpret_cast<const uint16_t*>(p));
    case DType::BF16: return bf16_to_fp32(*reinterpret_cast<const uint16_t*>(p));
    case DType::I32: return *reinterpret_cast<const int32_t*>(p);
    default: throw Error("reference kernels: cannot read elements of type " + std::string(type_name(t.type)));
  }
}

// Stores v (rounded to float, then to the tensor's type).
void set(const Tensor& t, double v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
  char* p = t.at(i0, i1, i2, i3);
  const float f = static_cast<float>(v);
  switch (t.type) {
    case DType::F32: *reinterpret_cast<float*>(p) = f; break;
    case DType::F16: *reinterpret_cast<uint16_t*>(p) = fp32_to_fp16(f); break;
    case DType::BF16: *reinterpret_cast<uint16_t*>(p) = fp32_to_bf16(f); break;
    default: throw Error("reference kernels: cannot write elements of type " + std::string(type_name(t.type)));
  }
}

// Row (i1, i2, i3) of t as doubles; block-quantized rows through to_float.
std::vector<double> row(const Tensor& t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  std::vector<double> r(t.ne[0]);
  const TypeTraits& tt = type_traits(t.type);
  if (tt.block_size > 1) {
    if (!tt.to_float) throw Error("reference kernels: cannot read type " + std::string(tt.name));
    std::vector<float> f(t.ne[0]);
    tt.to_float(t.at(0, i1, i2, i3), f.data(), t.ne[0]);
    for (int64_t i = 0; i < t.ne[0]; ++i) r[i] = f[i];
  } else {
    for (int64_t i = 0; i < t.ne[0]; ++i) r[i] = get(t, i, i1, i2, i3);
  }
  return r;
}

// Calls f(i1, i2, i3) for every row of t.
template <class F>
void for_rows(const Tensor& t, F&& f) {
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) f(i1, i2, i3);
}

enum class Binary { Add, Mul, Div };

void binary(const Tensor& d, Binary op) {
  const Tensor& a = *d.src[0];
  const Tensor& b = *d.src[1];
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) {
      const double x = get(a, i0, i1, i2, i3);
      const double y = get(b, i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
      set(d, op == Binary::Add ? x + y : op == Binary::Mul ? x * y : x / y, i0, i1, i2, i3);
    }
  });
}

// Element e of a in its logical order goes to element e of dst.
void copy_into(const Tensor& a, const Tensor& dst) {
  if (a.nelements() != dst.nelements()) throw Error("reference kernels: cpy element counts differ");
  int64_t ia[kMaxDims] = {}, id[kMaxDims] = {};
  for (int64_t e = 0; e < a.nelements(); ++e) {
    set(dst, get(a, ia[0], ia[1], ia[2], ia[3]), id[0], id[1], id[2], id[3]);
    for (int k = 0; k < kMaxDims && ++ia[k] == a.ne[k]; ++k) ia[k] = 0;
    for (int k = 0; k < kMaxDims && ++id[k] == dst.ne[k]; ++k) id[k] = 0;
  }
}

}  // namespace

void get_rows(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const Tensor& idx = *d.src[1];
  for (int64_t j = 0; j < idx.ne[1]; ++j)
    for (int64_t i = 0; i < idx.ne[0]; ++i) {
      const int64_t r = static_cast<int64_t>(get(idx, i, j));
      if (r < 0 || r >= a.ne[1]) throw Error("reference kernels: get_rows index out of range");
      const std::vector<double> x = row(a, r, j);
      for (int64_t k = 0; k < a.ne[0]; ++k) set(d, x[k], k, i, j);
    }
}

void mul_mat(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const Tensor& b = *d.src[1];
  const int64_t r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
  for (int64_t i3 = 0; i3 < b.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < b.ne[2]; ++i2)
      for (int64_t i = 0; i < a.ne[1]; ++i) {
        const std::vector<double> w = row(a, i, i2 / r2, i3 / r3);
        for (int64_t j = 0; j < b.ne[1]; ++j) {
          double s = 0;
          for (int64_t k = 0; k < a.ne[0]; ++k) s += w[k] * get(b, k, j, i2, i3);
          set(d, s, i, j, i2, i3);
        }
      }
}

void mul_mat_id(const Tensor& d) {
  const Tensor& as = *d.src[0];
  const Tensor& b = *d.src[1];
  const Tensor& ids = *d.src[2];
  for (int64_t t = 0; t < ids.ne[1]; ++t)
    for (int64_t u = 0; u < ids.ne[0]; ++u) {
      const int64_t e = static_cast<int64_t>(get(ids, u, t));
      if (e < 0 || e >= as.ne[2]) throw Error("reference kernels: mul_mat_id expert id out of range");
      const int64_t bu = u % b.ne[1];
      for (int64_t i = 0; i < as.ne[1]; ++i) {
        const std::vector<double> w = row(as, i, e);
        double s = 0;
        for (int64_t k = 0; k < as.ne[0]; ++k) s += w[k] * get(b, k, bu, t);
        set(d, s, i, u, t);
      }
    }
}

void argsort_desc(const Tensor& d) {
  const Tensor& a = *d.src[0];
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    const std::vector<double> x = row(a, i1, i2, i3);
    std::vector<int32_t> order(x.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    // Ties: lower index first (the CPU kernel's order for rows up to 16).
    std::stable_sort(order.begin(), order.end(), [&](int32_t p, int32_t q) { return x[p] > x[q]; });
    for (size_t i = 0; i < order.size(); ++i)
      *reinterpret_cast<int32_t*>(d.at(static_cast<int64_t>(i), i1, i2, i3)) = order[i];
  });
}

void sum_rows(const Tensor& d) {
  const Tensor& a = *d.src[0];
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    double s = 0;
    for (double v : row(a, i1, i2, i3)) s += v;
    set(d, s, 0, i1, i2, i3);
  });
}

void clamp(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const double lo = d.param_f(0), hi = d.param_f(1);
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) {
      const double x = get(a, i0, i1, i2, i3);
      const double m = x < hi ? x : hi;  // NaN becomes hi, as in ggml
      set(d, m > lo ? m : lo, i0, i1, i2, i3);
    }
  });
}

void scale(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const double s = d.param_f(0);
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) set(d, get(a, i0, i1, i2, i3) * s, i0, i1, i2, i3);
  });
}

void map(const Tensor& d, double (*f)(double)) {
  const Tensor& a = *d.src[0];
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) set(d, f(get(a, i0, i1, i2, i3)), i0, i1, i2, i3);
  });
}

double silu_of(double x) { return x / (1.0 + std::exp(-x)); }

// 1 + tanh u as 2 / (1 + e^-2u): in double the tanh form cancels to exactly 0
// from x = -7.2, where the result is still a normal float (-2e-16).
double gelu_of(double x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  const double u = c * (x + 0.044715 * x * x * x);
  // At -inf the quotient would be -inf / inf; the limit is 0.
  return x == -HUGE_VAL ? -0.0 : x / (1.0 + std::exp(-2.0 * u));
}

// Each row times scale(sum of its squares, row length, eps).
template <class Scale>
void scale_rows_by_norm(const Tensor& d, Scale scale) {
  const Tensor& a = *d.src[0];
  const double eps = d.param_f(0);
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    const std::vector<double> x = row(a, i1, i2, i3);
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = scale(ss, static_cast<double>(a.ne[0]), eps);
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) set(d, x[i0] * r, i0, i1, i2, i3);
  });
}

void rms_norm(const Tensor& d) {
  scale_rows_by_norm(d, [](double ss, double n, double eps) { return 1.0 / std::sqrt(ss / n + eps); });
}
void l2_norm(const Tensor& d) {
  scale_rows_by_norm(d, [](double ss, double, double eps) { return 1.0 / std::max(std::sqrt(ss), eps); });
}

void rope(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const Tensor& pos = *d.src[1];
  const int64_t n_dims = d.params[0];
  const RopeMode mode = rope_mode(d);
  const bool neox = rope_neox_pairs(mode);
  const RopeSections sections = rope_sections(d);
  const int n_positions = rope_is_multi(mode) ? 4 : 1;
  const double base = d.param_f(2), fscale = d.param_f(3);
  const RopeYarnParams yarn = rope_yarn_params(d);
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    const std::vector<double> x = row(a, i1, i2, i3);
    std::vector<double> y = x;  // dims from n_dims on are copied
    // The angles as the op defines them (ggml's): theta_i in float, by
    // repeated multiplication from the position (each of the token's
    // positions, section-major in pos, for the multi-section modes); the
    // rest in double.
    const float theta_scale = std::pow(static_cast<float>(base), -2.0f / static_cast<float>(n_dims));
    std::array<float, 4> thetas{};
    for (int p = 0; p < n_positions; ++p) thetas[p] = static_cast<float>(get(pos, p * a.ne[2] + i2));
    for (int64_t i = 0; i < n_dims / 2; ++i) {
      const float theta_i = thetas[rope_position_of(mode, sections, i)];
      for (float& t : thetas) t *= theta_scale;
      const float f = d.src[2] ? static_cast<float>(get(*d.src[2], i)) : 1.0f;
      const float extrapolated = theta_i / f;
      const float interpolated = static_cast<float>(fscale) * extrapolated;
      float angle = interpolated;
      // YaRN: extrapolated angles below the low correction dim, interpolated
      // ones above the high one, a linear ramp between (ggml's rope_yarn).
      if (yarn.ext_factor != 0.0f) {
        const float ramp = (1.0f - std::clamp((static_cast<float>(i) - yarn.low) / std::max(0.001f, yarn.high - yarn.low),
                                              0.0f, 1.0f)) * yarn.ext_factor;
        angle = interpolated * (1.0f - ramp) + extrapolated * ramp;
      }
      const double theta = angle;
      const int64_t j0 = neox ? i : 2 * i;
      const int64_t j1 = neox ? i + n_dims / 2 : 2 * i + 1;
      y[j0] = (x[j0] * std::cos(theta) - x[j1] * std::sin(theta)) * yarn.mscale;
      y[j1] = (x[j0] * std::sin(theta) + x[j1] * std::cos(theta)) * yarn.mscale;
    }
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) set(d, y[i0], i0, i1, i2, i3);
  });
}

void soft_max(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const Tensor* mask = d.src[1];
  const Tensor* sinks = d.src[2];
  const double s = d.param_f(0);
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    std::vector<double> x = row(a, i1, i2, i3);
    double mx = -INFINITY;
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) {
      x[i0] *= s;
      if (mask) x[i0] += get(*mask, i0, i1, i2 % mask->ne[2], i3 % mask->ne[3]);
      mx = std::max(mx, x[i0]);
    }
    // A sink is one more logit of the row: in the maximum and the sum, with no output.
    const double sink = sinks ? get(*sinks, i2) : -INFINITY;
    mx = std::max(mx, sink);
    double sum = mx == -INFINITY ? 0.0 : std::exp(sink - mx);
    for (double& v : x) {
      v = mx == -INFINITY ? 0.0 : std::exp(v - mx);  // a fully masked row gives zeros
      sum += v;
    }
    // A NaN anywhere in the row makes the sum and so the whole row NaN.
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) set(d, mx == -INFINITY ? 0.0 : x[i0] / sum, i0, i1, i2, i3);
  });
}

void glu(const Tensor& d) {
  const Tensor& gate = *d.src[0];
  const Tensor& value = *d.src[1];
  const auto kind = static_cast<GluKind>(d.params[0]);
  const double alpha = d.param_f(2), limit = d.param_f(3);
  for_rows(gate, [&](int64_t i1, int64_t i2, int64_t i3) {
    for (int64_t i0 = 0; i0 < gate.ne[0]; ++i0) {
      double x = get(gate, i0, i1, i2, i3), y = get(value, i0, i1, i2, i3);
      if (kind == GluKind::SwigluOai) {
        x = std::min(x, limit);
        y = std::clamp(y, -limit, limit) + 1.0;
        set(d, x / (1.0 + std::exp(-alpha * x)) * y, i0, i1, i2, i3);
      } else {
        set(d, silu_of(x) * y, i0, i1, i2, i3);
      }
    }
  });
}

void add_id(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const Tensor& b = *d.src[1];
  const Tensor& ids = *d.src[2];
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    const auto id = static_cast<int64_t>(get(ids, i1, i2));
    if (id < 0 || id >= b.ne[1])
      throw Error("add_id: id " + std::to_string(id) + " at (" + std::to_string(i1) + ", " + std::to_string(i2) +
                  ") is outside the " + std::to_string(b.ne[1]) + " rows of " + describe(b));
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) set(d, get(a, i0, i1, i2, i3) + get(b, i0, id), i0, i1, i2, i3);
  });
}


void concat(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const Tensor& b = *d.src[1];
  const int dim = d.params[0];
  for_rows(d, [&](int64_t i1, int64_t i2, int64_t i3) {
    for (int64_t i0 = 0; i0 < d.ne[0]; ++i0) {
      std::array<int64_t, kMaxDims> i = {i0, i1, i2, i3};
      const bool from_a = i[dim] < a.ne[dim];
      if (!from_a) i[dim] -= a.ne[dim];
      set(d, get(from_a ? a : b, i[0], i[1], i[2], i[3]), i0, i1, i2, i3);
    }
  });
}

void fill(const Tensor& d) {
  const double c = d.param_f(0);
  for_rows(d, [&](int64_t i1, int64_t i2, int64_t i3) {
    for (int64_t i0 = 0; i0 < d.ne[0]; ++i0) set(d, c, i0, i1, i2, i3);
  });
}

// Row by row of the result: the last row of b whose id names it, else a's.
void set_rows(const Tensor& d) {
  const Tensor& a = *d.src[0];
  const Tensor& b = *d.src[1];
  const Tensor& ids = *d.src[2];
  for_rows(d, [&](int64_t i1, int64_t i2, int64_t i3) {
    int64_t from = -1;
    for (int64_t u = 0; u < b.ne[1]; ++u) {
      const auto id = static_cast<int64_t>(get(ids, u, i2 % ids.ne[1], i3 % ids.ne[2]));
      if (id < 0 || id >= d.ne[1])
        throw Error("set_rows: id " + std::to_string(id) + " is outside the " + std::to_string(d.ne[1]) + " rows of " +
                    describe(d));
      if (id == i1) from = u;
    }
    for (int64_t i0 = 0; i0 < d.ne[0]; ++i0)
      set(d, from < 0 ? get(a, i0, i1, i2, i3) : get(b, i0, from, i2, i3), i0, i1, i2, i3);
  });
}

void ssm_conv(const Tensor& d) {
  const Tensor& sx = *d.src[0];
  const Tensor& c = *d.src[1];
  for_rows(d, [&](int64_t t, int64_t s, int64_t) {
    for (int64_t i = 0; i < d.ne[0]; ++i) {
      double sum = 0;
      for (int64_t k = 0; k < c.ne[0]; ++k) sum += get(sx, t + k, i, s) * get(c, k, i);
      set(d, sum, i, t, s);
    }
  });
}

// The gated delta rule as tensor.h states it, token by token, in double.
void gated_delta_net(const Tensor& d) {
  const Tensor& q = *d.src[0];
  const Tensor& k = *d.src[1];
  const Tensor& v = *d.src[2];
  const Tensor& gate = *d.src[3];
  const Tensor& beta = *d.src[4];
  const Tensor& state = *d.src[5];
  const int64_t S = v.ne[0], H = v.ne[1], T = v.ne[2], seqs = v.ne[3];
  const bool per_key_gate = gate.ne[0] > 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(S));
  // Element e of the packed result, counted in its logical order.
  const auto put = [&](int64_t e, double value) { set(d, value, e % d.ne[0], e / d.ne[0]); };
  const int64_t first_state = S * H * T * seqs;
  std::vector<double> st(static_cast<size_t>(S * S));  // st[i S + j] = S[i, j]: key i, value j
  std::vector<double> delta(static_cast<size_t>(S));
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h % q.ne[1];  // the tiled broadcast of q and k heads
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) st[i * S + j] = get(state, i, j, h, s);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < S; ++i) {
          const double decay = std::exp(get(gate, per_key_gate ? i : 0, h, t, s));
          for (int64_t j = 0; j < S; ++j) st[i * S + j] *= decay;
        }
        const double b = get(beta, 0, h, t, s);
        for (int64_t j = 0; j < S; ++j) {
          double predicted = 0;
          for (int64_t i = 0; i < S; ++i) predicted += st[i * S + j] * get(k, i, hk, t, s);
          delta[j] = b * (get(v, j, h, t, s) - predicted);
        }
        for (int64_t i = 0; i < S; ++i) {
          const double ki = get(k, i, hk, t, s);
          for (int64_t j = 0; j < S; ++j) st[i * S + j] += ki * delta[j];
        }
        for (int64_t j = 0; j < S; ++j) {
          double o = 0;
          for (int64_t i = 0; i < S; ++i) o += st[i * S + j] * get(q, i, hk, t, s);
          put(((s * T + t) * H + h) * S + j, o * scale);
        }
      }
      for (int64_t j = 0; j < S; ++j)
        for (int64_t i = 0; i < S; ++i) put(first_state + ((s * H + h) * S + j) * S + i, st[i * S + j]);
    }
}

void add(const Tensor& d) { binary(d, Binary::Add); }
void mul(const Tensor& d) { binary(d, Binary::Mul); }
void div(const Tensor& d) { binary(d, Binary::Div); }
void cpy(const Tensor& d) { copy_into(*d.src[0], *d.src[1]); }
void cont(const Tensor& d) { copy_into(*d.src[0], d); }

}  // namespace qlens::reference
