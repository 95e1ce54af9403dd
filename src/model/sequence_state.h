// The per-sequence state of a context: for each layer, the tensors its
// attention block declared (a KV cache, a latent cache, a recurrent state).
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <span>
#include <vector>

#include "model/attention.h"
#include "qlens/sched.h"

namespace qlens {

class SequenceState {
 public:
  // The state of every layer of `model` for up to n_ctx positions, without
  // memory yet: place() puts a tensor in device memory, allocate_host() the rest.
  SequenceState(const Model& model, int64_t n_ctx, DType cache_type);

  // Layer il's tensors, in the order its block declared them.
  std::span<Tensor* const> layer(int il) const { return layers_[il]; }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  // Gives every tensor that place() did not host memory, and resets.
  void allocate_host();
  // A new sequence: zeroes the recurrent states (caches need nothing: no
  // position past the sequence is ever read).
  void reset();

  // Whether a layer keeps a recurrent state, which a stopped batch must not
  // leave half-updated: save() before such a batch, restore() after a stop.
  bool has_recurrent() const;
  void save();
  void restore();

 private:
  std::deque<Tensor> tensors_;
  std::vector<std::vector<Tensor*>> layers_;
  std::vector<StateKind> kinds_;  // per layer
  std::vector<std::vector<uint8_t>> host_data_;
  std::vector<std::vector<uint8_t>> saved_;  // the recurrent tensors' bytes, in layer order
};

// Computes a batch's graph whose nodes update `states`: when the observe
// callback stops it, their recurrent states are left as they were before, so
// that the stopped batch is not part of any sequence.
ComputeStatus compute_batch(Scheduler& sched, Graph& g, std::initializer_list<SequenceState*> states);

}  // namespace qlens
