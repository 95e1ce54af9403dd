#include "qlens/context_pair.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "qlens/error.h"

namespace qlens {

std::string first_model_difference(const Model& ref, const Model& test) {
  const LlamaHParams& a = ref.hparams();
  const LlamaHParams& b = test.hparams();
  auto differ = [](const char* what, auto x, auto y) {
    return std::string(what) + ": " + std::to_string(x) + " in the reference, " + std::to_string(y) + " in the test model";
  };
  if (a.arch != b.arch) return "architecture: " + a.arch + " in the reference, " + b.arch + " in the test model";
  if (a.n_layer != b.n_layer) return differ("layer count", a.n_layer, b.n_layer);
  if (a.n_embd != b.n_embd) return differ("embedding length", a.n_embd, b.n_embd);
  if (a.n_ff != b.n_ff) return differ("feed-forward length", a.n_ff, b.n_ff);
  if (a.n_head != b.n_head) return differ("head count", a.n_head, b.n_head);
  if (a.n_head_kv != b.n_head_kv) return differ("KV head count", a.n_head_kv, b.n_head_kv);
  if (a.head_dim != b.head_dim) return differ("head dimension", a.head_dim, b.head_dim);
  if (a.n_vocab != b.n_vocab) return differ("vocabulary size", a.n_vocab, b.n_vocab);
  if (a.n_rot != b.n_rot) return differ("rope dimensions", a.n_rot, b.n_rot);
  if (a.rope_freq_base != b.rope_freq_base) return differ("rope base", a.rope_freq_base, b.rope_freq_base);
  for (Token t = 0; t < a.n_vocab; ++t)
    if (ref.vocab().token_to_piece(t) != test.vocab().token_to_piece(t))
      return "vocabulary: token " + std::to_string(t) + " is '" + ref.vocab().token_to_piece(t) +
             "' in the reference, '" + test.vocab().token_to_piece(t) + "' in the test model";
  for (const auto& [name, w] : ref.weights()) {
    auto it = test.weights().find(name);
    if (it == test.weights().end()) return "weight " + name + ": in the reference, not in the test model";
    for (int d = 0; d < kMaxDims; ++d)
      if (it->second->ne[d] != w->ne[d])
        return "weight " + name + ": shape " + shape_string(*w) + " in the reference, " + shape_string(*it->second) +
               " in the test model";
  }
  for (const auto& [name, w] : test.weights())
    if (!ref.weights().count(name)) return "weight " + name + ": in the test model, not in the reference";
  return "";
}

ContextPair::ContextPair(Context& ref, Context& test) : ref_(ref), test_(test) {
  const std::string diff = first_model_difference(ref.model(), test.model());
  if (!diff.empty())
    throw Error("cannot compare " + ref.model().path() + " with " + test.model().path() + ": " + diff);
  if (ref.n_ctx() != test.n_ctx()) throw Error("compare: the two contexts have different sizes");
  std::vector<Backend*> backends;
  for (Backend* d : {test.device(), ref.device()})
    if (d && std::find(backends.begin(), backends.end(), d) == backends.end()) backends.push_back(d);
  backends.push_back(&ref.backend());
  sched_ = std::make_unique<Scheduler>(backends);
}

ContextPair::~ContextPair() = default;

void ContextPair::clear() {
  ref_.clear();
  test_.clear();
}

bool ContextPair::decode(std::span<const Token> tokens) {
  if (tokens.empty()) throw Error("compare: no tokens");
  if (ref_.n_past() != test_.n_past()) throw Error("compare: the two contexts are at different positions");
  const int64_t n_vocab = ref_.model().hparams().n_vocab;
  for (Token t : tokens)
    if (t < 0 || t >= n_vocab) throw Error("compare: token id " + std::to_string(t) + " is outside the vocabulary");
  if (ref_.n_past() + static_cast<int64_t>(tokens.size()) > ref_.n_ctx())
    throw Error("compare: " + std::to_string(ref_.n_past() + tokens.size()) + " tokens exceed the context size " +
                std::to_string(ref_.n_ctx()) + " (-c)");
  ref_logits_.clear();
  test_logits_.clear();
  rows_ = 0;
  const size_t n_batch = static_cast<size_t>(ref_.options_.n_batch);
  for (size_t start = 0; start < tokens.size(); start += n_batch)
    if (!decode_batch(tokens.subspan(start, std::min(n_batch, tokens.size() - start)))) return false;
  return true;
}

bool ContextPair::decode_batch(std::span<const Token> tokens) {
  const int64_t N = static_cast<int64_t>(tokens.size());
  const int64_t n_past = ref_.n_past(), n_kv = n_past + N;
  Graph g;
  const LlamaGraphBuilder::Inputs in = LlamaGraphBuilder::make_inputs(g, N, n_kv);
  LlamaGraphBuilder ref_b(ref_, g, in, /*all_logits=*/true);
  LlamaGraphBuilder test_b(test_, g, in, /*all_logits=*/true);

  side_.clear();
  partner_.clear();
  partnered_.clear();
  label_.clear();
  std::map<std::string, int> seen_ref, seen_test;
  std::map<std::string, std::vector<Tensor*>> ref_by_label;
  // Records the nodes a step added to the order as belonging to `side`.
  size_t done = 0;
  auto claim = [&](Side side) {
    const auto& nodes = g.nodes();
    for (; done < nodes.size(); ++done) {
      Tensor* n = nodes[done];
      side_[n] = side;
      if (side == Side::Shared || n->name.empty()) continue;
      const int k = ++(side == Side::Ref ? seen_ref : seen_test)[n->name];
      const std::string lab = k == 1 ? n->name : n->name + "#" + std::to_string(k);
      label_[n] = lab;
      if (side == Side::Ref) {
        ref_by_label[lab].push_back(n);
      } else if (auto it = ref_by_label.find(lab); it != ref_by_label.end() && !op_is_view(n->op)) {
        Tensor* r = it->second.front();
        if (!op_is_view(r->op) && same_shape(*r, *n) && r->type == n->type) {
          partner_[n] = r;
          partnered_[r] = true;
          g.keep_until(r, n);  // a tap on n reads r
        }
      }
    }
  };
  ref_b.embed();
  claim(Side::Ref);
  test_b.embed();
  claim(Side::Test);
  for (int il = 0; il < ref_.model().hparams().n_layer; ++il) {
    ref_b.layer(il);
    claim(Side::Ref);
    test_b.layer(il);
    claim(Side::Test);
  }
  Tensor* ref_out = ref_b.output();
  claim(Side::Ref);
  Tensor* test_out = test_b.output();
  claim(Side::Test);
  for (Tensor* t : {in.tokens, in.positions, in.mask}) side_[t] = Side::Shared;

  sched_->allocate(g);
  tensor_write(*in.tokens, tokens.data(), 0, N * sizeof(Token));
  std::vector<int32_t> pos(N);
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(n_past + i);
  tensor_write(*in.positions, pos.data(), 0, N * sizeof(int32_t));
  std::vector<float> mask(N * n_kv);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < n_kv; ++j)
      mask[i * n_kv + j] = j <= n_past + i ? 0.0f : -std::numeric_limits<float>::infinity();
  tensor_write(*in.mask, mask.data(), 0, mask.size() * sizeof(float));

