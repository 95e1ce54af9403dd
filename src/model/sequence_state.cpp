// The per-sequence state: allocation, reset for a new sequence, and the
// snapshot that keeps a stopped batch out of a recurrent state.
#include "model/sequence_state.h"

#include "qlens/error.h"

namespace qlens {

SequenceState::SequenceState(const Model& model, int64_t n_ctx, DType cache_type) {
  const HParams& hp = model.hparams();
  layers_.resize(hp.n_layer);
  kinds_.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    const AttentionBlock& block = model.attention_block(il);
    kinds_[il] = block.state_kind();
    for (const StateSpec& spec : block.state(hp, il, n_ctx, cache_type)) {
      Tensor& t = tensors_.emplace_back();
      t.type = spec.type;
      t.ne = spec.ne;
      t.nb = contiguous_strides(t.type, t.ne);
      t.name = spec.name;
      layers_[il].push_back(&t);
    }
  }
}

void SequenceState::allocate_host() {
  for (Tensor& t : tensors_)
    if (!t.data) t.data = host_data_.emplace_back(t.nbytes()).data();
  reset();
}

void SequenceState::reset() {
  for (size_t il = 0; il < layers_.size(); ++il) {
    if (kinds_[il] != StateKind::Recurrent) continue;
    for (Tensor* t : layers_[il]) {
      const std::vector<uint8_t> zeros(t->nbytes());
      tensor_write(*t, zeros.data(), 0, zeros.size());
    }
  }
}

bool SequenceState::has_recurrent() const {
  for (StateKind k : kinds_)
    if (k == StateKind::Recurrent) return true;
  return false;
}

void SequenceState::save() {
  saved_.clear();
  for (size_t il = 0; il < layers_.size(); ++il) {
    if (kinds_[il] != StateKind::Recurrent) continue;
    for (Tensor* t : layers_[il]) {
      std::vector<uint8_t>& bytes = saved_.emplace_back(t->nbytes());
      tensor_read(*t, bytes.data(), 0, bytes.size());
    }
  }
}

void SequenceState::restore() {
  size_t i = 0;
  for (size_t il = 0; il < layers_.size(); ++il) {
    if (kinds_[il] != StateKind::Recurrent) continue;
    for (Tensor* t : layers_[il]) {
      if (i >= saved_.size()) throw Error("sequence state: restore without a saved state");
      tensor_write(*t, saved_[i].data(), 0, saved_[i].size());
      ++i;
    }
  }
}

ComputeStatus compute_batch(Scheduler& sched, Graph& g, std::initializer_list<SequenceState*> states) {
  // Only an observe callback can stop a graph; a copy of the states for every
  // batch would cost a generated token more than its kernels.
  bool keep = false;
  for (SequenceState* s : states) {
    if (sched.can_stop() && s->has_recurrent()) {
      s->save();
      keep = true;
    }
  }
  const ComputeStatus status = sched.compute(g);
  if (status == ComputeStatus::Stopped && keep)
    for (SequenceState* s : states)
      if (s->has_recurrent()) s->restore();
  return status;
}

}  // namespace qlens
