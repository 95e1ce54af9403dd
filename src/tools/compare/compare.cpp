#include "tools/compare/compare.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "qlens/backend.h"
#include "qlens/context_pair.h"
#include "core/parallel.h"
#include "qlens/error.h"
#include "dist/bytes.h"
#include "tools/common/chunks.h"
#include "tools/common/layer_pipeline.h"
#include "tools/common/user_regex.h"

namespace qlens::tools {

namespace {

const char* kRefPrefix = "ref:";
const char* kTestPrefix = "test:";

// The error tap runs on the test node (a) against its reference partner (b);
// reports take the reference as a.
ErrorStats reference_first(ErrorStats e) {
  std::swap(e.sum_sq_a, e.sum_sq_b);
  return e;
}

ContextOptions side_options(const ContextOptions& common, const std::string& device, Backend* shared_device) {
  ContextOptions o = common;
  o.device = device;
  if (shared_device) o.device_backend = shared_device;
  return o;
}

// Both models on one device share its backend: the scheduler then sees one
// memory, and the error taps reduce there instead of copying every node to
// the host.
std::unique_ptr<Backend> shared_device(const CompareOptions& opt) {
  if (opt.device == opt.device_ref && !opt.device.empty() && opt.device != "cpu")
    return make_backend(opt.device, opt.n_threads, opt.cpu, opt.vulkan);
  return nullptr;
}

// The two contexts, run as one graph.
struct PairedContexts {
  std::unique_ptr<Backend> device;  // null: each context has its own
  Context ref_ctx, test_ctx;
  ContextPair pair;
  PairedContexts(const Model& ref, const Model& test, const CompareOptions& opt, const ContextOptions& common)
      : device(shared_device(opt)),
        ref_ctx(ref, side_options(common, opt.device_ref, device.get())),
        test_ctx(test, side_options(common, opt.device, device.get())),
        pair(ref_ctx, test_ctx) {}
};

enum class NodeRole { None, Ref, Test };

// Which nodes, in graph order (labels as the pair gives them): computed F32
// nodes with a partner, whose label the filter accepts.
class NodeSelection {
 public:
  explicit NodeSelection(const CompareOptions& opt) : opt_(opt) {
    if (!opt.nodes_regex.empty()) filter_ = user_regex(opt.nodes_regex, "compare: --nodes");
  }

  NodeRole role_of(const ContextPair& pair, const Tensor& t) {
    if (op_is_view(t.op) || t.type != DType::F32) return NodeRole::None;
    const ContextPair::Side side = pair.side_of(t);
    if (side == ContextPair::Side::Test && pair.reference_of(t) && accepts(pair.label(t))) return NodeRole::Test;
    if (side == ContextPair::Side::Ref && pair.is_partner(t) && accepts(pair.label(t))) return NodeRole::Ref;
    return NodeRole::None;
  }
  void note_order(const std::string& label) {
    if (std::find(order_.begin(), order_.end(), label) == order_.end()) order_.push_back(label);
  }
  const std::vector<std::string>& order() const { return order_; }

  // Said after one chunk, not at the end of the run, with labels to choose from.
  void check_some_matched() const {
    if (!order_.empty() || opt_.nodes_regex.empty() || opt_.logits_only) return;
    std::string some;
    int shown = 0;
    for (const auto& [label, wanted] : label_wanted_)
      if (shown < 8 && label.find('-') != std::string::npos) some += (shown++ ? ", " : "") + label;
    throw Error("compare: --nodes '" + opt_.nodes_regex + "' matches no node of the graph (" +
                std::to_string(label_wanted_.size()) + " nodes, e.g. " + some + ")");
  }

 private:
  bool accepts(const std::string& label) {
    auto [it, fresh] = label_wanted_.try_emplace(label, false);
    if (fresh) it->second = !opt_.logits_only && (opt_.nodes_regex.empty() || std::regex_search(label, filter_));
    return it->second;
  }

  const CompareOptions& opt_;
  std::regex filter_;
  std::vector<std::string> order_;
  std::map<std::string, bool> label_wanted_;
};

// The first n_used entries of each row of an argsort, read back on the host.
std::vector<int32_t> top_choices(const Tensor& sorted, int64_t n_used) {
  std::vector<int32_t> all(sorted.nelements()), top;
  tensor_read(sorted, all.data(), 0, all.size() * sizeof(int32_t));
  for (int64_t r = 0; r < sorted.nrows(); ++r)
    top.insert(top.end(), all.begin() + r * sorted.ne[0], all.begin() + r * sorted.ne[0] + n_used);
  return top;
}

// What the pair's graph reports while it runs: the compared nodes' taps (on
// the backends, or reduced on the host with --host-reductions) and the
// routers' choices, the test model's argsort of each MoE layer and its
// reference partner (kept alive by the pair).
class CompareTaps {
 public:
  CompareTaps(ContextPair& pair, NodeSelection& nodes, int64_t n_used) : pair_(pair), nodes_(nodes), n_used_(n_used) {}

