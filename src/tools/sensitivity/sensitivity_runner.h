// One sensitivity run's passes (sensitivity.cpp's probes run through it):
// the text's chunks, the reference's output distribution (its top-K
// log-probabilities per scored token), the KLD of a pass against it, the
// layer cache (each chunk's residual stream entering a layer, so that a
// probe of layer L recomputes layers L onwards only), and under
// --split-layers this rank's part of every pass.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/parallel.h"
#include "dist/comm.h"
#include "qlens/model.h"
#include "tools/common/chunks.h"
#include "tools/common/layer_pipeline.h"
#include "tools/sensitivity/sensitivity.h"

namespace qlens::tools {

// One pass against the reference: KLD(reference ‖ pass) per scored token,
// its mean and standard error, and the pass's mean nll.
struct PassEvaluation {
  double kld_mean = 0, kld_error = 0, nll_mean = 0;
};

class SensitivityRunner {
 public:
  // score(t, logits, the token it predicts, worker) for scored token t.
  using ScoreFn = std::function<void(int64_t t, std::span<const float> logits, Token next, int worker)>;

  SensitivityRunner(const Model& model, const std::vector<Token>& tokens, const SensitivityOptions& opt,
                    dist::Comm& comm);

  Context& context() { return *ctx_; }
  int64_t n_chunks() const { return n_chunks_; }
  const std::optional<LayerSplit>& split() const { return split_; }

  // --split-layers: the rank that runs layer `layer` (n_layer: the output).
  int rank_of_layer(int layer) const;
  // The ranks whose computation reads weight w: its layer's, rank 0 for the
  // token embedding and the last for the output (both for a tied one).
  std::vector<int> readers(const Tensor* w) const;

  bool scores() const { return !split_ || split_->is_last(comm_.rank()); }

  // --split-layers: hands a replacement of w (its type and bytes) to the
  // other ranks that read w; relay_unit takes it there.
  void share_replacement(const Tensor* w, DType type, const std::vector<uint8_t>& bytes);
  bool reads(const Tensor* w) const;
  dist::Comm& comm() { return comm_; }

  int64_t n_scored() const { return n_chunks_ * (opt_.n_ctx - 1 - chunks_.first_scored()); }
  int n_workers() const { return opt_.n_threads > 0 ? opt_.n_threads : default_thread_count(); }

  // The residual stream of every chunk entering layer `layer` (n_layer: the
  // output norm), computed with the model as it is now (call it with no
  // replacement set). Probes of a tensor of layer L then recompute only
  // layers L onwards: the layers before give what they gave the reference.
  // Moving forward costs the layers in between once; moving back starts over.
  // Returns false (full passes) when caching is off or layer is 0.
  // Under --split-layers, within this rank's layers, from the stream
  // entering its first (the base the reference left).
  bool advance_cache(int layer);

  double probe_seconds() const { return probe_seconds_; }
  int64_t n_probes() const { return n_probes_; }
  // Probes another rank ran (rank 0's totals).
  void add_probes(int64_t n, double seconds);
  double reference_seconds() const { return reference_seconds_; }

  void make_reference();

  double reference_ppl() const { return reference_ppl_; }

  // KLD(reference ‖ current) over the reference's top-K and the rest, the
  // chunks run from layer `first` (see run). Under --split-layers the last
  // rank measures it and sends it here.
  PassEvaluation evaluate(int first = 0);

  // Per scored token, how the log-probabilities of the reference's top-K
  // tokens moved from the reference's ([token][k]), and the reference's
  // probabilities of them (the weights of KLD's second-order form).
  std::vector<float> top_logprob_shift();
  std::vector<float> top_probabilities() const;

  // --split-layers: this rank's part of a pass that rank `owner` evaluates.
  void relay(int first, int owner);

 private:
  // The reference's output distribution, compactly: per scored token the top-K
  // log-probabilities, the log of the remaining mass, and the next token's nll.
  struct Reference {
    int64_t k = 0;
    std::vector<int32_t> index;   // [tokens][k]
    std::vector<float> logp;      // [tokens][k]
    std::vector<double> log_rest;  // [tokens]
    std::vector<double> nll;       // [tokens]
  };

  // Runs every chunk from layer `first` (0: the whole model) and calls
  // score(t, logits, the token it predicts, worker) for each scored token t
  // (numbered across the chunks), on the tools' threads. From a later layer,
  // the chunks' residual stream entering it comes from the cache, which
  // advance_cache must have brought there.
  void run(const ScoreFn& score, int first = 0);
  // --split-layers: this rank's part of a pass from layer `first`: nothing
  // on the ranks before the one that runs it; that rank starts from its
  // cache (rank 0 from the embedding when first is 0), each later one from
  // the stream the rank before hands on, and the last scores. While the
  // reference is made (keeping_base_), the ranks after 0 keep the stream
  // entering their layers: the start of their caches.
  void run_split(const ScoreFn& score, int first);
  PassEvaluation receive_evaluation();

  PassEvaluation score_pass(int first);

  const Model& model_;
  const SensitivityOptions& opt_;
  TextChunks chunks_;
  dist::Comm& comm_;
  std::optional<LayerSplit> split_;
  int64_t n_chunks_ = 0;
  std::unique_ptr<Context> ctx_;
  Reference ref_;
  int n_layer_ = static_cast<int>(model_.hparams().n_layer);
  int cache_layer_ = 0;                   // 0: no cache
  double reference_seconds_ = 0, probe_seconds_ = 0;
  int64_t n_probes_ = 0;
  std::vector<std::vector<float>> cache_;  // [chunk][n_ctx * n_embd]
  // --split-layers: the stream entering this rank's first layer, per chunk
  // (ranks after 0), and the reference's perplexity the last rank measured.
  std::vector<std::vector<float>> base_;
  bool keeping_base_ = false;
  double reference_ppl_ = 0;
};

}  // namespace qlens::tools
