#include "tools/sensitivity/sensitivity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <sstream>

#include "core/parallel.h"
#include "dist/bytes.h"
#include "qlens/error.h"
#include "tools/common/chunks.h"
#include "tools/common/layer_pipeline.h"
#include "tools/compare/compare_logits.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/common/user_regex.h"
#include "tools/sensitivity/pooled_fit.h"
#include "tools/sensitivity/sensitivity_dist.h"
#include "tools/sensitivity/sensitivity_runner.h"

namespace qlens::tools {

std::vector<DType> default_sensitivity_types(bool with_imatrix) {
  std::vector<DType> types;
  // With one, the low-bit types: llama.cpp's i-quants, which need it, down
  // to 1.56 bits per weight, and Q1_0 and Q2_0, whose blocks of 128 and 64
  // fit the rows the 256-element ones do not (Gemma 3's 640).
  if (with_imatrix)
    types = {DType::Q1_0,    DType::IQ1_S,  DType::IQ1_M, DType::IQ2_XXS, DType::Q2_0,  DType::IQ2_XS,
             DType::IQ2_S,   DType::IQ3_XXS, DType::IQ3_S, DType::IQ4_XS};
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::Q4_0,
                  DType::Q5_0, DType::Q8_0, DType::F16})
    types.push_back(t);
  return types;
}

std::vector<DType> sensitivity_types(const SensitivityOptions& o) {
  return o.types.empty() ? default_sensitivity_types(!o.imatrix_path.empty()) : o.types;
}

namespace {

int layer_of(const std::string& name) { return tensor_layer(name); }

// FNV-1a of a tensor's name: its noise generator's seed with --seed.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// A host tensor of the weight's shape holding `bytes` of type `type`.
struct Replacement {
  std::vector<uint8_t> bytes;
  Tensor tensor;
  Replacement(const Tensor& like, DType type, std::vector<uint8_t> data) : bytes(std::move(data)) {
    tensor.type = type;
    tensor.ne = like.ne;
    tensor.nb = contiguous_strides(type, like.ne);
    tensor.name = like.name;
    tensor.flags = kFlagWeight;
    tensor.data = bytes.data();
  }
};

bool fits(DType type, const Tensor& w) {
  const TypeTraits& tt = type_traits(type);
  return tt.to_float && (tt.quantize || tt.from_float) && w.ne[0] % tt.block_size == 0;
}

// The importance of a weight's columns: [K], or [n_expert][K] for a 3-D
// expert tensor (each expert's own); empty without an imatrix entry.
std::vector<float> weight_importance(const Imatrix* imatrix, const Tensor& w) {
  return imatrix ? imatrix->tensor_importance(w.name, w.ne[0], w.ne[2]) : std::vector<float>{};
}

// Element i's importance: its column's, in its matrix (expert) when the
// importance has one vector per matrix.
struct ImportanceAt {
  const std::vector<float>& importance;
  int64_t n_cols, matrix_elements;
  double operator()(size_t i) const {
    if (importance.empty()) return 1.0;
    const int64_t col = static_cast<int64_t>(i) % n_cols;
    if (importance.size() == static_cast<size_t>(n_cols)) return importance[col];
    return importance[static_cast<int64_t>(i) / matrix_elements * n_cols + col];
  }
};

// Chunks of rows on n_threads threads (the grid searches of the 1- to 3-bit
// types take seconds per tensor), matrix by matrix, so that each expert
// quantizes with its own importance; quantizing a row does not depend on
// the others, so the bytes do not depend on the thread count.
std::vector<uint8_t> quantize_to(DType type, const std::vector<float>& x, const Tensor& w,
                                 const std::vector<float>& importance, int n_threads) {
  const TypeTraits& tt = type_traits(type);
  const int64_t rows = w.nelements() / w.ne[0];
  const size_t dst_row = row_bytes(type, w.ne[0]);
  std::vector<uint8_t> out(dst_row * rows);
  if (!tt.quantize) {
    tt.from_float(x.data(), out.data(), w.nelements());
    return out;
  }
  const int64_t n_mat = importance.size() > static_cast<size_t>(w.ne[0]) ? w.ne[2] : 1;
  const int64_t mat_rows = rows / n_mat;
  constexpr int64_t kChunkRows = 16;
  const int64_t chunks_per_mat = (mat_rows + kChunkRows - 1) / kChunkRows;
  parallel_for(n_mat * chunks_per_mat, n_threads, [&](int64_t c, int) {
    const int64_t e = c / chunks_per_mat;
    const int64_t r0 = e * mat_rows + (c % chunks_per_mat) * kChunkRows;
    const int64_t nr = std::min(kChunkRows, (e + 1) * mat_rows - r0);
    tt.quantize(x.data() + r0 * w.ne[0], out.data() + r0 * dst_row, nr, w.ne[0],
                importance.empty() ? nullptr : importance.data() + e * w.ne[0]);
  });
  return out;
}

// Σ_i imp_i d_i^2 / (rows · mean imp · cols): the imatrix-weighted mean square,
// what the output of x·W changes by on average (imp = 1 without an imatrix).
double weighted_error(const std::vector<float>& x, const std::vector<float>& y, const Tensor& w,
                      const std::vector<float>& importance) {
  const ImportanceAt imp{importance, w.ne[0], w.ne[0] * w.ne[1]};
  double num = 0, imp_sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    const double v = imp(i);
    num += v * d * d;
    imp_sum += v;
  }
  return imp_sum > 0 ? num / imp_sum : 0.0;
}