  void install(bool host_reductions) {
    Scheduler& s = pair_.scheduler();
    if (host_reductions) {
      s.set_observe_callback([this](const Tensor& t, bool ask) { return observe_on_host(t, ask); });
      return;
    }
    if (n_used_ > 0) s.set_observe_callback([this](const Tensor& t, bool ask) { return observe_router(t, ask); });
    s.set_tap_selector([this](const Tensor& t, std::vector<TapRequest>& r) { select_taps(t, r); });
  }

  std::map<std::string, TapResult> results(bool host_reductions) {
    return host_reductions ? host_ : pair_.scheduler().read_taps();
  }
  const std::map<int, RouterAgreement>& routers() const { return routers_; }

 private:
  bool is_router_choice(const Tensor& t) const {
    return n_used_ > 0 && t.op == Op::ArgSort && pair_.side_of(t) == ContextPair::Side::Test &&
           pair_.reference_of(t) && t.name.rfind("ffn_moe_argsort-", 0) == 0;
  }
  void add_router_choice(const Tensor& t) {
    const int layer = std::atoi(t.name.c_str() + std::strlen("ffn_moe_argsort-"));
    RouterAgreement& a = routers_[layer];
    a.layer = layer;
    a.n_expert = t.ne[0];
    a.n_used = n_used_;
    a.add(top_choices(*pair_.reference_of(t), n_used_), top_choices(t, n_used_));
  }
  bool observe_router(const Tensor& t, bool ask) {
    if (!is_router_choice(t)) return false;
    if (!ask) add_router_choice(t);
    return true;
  }

  void select_taps(const Tensor& t, std::vector<TapRequest>& r) {
    const NodeRole role = nodes_.role_of(pair_, t);
    if (role == NodeRole::None) return;
    const std::string& label = pair_.label(t);
    if (role == NodeRole::Ref) {
      r.push_back({TapKind::Stats, kRefPrefix + label});
      return;
    }
    nodes_.note_order(label);
    r.push_back({TapKind::ErrorStats, label, pair_.reference_of(t)});
    r.push_back({TapKind::Stats, kTestPrefix + label});
  }

  void add_on_host(const std::string& key, TapKind kind, const std::vector<float>& a, int64_t n_columns,
                   const std::vector<float>* b) {
    TapResult& acc = host_[key];
    acc.kind = kind;
    tap_accumulate_values(kind, a, n_columns, b, acc);
  }
  bool observe_on_host(const Tensor& t, bool ask) {
    if (is_router_choice(t)) {
      if (!ask) add_router_choice(t);
      return true;
    }
    const NodeRole role = nodes_.role_of(pair_, t);
    if (ask) return role != NodeRole::None;
    const std::string& label = pair_.label(t);
    const std::vector<float> a = tensor_to_f32(t);
    if (role == NodeRole::Ref) {
      add_on_host(kRefPrefix + label, TapKind::Stats, a, t.ne[0], nullptr);
    } else {
      nodes_.note_order(label);
      const std::vector<float> b = tensor_to_f32(*pair_.reference_of(t));
      add_on_host(label, TapKind::ErrorStats, a, t.ne[0], &b);
      add_on_host(kTestPrefix + label, TapKind::Stats, a, t.ne[0], nullptr);
    }
    return true;
  }

