// The reference backend: the op table's reference kernels, one node after
// the other on one thread. It is slow on purpose and is the oracle of the
// kernel tests; its taps are left to the scheduler's host fallback, the
// reference of taps.
#include <memory>
#include <string>

#include "backend/host_buffer.h"
#include "ops/op_table.h"
#include "qlens/backend.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override { return make_host_buffer(*this, bytes); }
  bool uses_host_memory() const override { return true; }
  // What the op's rules allow (the reference kernels assume them).
  bool supports_op(const Tensor& node) const override {
    const OpDef& def = op_def(node.op);
    return def.is_view || (def.reference && def.invalid(node).empty());
  }

  void compute_async(std::span<Tensor* const> nodes, std::span<const TapWork>) override {
    for (const Tensor* n : nodes) {
      const OpDef& def = op_def(n->op);
      if (def.is_view) continue;
      if (!def.reference) throw Error(std::string("reference backend: cannot compute ") + def.name);
      if (auto why = def.invalid(*n); !why.empty())
        throw Error(std::string("reference backend: ") + def.name + " '" + n->name + "': " + why);
      if (!n->data) throw Error("reference backend: '" + n->name + "' has no data");
      def.reference(*n);
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace qlens