// The first layer whose result changes when these weights change: their
// block's, n_layer for the output matrix (only the output is recomputed),
// 0 for the token embedding (also when tied to the output) and the rest.
int first_layer_reading(const Model& model, const std::vector<Tensor*>& weights) {
  const int n_layer = static_cast<int>(model.hparams().n_layer);
  int first = n_layer;
  for (const Tensor* w : weights) {
    const int layer = layer_of(w->name);
    const std::vector<Role> roles = model.roles_of(w);
    const bool output_only = !roles.empty() && std::all_of(roles.begin(), roles.end(), [](Role r) {
      return r == Role::Output || r == Role::OutputNorm;
    });
    first = std::min(first, layer >= 0 ? layer : output_only ? n_layer : 0);
  }
  return first;
}

}  // namespace

std::vector<Tensor*> sensitivity_probed_weights(const Model& model, const std::string& tensors_regex) {
  std::regex filter;
  if (!tensors_regex.empty()) filter = user_regex(tensors_regex, "sensitivity: --tensors");
  std::vector<Tensor*> probed;
  for (const auto& [name, w] : model.weights()) {
    // Matrices, and the 3-D expert tensors (all experts share one type, as
    // GGUF stores them), but for those quantize keeps as they are.
    const bool matrices = w->ne[1] > 1 && w->ne[3] == 1 && !never_quantized(tensor_role(name));
    if (matrices && (tensors_regex.empty() || std::regex_search(name, filter))) probed.push_back(w);
  }
  return probed;
}

