// Models loaded from GGUF, and contexts that run them.
//
// A Model holds the hyper-parameters, the vocabulary and the weights (tensors
// whose data points into the memory-mapped file). A Context holds what one
// sequence needs: the KV cache, the backend and its compute buffer, and the
// logits of the last batch. The graph of each batch names its nodes as
// llama.cpp does (`attn_norm-0`, `Qcur-0`, ..., `l_out-4`, `result_output`).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qlens/backend.h"
#include "qlens/gguf.h"
#include "qlens/sched.h"
#include "qlens/tensor.h"
#include "qlens/vocab.h"

namespace qlens {

struct LlamaHParams {
  std::string arch;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // n_embd / n_head unless the file says otherwise
  int64_t n_rot = 0;     // rotated dims per head
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  RopeMode rope_mode = RopeMode::Normal;

  int64_t n_embd_kv() const { return head_dim * n_head_kv; }
};

struct LlamaLayer {
  Tensor* attn_norm = nullptr;
  Tensor* wq = nullptr;
  Tensor* wk = nullptr;
  Tensor* wv = nullptr;
  Tensor* wo = nullptr;
  Tensor* ffn_norm = nullptr;
  Tensor* ffn_gate = nullptr;
  Tensor* ffn_up = nullptr;
  Tensor* ffn_down = nullptr;
};

class Model {
 public:
  // Loads and validates a llama-architecture GGUF (mistral-style files too).
  // Errors name the file and the missing or malformed key or tensor.
  static std::unique_ptr<Model> load(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const gguf::File& file() const { return *file_; }
  const LlamaHParams& hparams() const { return hp_; }
  const Vocab& vocab() const { return *vocab_; }

  Tensor* token_embd() const { return token_embd_; }
  Tensor* output_norm() const { return output_norm_; }
  Tensor* output() const { return output_; }  // == token_embd() when tied
  bool output_is_tied() const { return output_ == token_embd_; }
  const std::vector<LlamaLayer>& layers() const { return layers_; }
  // Every weight tensor by GGUF name.
  const std::map<std::string, Tensor*>& weights() const { return weights_; }
  int64_t n_params() const;
  size_t weight_bytes() const;

 private:
  Model() = default;
  Tensor* weight(const std::string& name, std::initializer_list<int64_t> shape, bool required = true);

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Vocab> vocab_;
  LlamaHParams hp_;
  std::deque<Tensor> storage_;
  std::map<std::string, Tensor*> weights_;
  Tensor* token_embd_ = nullptr;
  Tensor* output_norm_ = nullptr;
  Tensor* output_ = nullptr;
  std::vector<LlamaLayer> layers_;
};

struct ContextOptions {
  int64_t n_ctx = 0;      // 0: the model's training context, capped at 4096
  int64_t n_batch = 512;  // tokens per graph evaluation
  int n_threads = 0;      // 0: one per core
  DType cache_type = DType::F16;
  // Keep every intermediate result readable after compute (no buffer reuse),
  // for debugging and tests; costs memory.
  bool keep_intermediates = false;
  // Where to run: "cpu" or a device id ("vulkan:0", see list_devices()).
  std::string device = "cpu";
  // With a device: how many layers run there, counted from the last one
  // (llama.cpp's -ngl); more than the layer count also offloads the output
  // layer. < 0: everything. The token embedding stays in host memory.
  int n_gpu_layers = -1;
  // A device backend the caller owns (tests, tools sharing one device);
  // overrides `device` when set.
  Backend* device_backend = nullptr;
};

// Called after each batch's graph is computed. With keep_intermediates every
// node is readable; otherwise only inputs and the logits.
using GraphObserver = std::function<void(const Graph&)>;

class Context;

// Builds the graph of one batch for a context step by step (embedding, each
// layer, output), adding each step's nodes to the graph's order as it goes,
// so that the graphs of two models can be interleaved layer by layer in one
// Graph (qlens compare). The inputs may be shared between builders.
class LlamaGraphBuilder {
 public:
  struct Inputs {
    Tensor* tokens = nullptr;     // I32 [N]      "inp_tokens"
    Tensor* positions = nullptr;  // I32 [N]      "inp_pos"
    Tensor* mask = nullptr;       // F32 [n_kv, N] "KQ_mask"
  };
  static Inputs make_inputs(Graph& g, int64_t n_tokens, int64_t n_kv);

