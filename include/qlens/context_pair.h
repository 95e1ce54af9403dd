// Two models decoding the same tokens in one graph, for comparing them node
// by node (qlens compare).
//
// Each batch's graph holds both models, interleaved layer by layer (the
// reference's layer, then the test model's), with shared inputs. Every
// computed node of the test model is paired with the reference node of the
// same name (the k-th occurrence: llama.cpp names some nodes twice, e.g.
// `Qcur-0` before and after rope; the second is labelled `Qcur-0#2`), and the
// reference node is kept in memory until its partner is computed, so a tap on
// the test node can compare the two on the backend. Memory: both models, and
// about one layer of the reference's activations beyond a single model's.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "qlens/model.h"
#include "qlens/sched.h"

namespace qlens {

// "" when the two models can be compared node by node; else the first
// difference (architecture, a hyper-parameter, the vocabulary, a weight's
// presence or shape), named.
std::string first_model_difference(const Model& ref, const Model& test);

class ContextPair {
 public:
  enum class Side { Shared, Ref, Test };

  // Both contexts must be empty-handed alike (same n_ctx, same position);
  // throws Error naming the first difference between the models.
  ContextPair(Context& ref, Context& test);
  ~ContextPair();

  // Decodes `tokens` with both models, with the logits of tokens first_logit
  // onwards (the output norm and matrix see those rows only). Returns false
  // when the observe callback stopped the computation.
  bool decode(std::span<const Token> tokens, int64_t first_logit = 0);
  // Layers [first, last) of both models only, as Context::decode_layers
  // (--split-layers): `in` holds the two residual streams entering layer
  // `first` (the reference's, tokens x n_embd floats, then the test
  // model's; unused when first is 0); with `out`, the two leaving layer
  // last - 1 go there, in the same order, and no logits are computed;
  // without, last must be n_layer.
  bool decode_layers(std::span<const Token> tokens, int first, int last, const float* in, std::vector<float>* out,
                     int64_t first_logit = 0);
  void clear();  // empties both KV caches
  // Logits of the i-th token of the last decode (first_logit <= i).
  std::span<const float> ref_logits(int64_t i) const { return logits_row(ref_logits_, i); }
  std::span<const float> test_logits(int64_t i) const { return logits_row(test_logits_, i); }
  int64_t n_rows() const { return rows_; }  // logits rows: tokens first_logit onwards

  // For tap selectors and observe callbacks, about the graph being computed:
  Side side_of(const Tensor& node) const;
  // The reference partner of a test node (null when there is none).
  const Tensor* reference_of(const Tensor& test_node) const;
  // Whether a reference node is some test node's partner.
  bool is_partner(const Tensor& ref_node) const { return partnered_.count(&ref_node) > 0; }
  // The node's name, with "#k" for the k-th (k >= 2) node of that name in its model.
  const std::string& label(const Tensor& node) const;
  // How many nodes of each name the test model's part of the last graph
  // had: what turns the labels of a layer range's graph into those of the
  // whole model's (a name without a layer number, such as Gemma 3's `norm`,
  // is counted across layers).
  const std::map<std::string, int>& name_counts() const { return name_counts_; }

  Scheduler& scheduler() { return *sched_; }
  Context& ref() { return ref_; }
  Context& test() { return test_; }

 private:
  // One batch of decode_layers: the streams' rows of this batch (ref, test).
  struct BatchRange {
    int first = 0, last = 0;
    const float* ref_in = nullptr;
    const float* test_in = nullptr;
    float* ref_out = nullptr;
    float* test_out = nullptr;
  };
  bool decode_batch(std::span<const Token> tokens, int64_t first_logit, const BatchRange& range);
  std::span<const float> logits_row(const std::vector<float>& values, int64_t i) const;

  Context& ref_;
  Context& test_;
  std::unique_ptr<Scheduler> sched_;
  std::unordered_map<const Tensor*, Side> side_;
  std::unordered_map<const Tensor*, const Tensor*> partner_;
  std::unordered_map<const Tensor*, bool> partnered_;
  std::unordered_map<const Tensor*, std::string> label_;
  std::map<std::string, int> name_counts_;
  std::vector<float> ref_logits_, test_logits_;
  int64_t first_row_ = 0;  // the token of the first logits row
  int64_t rows_ = 0;
};

}  // namespace qlens
