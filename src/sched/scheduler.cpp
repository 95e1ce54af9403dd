#include "qlens/sched.h"

#include <algorithm>
#include <set>

#include "core/round_up.h"
#include "qlens/error.h"

namespace qlens {

namespace {

constexpr size_t kBufferAlignment = 64;

Tensor* owner_of(Tensor* t) { return t->view_src ? t->view_src : t; }
const Tensor* owner_of(const Tensor* t) { return t->view_src ? t->view_src : t; }

bool in_host_memory(const Tensor& t) { return !t.buffer || t.buffer->is_host(); }

// Copies the bytes of `src` (an owner) into `dst`, wherever both live.
void copy_bytes(const Tensor& src, const Tensor& dst) {
  const size_t n = src.nbytes();
  if (in_host_memory(src)) {
    tensor_write(dst, src.data, 0, n);
  } else if (in_host_memory(dst)) {
    tensor_read(src, dst.data, 0, n);
  } else {
    std::vector<char> staging(n);
    tensor_read(src, staging.data(), 0, n);
    tensor_write(dst, staging.data(), 0, n);
  }
}

}  // namespace

// One tap's accumulators: a state on each backend that runs it, and the
// host-side result of the fallback.
struct Scheduler::TapSlot {
  TapKind kind;
  int64_t n_columns = 0;
  std::map<Backend*, std::unique_ptr<TapState>> states;  // null state: the backend has no taps
  TapResult host;
};

Scheduler::Scheduler(Backend& backend) : Scheduler(std::vector<Backend*>{&backend}) {}

Scheduler::Scheduler(std::vector<Backend*> backends) : backends_(std::move(backends)) {
  if (backends_.empty()) throw Error("scheduler: no backends");
  for (Backend* b : backends_) {
    if (!b) throw Error("scheduler: null backend");
    if (!host_ && b->uses_host_memory()) host_ = b;
  }
  if (!host_) throw Error("scheduler: one backend must use host memory (the CPU fallback)");
}

Scheduler::~Scheduler() = default;

size_t Scheduler::buffer_bytes() const {
  size_t n = 0;
  for (const auto& [b, buf] : buffers_) n += buf ? buf->size() : 0;
  return n;
}

Backend* Scheduler::backend_of(const Tensor& node) const {
  Backend* const* b = assignment_.find(&node);
  return b ? *b : nullptr;
}

// The backend whose memory holds the tensor's data: its buffer's backend,
// the assigned backend of a node, the host backend for host memory.
Backend* Scheduler::home_of(const Tensor& t) const {
  const Tensor* o = owner_of(&t);
  if (o->buffer && !o->buffer->is_host()) return &o->buffer->backend();
  if (o->data) return host_;
  Backend* b = backend_of(*o);
  return b ? b : host_;
}

bool Scheduler::can_read(const Backend& b, const Tensor& owner) const {
  const Backend* home = home_of(owner);
  if (home == &b) return true;
  return b.uses_host_memory() && home->uses_host_memory();
}

// Nodes go where their weights are (when that backend supports the op),
// writes go where their destination lives, other nodes stay with the
// previous node, and anything unsupported falls back to the host backend.
Backend* Scheduler::assign(const Tensor& node, Backend* previous) const {
  auto supports = [&](Backend* b) { return b->supports_op(node); };
  if (op_is_view(node.op)) return home_of(node);
  if (node.op == Op::Cpy) {
    Backend* home = home_of(*node.src[1]);
    for (Backend* b : backends_)
      if ((b == home || (b->uses_host_memory() && home->uses_host_memory())) && supports(b)) return b;
    throw Error("scheduler: no backend can write '" + node.src[1]->name + "' for node '" + node.name + "'");
  }
  for (const Tensor* s : node.src)
    if (s && (owner_of(s)->flags & kFlagWeight)) {
      Backend* home = home_of(*s);
      if (home->uses_host_memory()) home = host_;
      if (supports(home)) return home;
    }
  if (previous && supports(previous)) return previous;
  for (Backend* b : backends_)
    if (supports(b)) return b;
  throw Error("scheduler: no backend supports node '" + node.name + "' (" + op_name(node.op) + " " +
              shape_string(node) + ")");
}

void Scheduler::allocate(const Graph& graph) {
  const auto& nodes = graph.nodes();
  give_back_sources(nodes);
  assignment_.clear();
  splits_.clear();
  copies_.clear();
  assign_backends(nodes);
  split_by_backend(nodes);
  const std::map<Backend*, MemoryPlan> plans = plan_backend_memory(graph);
  // Bind provisional addresses so that copies can be planned from homes,
  // then add the copies to each backend's buffer after its plan.
  plan_copies(graph);
  std::map<Backend*, size_t> need;
  for (Backend* b : backends_) need[b] = round_up(plans.at(b).size, kBufferAlignment);
  const std::vector<std::pair<Tensor*, size_t>> copy_offsets = place_copies(need);
  bind_buffers(plans, need);
  bind_copies(copy_offsets);
  bind_views(nodes);
}

// Allocated before, its nodes read the copies about to be freed: give them
// back their sources (another graph's nodes cannot point at our copies).
void Scheduler::give_back_sources(const std::vector<Tensor*>& nodes) {
  if (!replaced_sources_.empty())
    for (Tensor* n : nodes)
      for (Tensor*& s : n->src)
        if (auto it = replaced_sources_.find(s); s && it != replaced_sources_.end()) s = it->second;
  replaced_sources_.clear();
}

// Input leaves without memory live where their first reader runs: assign
// nodes first with inputs provisionally on the host.
void Scheduler::assign_backends(const std::vector<Tensor*>& nodes) {
  Backend* previous = nullptr;
  for (const Tensor* n : nodes) {
    Backend* b = assign(*n, previous);
    assignment_.insert(n, b);
    if (!op_is_view(n->op)) previous = b;
  }
  for (const Tensor* n : nodes)
    for (const Tensor* s : n->src)
      if (s && !s->data && !s->view_src && s->op == Op::None) assignment_.insert(s, *assignment_.find(n));
}

// Splits: runs of nodes on one backend (views join the run they are in).
void Scheduler::split_by_backend(const std::vector<Tensor*>& nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    Backend* b = *assignment_.find(nodes[i]);
    if (op_is_view(nodes[i]->op) && !splits_.empty()) b = splits_.back().backend;
    if (splits_.empty() || splits_.back().backend != b) splits_.push_back({b, i, i, {}});
    splits_.back().end = i + 1;
  }
}

