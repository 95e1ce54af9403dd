// llama.cpp's eval-callback dumps (llama-eval-callback, or the older
// ggml_debug lines): every graph node's name, shape, the first and last three
// values along each dimension, and the sum; and their comparison with a graph
// qlens computed.
#pragma once

#include <array>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/text_file.h"
#include "model/attention.h"
#include "model/sequence_state.h"
#include "qlens/model.h"
#include "qlens/tensor.h"

namespace qlens::test {

struct DumpNode {
  std::string name;
  std::string op;  // "MUL_MAT", "RESHAPE", ...
  std::array<int64_t, 4> ne{};
  std::vector<std::array<int64_t, 4>> index;  // of each printed value
  std::vector<float> value;
  double sum = NAN;  // of all elements (the first ne[3] slice's line)
};

inline std::vector<int64_t> printed_indices(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i)
    if (n <= 6 || i < 3 || i >= n - 3) v.push_back(i);
  return v;
}

inline std::vector<DumpNode> parse_eval_dump(const std::string& path) {
  std::istringstream in(read_text_file(path));
  std::vector<DumpNode> nodes;
  const std::regex header(
      R"(^(?:ggml_debug|common_debug_cb_eval):\s+(.+?) = \(\w+\)\s+(\w+)\(.*\) = \{(\d+), (\d+), (\d+), (\d+)\}\s*$)");
  const std::regex number(R"(-?\d+\.\d+(?:e[+-]?\d+)?|-?inf|nan)");
  std::string line;
  std::vector<float> values;
  bool in_node = false;
  auto flush = [&]() {
    if (!in_node) return;
    DumpNode& n = nodes.back();
    for (int64_t i3 : printed_indices(n.ne[3]))
      for (int64_t i2 : printed_indices(n.ne[2]))
        for (int64_t i1 : printed_indices(n.ne[1]))
          for (int64_t i0 : printed_indices(n.ne[0])) n.index.push_back({i0, i1, i2, i3});
    n.value = values;
    values.clear();
    in_node = false;
  };
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, header)) {
      flush();
      DumpNode n;
      n.name = m[1];
      n.op = m[2];
      for (int i = 0; i < 4; ++i) n.ne[i] = std::stoll(m[3 + i]);
      nodes.push_back(n);
      in_node = true;
      continue;
    }
    if (!in_node) continue;
    if (const size_t s = line.find("sum = "); s != std::string::npos) {
      if (std::isnan(nodes.back().sum)) nodes.back().sum = std::stod(line.substr(s + 6));
      continue;
    }
    if (line.find(':') != std::string::npos) {  // a log line ends the node's values
      flush();
      continue;
    }
    for (auto it = std::sregex_iterator(line.begin(), line.end(), number); it != std::sregex_iterator(); ++it)
      values.push_back(std::stof(it->str()));
  }
  flush();
  return nodes;
}

// One node compared: the largest error of a printed value beyond its print
// rounding, relative to the node's scale, and the error of the sum.
struct NodeMatch {
  std::string name;  // the dump's name, "#k" for the k-th (k >= 2) node of that name and shape
  double worst_value_rel = 0;
  float worst_ours = 0, worst_ref = 0;
  double sum_rel = 0;
};

inline bool is_view_op(const std::string& op) {
  return op == "RESHAPE" || op == "VIEW" || op == "PERMUTE" || op == "TRANSPOSE";
}

