#include "qlens/context_pair.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "model/graph_builder.h"
#include "model/sequence_state.h"
#include "qlens/error.h"

namespace qlens {

std::string first_model_difference(const Model& ref, const Model& test) {
  const auto fa = ref.hparams().fields(), fb = test.hparams().fields();
  for (size_t i = 0; i < fa.size(); ++i)
    if (fa[i].second != fb[i].second)
      return fa[i].first + ": " + fa[i].second + " in the reference, " + fb[i].second + " in the test model";
  const int64_t n_vocab = ref.hparams().n_vocab;
  for (Token t = 0; t < n_vocab; ++t)
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

bool ContextPair::decode(std::span<const Token> tokens, int64_t first_logit) {
  return decode_layers(tokens, 0, static_cast<int>(ref_.model().hparams().n_layer), nullptr, nullptr, first_logit);
}

bool ContextPair::decode_layers(std::span<const Token> tokens, int first, int last, const float* in,
                                std::vector<float>* out, int64_t first_logit) {
  if (tokens.empty()) throw Error("compare: no tokens");
  if (ref_.n_past() != test_.n_past()) throw Error("compare: the two contexts are at different positions");
  const int n_layer = static_cast<int>(ref_.model().hparams().n_layer);
  if (first < 0 || last > n_layer || first >= last)
    throw Error("compare: no layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                ") in a model of " + std::to_string(n_layer) + " layers");
  if (first > 0 && !in) throw Error("compare: starting at layer " + std::to_string(first) + " needs its input");
  if (last < n_layer && !out) throw Error("compare: stopping before the output needs a place for the streams");
  if (ref_.model().hparams().layers_read_beyond_residual() && (first > 0 || last < n_layer))
    throw Error("compare: the layers of " + ref_.model().path() + " read more than the residual stream");
  const int64_t n_vocab = ref_.model().hparams().n_vocab;
  for (Token t : tokens)
    if (t < 0 || t >= n_vocab) throw Error("compare: token id " + std::to_string(t) + " is outside the vocabulary");
  if (ref_.n_past() + static_cast<int64_t>(tokens.size()) > ref_.n_ctx())
    throw Error("compare: " + std::to_string(ref_.n_past() + tokens.size()) + " tokens exceed the context size " +
                std::to_string(ref_.n_ctx()) + " (-c)");
  if (!out && (first_logit < 0 || first_logit >= static_cast<int64_t>(tokens.size())))
    throw Error("compare: logits from token " + std::to_string(first_logit) + " of a batch of " +
                std::to_string(tokens.size()));
  const int64_t n_embd = ref_.model().hparams().n_embd;
  const size_t stream = tokens.size() * n_embd;  // floats of one model's stream
  if (out) out->resize(2 * stream);
  ref_logits_.clear();
  test_logits_.clear();
  first_row_ = out ? 0 : first_logit;
  rows_ = 0;
  const size_t n_batch = static_cast<size_t>(ref_.options().n_batch);
  for (size_t start = 0; start < tokens.size(); start += n_batch) {
    const size_t at = start * n_embd;
    BatchRange range{first, last};
    if (in) {
      range.ref_in = in + at;
      range.test_in = in + stream + at;
    }
    if (out) {
      range.ref_out = out->data() + at;
      range.test_out = out->data() + stream + at;
    }
    if (!decode_batch(tokens.subspan(start, std::min(n_batch, tokens.size() - start)),
                      out ? static_cast<int64_t>(tokens.size()) : std::max<int64_t>(0, first_logit - static_cast<int64_t>(start)),
                      range))
      return false;
  }
  return true;
}

// first_logit is relative to this batch; a batch wholly before it (or of a
// range that stops before the output) computes its layers only.
bool ContextPair::decode_batch(std::span<const Token> tokens, int64_t first_logit, const BatchRange& range) {
  const int64_t N = static_cast<int64_t>(tokens.size());
  const int64_t n_past = ref_.n_past(), n_kv = n_past + N;
  Graph g;
  const GraphInputs in = GraphInputs::make(g, N, n_kv, ref_.model().hparams().has_swa(),
                                             ref_.model().hparams().n_pos_per_token());
  GraphBuilder ref_b(ref_, g, in, /*all_logits=*/true);
  GraphBuilder test_b(test_, g, in, /*all_logits=*/true);

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
  Tensor* ref_residual = range.first > 0 ? ref_b.residual_input() : ref_b.embed();
  claim(Side::Ref);
  Tensor* test_residual = range.first > 0 ? test_b.residual_input() : test_b.embed();
  claim(Side::Test);
  for (int il = range.first; il < range.last; ++il) {
    ref_b.layer(il);
    claim(Side::Ref);
    test_b.layer(il);
    claim(Side::Test);
  }
  const bool logits = !range.ref_out && first_logit < N;
  Tensor* ref_out = logits ? ref_b.output(first_logit) : nullptr;
  claim(Side::Ref);
  Tensor* test_out = logits ? test_b.output(first_logit) : nullptr;
  claim(Side::Test);
  if (!logits)
    for (GraphBuilder* b : {&ref_b, &test_b}) b->current()->flags |= kFlagOutput;
  for (Tensor* t : {in.tokens, in.positions, in.mask, in.mask_swa})
    if (t) side_[t] = Side::Shared;

  sched_->allocate(g);
  // A layer range's graph reads no token ids (and a range of layers without
  // attention no positions or mask): those inputs are not in it.
  GraphInputs used;
  used.tokens = g.find("inp_tokens");
  used.positions = g.find("inp_pos");
  used.mask = g.find("KQ_mask");
  used.mask_swa = g.find("KQ_mask_swa");
  used.write(tokens, n_past, ref_.model().hparams().n_swa);
  if (range.first > 0) {
    tensor_write(*ref_residual, range.ref_in, 0, ref_residual->nbytes());
    tensor_write(*test_residual, range.test_in, 0, test_residual->nbytes());
  }

  name_counts_ = seen_test;
  if (compute_batch(*sched_, g, {&ref_.state(), &test_.state()}) == ComputeStatus::Stopped) return false;
  ref_.advance(N);
  test_.advance(N);
  if (range.ref_out) {
    tensor_read(*ref_b.current(), range.ref_out, 0, ref_b.current()->nbytes());
    tensor_read(*test_b.current(), range.test_out, 0, test_b.current()->nbytes());
    return true;
  }
  if (!logits) return true;
  const int64_t n_vocab = ref_out->ne[0], rows = ref_out->ne[1];
  for (auto [out, values] : {std::pair{ref_out, &ref_logits_}, std::pair{test_out, &test_logits_}}) {
    const size_t old = values->size();
    values->resize(old + rows * n_vocab);
    tensor_read(*out, values->data() + old, 0, rows * n_vocab * sizeof(float));
  }
  rows_ += rows;
  return true;
}

std::span<const float> ContextPair::logits_row(const std::vector<float>& values, int64_t i) const {
  const int64_t row = i - first_row_;
  if (row < 0 || row >= rows_) throw Error("compare: logits of token " + std::to_string(i) + " were not computed");
  const int64_t n_vocab = ref_.model().hparams().n_vocab;
  return {values.data() + row * n_vocab, static_cast<size_t>(n_vocab)};
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