// Memory per backend for the owners assigned to it.
std::map<Backend*, MemoryPlan> Scheduler::plan_backend_memory(const Graph& graph) const {
  std::map<Backend*, MemoryPlan> plans;
  if (backends_.size() == 1) {  // every owner is its
    plans[backends_[0]] = plan_memory(graph, kBufferAlignment);
    return plans;
  }
  for (Backend* b : backends_) {
    plans[b] = plan_memory(graph, kBufferAlignment, [&](const Tensor* t) {
      Backend* const* home = assignment_.find(t);
      return home && *home == b;
    });
  }
  return plans;
}

// Each split's copies after what its backend needs so far (need grows by
// them); returns each copy's offset in its backend's buffer.
std::vector<std::pair<Tensor*, size_t>> Scheduler::place_copies(std::map<Backend*, size_t>& need) {
  std::vector<std::pair<Tensor*, size_t>> copy_offsets;
  for (Split& s : splits_)
    for (auto& [src, copy] : s.copies) {
      copy_offsets.emplace_back(copy, need[s.backend]);
      need[s.backend] += round_up(copy->nbytes(), kBufferAlignment);
    }
  return copy_offsets;
}

// Grows each backend's buffer to what it needs and binds the planned owners.
void Scheduler::bind_buffers(const std::map<Backend*, MemoryPlan>& plans, const std::map<Backend*, size_t>& need) {
  for (Backend* b : backends_) {
    auto& buf = buffers_[b];
    const size_t bytes = need.at(b);
    if (bytes == 0) continue;
    if (!buf || buf->size() < bytes) {
      buf.reset();
      try {
        buf = b->alloc_buffer(bytes);
      } catch (const Error& e) {
        throw Error("scheduler: the intermediate results of a graph on " + b->name() + ": " + e.what());
      }
    }
    for (const auto& [t, off] : plans.at(b).offsets) {
      t->data = buf->base() + off;
      t->buffer = buf.get();
    }
  }
}

void Scheduler::bind_copies(const std::vector<std::pair<Tensor*, size_t>>& copy_offsets) {
  for (Split& s : splits_)
    for (auto& [src, copy] : s.copies) {
      Buffer* buf = buffers_[s.backend].get();
      for (const auto& [t, off] : copy_offsets)
        if (t == copy) {
          copy->data = buf->base() + off;
          copy->buffer = buf;
        }
    }
  for (Tensor& t : copies_)
    if (t.view_src) {
      t.data = static_cast<char*>(t.view_src->data) + t.view_offset;
      t.buffer = t.view_src->buffer;
    }
}

void Scheduler::bind_views(const std::vector<Tensor*>& nodes) {
  for (Tensor* n : nodes)
    if (n->view_src) {
      if (!n->view_src->data) throw Error("scheduler: view '" + n->name + "' of a tensor without data");
      n->data = static_cast<char*>(n->view_src->data) + n->view_offset;
      n->buffer = n->view_src->buffer;
    }
}

