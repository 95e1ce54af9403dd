// How far a quantized model's next-token distributions are from a reference
// model's, token by token: the statistics llama.cpp's
// `perplexity --kl-divergence` prints, with the same definitions, so figures
// from the two tools can be set side by side.
//
// Per token (in double precision, from both models' logits):
//   log p = log_softmax(logits)
//   KLD(ref || test) = sum_i p_ref_i * (log p_ref_i - log p_test_i)
//   same top         = argmax(ref logits) == argmax(test logits)
//   delta p          = p_test(next) - p_ref(next)
//   nll              = -log p(next) under each model
// Over tokens, "value ± error" is a mean and its standard error
// sqrt(var / (n - 1)) with var the population variance (0 when n < 2), as in
// llama.cpp; perplexities are exp(mean nll) with error PPL * error(mean nll).
#pragma once

#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

namespace qlens::tools {

// A statistic and its standard error; NaN when nothing was measured.
struct ValueWithError {
  double value = std::numeric_limits<double>::quiet_NaN();
  double error = std::numeric_limits<double>::quiet_NaN();
};

struct LogitSummary {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  int64_t n_tokens = 0;

  // KL divergence of the test distribution from the reference one (nats).
  ValueWithError kld_mean;
  double kld_max = kNaN;
  double kld_p99_9 = kNaN;
  double kld_p99 = kNaN;
  double kld_p95 = kNaN;
  double kld_p90 = kNaN;
  double kld_median = kNaN;
  double kld_p10 = kNaN;
  double kld_p5 = kNaN;
  double kld_p1 = kNaN;
  double kld_p0_1 = kNaN;
  double kld_min = kNaN;

  // Share of tokens (0..1) where both models rank the same token first.
  ValueWithError same_top;

  // p_test(next) - p_ref(next), probabilities in 0..1.
  ValueWithError delta_p_mean;
  ValueWithError delta_p_rms;  // sqrt(mean delta_p^2); error 0.5 / rms * error(mean delta_p^2)
  double delta_p_min = kNaN;
  double delta_p_max = kNaN;

  ValueWithError ppl_ref;
  ValueWithError ppl_test;
  ValueWithError ln_ppl_ratio;  // mean(nll_test - nll_ref) = ln(PPL_test / PPL_ref)
  ValueWithError ppl_ratio;     // exp(ln_ppl_ratio); error ratio * error(ln ratio)
  ValueWithError ppl_diff;      // PPL_test - PPL_ref, error from both errors and their covariance
  double ln_ppl_correlation = kNaN;  // Pearson correlation of per-token nll_ref and nll_test
};

// Accumulates the per-token comparison. Keeps one float per token (its KLD) so
// that percentiles are exact, and running sums for everything else.
class LogitComparison {
 public:
  // Both spans hold one token's logits over the same vocabulary; next_token is
  // the token that follows in the text. Throws Error when the vocabularies
  // differ in size, are empty, or next_token is outside them.
  void add_token(std::span<const float> ref_logits, std::span<const float> test_logits, int32_t next_token);

  // add_token in two steps, so that tokens can be measured on several
  // threads and added in order (the same sums whatever the thread count).
  struct TokenStats {
    double kld = 0, nll_ref = 0, nll_test = 0;
    bool same_top = false;
  };
  static TokenStats measure(std::span<const float> ref_logits, std::span<const float> test_logits, int32_t next_token);
  void add(const TokenStats& t);

  // Adds another comparison's tokens (after this one's).
  void merge(const LogitComparison& other);

  int64_t n_tokens() const { return static_cast<int64_t>(kld_values_.size()); }
  const std::vector<float>& kld_values() const { return kld_values_; }

  LogitSummary summary() const;

 private:
  // Sum and sum of squares of one per-token quantity.
  struct Moments {
    double sum = 0;
    double sum_sq = 0;
    void add(double x) {
      sum += x;
      sum_sq += x * x;
    }
    void merge(const Moments& o) {
      sum += o.sum;
      sum_sq += o.sum_sq;
    }
  };

  std::vector<float> kld_values_;
  Moments kld_;
  Moments nll_ref_;
  Moments nll_test_;
  Moments nll_diff_;     // nll_test - nll_ref, summed directly: no cancellation between two large sums
  double sum_nll_ref_times_test_ = 0;
  Moments delta_p_;
  Moments delta_p_sq_;   // of delta_p^2: gives the error of the mean square
  double delta_p_min_ = std::numeric_limits<double>::infinity();
  double delta_p_max_ = -std::numeric_limits<double>::infinity();
  int64_t n_same_top_ = 0;
};

// The value at `fraction` (0..1) of ascending `sorted` values, interpolating
// linearly between neighbours at position fraction * (n - 1) (llama.cpp's
// definition; the median of an even count is the mean of the middle two).
// NaN for an empty list.
double percentile_of_sorted(const std::vector<float>& sorted, double fraction);

// log-softmax of a row of logits in double (max-subtracted).
std::vector<double> log_softmax(std::span<const float> logits);
// log Σ exp(logits), in double (log p_i = logits_i - this).
// Throws Error(kNonFiniteLogits) when the logits hold NaN or +inf.
double log_sum_exp(std::span<const float> logits);
inline constexpr const char* kNonFiniteLogits =
    "the model's output logits hold NaN or an infinity: a weight is corrupt or the activations overflow "
    "(qlens inspect MODEL --check-tensors names corrupt weights; qlens compare shows where activations blow up)";
// The same into `out` (resized): no allocation once it is large enough.
void log_softmax_into(std::span<const float> logits, std::vector<double>& out);

// The figures as llama.cpp's KL divergence block shows them ("Mean KLD",
// "99.0%   KLD", "Same top p", "RMS Δp", "Mean ln(PPL(Q)/PPL(base))", ...),
// probabilities in percent. Q is the test model, base the reference.
void print_logit_summary(std::ostream& out, const LogitSummary& s);

}  // namespace qlens::tools
