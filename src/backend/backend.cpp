// What every backend shares: graph compute as one call, the default (absent)
// taps, host buffers, and reading or writing tensors wherever they live.
#include <cstring>

#include "backend/host_buffer.h"
#include "core/host_memory.h"
#include "qlens/backend.h"
#include "qlens/error.h"

namespace qlens {

void Backend::compute(const Graph& graph) {
  compute_async(graph.nodes(), {});
  synchronize();
}

std::unique_ptr<TapState> Backend::make_tap_state(TapKind, int64_t) { return nullptr; }

void Backend::read_tap(TapState&, TapResult&, bool) {
  throw Error("backend " + name() + " has no taps");
}

namespace {

class HostBuffer final : public Buffer {
 public:
  HostBuffer(Backend& backend, size_t bytes, bool huge_pages)
      : backend_(backend), size_(bytes), base_(alloc_host_memory(bytes, huge_pages)) {}

  Backend& backend() const override { return backend_; }
  char* base() const override { return base_.get(); }
  size_t size() const override { return size_; }
  bool is_host() const override { return true; }
  void write(size_t offset, const void* src, size_t n) override { std::memcpy(base_.get() + offset, src, n); }
  void read(size_t offset, void* dst, size_t n) const override { std::memcpy(dst, base_.get() + offset, n); }

 private:
  Backend& backend_;
  size_t size_;
  HostMemory base_;
};

// Byte offset of the tensor's data inside its buffer, with a bounds check so
// that a stale pointer is an error, not a wild read.
size_t buffer_offset(const Tensor& t, size_t offset, size_t n) {
  const Buffer& b = *t.buffer;
  const char* p = static_cast<const char*>(t.data);
  if (p < b.base() || static_cast<size_t>(p - b.base()) + offset + n > b.size())
    throw Error("tensor '" + t.name + "': data lies outside its backend buffer");
  return static_cast<size_t>(p - b.base()) + offset;
}

}  // namespace

std::unique_ptr<Buffer> make_host_buffer(Backend& backend, size_t bytes, bool huge_pages) {
  return std::make_unique<HostBuffer>(backend, bytes, huge_pages);
}

void tensor_write(const Tensor& t, const void* src, size_t offset, size_t n) {
  if (!t.data) throw Error("tensor '" + t.name + "' has no data to write to");
  if (n == 0) return;  // an empty tensor's source may be null
  if (t.buffer && !t.buffer->is_host())
    t.buffer->write(buffer_offset(t, offset, n), src, n);
  else
    std::memcpy(static_cast<char*>(t.data) + offset, src, n);
}

void tensor_read(const Tensor& t, void* dst, size_t offset, size_t n) {
  if (!t.data) throw Error("tensor '" + t.name + "' has no data to read");
  if (n == 0) return;  // an empty tensor's reader may pass no buffer (null)
  if (t.buffer && !t.buffer->is_host())
    t.buffer->read(buffer_offset(t, offset, n), dst, n);
  else
    std::memcpy(dst, static_cast<const char*>(t.data) + offset, n);
}

std::vector<float> tensor_to_f32(const Tensor& t) {
  const TypeTraits& tt = type_traits(t.type);
  if (!tt.to_float) throw Error("tensor '" + t.name + "': cannot read values of type " + std::string(tt.name));
  // One copy of the bytes the tensor spans, then a walk in logical order.
  std::vector<char> bytes(t.nbytes());
  tensor_read(t, bytes.data(), 0, bytes.size());
  std::vector<float> out(static_cast<size_t>(t.nelements()));
  const int64_t row = t.ne[0];
  const bool packed_rows = tt.block_size > 1 || t.nb[0] == tt.block_bytes;
  if (tt.block_size > 1 && (row % tt.block_size != 0 || t.nb[0] != tt.block_bytes))
    throw Error("tensor '" + t.name + "': quantized rows must be whole and contiguous");
  float* dst = out.data();
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1, dst += row) {
        const char* src = bytes.data() + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
        if (packed_rows) {
          tt.to_float(src, dst, row);
        } else {
          for (int64_t i0 = 0; i0 < row; ++i0) tt.to_float(src + i0 * t.nb[0], dst + i0, 1);
        }
      }
  return out;
}

}  // namespace qlens
