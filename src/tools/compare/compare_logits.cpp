#include "tools/compare/compare_logits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "qlens/backend.h"
#include "qlens/error.h"

namespace qlens::tools {
namespace {

size_t argmax(std::span<const float> logits) {
  return static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Mean and standard error of the mean from a sum and a sum of squares.
ValueWithError mean_and_error(double sum, double sum_sq, int64_t n) {
  if (n < 1) return {};
  const double mean = sum / n;
  const double variance = sum_sq / n - mean * mean;
  const double error = variance > 0 && n > 1 ? std::sqrt(variance / (n - 1)) : 0.0;
  return {mean, error};
}

// Covariance of the means of two per-token quantities (llama.cpp's estimate).
double covariance_of_means(double sum_x, double sum_y, double sum_xy, int64_t n) {
  if (n < 2) return 0.0;
  return (sum_xy / n - (sum_x / n) * (sum_y / n)) / (n - 1);
}

// NaN sorts after every number, so a token whose KLD is NaN (a model produced
// NaN logits) shows up at the top percentiles instead of breaking the sort.
bool less_nan_last(float a, float b) { return a < b || (!std::isnan(a) && std::isnan(b)); }

std::string with_error(const ValueWithError& v, const char* format_one) {
  char buf[128];
  const std::string format = std::string(format_one) + " ± " + format_one;
  std::snprintf(buf, sizeof buf, format.c_str(), v.value, v.error);
  return buf;
}

std::string scaled(const ValueWithError& v, double scale) { return with_error({v.value * scale, v.error * scale}, "%10.6f"); }

void print_line(std::ostream& out, const char* label, const std::string& figure) { out << label << ": " << figure << "\n"; }

std::string plain(double v, const char* format = "%10.6f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

void print_perplexity_block(std::ostream& out, const LogitSummary& s) {
  out << "====== Perplexity statistics ======\n";
  print_line(out, "Mean PPL(Q)                   ", scaled(s.ppl_test, 1));
  print_line(out, "Mean PPL(base)                ", scaled(s.ppl_ref, 1));
  print_line(out, "Cor(ln(PPL(Q)), ln(PPL(base)))", plain(100.0 * s.ln_ppl_correlation, "%6.2f%%"));
  print_line(out, "Mean ln(PPL(Q)/PPL(base))     ", scaled(s.ln_ppl_ratio, 1));
  print_line(out, "Mean PPL(Q)/PPL(base)         ", scaled(s.ppl_ratio, 1));
  print_line(out, "Mean PPL(Q)-PPL(base)         ", scaled(s.ppl_diff, 1));
}

void print_kld_block(std::ostream& out, const LogitSummary& s) {
  out << "====== KL divergence statistics ======\n";
  print_line(out, "Mean    KLD", scaled(s.kld_mean, 1));
  print_line(out, "Maximum KLD", plain(s.kld_max));
  print_line(out, "99.9%   KLD", plain(s.kld_p99_9));
  print_line(out, "99.0%   KLD", plain(s.kld_p99));
  print_line(out, "95.0%   KLD", plain(s.kld_p95));
  print_line(out, "90.0%   KLD", plain(s.kld_p90));
  print_line(out, "Median  KLD", plain(s.kld_median));
  print_line(out, "10.0%   KLD", plain(s.kld_p10));
  print_line(out, " 5.0%   KLD", plain(s.kld_p5));
  print_line(out, " 1.0%   KLD", plain(s.kld_p1));
  print_line(out, " 0.1%   KLD", plain(s.kld_p0_1));
  print_line(out, "Minimum KLD", plain(s.kld_min));
}

void print_probability_block(std::ostream& out, const LogitSummary& s) {
  out << "====== Token probability statistics ======\n";
  const auto percent = [](const ValueWithError& v) { return with_error({100 * v.value, 100 * v.error}, "%6.3f") + " %"; };
  print_line(out, "Mean    Δp", percent(s.delta_p_mean));
  print_line(out, "Maximum Δp", plain(100 * s.delta_p_max, "%6.3f %%"));
  print_line(out, "Minimum Δp", plain(100 * s.delta_p_min, "%6.3f %%"));
  print_line(out, "RMS Δp    ", percent(s.delta_p_rms));
  print_line(out, "Same top p", percent(s.same_top));
}

}  // namespace

void LogitComparison::add_token(std::span<const float> ref_logits, std::span<const float> test_logits,
                                int32_t next_token) {
  add(measure(ref_logits, test_logits, next_token));
}

// With d_i = ref_i - test_i, KL = Σ p_i (log p_i - log q_i) = Σ p_i d_i -
// (lse_ref - lse_test), p_i = exp(ref_i - max_ref) / Σ: no log-probability is
// stored. The two normalizers come from the CPU backend's vector loop (the
// same code for both models, so a model against itself gives exactly 0);
// libm's exponential weighs d_i only where it is not 0. Terms whose p_i is 0
// are skipped (0 * log 0 = 0): a -inf reference logit would otherwise make
// the sum NaN.
LogitComparison::TokenStats LogitComparison::measure(std::span<const float> ref_logits,
                                                std::span<const float> test_logits, int32_t next_token) {
  if (ref_logits.size() != test_logits.size())
    throw Error("compare: the models' vocabularies differ (" + std::to_string(ref_logits.size()) + " vs " +
                std::to_string(test_logits.size()) + " logits)");
  if (ref_logits.empty()) throw Error("compare: no logits to compare");
  if (next_token < 0 || static_cast<size_t>(next_token) >= ref_logits.size())
    throw Error("compare: next token " + std::to_string(next_token) + " is outside the vocabulary of " +
                std::to_string(ref_logits.size()));

  const size_t top_ref = argmax(ref_logits), top_test = argmax(test_logits);
  const double max_ref = ref_logits[top_ref], max_test = test_logits[top_test];
  const double sum_ref = host_exp_sum(ref_logits, max_ref);
  const double sum_test = host_exp_sum(test_logits, max_test);
  double weighted_diff = 0;
  for (size_t i = 0; i < ref_logits.size(); ++i) {
    const double ref = ref_logits[i], test = test_logits[i];
    if (ref == test) continue;
    const double e_ref = std::exp(ref - max_ref);
    if (e_ref > 0) weighted_diff += e_ref * (ref - test);
  }
  // NaN (caught by the sums) or +inf (by the maxima): every figure would be NaN.
  if (!std::isfinite(max_ref) || !std::isfinite(sum_ref) || !std::isfinite(max_test) || !std::isfinite(sum_test))
    throw Error(kNonFiniteLogits);
  const double lse_ref = max_ref + std::log(sum_ref), lse_test = max_test + std::log(sum_test);
  TokenStats t;
  t.kld = weighted_diff / sum_ref - (lse_ref - lse_test);
  t.nll_ref = lse_ref - ref_logits[next_token];
  t.nll_test = lse_test - test_logits[next_token];
  t.same_top = top_ref == top_test;
  return t;
}

void LogitComparison::add(const TokenStats& t) {
  const double kld = t.kld, nll_ref = t.nll_ref, nll_test = t.nll_test;
  kld_values_.push_back(static_cast<float>(kld));
  kld_.add(kld);
  nll_ref_.add(nll_ref);
  nll_test_.add(nll_test);
  nll_diff_.add(nll_test - nll_ref);
  sum_nll_ref_times_test_ += nll_ref * nll_test;

  const double delta_p = std::exp(-nll_test) - std::exp(-nll_ref);
  delta_p_.add(delta_p);
  delta_p_sq_.add(delta_p * delta_p);
  delta_p_min_ = std::min(delta_p_min_, delta_p);
  delta_p_max_ = std::max(delta_p_max_, delta_p);

  if (t.same_top) ++n_same_top_;
}

void LogitComparison::merge(const LogitComparison& other) {
  kld_values_.insert(kld_values_.end(), other.kld_values_.begin(), other.kld_values_.end());
  kld_.merge(other.kld_);
  nll_ref_.merge(other.nll_ref_);
  nll_test_.merge(other.nll_test_);
  nll_diff_.merge(other.nll_diff_);
  sum_nll_ref_times_test_ += other.sum_nll_ref_times_test_;
  delta_p_.merge(other.delta_p_);
  delta_p_sq_.merge(other.delta_p_sq_);
  delta_p_min_ = std::min(delta_p_min_, other.delta_p_min_);
  delta_p_max_ = std::max(delta_p_max_, other.delta_p_max_);
  n_same_top_ += other.n_same_top_;
}

double percentile_of_sorted(const std::vector<float>& sorted, double fraction) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double position = fraction * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(position);
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double weight_above = position - static_cast<double>(below);
  return (1 - weight_above) * sorted[below] + weight_above * sorted[above];
}

LogitSummary LogitComparison::summary() const {
  LogitSummary s;
  const int64_t n = n_tokens();
  s.n_tokens = n;
  if (n == 0) return s;

  s.kld_mean = mean_and_error(kld_.sum, kld_.sum_sq, n);
  std::vector<float> sorted = kld_values_;
  std::sort(sorted.begin(), sorted.end(), less_nan_last);
  s.kld_min = sorted.front();
  s.kld_max = sorted.back();
  s.kld_p99_9 = percentile_of_sorted(sorted, 0.999);
  s.kld_p99 = percentile_of_sorted(sorted, 0.99);
  s.kld_p95 = percentile_of_sorted(sorted, 0.95);
  s.kld_p90 = percentile_of_sorted(sorted, 0.90);
  s.kld_median = percentile_of_sorted(sorted, 0.5);
  s.kld_p10 = percentile_of_sorted(sorted, 0.10);
  s.kld_p5 = percentile_of_sorted(sorted, 0.05);
  s.kld_p1 = percentile_of_sorted(sorted, 0.01);
  s.kld_p0_1 = percentile_of_sorted(sorted, 0.001);

  const double same_top = static_cast<double>(n_same_top_) / n;
  s.same_top = {same_top, n > 1 ? std::sqrt(same_top * (1 - same_top) / (n - 1)) : 0.0};

  s.delta_p_mean = mean_and_error(delta_p_.sum, delta_p_.sum_sq, n);
  const ValueWithError mean_square = mean_and_error(delta_p_sq_.sum, delta_p_sq_.sum_sq, n);
  const double rms = std::sqrt(mean_square.value);
  s.delta_p_rms = {rms, rms > 0 ? 0.5 / rms * mean_square.error : 0.0};
  s.delta_p_min = delta_p_min_;
  s.delta_p_max = delta_p_max_;

  const ValueWithError ln_ppl_ref = mean_and_error(nll_ref_.sum, nll_ref_.sum_sq, n);
  const ValueWithError ln_ppl_test = mean_and_error(nll_test_.sum, nll_test_.sum_sq, n);
  s.ppl_ref = {std::exp(ln_ppl_ref.value), std::exp(ln_ppl_ref.value) * ln_ppl_ref.error};
  s.ppl_test = {std::exp(ln_ppl_test.value), std::exp(ln_ppl_test.value) * ln_ppl_test.error};
  s.ln_ppl_ratio = mean_and_error(nll_diff_.sum, nll_diff_.sum_sq, n);
  const double ratio = std::exp(s.ln_ppl_ratio.value);
  s.ppl_ratio = {ratio, ratio * s.ln_ppl_ratio.error};

  const double ln_covariance = covariance_of_means(nll_ref_.sum, nll_test_.sum, sum_nll_ref_times_test_, n);
  const double ppl_covariance = s.ppl_ref.value * s.ppl_test.value * ln_covariance;
  const double diff_variance = s.ppl_ref.error * s.ppl_ref.error + s.ppl_test.error * s.ppl_test.error -
                               2 * ppl_covariance;
  s.ppl_diff = {s.ppl_test.value - s.ppl_ref.value, std::sqrt(std::max(0.0, diff_variance))};
  const double error_product = ln_ppl_ref.error * ln_ppl_test.error;
  s.ln_ppl_correlation = error_product > 0 ? ln_covariance / error_product : std::numeric_limits<double>::quiet_NaN();
  return s;
}

void print_logit_summary(std::ostream& out, const LogitSummary& s) {
  if (s.n_tokens == 0) {
    out << "no tokens compared: no logit statistics\n";
    return;
  }
  out << "Logits compared over " << s.n_tokens << " tokens (Q: the test model, base: the reference)\n\n";
  print_perplexity_block(out, s);
  out << "\n";
  print_kld_block(out, s);
  out << "\n";
  print_probability_block(out, s);
}

double log_sum_exp(std::span<const float> logits) {
  const double max_logit = host_row_max(logits);
  const double sum_exp = host_exp_sum(logits, max_logit);
  // NaN (maybe skipped by max, caught by the sum) or +inf: every figure built
  // on these logits would be NaN; stop and say why instead.
  if (!std::isfinite(max_logit) || !std::isfinite(sum_exp)) throw Error(kNonFiniteLogits);
  return max_logit + std::log(sum_exp);
}

void log_softmax_into(std::span<const float> logits, std::vector<double>& out) {
  const double log_normalizer = log_sum_exp(logits);
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_normalizer;
}

std::vector<double> log_softmax(std::span<const float> logits) {
  std::vector<double> out;
  log_softmax_into(logits, out);
  return out;
}

}  // namespace qlens::tools