  ContextPair& pair_;
  NodeSelection& nodes_;
  const int64_t n_used_;
  std::map<int, RouterAgreement> routers_;
  std::map<std::string, TapResult> host_;  // the host-reduction path
};

// The logit statistics of chunk c's scored tokens, from the pair's last
// decode, measured on every thread.
std::vector<LogitComparison::TokenStats> measure_chunk(const ContextPair& pair, TextChunks& chunks, int64_t c,
                                                       const CompareOptions& opt) {
  const int64_t first = chunks.first_scored(), n_scored = opt.n_ctx - 1 - first;
  std::vector<LogitComparison::TokenStats> measured(n_scored);
  parallel_for(n_scored, opt.n_threads, [&](int64_t i, int) {
    measured[i] =
        LogitComparison::measure(pair.ref_logits(first + i), pair.test_logits(first + i), chunks.next(c, first + i));
  });
  return measured;
}

// Runs chunk c through both models and adds its scored tokens' logit
// statistics in order.
void compare_chunk(ContextPair& pair, TextChunks& chunks, int64_t c, const CompareOptions& opt,
                   LogitComparison& logits) {
  pair.clear();
  if (!pair.decode(chunks.chunk(c), chunks.first_scored())) throw Error("compare: the computation was stopped");
  for (const auto& t : measure_chunk(pair, chunks, c, opt)) logits.add(t);
}

// --split-layers: chunk c through this rank's layers of both models (the two
// residual streams passed on together); the last rank sends the chunk's
// token figures to rank 0.
void compare_chunk_split(ContextPair& pair, TextChunks& chunks, int64_t c, const CompareOptions& opt,
                         dist::Comm& comm, const LayerSplit& split) {
  pair.clear();
  const int r = comm.rank();
  const std::span<const Token> tokens = chunks.chunk(c);
  const int64_t n_embd = pair.ref().model().hparams().n_embd;
  const bool has_logits =
      pipeline_step(comm, split, 2 * tokens.size() * n_embd, [&](const float* in, std::vector<float>* out) {
        return pair.decode_layers(tokens, split.first(r), split.last(r), in, out, chunks.first_scored());
      });
  if (!split.is_last(r)) return;
  if (!has_logits) throw Error("compare: the computation was stopped");
  dist::ByteWriter w;
  w.put(measure_chunk(pair, chunks, c, opt));
  comm.post(w.take(), 0);
}

void put_node(dist::ByteWriter& w, const NodeComparison& n) {
  w.put(n.name);  // layer and kind follow from it
  w.put(n.ref);
  w.put(n.test);
  const ErrorStats& e = n.error;
  for (double v : {e.sum_sq_diff, e.sum_sq_a, e.sum_sq_b, e.sum_ab, e.max_abs_diff}) w.put(v);
  w.put(e.count);
  w.put(e.non_finite);
  w.put(e.row_nmse.counts);
}

NodeComparison get_node(dist::ByteReader& rd) {
  NodeComparison n;
  n.name = rd.get_string();
  n.ref = rd.get<NodeStats>();
  n.test = rd.get<NodeStats>();
  ErrorStats& e = n.error;
  for (double* v : {&e.sum_sq_diff, &e.sum_sq_a, &e.sum_sq_b, &e.sum_ab, &e.max_abs_diff}) *v = rd.get<double>();
  e.count = rd.get<int64_t>();
  e.non_finite = rd.get<int64_t>();
  e.row_nmse.counts = rd.get_vector<uint64_t>();
  return n;
}

// A label ("name" or "name#k", ContextPair::label) as the whole graph has
// it, given how many nodes of each name came before this rank's layers.
std::string whole_graph_label(const std::string& label, const std::map<std::string, int>& before) {
  std::string name = label;
  int k = 1;
  if (const size_t hash = label.rfind('#');
      hash != std::string::npos && hash + 1 < label.size() &&
      label.find_first_not_of("0123456789", hash + 1) == std::string::npos) {
    name = label.substr(0, hash);
    k = std::stoi(label.substr(hash + 1));
  }
  if (auto it = before.find(name); it != before.end()) k += it->second;
  return k == 1 ? name : name + "#" + std::to_string(k);
}

// --split-layers: every rank's nodes and routers (its layers; the embedding's
// on rank 0, the output's on the last), in rank order, which is graph order,
// each node labelled as in the whole graph.
void gather_nodes(CompareResult& r, const ContextPair& pair, dist::Comm& comm) {
  dist::ByteWriter w;
  w.put(static_cast<uint64_t>(pair.name_counts().size()));
  for (const auto& [name, count] : pair.name_counts()) {
    w.put(name);
    w.put(count);
  }
  w.put(static_cast<uint64_t>(r.nodes.size()));
  for (const NodeComparison& n : r.nodes) put_node(w, n);
  w.put(r.routers);
  const std::vector<std::string> all = comm.gather(w.take(), 0);
  if (!comm.is_root()) return;
  r.nodes.clear();
  r.routers.clear();
  std::map<std::string, int> before;  // nodes of each name on the ranks so far
  for (const std::string& bytes : all) {
    dist::ByteReader rd(bytes);
    std::map<std::string, int> counts;
    for (uint64_t i = 0, n = rd.get<uint64_t>(); i < n; ++i) {
      std::string name = rd.get_string();
      counts[name] = rd.get<int>();
    }
    for (uint64_t i = 0, n = rd.get<uint64_t>(); i < n; ++i) {
      const NodeComparison node = get_node(rd);
      r.nodes.push_back(make_node_comparison(whole_graph_label(node.name, before), node.ref, node.test, node.error));
    }
    for (const RouterAgreement& a : rd.get_vector<RouterAgreement>()) r.routers.push_back(a);
    for (const auto& [name, count] : counts) before[name] += count;
  }
}

// The options' hooks on chunk c: its tokens and the reference's scored logits.
void pass_chunk_on(const ContextPair& pair, const std::vector<Token>& tokens, int64_t c, int64_t first_scored,
                   const CompareOptions& opt) {
  const int64_t n_ctx = opt.n_ctx, n_scored = n_ctx - 1 - first_scored;
  if (opt.on_chunk_tokens) opt.on_chunk_tokens(std::span<const Token>(tokens).subspan(c * n_ctx, n_ctx));
  if (opt.on_ref_scored_logits)
    for (int64_t i = 0; i < n_scored; ++i) opt.on_ref_scored_logits(pair.ref_logits(first_scored + i));
}

void add_nodes(CompareResult& r, const std::vector<std::string>& order, const std::map<std::string, TapResult>& taps) {
  for (const std::string& label : order) {
    auto e = taps.find(label), ts = taps.find(kTestPrefix + label), rs = taps.find(kRefPrefix + label);
    if (e == taps.end() || ts == taps.end() || rs == taps.end()) continue;
    r.nodes.push_back(
        make_node_comparison(label, rs->second.stats, ts->second.stats, reference_first(e->second.error)));
  }
}

void describe_run(CompareResult& r, const Model& ref, const Model& test, int64_t n_ctx, int64_t n_batch,
                  int64_t n_chunks) {
  r.meta.ref_path = ref.path();
  r.meta.test_path = test.path();
  r.meta.n_ctx = n_ctx;
  r.meta.n_batch = n_batch;
  r.meta.n_chunks = n_chunks;
  r.meta.n_tokens = n_chunks * n_ctx;
}

}  // namespace

CompareResult compare_models(const Model& ref, const Model& test, const std::vector<Token>& tokens,
                             const CompareOptions& opt, const std::function<void(int64_t, int64_t, double)>& on_chunk,
                             dist::Comm& comm) {
  TextChunks chunks(tokens, opt.n_ctx, ref.vocab(), "compare");
  const int64_t n_chunks = chunks_to_run(chunks.available(), opt.max_chunks);
  const std::optional<LayerSplit> split = split_for_run(
      ref, comm, opt.split_layers, opt.on_chunk_tokens || opt.on_ref_scored_logits, "compare");
  NodeSelection nodes(opt);
  const ContextOptions common = run_context(opt, opt.n_ctx, opt.n_batch);  // each side's device: PairedContexts
  PairedContexts contexts(ref, test, opt, common);
  ContextPair& pair = contexts.pair;
  CompareTaps taps(pair, nodes, test.hparams().n_expert_used);
  taps.install(opt.host_reductions);

  LogitComparison logits;
  // Rank 0 adds the last rank's figures of each chunk one chunk behind, so
  // that the pipeline keeps flowing.
  const auto add_received = [&](int64_t c) {
    const std::string bytes = comm.receive(comm.size() - 1);
    dist::ByteReader rd(bytes);
    for (const auto& t : rd.get_vector<LogitComparison::TokenStats>()) logits.add(t);
    if (on_chunk) on_chunk(c + 1, n_chunks, logits.summary().kld_mean.value);
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    if (!split) {
      compare_chunk(pair, chunks, c, opt, logits);
      pass_chunk_on(pair, tokens, c, chunks.first_scored(), opt);
      if (c == 0) nodes.check_some_matched();
      if (on_chunk) on_chunk(c + 1, n_chunks, logits.summary().kld_mean.value);
      continue;
    }
    compare_chunk_split(pair, chunks, c, opt, comm, *split);
    if (comm.is_root() && c > 0) add_received(c - 1);
    if (c == 0) {  // --nodes must match a node of some rank's layers
      const auto matched = comm.gather(nodes.order().empty() ? "" : "y", 0);
      if (comm.is_root() && std::all_of(matched.begin(), matched.end(), [](const std::string& m) { return m.empty(); }))
        nodes.check_some_matched();
    }
  }
  if (split && comm.is_root() && n_chunks > 0) add_received(n_chunks - 1);

  CompareResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_second = r.seconds > 0 ? 2.0 * n_chunks * opt.n_ctx / r.seconds : 0;
  add_nodes(r, nodes.order(), taps.results(opt.host_reductions));
  for (const auto& [layer, a] : taps.routers()) r.routers.push_back(a);
  if (split) {
    gather_nodes(r, pair, comm);
    if (!comm.is_root()) return CompareResult{};
  }
  r.logits = logits.summary();
  r.growth = analyze_error_growth(r.nodes);
  describe_run(r, ref, test, opt.n_ctx, common.n_batch, n_chunks);
  return r;
}

}  // namespace qlens::tools