// Pairs each computed dump node (views that repeat a named node's values are
// left out) with the k-th F32 node of ours of the same name (after `alias`)
// and shape, in graph order, and compares them. Values are printed with
// `print_step` resolution (1e-4 for %.4f): errors within half of it count
// as none.
inline std::vector<NodeMatch> match_eval_dump(const std::vector<DumpNode>& ref,
                                              const std::vector<const Tensor*>& ours,
                                              const std::map<std::string, std::string>& alias,
                                              double print_step = 1e-4) {
  auto key = [](const std::string& name, const std::array<int64_t, 4>& ne) {
    return name + "{" + std::to_string(ne[0]) + "," + std::to_string(ne[1]) + "," + std::to_string(ne[2]) + "," +
           std::to_string(ne[3]) + "}";
  };
  std::map<std::string, std::vector<const Tensor*>> by_key;
  for (const Tensor* t : ours)
    if (t->type == DType::F32) by_key[key(t->name, t->ne)].push_back(t);
  std::map<std::string, size_t> seen;
  std::set<std::string> computed;  // names of the dump's computed nodes so far
  std::vector<NodeMatch> out;
  for (const DumpNode& r : ref) {
    // A view repeats its source's values; one that first gives a name to
    // values (llama.cpp's kqv_out, a reshape of the unnamed attention) counts.
    if (!is_view_op(r.op)) computed.insert(r.name);
    if ((is_view_op(r.op) && computed.count(r.name)) || r.index.size() != r.value.size()) continue;
    std::string name = r.name;
    for (const auto& [from, to] : alias)
      if (name.rfind(from, 0) == 0 && (name.size() == from.size() || name[from.size()] == '-')) {
        // In `to`, '*' stands for the layer suffix ("-3"); else it goes at the end.
        const std::string suffix = name.substr(from.size());
        const size_t star = to.find('*');
        name = star == std::string::npos ? to + suffix : to.substr(0, star) + suffix + to.substr(star + 1);
        break;
      }
    const size_t k = seen[key(r.name, r.ne)]++;
    auto it = by_key.find(key(name, r.ne));
    if (it == by_key.end() || k >= it->second.size()) continue;
    const Tensor* t = it->second[k];
    NodeMatch m;
    m.name = k == 0 ? r.name : r.name + "#" + std::to_string(k + 1);
    // Errors relative to the node's scale (its largest printed magnitude): a
    // value near zero in a vector of large ones has no relative precision
    // of its own in either engine (llama.cpp's flash attention rounds to F16).
    double scale = print_step;
    for (float v : r.value) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < r.index.size(); ++i) {
      const auto& ix = r.index[i];
      const float v = *reinterpret_cast<const float*>(t->at(ix[0], ix[1], ix[2], ix[3]));
      const double excess = std::max(0.0, std::fabs(v - r.value[i]) - 0.5 * print_step);
      const double rel = excess / scale;
      if (!(rel <= m.worst_value_rel)) {
        m.worst_value_rel = rel;
        m.worst_ours = v;
        m.worst_ref = r.value[i];
      }
    }
    if (!std::isnan(r.sum)) {
      double sum = 0, sum_abs = 0;
      for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
          for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
            const float v = *reinterpret_cast<const float*>(t->at(i0, i1, i2, 0));
            sum += v;
            sum_abs += std::fabs(v);
          }
      // A sum that cancels to near zero has no relative precision of its
      // own: it is judged against the size of a sum of random signs,
      // sum|x| / sqrt(n).
      const double n = static_cast<double>(t->ne[0] * t->ne[1] * t->ne[2]);
      m.sum_rel = std::fabs(sum - r.sum) / std::max(std::fabs(r.sum), sum_abs / std::sqrt(n));
      if (std::isinf(r.sum) && sum == r.sum) m.sum_rel = 0;  // -inf scores of masked experts in both
    }
    out.push_back(m);
  }
  return out;
}

// llama.cpp 0c1e570 names the embedding "embd", with flash attention the
// attention result before attn_output "kqv_out", the llama graph's output
// projection "attn_out", and the SiLU-gated product "ffn_swiglu"; qlens names
// them as the older llama.cpp of its first reference dump (stories260K) did.
inline const std::map<std::string, std::string> kLlamaCppAliases = {{"embd", "inp_embd"},
                                                                    {"kqv_out", "kqv_merged_cont* (reshaped)"},
                                                                    {"attn_out", "kqv_out"},
                                                                    {"ffn_swiglu", "ffn_gate_par"}};

// Runs `prompt` (BOS added as the model asks) through the model with every
// node kept, as llama-eval-callback does (the last token's logits only), on a
// CPU backend with `cpu`, and compares the graph with the dump.
inline std::vector<NodeMatch> compare_model_with_dump(const std::string& model_path, const std::string& dump_path,
                                                      const std::string& prompt,
                                                      const std::map<std::string, std::string>& alias,
                                                      const CpuOptions& cpu = {},
                                                      DType cache_type = DType::F16) {
  const auto ref = parse_eval_dump(dump_path);
  auto m = Model::load(model_path);
  const auto tokens = m->vocab().tokenize(prompt, true);
  ContextOptions opt;
  opt.n_ctx = 256;
  opt.cache_type = cache_type;
  opt.cpu = cpu;
  opt.keep_intermediates = true;
  Context ctx(*m, opt);
  // Views of a recurrent state (Qwen3.5's conv and DeltaNet states) are
  // read before the batch's copies overwrite that memory: llama.cpp prints
  // them then, qlens reads every node after compute, when they show the new
  // state. They are left out; the nodes computed from them are compared.
  std::set<const Tensor*> recurrent;
  for (int il = 0; il < m->hparams().n_layer; ++il)
    if (m->attention_block(il).state_kind() == StateKind::Recurrent)
      for (Tensor* t : ctx.state().layer(il)) recurrent.insert(t);
  std::vector<NodeMatch> matches;
  ctx.set_observer([&](const Graph& g) {
    std::vector<const Tensor*> nodes;
    for (const Tensor* t : g.nodes()) {
      const Tensor* root = t;
      while (root->view_src) root = root->view_src;
      if (!recurrent.count(root)) nodes.push_back(t);
    }
    matches = match_eval_dump(ref, nodes, alias);
  });
  ctx.decode(tokens, false);
  return matches;
}

}  // namespace qlens::test