  if (sched_->compute(g) == ComputeStatus::Stopped) return false;
  ref_.n_past_ += N;
  test_.n_past_ += N;
  const int64_t n_vocab = ref_out->ne[0];
  for (auto [out, logits] : {std::pair{ref_out, &ref_logits_}, std::pair{test_out, &test_logits_}}) {
    const size_t old = logits->size();
    logits->resize(old + N * n_vocab);
    tensor_read(*out, logits->data() + old, 0, N * n_vocab * sizeof(float));
  }
  rows_ += N;
  return true;
}

std::span<const float> ContextPair::ref_logits(int64_t i) const {
  if (i < 0 || i >= rows_) throw Error("compare: logits row " + std::to_string(i) + " was not computed");
  const int64_t n_vocab = ref_.model().hparams().n_vocab;
  return {ref_logits_.data() + i * n_vocab, static_cast<size_t>(n_vocab)};
}

std::span<const float> ContextPair::test_logits(int64_t i) const {
  if (i < 0 || i >= rows_) throw Error("compare: logits row " + std::to_string(i) + " was not computed");
  const int64_t n_vocab = test_.model().hparams().n_vocab;
  return {test_logits_.data() + i * n_vocab, static_cast<size_t>(n_vocab)};
}

ContextPair::Side ContextPair::side_of(const Tensor& node) const {
  auto it = side_.find(&node);
  return it == side_.end() ? Side::Shared : it->second;
}

const Tensor* ContextPair::reference_of(const Tensor& test_node) const {
  auto it = partner_.find(&test_node);
  return it == partner_.end() ? nullptr : it->second;
}

const std::string& ContextPair::label(const Tensor& node) const {
  auto it = label_.find(&node);
  return it == label_.end() ? node.name : it->second;
}

}  // namespace qlens
