// One model across the ranks by layers (--split-layers): rank r computes
// layers [first(r), last(r)) of every sequence, rank 0 from the embedding,
// the last rank through the output matrix, each handing the residual stream
// (tokens x n_embd floats) to the next. A rank reads only the weights of its
// own layers (the embedding: rank 0's; the output: the last's), so a model
// too large for one machine runs on several. While rank r computes a
// sequence, rank r-1 computes the next one: the ranks work as a pipeline.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "qlens/model.h"

namespace qlens::tools {

struct LayerSplit {
  std::vector<int> bounds;  // rank r: layers [bounds[r], bounds[r + 1]); bounds.back() == n_layer
  int first(int rank) const { return bounds.at(rank); }
  int last(int rank) const { return bounds.at(rank + 1); }
  int n_ranks() const { return static_cast<int>(bounds.size()) - 1; }
  bool is_last(int rank) const { return rank == n_ranks() - 1; }
};

// The layers of each of n_ranks ranks, contiguous, at least one each, so
// that the weight bytes a rank reads (its layers', the token embedding on
// the first, the output norm and matrix on the last) are as even as they can
// be. An Error for more ranks than layers, and for a model whose layers
// read more than the residual stream (Gemma 4's shared KV caches and
// per-layer inputs), which cannot be cut between layers.
LayerSplit split_layers_by_bytes(const Model& model, int n_ranks);

// The split of one run of `tool` ("perplexity", "compare"): none unless
// --split-layers was given and the run has several ranks. A run that writes
// the reference logits (--kl-divergence-base) is refused, naming the tool:
// the logits are computed on the last rank only.
std::optional<LayerSplit> split_for_run(const Model& model, const dist::Comm& comm, bool split_layers,
                                        bool writes_logits, const std::string& tool);

// The weight bytes rank `rank` of `split` reads.
uint64_t layer_split_bytes(const Model& model, const LayerSplit& split, int rank);

// One step of the pipeline on this rank, for any computation over its
// layers: receives the stream entering them (rank > 0: stream_floats
// floats), calls run(in, out) (in null on rank 0; out null on the last rank,
// which computes the logits instead) and hands what `out` holds to the next
// rank. Returns run's result on the last rank, false on the others (an Error
// when run stops the computation there).
bool pipeline_step(dist::Comm& comm, const LayerSplit& split, size_t stream_floats,
                   const std::function<bool(const float* in, std::vector<float>* out)>& run);

// Runs `tokens` (one sequence, the context cleared before as a plain decode
// needs) through the ranks' layers: every rank calls it with the same
// tokens. The last rank's context then holds the logits of tokens
// first_logit onwards (Context::logits) and it returns true; the others
// return false. False too when the computation was stopped.
bool pipeline_decode(Context& ctx, dist::Comm& comm, const LayerSplit& split, std::span<const Token> tokens,
                     int64_t first_logit);

// "rank 1: layers 12-23 (1.2 GiB)" for each rank, one per line.
std::string describe_layer_split(const Model& model, const LayerSplit& split);

}  // namespace qlens::tools
