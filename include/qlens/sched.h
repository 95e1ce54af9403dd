// The scheduler runs graphs on one or more backends.
//
// allocate(graph) assigns every node to a backend (where its weights live,
// whether the backend supports the op, the host backend as fallback), splits
// the node order into runs per backend, plans each backend's memory and the
// copies of inputs that cross from one backend to another. compute(graph)
// runs the splits in order.
//
// The observe callback: before running each node the scheduler asks the
// callback whether it wants the node (ask = true). Consecutive unwanted
// nodes are computed in one backend call; a wanted node ends its call, its
// backend is synchronized and the callback gets it (ask = false) readable
// (tensor_to_f32 copies it to host memory). Returning false then stops the
// whole computation: compute returns Stopped. Without a callback compute is
// one call per split, with no extra synchronization.
//
// Taps (qlens/tap.h): a selector attaches reductions to nodes; the backend
// running a node computes them itself, or, when it has no taps, the
// scheduler reads the node back and reduces it on the host (the fallback).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qlens/backend.h"
#include "qlens/pointer_map.h"
#include "qlens/tap.h"

namespace qlens {

using ObserveCallback = std::function<bool(const Tensor& node, bool ask)>;
using TapSelector = std::function<void(const Tensor& node, std::vector<TapRequest>& requests)>;

// ColumnSumSq of a computed MulMat or MulMatId node wherever its sources
// lie (read back to the host first when on a device): the host fallback,
// and the callback path of the imatrix.
void tap_accumulate_on_host(const Tensor& node, TapResult& acc);

enum class ComputeStatus { Done, Stopped };

class Scheduler {
 public:
  explicit Scheduler(Backend& backend);
  // Backends in order of preference; at least one must use host memory (the
  // fallback for ops the others do not support, and for host weights).
  explicit Scheduler(std::vector<Backend*> backends);
  ~Scheduler();

  // Assigns backends, plans memory for the graph's intermediates and inputs
  // and binds it; the caller then writes the inputs (tensor_write). Buffers
  // grow as needed and are reused across graphs.
  void allocate(const Graph& graph);
  // Computes an allocated graph.
  ComputeStatus compute(const Graph& graph);

  void set_observe_callback(ObserveCallback callback) { observe_ = std::move(callback); }
  // Whether compute can return Stopped (an observe callback is set).
  bool can_stop() const { return static_cast<bool>(observe_); }
  void set_tap_selector(TapSelector selector) { tap_selector_ = std::move(selector); }
  // What the taps accumulated since the last reset, by key.
  std::map<std::string, TapResult> read_taps(bool reset = true);

  // A run of consecutive nodes on one backend, and the inputs copied to it.
  struct Split {
    Backend* backend = nullptr;
    size_t first = 0, end = 0;  // node indices [first, end)
    std::vector<std::pair<const Tensor*, Tensor*>> copies;  // (source owner, its copy on `backend`)
  };
  const std::vector<Split>& splits() const { return splits_; }
  Backend* backend_of(const Tensor& node) const;
  const std::vector<Backend*>& backends() const { return backends_; }
  Backend& backend() const { return *backends_.front(); }
  size_t buffer_bytes() const;

 private:
  struct TapSlot;
  struct NodeTap;
  using NodeTaps = std::map<size_t, std::vector<NodeTap>>;  // by node index
  struct CallEnd;

  Backend* assign(const Tensor& node, Backend* previous) const;
  Backend* home_of(const Tensor& t) const;
  bool can_read(const Backend& b, const Tensor& owner) const;

  // allocate's steps
  void give_back_sources(const std::vector<Tensor*>& nodes);
  void assign_backends(const std::vector<Tensor*>& nodes);
  void split_by_backend(const std::vector<Tensor*>& nodes);
  std::map<Backend*, MemoryPlan> plan_backend_memory(const Graph& graph) const;
  void plan_copies(const Graph& graph);
  std::vector<std::pair<Tensor*, size_t>> place_copies(std::map<Backend*, size_t>& need);
  void bind_buffers(const std::map<Backend*, MemoryPlan>& plans, const std::map<Backend*, size_t>& need);
  void bind_copies(const std::vector<std::pair<Tensor*, size_t>>& copy_offsets);
  void bind_views(const std::vector<Tensor*>& nodes);

  // compute's steps
  void select_taps(const std::vector<Tensor*>& nodes, NodeTaps& node_taps);
  NodeTap node_tap(const TapRequest& r, const Tensor& node, Backend& b);
  TapSlot& tap_slot(const TapRequest& request, const Tensor& node);
  void run_copies(const Split& split);
  ComputeStatus run_split(const Split& split, const std::vector<Tensor*>& nodes, NodeTaps& node_taps,
                          std::vector<TapWork>& call_taps);
  CallEnd call_end(const std::vector<Tensor*>& nodes, const NodeTaps& node_taps, size_t j0, size_t split_end) const;
  static void gather_call_taps(const NodeTaps& node_taps, size_t j0, size_t j1, std::vector<TapWork>& call_taps);
  void run_host_taps(const Tensor& node, const std::vector<NodeTap>& taps);

  std::vector<Backend*> backends_;
  Backend* host_ = nullptr;  // the fallback
  std::map<Backend*, std::unique_ptr<Buffer>> buffers_;
  PointerMap<Backend*> assignment_;
  std::vector<Split> splits_;
  std::deque<Tensor> copies_;  // copies of cross-backend inputs (and their views)
  // A copy (or view of one) -> the source it replaced in the allocated
  // graph's nodes: allocating that graph again gives the sources back first.
  std::map<const Tensor*, Tensor*> replaced_sources_;
  ObserveCallback observe_;
  TapSelector tap_selector_;
  std::map<std::string, std::unique_ptr<TapSlot>> taps_;
};

}  // namespace qlens