namespace {

using OnTensor = std::function<void(const SensitivityResult&, int64_t, int64_t)>;

// What the steps of one run share: its settings, the reference runner, the
// importance matrix and the result being filled.
struct Probe {
  const Model& model;
  const SensitivityOptions& opt;
  const std::vector<DType>& types;
  const Imatrix* imatrix;
  SensitivityRunner& runner;
  SensitivityResult& r;
};

SensitivityResult start_result(const Model& model, const SensitivityOptions& opt, const std::vector<DType>& types,
                               const std::vector<Tensor*>& probed) {
  SensitivityResult r;
  r.model_path = model.path();
  r.imatrix_path = opt.imatrix_path;
  r.mode = opt.mode;
  r.settings = opt;
  r.settings.types = types;
  for (const auto& [name, w] : model.weights()) {
    r.n_weights_total += w->nelements();
    if (std::find(probed.begin(), probed.end(), w) == probed.end()) r.fixed_bytes += w->nbytes();
  }
  return r;
}

void check_some_probed(const Model& model, const SensitivityOptions& opt, const std::vector<Tensor*>& probed) {
  if (probed.empty())
    throw Error(opt.tensors_regex.empty()
                    ? "sensitivity: " + model.path() + " has no matrix to probe"
                    : "sensitivity: --tensors '" + opt.tensors_regex + "' matches no matrix of " + model.path() +
                          " (names look like blk.0.attn_q.weight, output.weight)");
}

// Layer by layer (those outside layers last), so that the cache only moves forward.
void sort_by_layer(std::vector<Tensor*>& probed) {
  std::stable_sort(probed.begin(), probed.end(), [](const Tensor* a, const Tensor* b) {
    const int la = layer_of(a->name), lb = layer_of(b->name);
    if (la != lb) return (la < 0 ? 1 << 30 : la) < (lb < 0 ? 1 << 30 : lb);
    return a->name < b->name;
  });
}

void finish(SensitivityResult& r, const SensitivityRunner& runner) {
  r.complete = true;
  r.reference_seconds = runner.reference_seconds();
  r.probe_seconds = runner.probe_seconds();
  r.n_probes = runner.n_probes();
}

// The source type itself: free of error.
SensitivityCandidate source_candidate(DType type, uint64_t bytes, int64_t n_elements) {
  SensitivityCandidate source;
  source.measured = true;
  source.bytes = bytes;
  source.type = type;
  source.bpw = 8.0 * source.bytes / n_elements;
  return source;
}

void record_evaluation(SensitivityCandidate& c, const PassEvaluation& e, double reference_ppl) {
  c.delta_kld = e.kld_mean;
  c.delta_kld_error = e.kld_error;
  c.delta_ppl = std::exp(e.nll_mean) - reference_ppl;
  c.measured = true;
}

// The first layer to recompute for weights first read at layer `first`
// (0: full passes when the cache is off).
int cached_start(SensitivityRunner& runner, int first) { return runner.advance_cache(first) ? first : 0; }

// With each of `weights` replaced by its `replacements` entry (the other
// ranks that read one given it first, under --split-layers), then restored.
PassEvaluation evaluate_with(SensitivityRunner& runner, const std::vector<Tensor*>& weights,
                         const std::vector<std::unique_ptr<Replacement>>& replacements, int first) {
  for (size_t i = 0; i < weights.size(); ++i) {
    runner.share_replacement(weights[i], replacements[i]->tensor.type, replacements[i]->bytes);
    runner.context().replace_weight(weights[i], &replacements[i]->tensor);
  }
  const PassEvaluation e = runner.evaluate(first);
  for (Tensor* w : weights) runner.context().restore_weight(w);
  return e;
}

PassEvaluation evaluate_replaced(SensitivityRunner& runner, Tensor* w, std::unique_ptr<Replacement> rep, int first) {
  std::vector<std::unique_ptr<Replacement>> reps;
  reps.push_back(std::move(rep));
  return evaluate_with(runner, {w}, reps, first);
}

// ---- --group layer|role|experts

using Groups = std::map<std::string, std::vector<Tensor*>>;

std::string group_name(const Tensor& w, SensitivityGroup group) {
  const int layer = layer_of(w.name);
  // Experts: a layer's expert tensors together; every other tensor alone.
  if (group == SensitivityGroup::Experts) return w.ne[2] > 1 ? "layer " + std::to_string(layer) + " experts" : w.name;
  if (group == SensitivityGroup::Role) return tensor_role(w.name);
  return layer < 0 ? std::string("outside layers") : "layer " + std::to_string(layer);
}

// In the order of the first layer each group changes, so that the cache only
// moves forward ("layer 2" before "layer 10").
std::vector<const Groups::value_type*> groups_in_layer_order(const Model& model, const Groups& members) {
  std::vector<const Groups::value_type*> order;
  for (auto& m : members) order.push_back(&m);
  std::stable_sort(order.begin(), order.end(), [&](const auto* a, const auto* b) {
    return first_layer_reading(model, a->second) < first_layer_reading(model, b->second);
  });
  return order;
}

SensitivityTensor group_entry(const std::string& name, const std::vector<Tensor*>& group, SensitivityGroup kind) {
  SensitivityTensor st;
  st.name = name;
  st.role = kind == SensitivityGroup::Role      ? name
            : kind == SensitivityGroup::Experts ? (group.size() > 1 || group.front()->ne[2] > 1
                                                       ? std::string("(experts)")
                                                       : tensor_role(group.front()->name))
                                                : std::string("(layer)");
  st.layer = kind != SensitivityGroup::Role ? layer_of(group.front()->name) : -1;
  uint64_t bytes = 0;
  for (Tensor* w : group) {
    st.members.push_back(w->name);
    st.n_elements += w->nelements();
    bytes += w->nbytes();
  }
  st.candidates.push_back(source_candidate(group.front()->type, bytes, st.n_elements));
  return st;
}

// Every tensor of the group quantized to `type` at once.
SensitivityCandidate probe_group_type(Probe& p, const std::vector<Tensor*>& group, DType type, int first,
                                      int64_t n_elements) {
  SensitivityCandidate c;
  c.type = type;
  std::vector<std::unique_ptr<Replacement>> reps;
  for (Tensor* w : group) {
    auto q = quantize_to(type, tensor_to_f32(*w), *w, weight_importance(p.imatrix, *w), p.opt.n_threads);
    c.bytes += q.size();
    reps.push_back(std::make_unique<Replacement>(*w, type, std::move(q)));
  }
  const PassEvaluation e = evaluate_with(p.runner, group, reps, first);
  c.bpw = 8.0 * c.bytes / n_elements;
  record_evaluation(c, e, p.r.reference_ppl);
  return c;
}

SensitivityTensor measure_group(Probe& p, const std::string& name, const std::vector<Tensor*>& group, int first) {
  SensitivityTensor st = group_entry(name, group, p.opt.group);
  for (DType type : p.types)
    if (std::all_of(group.begin(), group.end(), [&](Tensor* w) { return w->type != type && fits(type, *w); }))
      st.candidates.push_back(probe_group_type(p, group, type, first, st.n_elements));
  return st;
}

// ---- --group tensor

SensitivityTensor tensor_entry(const Tensor& w) {
  SensitivityTensor st;
  st.name = w.name;
  st.role = tensor_role(w.name);
  st.layer = layer_of(w.name);
  st.n_elements = w.nelements();
  st.shape = {w.ne[0], w.ne[1]};
  st.source_type = w.type;
  st.candidates.push_back(source_candidate(w.type, w.nbytes(), w.nelements()));
  return st;
}

// The type's weighted error, and in quant mode its measured effect.
SensitivityCandidate probe_type(Probe& p, Tensor* w, DType type, const std::vector<float>& x,
                                const std::vector<float>& importance, int first) {
  SensitivityCandidate c;
  c.type = type;
  auto q = quantize_to(type, x, *w, importance, p.opt.n_threads);
  c.bytes = q.size();
  c.bpw = 8.0 * c.bytes / w->nelements();
  std::vector<float> back(x.size());
  type_traits(type).to_float(q.data(), back.data(), w->nelements());
  c.weighted_error = weighted_error(x, back, *w, importance);
  if (p.opt.mode == SensitivityMode::Quant)
    record_evaluation(c, evaluate_replaced(p.runner, w, std::make_unique<Replacement>(*w, type, std::move(q)), first),
                      p.r.reference_ppl);
  return c;
}

// Noise shaped per column like an imatrix-aware quantizer's error (smaller
// where the importance is larger), with an RMS of 1 over the columns: one
// scale per column (per expert's column for expert tensors).
struct NoiseShape {
  std::vector<double> col_scale;
  double norm = 1;
  int64_t n_cols = 0, mat_elements = 0;
  double at(size_t i) const {
    const int64_t col = static_cast<int64_t>(i) % n_cols;
    if (col_scale.size() == static_cast<size_t>(n_cols)) return col_scale[col];
    return col_scale[static_cast<int64_t>(i) / mat_elements * n_cols + col];
  }
};

NoiseShape noise_shape(const Tensor& w, const std::vector<float>& importance) {
  NoiseShape s;
  s.n_cols = w.ne[0];
  s.mat_elements = w.ne[0] * w.ne[1];
  const size_t n_scales = importance.empty() ? static_cast<size_t>(w.ne[0]) : importance.size();
  s.col_scale.assign(n_scales, 1.0);
  if (!importance.empty()) {
    double mean_imp = 0;
    for (float v : importance) mean_imp += v;
    mean_imp /= importance.size();
    for (size_t j = 0; j < n_scales; ++j)
      s.col_scale[j] = std::clamp(std::sqrt(mean_imp / std::max<double>(importance[j], 1e-30)), 0.1, 10.0);
  }
  double scale_sq = 0;
  for (double v : s.col_scale) scale_sq += v * v;
  s.norm = std::sqrt(static_cast<double>(n_scales) / scale_sq);
  return s;
}

double rms_of(const std::vector<float>& x) {
  double sum_sq = 0;
  for (float v : x) sum_sq += static_cast<double>(v) * v;
  return std::sqrt(sum_sq / x.size());
}

// Fits ΔKLD = c·E^γ through the noise points (γ = 1 with one usable point)
// and predicts the candidates' ΔKLD from their weighted errors with it.
void fit_noise_response(SensitivityTensor& st) {
  std::vector<std::pair<double, double>> usable;
  for (auto [e, k] : st.noise_points)
    if (e > 0 && k > 0) usable.emplace_back(e, k);
  if (usable.size() >= 2) {
    const auto [e1, k1] = usable.front();
    const auto [e2, k2] = usable.back();
    st.noise_exponent = e2 != e1 ? std::clamp(std::log(k2 / k1) / std::log(e2 / e1), 0.5, 2.0) : 1.0;
    st.noise_coefficient = k2 / std::pow(e2, st.noise_exponent);
  } else if (usable.size() == 1) {
    st.noise_coefficient = usable[0].second / usable[0].first;
  }
  for (SensitivityCandidate& c : st.candidates)
    if (!c.measured) c.delta_kld = st.noise_coefficient * std::pow(c.weighted_error, st.noise_exponent);
}

// The tensor with noise of RMS level x its own RMS, shaped by the imatrix,
// and the noise's weighted error energy.
std::unique_ptr<Replacement> noisy_copy(const Tensor& w, const std::vector<float>& x,
                                        const std::vector<float>& importance, double level, std::mt19937_64& rng,
                                        double& energy) {
  const double rms = rms_of(x);
  const NoiseShape shape = noise_shape(w, importance);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> noisy(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    noisy[i] = x[i] + static_cast<float>(level * rms * shape.norm * shape.at(i) * gauss(rng));
  energy = weighted_error(x, noisy, w, importance);
  std::vector<uint8_t> bytes(noisy.size() * sizeof(float));
  std::memcpy(bytes.data(), noisy.data(), bytes.size());
  return std::make_unique<Replacement>(w, DType::F32, std::move(bytes));
}

// Noise mode: ΔKLD measured at each noise level (an RMS of level x the
// tensor's RMS), then the response fitted.
void probe_noise(Probe& p, Tensor* w, const std::vector<float>& x, const std::vector<float>& importance, int first,
                 std::mt19937_64& rng, SensitivityTensor& st) {
  for (double level : p.opt.noise_levels) {
    double energy = 0;
    auto rep = noisy_copy(*w, x, importance, level, rng, energy);
    st.noise_points.emplace_back(energy, evaluate_replaced(p.runner, w, std::move(rep), first).kld_mean);
  }
  fit_noise_response(st);
}

// A tensor's own noise generator: --seed and its name, so that its noise
// does not depend on which tensors ran before it.
std::mt19937_64 tensor_rng(const SensitivityOptions& opt, const std::string& name) {
  std::seed_seq seq{opt.seed, name_hash(name)};
  return std::mt19937_64(seq);
}

SensitivityTensor measure_tensor(Probe& p, Tensor* w, int first) {
  SensitivityTensor st = tensor_entry(*w);
  const std::vector<float> x = tensor_to_f32(*w);
  const std::vector<float> importance = weight_importance(p.imatrix, *w);
  for (DType type : p.types)
    if (type != w->type && fits(type, *w)) st.candidates.push_back(probe_type(p, w, type, x, importance, first));
  if (p.opt.mode == SensitivityMode::Noise) {
    // (A resumed run or another rank draws what one uninterrupted process draws.)
    std::mt19937_64 rng = tensor_rng(p.opt, w->name);
    probe_noise(p, w, x, importance, first, rng, st);
  }
  return st;
}

// The reference's top-K log-probabilities moved by a pass: tokens x K values.
using LogProbShift = std::vector<float>;

// Σ_t Σ_k p_tk a_tk b_tk / tokens for every pair of the passes' shifts, each
// first centred on their mean (which removes what does not flip with the
// signs: the tensors' own second-order terms).
std::vector<std::vector<double>> shift_gram(std::vector<LogProbShift>& shifts, const std::vector<float>& prob,
                                            int64_t n_tokens, int n_threads) {
  const size_t m = shifts.size(), d = prob.size();
  std::vector<double> mean(d, 0.0);
  for (const LogProbShift& s : shifts)
    for (size_t k = 0; k < d; ++k) mean[k] += s[k];
  for (LogProbShift& s : shifts)
    for (size_t k = 0; k < d; ++k) s[k] = static_cast<float>(s[k] - mean[k] / m);
  std::vector<std::vector<double>> gram(m, std::vector<double>(m, 0.0));
  parallel_for(static_cast<int64_t>(m), n_threads, [&](int64_t a, int) {
    for (size_t b = static_cast<size_t>(a); b < m; ++b) {
      double g = 0;
      for (size_t k = 0; k < d; ++k) g += static_cast<double>(prob[k]) * shifts[a][k] * shifts[b][k];
      gram[a][b] = g / static_cast<double>(n_tokens);
    }
  });
  for (size_t a = 0; a < m; ++a)
    for (size_t b = 0; b < a; ++b) gram[a][b] = gram[b][a];
  return gram;
}

// --mode pooled (pooled_fit.h): every tensor's candidates (their weighted
// errors) and its noise at the first level, +δ and -δ; the tensors outside
// the layers (the token embedding: on Gemma 3 half of all the tensors'
// ΔKLD, whose cross terms would drown the small ones) a pass each, alone;
// the rest in signed passes together, their ΔKLD fitted from the passes'
// Gram matrix. Each tensor's candidates are then predicted as noise mode
// predicts them from its own probe (ΔKLD / E times a type's weighted error).
void measure_pooled(Probe& p, const std::vector<Tensor*>& probed) {
  const int n = static_cast<int>(probed.size());
  const int n_layer = static_cast<int>(p.model.hparams().n_layer);
  std::vector<SensitivityTensor> tensors;
  std::vector<std::unique_ptr<Replacement>> plus, minus;
  std::vector<double> energy(n);
  std::vector<int> alone, together, group;
  std::map<std::string, int> roles;
  for (int i = 0; i < n; ++i) {
    Tensor* w = probed[i];
    SensitivityTensor st = tensor_entry(*w);
    const std::vector<float> x = tensor_to_f32(*w);
    const std::vector<float> importance = weight_importance(p.imatrix, *w);
    for (DType type : p.types)
      if (type != w->type && fits(type, *w)) st.candidates.push_back(probe_type(p, w, type, x, importance, 0));
    std::mt19937_64 rng = tensor_rng(p.opt, w->name);
    plus.push_back(noisy_copy(*w, x, importance, p.opt.noise_levels.front(), rng, energy[i]));
    std::vector<uint8_t> opposite(plus.back()->bytes.size());  // x - δ = 2x - (x + δ)
    const auto* noisy = reinterpret_cast<const float*>(plus.back()->bytes.data());
    auto* out = reinterpret_cast<float*>(opposite.data());
    for (size_t k = 0; k < x.size(); ++k) out[k] = 2 * x[k] - noisy[k];
    minus.push_back(std::make_unique<Replacement>(*w, DType::F32, std::move(opposite)));
    const bool inside = st.layer >= 0 && st.layer < n_layer;
    (inside ? together : alone).push_back(i);
    if (inside) group.push_back(roles.emplace(st.role, static_cast<int>(roles.size())).first->second);
    tensors.push_back(std::move(st));
  }
  const int n_passes = p.opt.pooled_passes > 0 ? static_cast<int>(p.opt.pooled_passes) : std::max(8, n / 4);
  int signed_passes = n_passes - static_cast<int>(alone.size());
  signed_passes -= signed_passes % 2;
  if (!together.empty() && signed_passes < 2)
    throw Error("sensitivity: --mode pooled with " + std::to_string(n_passes) + " passes: the " +
                std::to_string(alone.size()) + " tensors outside the layers take a pass each and the signed passes "
                "need at least 2 more (--passes)");
  std::vector<double> delta_kld(n, 0.0);
  for (int i : alone) {
    delta_kld[i] = evaluate_replaced(p.runner, probed[i], std::move(plus[i]), 0).kld_mean;
    p.r.pooled_alone.emplace_back(probed[i]->name, delta_kld[i]);
  }
  if (!together.empty()) {
    const auto sign = balanced_signs(static_cast<int>(together.size()), signed_passes, p.opt.seed);
    std::vector<LogProbShift> shifts;
    for (const std::vector<int>& pass : sign) {
      for (size_t j = 0; j < together.size(); ++j)
        p.runner.context().replace_weight(probed[together[j]], &(pass[j] > 0 ? plus : minus)[together[j]]->tensor);
      shifts.push_back(p.runner.top_logprob_shift());
      for (int i : together) p.runner.context().restore_weight(probed[i]);
    }
    std::vector<double> together_energy;
    for (int i : together) together_energy.push_back(energy[i]);
    const SignedFit fit = fit_signed(sign, shift_gram(shifts, p.runner.top_probabilities(), p.runner.n_scored(),
                                                      p.opt.n_threads),
                                     together_energy, group);
    for (size_t j = 0; j < together.size(); ++j) delta_kld[together[j]] = fit.delta_kld[j];
    p.r.pooled_relative_rms = fit.relative_rms;
  }
  for (int i = 0; i < n; ++i) {
    SensitivityTensor& st = tensors[i];
    st.noise_points.emplace_back(energy[i], delta_kld[i]);
    fit_noise_response(st);
    p.r.tensors.push_back(std::move(st));
  }
  p.r.pooled_passes = static_cast<int64_t>(alone.size()) + (together.empty() ? 0 : signed_passes);
}

// ---- the units probed (tensors, or groups) and their share among ranks

struct ProbeUnit {
  std::string name;
  std::vector<Tensor*> members;
  int first_layer = 0;  // the first layer its members change
  int passes = 0;       // evaluations (one per type, or per noise level)
  double cost = 0;      // sensitivity_unit_cost
};

// In the order of the first layer each unit changes, so that the cache only
// moves forward ("layer 2" before "layer 10"; the output matrix last).
std::vector<ProbeUnit> probe_units(const Probe& p, std::vector<Tensor*> probed) {
  std::vector<ProbeUnit> units;
  if (p.opt.group == SensitivityGroup::Tensor) {
    sort_by_layer(probed);
    for (Tensor* w : probed) units.push_back({w->name, {w}, first_layer_reading(p.model, {w})});
  } else {
    if (p.opt.mode != SensitivityMode::Quant) throw Error("sensitivity: --group layer|role needs --mode quant");
    Groups members;
    for (Tensor* w : probed) members[group_name(*w, p.opt.group)].push_back(w);
    for (const auto* m : groups_in_layer_order(p.model, members))
      units.push_back({m->first, m->second, first_layer_reading(p.model, m->second)});
  }
  const int n_layer = static_cast<int>(p.model.hparams().n_layer);
  for (ProbeUnit& u : units) {
    if (p.opt.mode == SensitivityMode::Noise)
      u.passes = static_cast<int>(p.opt.noise_levels.size());
    else
      for (DType type : p.types)
        u.passes += std::all_of(u.members.begin(), u.members.end(),
                                [&](Tensor* w) { return w->type != type && fits(type, *w); });
    u.cost = sensitivity_unit_cost(u.passes, p.opt.layer_cache ? u.first_layer : 0, n_layer);
  }
  return units;
}

SensitivityTensor measure_unit(Probe& p, const ProbeUnit& u) {
  const int first = cached_start(p.runner, u.first_layer);
  if (p.opt.group == SensitivityGroup::Tensor) return measure_tensor(p, u.members.front(), first);
  return measure_group(p, u.name, u.members, first);
}

// --split-layers: this rank's part of a unit that rank `owner` measures:
// each of its passes (from where the owner starts it), with the replacements
// the owner hands over for the unit's tensors this rank reads.
void relay_unit(Probe& p, const ProbeUnit& u, int owner) {
  const int first = p.opt.layer_cache && u.first_layer > 0 ? u.first_layer : 0;
  std::vector<Tensor*> read_here;
  for (Tensor* w : u.members)
    if (p.runner.reads(w)) read_here.push_back(w);
  for (int pass = 0; pass < u.passes; ++pass) {
    std::vector<std::unique_ptr<Replacement>> reps;
    for (Tensor* w : read_here) {
      const std::string bytes = p.runner.comm().receive(owner);
      dist::ByteReader in(bytes);
      const auto type = in.get<DType>();
      reps.push_back(std::make_unique<Replacement>(*w, type, in.get_vector<uint8_t>()));
      p.runner.context().replace_weight(w, &reps.back()->tensor);
    }
    p.runner.relay(first, owner);
    for (Tensor* w : read_here) p.runner.context().restore_weight(w);
  }
}

// What a rank sends rank 0 at the end: its units' results and its probes' cost.
std::string serialize_units(const std::vector<SensitivityTensor>& units, const SensitivityRunner& runner) {
  dist::ByteWriter w;
  w.put(runner.n_probes());
  w.put(runner.probe_seconds());
  w.put(serialize_sensitivity_units(units));
  return w.take();
}

// Units a resumed run measured are taken as they are; under several ranks,
// those any rank's checkpoints hold. The rest go to the ranks by cost
// (sensitivity_shares); each rank measures its own in order, calling
// on_tensor with its result so far (its checkpoint), and rank 0 gathers them
// all, in the units' order, into p.r.
void measure_units(Probe& p, const std::vector<ProbeUnit>& units, const SensitivityResult* resume,
                   const OnTensor& on_tensor, dist::Comm& comm) {
  const bool groups = p.opt.group != SensitivityGroup::Tensor;
  std::map<std::string, SensitivityTensor> done_before;
  if (resume)
    for (const SensitivityTensor& t : groups ? resume->groups : resume->tensors) done_before[t.name] = t;
  if (comm.size() > 1) {
    std::vector<SensitivityTensor> known;
    for (auto& [name, t] : done_before) known.push_back(t);
    std::string all;
    if (comm.is_root())
      for (const std::string& bytes : comm.gather(serialize_sensitivity_units(known), 0)) all += bytes;
    else
      comm.gather(serialize_sensitivity_units(known), 0);
    for (SensitivityTensor& t : parse_sensitivity_units(comm.broadcast(all, 0))) done_before.emplace(t.name, t);
  }
  std::vector<size_t> todo;
  std::vector<double> costs;
  for (size_t i = 0; i < units.size(); ++i)
    if (!done_before.count(units[i].name)) {
      todo.push_back(i);
      costs.push_back(units[i].cost);
    }
  // Across ranks by layers, a unit is its first layer's rank's; else the
  // ranks share them by cost.
  std::vector<int> owner;
  if (p.runner.split())
    for (size_t i : todo) owner.push_back(p.runner.rank_of_layer(units[i].first_layer));
  else
    owner = sensitivity_shares(costs, comm.size());

  SensitivityResult& mine = p.r;  // this rank's results so far (rank 0: also those before)
  std::vector<SensitivityTensor>& list = groups ? mine.groups : mine.tensors;
  if (comm.is_root())
    for (const ProbeUnit& u : units)
      if (auto it = done_before.find(u.name); it != done_before.end()) list.push_back(it->second);
  const int64_t my_total =
      static_cast<int64_t>(list.size()) + std::count(owner.begin(), owner.end(), comm.rank());
  std::vector<SensitivityTensor> measured;
  for (size_t k = 0; k < todo.size(); ++k) {
    if (owner[k] != comm.rank()) {
      if (p.runner.split()) relay_unit(p, units[todo[k]], owner[k]);
      continue;
    }
    measured.push_back(measure_unit(p, units[todo[k]]));
    list.push_back(measured.back());
    if (on_tensor) on_tensor(mine, static_cast<int64_t>(list.size()), my_total);
  }
  // Rank 0: every unit in order (its own as they are, the others' from their bytes).
  std::vector<std::string> parts;
  if (comm.size() > 1) parts = comm.gather(comm.is_root() ? std::string() : serialize_units(measured, p.runner), 0);
  if (!comm.is_root()) return;
  std::map<std::string, SensitivityTensor> by_name = done_before;
  for (SensitivityTensor& t : measured) by_name[t.name] = std::move(t);
  for (int r = 1; r < static_cast<int>(parts.size()); ++r) {
    dist::ByteReader in(parts[r]);
    const auto n_probes = in.get<int64_t>();
    const auto seconds = in.get<double>();
    p.runner.add_probes(n_probes, seconds);
    for (SensitivityTensor& t : parse_sensitivity_units(in.get_string())) by_name[t.name] = std::move(t);
  }
  list.clear();
  for (const ProbeUnit& u : units) list.push_back(by_name.at(u.name));
}

}  // namespace

SensitivityResult measure_sensitivity(const Model& model, const std::vector<Token>& tokens,
                                      const SensitivityOptions& opt, const SensitivityResult* resume,
                                      const OnTensor& on_tensor, dist::Comm& comm) {
  std::unique_ptr<Imatrix> imatrix;
  if (!opt.imatrix_path.empty()) imatrix = std::make_unique<Imatrix>(load_imatrix(opt.imatrix_path));
  const std::vector<DType> types = sensitivity_types(opt);
  std::vector<Tensor*> probed = sensitivity_probed_weights(model, opt.tensors_regex);
  SensitivityResult r = start_result(model, opt, types, probed);
  check_some_probed(model, opt, probed);
  if (opt.mode == SensitivityMode::Pooled && comm.size() > 1)
    throw Error("sensitivity: --mode pooled runs on one process");
  if (opt.mode == SensitivityMode::Pooled && opt.group != SensitivityGroup::Tensor)
    throw Error("sensitivity: --mode pooled probes tensors (--group tensor)");

  // Every rank makes the reference itself (one full pass): cheaper than
  // sending it, and the same on each.
  SensitivityRunner runner(model, tokens, opt, comm);
  runner.make_reference();
  r.n_tokens_scored = runner.n_scored();
  r.reference_ppl = runner.reference_ppl();
  Probe p{model, opt, types, imatrix.get(), runner, r};
  if (opt.mode == SensitivityMode::Pooled) {
    sort_by_layer(probed);
    measure_pooled(p, probed);
  } else {
    measure_units(p, probe_units(p, probed), resume, on_tensor, comm);
  }
  finish(r, runner);
  r.complete = comm.is_root();
  return r;
}

}  // namespace qlens::tools