// For each split, the sources its backend cannot read get a copy on it (one
// per owner and split), and the nodes read the copy (or a view of it).
void Scheduler::plan_copies(const Graph& graph) {
  const auto& nodes = graph.nodes();
  for (Split& split : splits_) {
    std::map<const Tensor*, Tensor*> copy_of;  // owner -> copy on this split's backend
    for (size_t i = split.first; i < split.end; ++i) {
      Tensor* n = nodes[i];
      if (op_is_view(n->op)) continue;
      for (Tensor*& s : n->src) {
        if (!s) continue;
        Tensor* o = owner_of(s);
        if (can_read(*split.backend, *o)) continue;
        if (n->op == Op::Cpy && s == n->src[1]) continue;  // the destination: assigned where it lives
        Tensor*& copy = copy_of[o];
        if (!copy) {
          copy = &copies_.emplace_back();
          copy->type = o->type;
          copy->ne = o->ne;
          copy->nb = o->nb;
          copy->name = o->name + "#" + split.backend->name();
          copy->flags = o->flags & ~kFlagOutput;
          split.copies.emplace_back(o, copy);
        }
        if (s == o) {
          replaced_sources_[copy] = s;
          s = copy;
        } else {
          Tensor& v = copies_.emplace_back(*s);
          v.view_src = copy;
          v.data = nullptr;
          v.buffer = nullptr;
          replaced_sources_[&v] = s;
          s = &v;
        }
      }
    }
  }
}

void Scheduler::run_copies(const Split& split) {
  std::set<Backend*> synced;
  for (const auto& [src, copy] : split.copies) {
    Backend* home = home_of(*src);
    if (home != split.backend && synced.insert(home).second) home->synchronize();
    copy_bytes(*src, *copy);
  }
}

Scheduler::TapSlot& Scheduler::tap_slot(const TapRequest& request, const Tensor& node) {
  const int64_t n_columns = tap_columns(request.kind, node);
  auto& slot = taps_[request.key];
  if (!slot) {
    slot = std::make_unique<TapSlot>();
    slot->kind = request.kind;
    slot->n_columns = n_columns;
    slot->host.kind = request.kind;
  }
  if (slot->kind != request.kind || slot->n_columns != n_columns)
    throw Error("tap '" + request.key + "': node '" + node.name + "' asks for a " + tap_kind_name(request.kind) +
                " tap over " + std::to_string(n_columns) + " columns, the tap is a " + tap_kind_name(slot->kind) +
                " over " + std::to_string(slot->n_columns));
  return *slot;
}

std::map<std::string, TapResult> Scheduler::read_taps(bool reset) {
  std::map<std::string, TapResult> out;
  for (auto& [key, slot] : taps_) {
    TapResult r;
    r.kind = slot->kind;
    if (slot->kind == TapKind::ColumnSumSq) r.column_sum_sq.assign(slot->n_columns, 0.0);
    for (auto& [backend, state] : slot->states)
      if (state) backend->read_tap(*state, r, reset);
    r.merge(slot->host);
    if (reset) {
      TapResult empty;
      empty.kind = slot->kind;
      slot->host = empty;
    }
    out.emplace(key, std::move(r));
  }
  return out;
}

void tap_accumulate_on_host(const Tensor& node, TapResult& acc) {
  const Tensor& x = *node.src[1];
  if (tap_batch_matrices(node) > 0) {
    tap_accumulate_batch_values(tensor_to_f32(x), node, acc);
    return;
  }
  if (node.op != Op::MulMatId) {
    tap_accumulate_values(TapKind::ColumnSumSq, tensor_to_f32(x), x.ne[0], nullptr, acc);
    return;
  }
  const Tensor& ids = *node.src[2];
  std::vector<int32_t> id_values(ids.ne[0] * ids.ne[1]);
  // ids may be a view with gaps (top-k of an argsort): read row by row.
  for (int64_t t = 0; t < ids.ne[1]; ++t)
    tensor_read(ids, id_values.data() + t * ids.ne[0], t * ids.nb[1], ids.ne[0] * sizeof(int32_t));
  tap_accumulate_expert_values(tensor_to_f32(x), x.ne[0], x.ne[1], id_values, ids.ne[0], tap_experts(node), acc);
}

// A tap of the graph being computed on one node: on the node's backend when
// it has taps, else on the host after a synchronization (the node then ends
// its call).
struct Scheduler::NodeTap {
  TapKind kind;
  const Tensor* other;
  TapSlot* slot;
  TapState* state;  // null: host fallback
};

// Where a backend call ends: its last node, and why it ends there.
struct Scheduler::CallEnd {
  size_t last;
  bool wanted;     // the observer wants the last node
  bool host_taps;  // the last node has taps reduced on the host
};