  // The batch goes at ctx.n_past(); in.mask must cover n_past + N positions.
  LlamaGraphBuilder(const Context& ctx, Graph& g, const Inputs& in, bool all_logits);
  Tensor* embed();         // "inp_embd"
  Tensor* layer(int il);   // returns "l_out-il"
  Tensor* output();        // "result_output" (kFlagOutput)

 private:
  const Context& ctx_;
  Graph& g_;
  Inputs in_;
  bool all_logits_;
  int64_t n_tokens_;
  Tensor* inpL_ = nullptr;
};

class Context {
 public:
  Context(const Model& model, const ContextOptions& options);
  ~Context();

  // Appends `tokens` to the sequence (positions n_past() onwards) and computes
  // logits: for every token when all_logits, else only for the last one.
  // Returns false when the observe callback stopped the computation: the
  // batch being computed is then not part of the sequence (n_past() is that
  // of the batches finished before it) and its logits are not available.
  bool decode(std::span<const Token> tokens, bool all_logits);
  // Logits of the i-th token of the last decode (i < number of rows computed).
  std::span<const float> logits(int64_t i) const;
  // Logits of the last token of the last decode.
  std::span<const float> last_logits() const;

  void clear();  // empties the KV cache
  void set_observer(GraphObserver observer) { observer_ = std::move(observer); }
  // The scheduler's observe callback and taps (qlens/sched.h), for every
  // graph this context computes. Tap keys accumulate until read_taps.
  void set_observe_callback(ObserveCallback callback) { sched_->set_observe_callback(std::move(callback)); }
  void set_tap_selector(TapSelector selector) { sched_->set_tap_selector(std::move(selector)); }
  std::map<std::string, TapResult> read_taps(bool reset = true) { return sched_->read_taps(reset); }
  Scheduler& scheduler() const { return *sched_; }
  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  const Model& model() const { return model_; }
  Backend& backend() const { return *backend_; }          // the host (CPU) backend
  Backend* device() const { return device_; }              // null without one
  int64_t n_offloaded_layers() const { return n_offloaded_; }
  // The tensor a graph uses for a model weight: a replacement when one is
  // set, its copy in device memory when offloaded, else the weight itself.
  Tensor* weight(Tensor* model_weight) const;
  // Makes graphs use `replacement` (same shape, any type, data in host
  // memory; owned by the caller and read only now: the context keeps a copy
  // in device memory when the weight is offloaded and the device runs its
  // type) instead of a weight, until restored: how sensitivity probes one
  // quantized or noisy tensor without reloading.
  void replace_weight(const Tensor* model_weight, Tensor* replacement);
  void restore_weight(const Tensor* model_weight) { replaced_.erase(model_weight); }

  // Builds the graph for a batch of `n_tokens` at the current position, with
  // inputs named inp_tokens, inp_pos and KQ_mask (exposed for tests and tools).
  Tensor* build_graph(Graph& g, int64_t n_tokens, bool all_logits) const;

 private:
  friend class LlamaGraphBuilder;
  friend class ContextPair;
  bool decode_batch(std::span<const Token> tokens, bool all_logits);

  const Model& model_;
  ContextOptions options_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  void offload(const ContextOptions& options);
  // Whether the device runs the op that reads weight `w` (mul_mat, or mul
  // for a norm's vector).
  bool device_runs(const Tensor& w) const;
  struct Replacement {
    Tensor* tensor = nullptr;              // what graphs use
    std::unique_ptr<Buffer> device_buffer;  // when copied to the device
    std::unique_ptr<Tensor> device_copy;
  };

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> owned_device_;
  Backend* device_ = nullptr;
  int64_t n_offloaded_ = 0;
  std::unique_ptr<Buffer> device_weights_buffer_;
  std::unique_ptr<Buffer> device_cache_buffer_;
  std::deque<Tensor> device_weights_;
  std::map<const Tensor*, Tensor*> device_weight_of_;
  std::map<const Tensor*, Replacement> replaced_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<std::vector<uint8_t>> cache_data_;  // per layer: K then V (host layers)
  std::deque<Tensor> cache_;                      // per layer: K, V
  std::vector<float> logits_;
  int64_t logits_rows_ = 0;
  GraphObserver observer_;
};

}  // namespace qlens
