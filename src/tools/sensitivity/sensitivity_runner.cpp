#include "tools/sensitivity/sensitivity_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/parallel.h"
#include "dist/bytes.h"
#include "qlens/error.h"
#include "tools/common/tensor_names.h"
#include "tools/compare/compare_logits.h"

namespace qlens::tools {

namespace {

// log(1 - exp(log_mass)) for a mass below 1, kept finite.
double log_complement(double mass) { return std::log(std::max(1.0 - mass, 1e-30)); }

}  // namespace

SensitivityRunner::SensitivityRunner(const Model& model, const std::vector<Token>& tokens,
                                     const SensitivityOptions& opt, dist::Comm& comm)
    : model_(model), opt_(opt), chunks_(tokens, opt.n_ctx, model.vocab(), "sensitivity"), comm_(comm) {
  n_chunks_ = std::min(opt.max_chunks > 0 ? opt.max_chunks : chunks_.available(), chunks_.available());
  split_ = split_for_run(model, comm, opt.split_layers, false, "sensitivity");
  ctx_ = std::make_unique<Context>(model, run_context(opt, opt.n_ctx, opt.n_batch));
}

int SensitivityRunner::rank_of_layer(int layer) const {
  for (int r = 0; r < split_->n_ranks(); ++r)
    if (layer < split_->last(r)) return r;
  return split_->n_ranks() - 1;
}

std::vector<int> SensitivityRunner::readers(const Tensor* w) const {
  const int layer = tensor_layer(w->name);
  if (layer >= 0 && layer < n_layer_) return {rank_of_layer(layer)};
  std::vector<int> ranks;
  const std::vector<Role> roles = model_.roles_of(w);
  const auto has = [&](Role role) { return std::find(roles.begin(), roles.end(), role) != roles.end(); };
  if (has(Role::TokenEmbd) || !(has(Role::Output) || has(Role::OutputNorm))) ranks.push_back(0);
  if (has(Role::Output) || has(Role::OutputNorm)) ranks.push_back(split_->n_ranks() - 1);
  return ranks;
}

void SensitivityRunner::run(const ScoreFn& score, int first) {
  if (split_) {
    run_split(score, first);
    return;
  }
  if (first > 0 && first != cache_layer_)
    throw Error("sensitivity: internal: the cache is at layer " + std::to_string(cache_layer_) + ", not " +
                std::to_string(first));
  const int64_t first_scored = chunks_.first_scored(), per_chunk = opt_.n_ctx - 1 - first_scored;
  for (int64_t c = 0; c < n_chunks_; ++c) {
    ctx_->clear();
    // Logits only where they are scored: the output matrix on half the rows.
    const bool ok = ctx_->decode_layers(chunks_.chunk(c), first, n_layer_, first > 0 ? cache_[c].data() : nullptr,
                                        nullptr, first_scored);
    if (!ok) throw Error("sensitivity: the computation was stopped");
    parallel_for(per_chunk, opt_.n_threads, [&](int64_t i, int worker) {
      const int64_t j = first_scored + i;
      score(c * per_chunk + i, ctx_->logits(j), chunks_.next(c, j), worker);
    });
  }
}

void SensitivityRunner::run_split(const ScoreFn& score, int first) {
  const int r = comm_.rank(), starter = rank_of_layer(first);
  if (r < starter) return;
  if (r == starter && first > 0 && first != cache_layer_)
    throw Error("sensitivity: internal: rank " + std::to_string(r) + "'s cache is at layer " +
                std::to_string(cache_layer_) + ", not " + std::to_string(first));
  const int from = r == starter ? first : split_->first(r);
  const bool last_rank = split_->is_last(r);
  const int64_t first_scored = chunks_.first_scored(), per_chunk = opt_.n_ctx - 1 - first_scored;
  const size_t stream = static_cast<size_t>(opt_.n_ctx * model_.hparams().n_embd);
  const bool keep = keeping_base_ && opt_.layer_cache;  // without the cache, nothing starts from it
  if (keep) base_.resize(n_chunks_);
  std::vector<float> received, out;
  for (int64_t c = 0; c < n_chunks_; ++c) {
    const float* in = nullptr;
    if (r > starter) {
      const std::string bytes = comm_.receive(r - 1);
      if (bytes.size() != stream * sizeof(float))
        throw Error("sensitivity: rank " + std::to_string(r) + " received " + std::to_string(bytes.size()) +
                    " bytes of residual stream");
      received.resize(stream);
      std::memcpy(received.data(), bytes.data(), bytes.size());
      if (keep) base_[c] = received;
      in = received.data();
    } else if (first > 0) {
      in = cache_[c].data();
    }
    ctx_->clear();
    const bool ok = last_rank ? ctx_->decode_layers(chunks_.chunk(c), from, n_layer_, in, nullptr, first_scored)
                              : ctx_->decode_layers(chunks_.chunk(c), from, split_->last(r), in, &out);
    if (!ok) throw Error("sensitivity: the computation was stopped");
    if (!last_rank) {
      comm_.send(std::string(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(float)), r + 1);
      continue;
    }
    parallel_for(per_chunk, opt_.n_threads, [&](int64_t i, int worker) {
      const int64_t j = first_scored + i;
      score(c * per_chunk + i, ctx_->logits(j), chunks_.next(c, j), worker);
    });
  }
}

void SensitivityRunner::share_replacement(const Tensor* w, DType type, const std::vector<uint8_t>& bytes) {
  if (!split_) return;
  for (int r : readers(w)) {
    if (r == comm_.rank()) continue;
    dist::ByteWriter out;
    out.put(type);
    out.put(bytes);
    comm_.post(out.take(), r);
  }
}

bool SensitivityRunner::reads(const Tensor* w) const {
  const std::vector<int> ranks = readers(w);
  return std::find(ranks.begin(), ranks.end(), comm_.rank()) != ranks.end();
}

bool SensitivityRunner::advance_cache(int layer) {
  if (!opt_.layer_cache || layer <= 0) return false;
  if (layer < cache_layer_) {
    cache_layer_ = split_ ? split_->first(comm_.rank()) : 0;
    if (cache_layer_ > 0) cache_ = base_;
  }
  if (cache_layer_ == layer) return true;
  cache_.resize(n_chunks_);
  std::vector<float> next;
  for (int64_t c = 0; c < n_chunks_; ++c) {
    ctx_->clear();
    if (!ctx_->decode_layers(chunks_.chunk(c), cache_layer_, layer, cache_layer_ > 0 ? cache_[c].data() : nullptr,
                             &next))
      throw Error("sensitivity: the computation was stopped");
    cache_[c].swap(next);
  }
  cache_layer_ = layer;
  return true;
}

void SensitivityRunner::add_probes(int64_t n, double seconds) {
  n_probes_ += n;
  probe_seconds_ += seconds;
}

void SensitivityRunner::make_reference() {
  const auto start = std::chrono::steady_clock::now();
  const int64_t n_vocab = model_.hparams().n_vocab, n = n_scored();
  const int64_t k = ref_.k = std::min<int64_t>(std::max<int64_t>(opt_.top_k, 1), n_vocab);
  ref_.index.resize(n * k);
  ref_.logp.resize(n * k);
  ref_.log_rest.resize(n);
  ref_.nll.resize(n);
  std::vector<std::vector<double>> lp(n_workers());
  std::vector<std::vector<int32_t>> order(n_workers(), std::vector<int32_t>(n_vocab));
  keeping_base_ = true;
  run([&](int64_t t, std::span<const float> logits, Token next, int worker) {
    std::vector<double>& l = lp[worker];
    std::vector<int32_t>& o = order[worker];
    log_softmax_into(logits, l);
    std::iota(o.begin(), o.end(), 0);
    std::partial_sort(o.begin(), o.begin() + k, o.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    double mass = 0;
    for (int64_t i = 0; i < k; ++i) {
      ref_.index[t * k + i] = o[i];
      ref_.logp[t * k + i] = static_cast<float>(l[o[i]]);
      mass += std::exp(l[o[i]]);
    }
    ref_.log_rest[t] = log_complement(mass);
    ref_.nll[t] = -l[next];
  });
  keeping_base_ = false;
  reference_ppl_ =
      std::exp(std::accumulate(ref_.nll.begin(), ref_.nll.end(), 0.0) / std::max<size_t>(1, ref_.nll.size()));
  if (split_) {
    // The last rank scored the reference; the ranks after 0 start their caches at their first layer.
    dist::ByteWriter w;
    w.put(reference_ppl_);
    const std::string bytes = comm_.broadcast(w.take(), comm_.size() - 1);
    reference_ppl_ = dist::ByteReader(bytes).get<double>();
    if (comm_.rank() > 0 && opt_.layer_cache) {
      cache_layer_ = split_->first(comm_.rank());
      cache_ = base_;
    }
  }
  reference_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

PassEvaluation SensitivityRunner::evaluate(int first) {
  const auto start = std::chrono::steady_clock::now();
  const PassEvaluation e = scores() ? score_pass(first) : (run_split([](auto&&...) {}, first), receive_evaluation());
  probe_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++n_probes_;
  return e;
}

std::vector<float> SensitivityRunner::top_logprob_shift() {
  std::vector<float> d(n_scored() * ref_.k);
  run([&](int64_t t, std::span<const float> logits, Token, int) {
    const double lse = log_sum_exp(logits);
    for (int64_t i = 0; i < ref_.k; ++i)
      d[t * ref_.k + i] = static_cast<float>(logits[ref_.index[t * ref_.k + i]] - lse - ref_.logp[t * ref_.k + i]);
  });
  return d;
}

std::vector<float> SensitivityRunner::top_probabilities() const {
  std::vector<float> p(ref_.logp.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = std::exp(ref_.logp[i]);
  return p;
}

void SensitivityRunner::relay(int first, int owner) {
  if (!scores()) {
    run_split([](auto&&...) {}, first);
    return;
  }
  dist::ByteWriter w;
  w.put(score_pass(first));
  comm_.post(w.take(), owner);
}

PassEvaluation SensitivityRunner::receive_evaluation() {
  const std::string bytes = comm_.receive(comm_.size() - 1);
  return dist::ByteReader(bytes).get<PassEvaluation>();
}

PassEvaluation SensitivityRunner::score_pass(int first) {
  const int64_t n = n_scored();
  std::vector<double> kld(n), nll(n);
  run([&](int64_t t, std::span<const float> logits, Token next, int) {
    const double lse = log_sum_exp(logits);  // log q_j = logits_j - lse
    const int32_t* idx = &ref_.index[t * ref_.k];
    const float* lp = &ref_.logp[t * ref_.k];
    double d = 0, q_mass = 0;
    for (int64_t i = 0; i < ref_.k; ++i) {
      const double p = std::exp(static_cast<double>(lp[i]));
      const double lq = logits[idx[i]] - lse;
      d += p * (lp[i] - lq);
      q_mass += std::exp(lq);
    }
    if (ref_.k < static_cast<int64_t>(logits.size())) {
      const double p_rest = std::exp(ref_.log_rest[t]);
      d += p_rest * (ref_.log_rest[t] - log_complement(q_mass));
    }
    kld[t] = std::max(d, 0.0);  // rounding around an exact match
    nll[t] = -(logits[next] - lse);
  }, first);
  double sum = 0, sum_sq = 0, nll_sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    sum += kld[t];
    sum_sq += kld[t] * kld[t];
    nll_sum += nll[t];
  }
  PassEvaluation e;
  const double nd = static_cast<double>(n);
  e.kld_mean = sum / nd;
  e.kld_error = n > 1 ? std::sqrt(std::max(0.0, sum_sq / nd - e.kld_mean * e.kld_mean) / (nd - 1)) : 0;
  e.nll_mean = nll_sum / nd;
  return e;
}

}  // namespace qlens::tools