ComputeStatus Scheduler::compute(const Graph& graph) {
  const auto& nodes = graph.nodes();
  if (splits_.empty() && !nodes.empty()) throw Error("scheduler: compute before allocate");
  NodeTaps node_taps;
  if (tap_selector_) select_taps(nodes, node_taps);
  std::vector<TapWork> call_taps;
  for (const Split& split : splits_) {
    run_copies(split);
    if (run_split(split, nodes, node_taps, call_taps) == ComputeStatus::Stopped) return ComputeStatus::Stopped;
  }
  std::set<Backend*> used;
  for (const Split& split : splits_)
    if (used.insert(split.backend).second) split.backend->synchronize();
  return ComputeStatus::Done;
}

// The taps the selector asks for, by node index.
void Scheduler::select_taps(const std::vector<Tensor*>& nodes, NodeTaps& node_taps) {
  std::vector<TapRequest> requests;
  for (const Split& split : splits_)
    for (size_t i = split.first; i < split.end; ++i) {
      requests.clear();
      tap_selector_(*nodes[i], requests);
      for (const TapRequest& r : requests) node_taps[i].push_back(node_tap(r, *nodes[i], *split.backend));
    }
}

// A backend reduces what lies in memory it can read; else the host.
Scheduler::NodeTap Scheduler::node_tap(const TapRequest& r, const Tensor& node, Backend& b) {
  TapSlot& slot = tap_slot(r, node);
  TapState* state = nullptr;
  const Tensor* input = r.kind == TapKind::ColumnSumSq ? node.src[1] : &node;
  if (input && b.supports_tap(r.kind, node) && can_read(b, *owner_of(input)) &&
      (!r.other || can_read(b, *owner_of(r.other)))) {
    auto it = slot.states.find(&b);
    if (it == slot.states.end()) it = slot.states.emplace(&b, b.make_tap_state(r.kind, slot.n_columns)).first;
    state = it->second.get();
  }
  return {r.kind, r.other, &slot, state};
}

// One split's nodes in as few backend calls as the observer and the host
// taps allow.
ComputeStatus Scheduler::run_split(const Split& split, const std::vector<Tensor*>& nodes, NodeTaps& node_taps,
                                   std::vector<TapWork>& call_taps) {
  Backend& backend = *split.backend;
  size_t j0 = split.first;
  while (j0 < split.end) {
    const CallEnd end = call_end(nodes, node_taps, j0, split.end);
    gather_call_taps(node_taps, j0, end.last, call_taps);
    backend.compute_async(std::span<Tensor* const>(nodes.data() + j0, end.last - j0 + 1), call_taps);
    if (end.wanted || end.host_taps) {
      backend.synchronize();
      const Tensor& node = *nodes[end.last];
      if (end.host_taps) run_host_taps(node, node_taps[end.last]);
      if (end.wanted && !observe_(node, false)) return ComputeStatus::Stopped;
    }
    j0 = end.last + 1;
  }
  return ComputeStatus::Done;
}

// Extends the call from node j0 over nodes nobody needs to see on the host.
Scheduler::CallEnd Scheduler::call_end(const std::vector<Tensor*>& nodes, const NodeTaps& node_taps, size_t j0,
                                       size_t split_end) const {
  size_t j1 = j0;
  bool wanted = false, host_taps = false;
  for (;; ++j1) {
    wanted = observe_ && observe_(*nodes[j1], true);
    host_taps = false;
    if (auto it = node_taps.find(j1); it != node_taps.end())
      for (const NodeTap& t : it->second) host_taps |= t.state == nullptr;
    if (wanted || host_taps || j1 + 1 == split_end) break;
  }
  return {j1, wanted, host_taps};
}

// The backend taps of nodes j0..j1, indexed from j0.
void Scheduler::gather_call_taps(const NodeTaps& node_taps, size_t j0, size_t j1, std::vector<TapWork>& call_taps) {
  call_taps.clear();
  for (auto it = node_taps.lower_bound(j0); it != node_taps.end() && it->first <= j1; ++it)
    for (const NodeTap& t : it->second)
      if (t.state) call_taps.push_back({it->first - j0, t.kind, t.other, t.state});
}

// The host fallback of a computed (synchronized) node's taps.
void Scheduler::run_host_taps(const Tensor& node, const std::vector<NodeTap>& taps) {
  for (const NodeTap& t : taps) {
    if (t.state) continue;
    if (t.kind == TapKind::ColumnSumSq) {
      tap_accumulate_on_host(node, t.slot->host);
    } else {
      std::vector<float> other;
      if (t.other) other = tensor_to_f32(*t.other);
      tap_accumulate_values(t.kind, tensor_to_f32(node), node.ne[0], t.other ? &other : nullptr, t.slot->host);
    }
  }
}

}  // namespace qlens
