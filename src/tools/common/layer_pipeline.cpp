#include "tools/common/layer_pipeline.h"

#include <algorithm>
#include <cstring>

#include "core/human_bytes.h"
#include "qlens/error.h"
#include "tools/common/tensor_names.h"

namespace qlens::tools {

namespace {

// Weight bytes per layer, and those outside layers: the first rank's
// (token embedding) and the last's (output norm and matrix, and a tied
// output is the embedding read again by the last rank).
struct LayerBytes {
  std::vector<uint64_t> layer;
  uint64_t first = 0, last = 0;
};

LayerBytes layer_bytes(const Model& model) {
  LayerBytes b;
  b.layer.assign(model.hparams().n_layer, 0);
  for (const auto& [name, w] : model.weights()) {
    const int il = tensor_layer(name);
    if (il >= 0 && il < static_cast<int>(b.layer.size()))
      b.layer[il] += w->nbytes();
    else if (tensor_role(name).rfind("token_embd", 0) == 0 || tensor_role(name).rfind("per_layer", 0) == 0)
      b.first += w->nbytes();
    else
      b.last += w->nbytes();
  }
  if (!model.weights().count("output.weight") && model.weights().count("token_embd.weight"))
    b.last += model.weights().at("token_embd.weight")->nbytes();  // tied: the last rank reads it as the output
  return b;
}

}  // namespace

LayerSplit split_layers_by_bytes(const Model& model, int n_ranks) {
  const int n_layer = static_cast<int>(model.hparams().n_layer);
  if (n_ranks > n_layer)
    throw Error("--split-layers: " + std::to_string(n_ranks) + " ranks for the " + std::to_string(n_layer) +
                " layers of " + model.path() + "; give each rank at least one layer (mpirun -np " +
                std::to_string(n_layer) + " at most)");
  if (model.hparams().layers_read_beyond_residual())
    throw Error("--split-layers: the layers of " + model.path() +
                " read more than the residual stream (shared KV caches or per-layer inputs), so it cannot be cut "
                "between layers; run it on one rank");
  const LayerBytes b = layer_bytes(model);
  uint64_t total = b.first + b.last;
  for (uint64_t x : b.layer) total += x;
  // Greedy: each rank takes layers until it reaches its share of what is
  // left, keeping one layer for every rank after it.
  LayerSplit s;
  s.bounds.push_back(0);
  uint64_t left = total;
  int at = 0;
  for (int r = 0; r < n_ranks - 1; ++r) {
    const uint64_t share = left / (n_ranks - r);
    uint64_t mine = r == 0 ? b.first : 0;
    int end = at;
    while (end < n_layer - (n_ranks - 1 - r) &&
           (end == at || mine + b.layer[end] / 2 <= share))  // take the layer when at least half of it fits
      mine += b.layer[end++];
    s.bounds.push_back(end);
    left -= mine;
    at = end;
  }
  s.bounds.push_back(n_layer);
  return s;
}

std::optional<LayerSplit> split_for_run(const Model& model, const dist::Comm& comm, bool split_layers,
                                        bool writes_logits, const std::string& tool) {
  if (!split_layers || comm.size() == 1) return std::nullopt;
  if (writes_logits)
    throw Error(tool + ": --split-layers computes the logits on the last rank; --kl-divergence-base is not written "
                       "there");
  return split_layers_by_bytes(model, comm.size());
}

uint64_t layer_split_bytes(const Model& model, const LayerSplit& split, int rank) {
  const LayerBytes b = layer_bytes(model);
  uint64_t bytes = (rank == 0 ? b.first : 0) + (split.is_last(rank) ? b.last : 0);
  for (int il = split.first(rank); il < split.last(rank); ++il) bytes += b.layer[il];
  return bytes;
}

bool pipeline_step(dist::Comm& comm, const LayerSplit& split, size_t stream_floats,
                   const std::function<bool(const float* in, std::vector<float>* out)>& run) {
  if (split.n_ranks() != comm.size())
    throw Error("--split-layers: the split has " + std::to_string(split.n_ranks()) + " ranks, the run " +
                std::to_string(comm.size()));
  const int r = comm.rank();
  std::string in_bytes;
  if (r > 0) in_bytes = comm.receive(r - 1);
  if (r > 0 && in_bytes.size() != stream_floats * sizeof(float))
    throw Error("--split-layers: rank " + std::to_string(r) + " received " + std::to_string(in_bytes.size()) +
                " bytes of residual stream where it expected " + std::to_string(stream_floats * sizeof(float)));
  const float* in = r > 0 ? reinterpret_cast<const float*>(in_bytes.data()) : nullptr;
  if (split.is_last(r)) return run(in, nullptr);
  std::vector<float> out;
  if (!run(in, &out)) throw Error("--split-layers: rank " + std::to_string(r) + ": the computation was stopped");
  comm.send(std::string(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(float)), r + 1);
  return false;
}

bool pipeline_decode(Context& ctx, dist::Comm& comm, const LayerSplit& split, std::span<const Token> tokens,
                     int64_t first_logit) {
  const int r = comm.rank();
  return pipeline_step(comm, split, tokens.size() * ctx.model().hparams().n_embd,
                       [&](const float* in, std::vector<float>* out) {
                         return ctx.decode_layers(tokens, split.first(r), split.last(r), in, out, first_logit);
                       });
}

std::string describe_layer_split(const Model& model, const LayerSplit& split) {
  std::string text;
  for (int r = 0; r < split.n_ranks(); ++r) {
    text += "rank " + std::to_string(r) + ": " +
            (split.last(r) - split.first(r) == 1
                 ? "layer " + std::to_string(split.first(r))
                 : "layers " + std::to_string(split.first(r)) + "-" + std::to_string(split.last(r) - 1));
    if (r == 0) text += " and the embedding";
    if (split.is_last(r)) text += " and the output";
    text += " (" + human_bytes(layer_split_bytes(model, split, r)) + " of weights)\n";
  }
  return text;
}

}  // namespace qlens::tools
