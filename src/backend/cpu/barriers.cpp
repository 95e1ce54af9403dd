#include "backend/cpu/barriers.h"

namespace qlens::cpu {

namespace {

bool same_layout(const Tensor& a, const Tensor& b) { return a.data == b.data && a.ne == b.ne && a.nb == b.nb; }

}  // namespace

ByteRange byte_range(const Tensor& t) {
  const auto lo = reinterpret_cast<uintptr_t>(t.data);
  return {lo, lo + (t.data ? t.nbytes() : 0)};
}

void MemoryAccess::read(const Tensor* t) {
  // No node writes a model's weights.
  if (!t || ((t->view_src ? t->view_src : t)->flags & kFlagWeight)) return;
  if (n_reads_ == kMaxReads) {
    alone_ = true;
    return;
  }
  read_tensors_[n_reads_] = t;
  reads_[n_reads_++] = byte_range(*t);
}

MemoryAccess MemoryAccess::node(const Tensor& node, Split split, bool alone) {
  MemoryAccess a;
  a.alone_ = alone;  // (or made so by a read past kMaxReads)
  for (const Tensor* s : node.src) a.read(s);
  a.written_ = &node;
  a.write_ = byte_range(node);
  a.split_ = split;
  return a;
}

MemoryAccess MemoryAccess::tap(const TapWork& tap, const Tensor& node) {
  MemoryAccess a;
  switch (tap.kind) {
    case TapKind::ColumnSumSq:  // the product's activations (and a MulMatId's expert ids)
      a.read(node.src[1]);
      if (node.op == Op::MulMatId) a.read(node.src[2]);
      break;
    case TapKind::Stats:
      a.read(&node);
      break;
    case TapKind::ErrorStats:
      a.read(&node);
      a.read(tap.other);
      break;
  }
  // Two taps into one state add to the same partials.
  const auto state = reinterpret_cast<uintptr_t>(tap.state);
  a.write_ = {state, state + 1};
  return a;
}

bool MemoryAccess::same_pieces(const MemoryAccess& other) const {
  return split_ != Split::Any && other.split_ != Split::Any && written_ && other.written_ &&
         written_->ne == other.written_->ne;
}

bool MemoryAccess::conflicts(const MemoryAccess& later) const {
  if (alone_ || later.alone_) return true;
  // Bytes both touch are harmless when each thread touches the same
  // elements in both: this item's pieces of a tensor laid out as the later
  // item's result (or the other way round), element for element.
  const bool pieces = same_pieces(later);
  if (write_.overlaps(later.write_) && !(pieces && same_layout(*written_, *later.written_))) return true;
  for (int k = 0; k < later.n_reads_; ++k)
    if (write_.overlaps(later.reads_[k]) &&
        !(pieces && later.split_ == Split::Pieces && same_layout(*later.read_tensors_[k], *written_)))
      return true;
  for (int k = 0; k < n_reads_; ++k)
    if (later.write_.overlaps(reads_[k]) &&
        !(pieces && split_ == Split::Pieces && same_layout(*read_tensors_[k], *later.written_)))
      return true;
  return false;
}

std::vector<uint8_t> barriers_before(std::span<const MemoryAccess> items) {
  std::vector<uint8_t> barrier(items.size(), 0);
  size_t segment = 0;  // the first item since the last barrier
  for (size_t i = 1; i < items.size(); ++i)
    for (size_t j = segment; j < i; ++j)
      if (items[j].conflicts(items[i])) {
        barrier[i] = 1;
        segment = i;
        break;
      }
  return barrier;
}

}  // namespace qlens::cpu
