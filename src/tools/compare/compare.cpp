#include "tools/compare/compare.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "qlens/backend.h"
#include "qlens/context_pair.h"
#include "core/parallel.h"
#include "qlens/error.h"
#include "tools/common/chunks.h"
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

}  // namespace

CompareResult compare_models(const Model& ref, const Model& test, const std::vector<Token>& tokens,
                             const CompareOptions& opt, const std::function<void(int64_t, int64_t, double)>& on_chunk) {
  TextChunks chunks(tokens, opt.n_ctx, ref.vocab(), "compare");
  const int64_t n_ctx = opt.n_ctx;
  const int64_t n_chunks = chunks_to_run(chunks.available(), opt.max_chunks);
  std::regex filter;
  if (!opt.nodes_regex.empty()) filter = user_regex(opt.nodes_regex, "compare: --nodes");

  ContextOptions copt = chunk_context(n_ctx, opt.n_batch, opt.n_threads);
  copt.n_gpu_layers = opt.n_gpu_layers;
  copt.cache_type = opt.cache_type;
  copt.cpu = opt.cpu;
  ContextOptions ref_opt = copt, test_opt = copt;
  ref_opt.device = opt.device_ref;
  test_opt.device = opt.device;
  // Both models on one device share its backend: the scheduler then sees one
  // memory, and the error taps reduce there instead of copying every node
  // to the host.
  std::unique_ptr<Backend> shared_device;
  if (opt.device == opt.device_ref && !opt.device.empty() && opt.device != "cpu") {
    shared_device = make_backend(opt.device, opt.n_threads, opt.cpu);
    ref_opt.device_backend = test_opt.device_backend = shared_device.get();
  }
  Context ref_ctx(ref, ref_opt);
  Context test_ctx(test, test_opt);
  ContextPair pair(ref_ctx, test_ctx);

  // Which nodes, in graph order (labels as the pair gives them): computed
  // F32 nodes with a partner, whose label the filter accepts.
  std::vector<std::string> order;
  std::map<std::string, bool> label_wanted;
  auto accepts = [&](const std::string& label) {
    auto [it, fresh] = label_wanted.try_emplace(label, false);
    if (fresh) it->second = !opt.logits_only && (opt.nodes_regex.empty() || std::regex_search(label, filter));
    return it->second;
  };
  enum class Role { None, Ref, Test };
  auto role_of = [&](const Tensor& t) {
    if (op_is_view(t.op) || t.type != DType::F32) return Role::None;
    const ContextPair::Side side = pair.side_of(t);
    if (side == ContextPair::Side::Test && pair.reference_of(t) && accepts(pair.label(t))) return Role::Test;
    if (side == ContextPair::Side::Ref && pair.is_partner(t) && accepts(pair.label(t))) return Role::Ref;
    return Role::None;
  };
  auto note_order = [&](const std::string& label) {
    if (std::find(order.begin(), order.end(), label) == order.end()) order.push_back(label);
  };

  // The routers' choices: the test model's argsort of each MoE layer and its
  // reference partner (kept alive by the pair), read back on the host.
  std::map<int, RouterAgreement> routers;
  const int64_t n_used = test.hparams().n_expert_used;
  auto is_router_choice = [&](const Tensor& t) {
    return n_used > 0 && t.op == Op::ArgSort && pair.side_of(t) == ContextPair::Side::Test && pair.reference_of(t) &&
           t.name.rfind("ffn_moe_argsort-", 0) == 0;
  };
  auto add_router_choice = [&](const Tensor& t) {
    auto choices = [&](const Tensor& sorted) {
      std::vector<int32_t> all(sorted.nelements()), top;
      tensor_read(sorted, all.data(), 0, all.size() * sizeof(int32_t));
      for (int64_t r = 0; r < sorted.nrows(); ++r)
        top.insert(top.end(), all.begin() + r * sorted.ne[0], all.begin() + r * sorted.ne[0] + n_used);
      return top;
    };
    const int layer = std::atoi(t.name.c_str() + std::strlen("ffn_moe_argsort-"));
    RouterAgreement& a = routers[layer];
    a.layer = layer;
    a.n_expert = t.ne[0];
    a.n_used = n_used;
    a.add(choices(*pair.reference_of(t)), choices(t));
  };

  std::map<std::string, TapResult> host;  // the host-reduction path
  if (!opt.host_reductions) {
    if (n_used > 0)
      pair.scheduler().set_observe_callback([&](const Tensor& t, bool ask) {
        if (!is_router_choice(t)) return false;
        if (!ask) add_router_choice(t);
        return true;
      });
    pair.scheduler().set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
      const Role role = role_of(t);
      if (role == Role::None) return;
      const std::string& label = pair.label(t);
      if (role == Role::Ref) {
        r.push_back({TapKind::Stats, kRefPrefix + label});
        return;
      }
      note_order(label);
      r.push_back({TapKind::ErrorStats, label, pair.reference_of(t)});
      r.push_back({TapKind::Stats, kTestPrefix + label});
    });
  } else {
    pair.scheduler().set_observe_callback([&](const Tensor& t, bool ask) {
      if (is_router_choice(t)) {
        if (!ask) add_router_choice(t);
        return true;
      }
      const Role role = role_of(t);
      if (ask) return role != Role::None;
      const std::string& label = pair.label(t);
      const std::vector<float> a = tensor_to_f32(t);
      auto add = [&](const std::string& key, TapKind kind, const std::vector<float>* b) {
        TapResult& acc = host[key];
        acc.kind = kind;
        tap_accumulate_values(kind, a, t.ne[0], b, acc);
      };
      if (role == Role::Ref) {
        add(kRefPrefix + label, TapKind::Stats, nullptr);
      } else {
        note_order(label);
        const std::vector<float> b = tensor_to_f32(*pair.reference_of(t));
        add(label, TapKind::ErrorStats, &b);
        add(kTestPrefix + label, TapKind::Stats, nullptr);
      }
      return true;
    });
  }

  LogitComparison logits;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    pair.clear();
    if (!pair.decode(chunks.chunk(c), chunks.first_scored())) throw Error("compare: the computation was stopped");
    // Measured on every thread, added in order.
    const int64_t first = chunks.first_scored(), n_scored = n_ctx - 1 - first;
    std::vector<LogitComparison::TokenStats> measured(n_scored);
    parallel_for(n_scored, opt.n_threads, [&](int64_t i, int) {
      measured[i] = LogitComparison::measure(pair.ref_logits(first + i), pair.test_logits(first + i),
                                             chunks.next(c, first + i));
    });
    for (const auto& t : measured) logits.add(t);
    if (opt.on_chunk_tokens) opt.on_chunk_tokens(std::span<const Token>(tokens).subspan(c * n_ctx, n_ctx));
    if (opt.on_ref_scored_logits)
      for (int64_t i = 0; i < n_scored; ++i) opt.on_ref_scored_logits(pair.ref_logits(first + i));
    if (c == 0 && order.empty() && !opt.nodes_regex.empty() && !opt.logits_only) {
      // Said after one chunk, not at the end of the run, with labels to choose from.
      std::string some;
      int shown = 0;
      for (const auto& [label, wanted] : label_wanted)
        if (shown < 8 && label.find('-') != std::string::npos) some += (shown++ ? ", " : "") + label;
      throw Error("compare: --nodes '" + opt.nodes_regex + "' matches no node of the graph (" +
                  std::to_string(label_wanted.size()) + " nodes, e.g. " + some + ")");
    }
    if (on_chunk) on_chunk(c + 1, n_chunks, logits.summary().kld_mean.value);
  }

  CompareResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_second = r.seconds > 0 ? 2.0 * n_chunks * n_ctx / r.seconds : 0;
  auto taps = opt.host_reductions ? host : pair.scheduler().read_taps();
  for (const std::string& label : order) {
    auto e = taps.find(label), ts = taps.find(kTestPrefix + label), rs = taps.find(kRefPrefix + label);
    if (e == taps.end() || ts == taps.end() || rs == taps.end()) continue;
    r.nodes.push_back(
        make_node_comparison(label, rs->second.stats, ts->second.stats, reference_first(e->second.error)));
  }
  r.logits = logits.summary();
  r.growth = analyze_error_growth(r.nodes);
  for (auto& [layer, a] : routers) r.routers.push_back(a);
  r.meta.ref_path = ref.path();
  r.meta.test_path = test.path();
  r.meta.n_ctx = n_ctx;
  r.meta.n_batch = copt.n_batch;
  r.meta.n_chunks = n_chunks;
  r.meta.n_tokens = n_chunks * n_ctx;
  return r;
}

}  // namespace qlens::tools
