// Models loaded from GGUF, and contexts that run them.
//
// A Model holds the hyper-parameters, the vocabulary and the weights (tensors
// whose data points into the memory-mapped file). A Context holds what one
// sequence needs: the per-layer state (KV caches), the backend and its
// compute buffer, and the logits of the last batch. The graph of each batch names its nodes as
// llama.cpp does (`attn_norm-0`, `Qcur-0`, ..., `l_out-4`, `result_output`).
#pragma once

#include <algorithm>
#include <array>
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

// Hyper-parameters every architecture here shares, read from `<arch>.*` keys
// by the architecture file (src/model/arch/), which also sets the options its
// graph uses.
// How a router turns its logits into each token's experts and their weights
// (llama.cpp's expert gating functions): Softmax, the top-k of the softmax
// over every expert, weighted by those probabilities; SoftmaxWeight
// (gpt-oss), the top-k of the logits, weighted by the softmax over the k;
// Sigmoid (DeepSeek V3, Kimi K2, GLM-4.5), the top-k of the sigmoids (plus
// the selection bias exp_probs_b where the model has one), weighted by the
// sigmoids themselves.
enum class ExpertGating { Softmax, SoftmaxWeight, Sigmoid };

struct HParams {
  std::string arch;  // general.architecture as in the file ("llama", "mistral", "gemma3")
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_layer = 0;        // the layers the graph runs
  int64_t n_layer_nextn = 0;  // NextN/MTP layers after them (GLM-4.5, DeepSeek V3): loaded and checked, never run
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // key and value length per head: n_embd / n_head unless the file says otherwise
  int64_t head_dim_v = 0;  // value length per head (attention.value_length): head_dim unless the file says otherwise
  int64_t n_rot = 0;     // rotated dims per head
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  RopeMode rope_mode = RopeMode::Normal;
  // Sliding-window attention (Gemma 3): on the layers marked here a query
  // sees only the n_swa latest positions (itself included), and rope uses
  // the local base and scale.
  int64_t n_swa = 0;
  std::vector<bool> swa_layers;  // empty: every layer attends to everything
  float rope_freq_base_swa = 10000.0f;
  float rope_freq_scale_swa = 1.0f;
  // Mixture of experts (0 experts: a dense feed-forward): each token's
  // n_expert_used experts by the router's softmax, their weights divided by
  // their sum when expert_weights_norm, then scaled (0 or 1: not scaled).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;  // rows of one expert's gate and up matrices
  bool expert_weights_norm = false;
  float expert_weights_scale = 0.0f;
  ExpertGating expert_gating = ExpertGating::Softmax;
  // Grouped routing (DeepSeek V3): the experts in n_expert_groups groups,
  // only the n_group_used groups with the best two scores each compete.
  int64_t n_expert_groups = 0;
  int64_t n_group_used = 0;
  int64_t n_expert_shared = 0;     // shared experts beside the routed ones (one dense feed-forward of n_ff_exp each)
  int64_t n_layer_dense_lead = 0;  // leading layers with a dense feed-forward instead of experts
  // YaRN (rope.scaling.type "yarn"; ext_factor 0: none), for every layer.
  RopeYarn rope_yarn;
  // DeepSeek's YaRN attention scale (rope.scaling.yarn_log_multiplier / 0.1,
  // as llama.cpp reads it): the scores are scaled by mscale^2,
  // mscale = 1 + 0.1 log_mul ln(factor).
  float rope_yarn_log_mul = 0.0f;
  // Multi-head latent attention (DeepSeek V2/V3, Kimi K2): keys and values
  // from a compressed latent of n_lora_kv per token plus a shared rope key of
  // n_rot; queries through a rank-n_lora_q bottleneck (0: one matrix). Per
  // head, head_dim_k_mla key dims (the no-rope part, then n_rot) and
  // head_dim_v_mla value dims (attention.key_length_mla / value_length_mla).
  int64_t n_lora_q = 0;
  int64_t n_lora_kv = 0;
  int64_t head_dim_k_mla = 0;
  int64_t head_dim_v_mla = 0;
  // Multi-section rope (rope.dimension_sections; Qwen3.5's IMRope): the
  // pairs each of the four positions of a token turns.
  RopeSections rope_sections{};
  // Gated DeltaNet layers (Qwen3.5/3.6, llama.cpp's ssm.* keys): the short
  // convolution's width (ssm.conv_kernel), n_v_heads (ssm.time_step_rank)
  // value heads and n_k_heads (ssm.group_count) key heads of ssm_d_state
  // each (ssm.state_size), ssm_d_inner (ssm.inner_size) = the value heads'
  // total width. recurrent_layers marks the DeltaNet layers (empty: none).
  int64_t ssm_d_conv = 0, ssm_d_inner = 0, ssm_d_state = 0, ssm_dt_rank = 0, ssm_n_group = 0;
  std::vector<bool> recurrent_layers;
  int64_t n_ff_shexp = 0;  // the shared expert's width (Qwen3.5 MoE: expert_shared_feed_forward_length)
  // Per-layer shapes (Gemma 4): the sliding layers' head size and rotated
  // dims (attention.key_length_swa, rope.dimension_count_swa; 0: as the
  // others), and head_count_kv and feed_forward_length given per layer
  // (empty: n_head_kv and n_ff everywhere).
  int64_t head_dim_swa = 0;
  int64_t n_rot_swa = 0;
  std::vector<int64_t> n_head_kv_layers;
  std::vector<int64_t> n_ff_layers;
  // Shared KV layers (Gemma 4's attention.shared_kv_layers): only the first
  // n_layer_kv layers have a KV cache (0: all); a later layer attends to the
  // cache of one of them (kv_layer_of).
  int64_t n_layer_kv = 0;
  // Per-layer embeddings (Gemma 4 E2B/E4B): n_embd_per_layer values per token
  // and layer, added to the residual stream after each layer's feed-forward.
  int64_t n_embd_per_layer = 0;
  float final_logit_softcap = 0;  // cap tanh(logits / cap) (0: none)

  int64_t n_embd_q() const { return head_dim * n_head; }
  int64_t n_embd_kv() const { return head_dim * n_head_kv; }
  bool is_swa(int il) const { return il >= 0 && static_cast<size_t>(il) < swa_layers.size() && swa_layers[il]; }
  // Layer il's shapes, where they may differ per layer.
  int64_t head_dim_of(int il) const { return is_swa(il) && head_dim_swa > 0 ? head_dim_swa : head_dim; }
  int64_t n_rot_of(int il) const { return is_swa(il) && n_rot_swa > 0 ? n_rot_swa : n_rot; }
  int64_t n_head_kv_of(int il) const { return at_layer(n_head_kv_layers, il, n_head_kv); }
  int64_t n_ff_of(int il) const { return at_layer(n_ff_layers, il, n_ff); }
  int64_t n_embd_q_of(int il) const { return head_dim_of(il) * n_head; }
  int64_t n_embd_kv_of(int il) const { return head_dim_of(il) * n_head_kv_of(il); }
  // Whether a layer reads more than the residual stream (another layer's
  // cache, the per-layer inputs): a graph of a layer range must then start
  // from the embedding.
  bool layers_read_beyond_residual() const { return n_layer_kv > 0 || n_embd_per_layer > 0; }
  // The layer whose KV cache layer il attends to: itself, or for a shared
  // KV layer one of the last two with a cache, as llama.cpp reuses them: the
  // one before the last for a sliding layer, else the last (the reader
  // checks that their kinds fit).
  int kv_layer_of(int il) const {
    if (n_layer_kv <= 0 || il < n_layer_kv) return il;
    return static_cast<int>(n_layer_kv) - (is_swa(il) ? 2 : 1);
  }
  bool is_recurrent(int il) const {
    return il >= 0 && static_cast<size_t>(il) < recurrent_layers.size() && recurrent_layers[il];
  }
  // Positions per token the graph's inp_pos holds: four for the
  // multi-section rope (text: p, p, p, 0), else one.
  int64_t n_pos_per_token() const {
    return rope_mode == RopeMode::MRope || rope_mode == RopeMode::IMRope ? 4 : 1;
  }
  bool has_swa() const { return n_swa > 0 && std::find(swa_layers.begin(), swa_layers.end(), true) != swa_layers.end(); }
  static int64_t at_layer(const std::vector<int64_t>& v, int il, int64_t all) {
    return il >= 0 && static_cast<size_t>(il) < v.size() ? v[il] : all;
  }
  // Every field as (name, value) text, for messages and for comparing two
  // models (qlens compare refuses models whose graphs differ).
  std::vector<std::pair<std::string, std::string>> fields() const;
};

// What a weight is for. The names are llama.cpp's (the GGUF tensor names
// without "blk.N." and ".weight"); the table in model.cpp gives each role its
// GGUF suffix, whether it is per layer, and the op that reads it, which is
// what offloading and the type checks go by.
enum class Role : uint8_t {
  TokenEmbd,
  OutputNorm,
  Output,
  AttnNorm,
  AttnQ,
  AttnK,
  AttnV,
  AttnOutput,
  AttnQNorm,
  AttnKNorm,
  AttnPostNorm,
  FfnNorm,
  FfnGate,
  FfnUp,
  FfnDown,
  FfnPostNorm,
  RopeFreqs,  // Llama 3's frequency factors, one tensor for every layer
  AttnQBias,
  AttnKBias,
  AttnVBias,
  AttnQkv,  // q | k | v rows in one matrix (Phi-3)
  // Mixtures of experts: the router, and the experts' matrices stored as one
  // 3-D tensor each ([n_embd, n_ff_exp, n_expert] in ggml order for gate/up).
  FfnGateInp,
  FfnGateExps,
  FfnUpExps,
  FfnDownExps,
  // gpt-oss: the attention output's bias, per-head attention sinks, and the
  // biases of the router and of the experts' rows (added by expert id).
  AttnOutputBias,
  AttnSinks,
  FfnGateInpBias,
  FfnGateExpsBias,
  FfnUpExpsBias,
  FfnDownExpsBias,
  // DeepSeek's latent attention: q's low-rank pair and the norm between
  // them, the compressed kv with the rope key (kv_a_mqa) and its norm, and
  // the per-head up-projections of the latent into keys (k_b, absorbed into
  // the queries) and values (v_b), 3-D [.., .., n_head].
  AttnQA,
  AttnQANorm,
  AttnQB,
  AttnKvAMqa,
  AttnKvANorm,
  AttnKB,
  AttnVB,
  // The routers' selection bias (exp_probs_b) and the shared experts.
  FfnExpProbsB,
  FfnGateShexp,
  FfnUpShexp,
  FfnDownShexp,
  // A NextN / multi-token-prediction layer's own tensors (beside a full
  // layer's): what llama.cpp loads and its main graph skips.
  NextnEhProj,
  NextnEnorm,
  NextnHnorm,
  NextnEmbedTokens,
  NextnSharedHeadHead,
  NextnSharedHeadNorm,
  // Gated DeltaNet (Qwen3.5/3.6): the z gate's projection (attn_gate; q, k
  // and v come from attn_qkv), the short convolution's kernels, the decay's
  // bias (ssm_dt.bias) and -exp(A_log) per value head (ssm_a, a name with
  // no suffix), the beta and alpha projections, the gated norm and the out
  // projection; and the MoE's sigmoid gate of the shared expert.
  AttnGate,
  SsmConv1d,
  SsmDt,
  SsmA,
  SsmBeta,
  SsmAlpha,
  SsmNorm,
  SsmOut,
  FfnGateInpShexp,
  // Gemma 4: per-layer embeddings (their table, the projection of the
  // embedded token into them and its norm; per layer the gate, the
  // projection back and its norm), the scalar each layer's output is
  // multiplied by, the MoE layers' norms around the dense and the expert
  // feed-forwards, and the per-channel scale of the router's input.
  PerLayerTokenEmbd,
  PerLayerModelProj,
  PerLayerProjNorm,
  PerLayerInpGate,
  PerLayerProj,
  PerLayerPostNorm,
  LayerOutputScale,
  FfnPreNorm2,
  FfnPostNorm1,
  FfnPostNorm2,
  FfnGateInpScale,
  FfnDownExpsScale,  // one per expert: the experts' outputs times their own (Model::scale_of)
  // The experts' gate and up matrices as one tensor, gate rows then up rows
  // per expert ([n_embd, 2 n_ff_exp, n_expert]): how llama.cpp's converter
  // writes Gemma 4's experts (and any model converted with fused experts).
  FfnGateUpExps,
};
constexpr int kRoleCount = static_cast<int>(Role::FfnGateUpExps) + 1;

struct RoleInfo {
  const char* name;    // "attn_q"
  const char* suffix;  // "weight" or "bias"
  bool per_layer;
  Op reader;  // MulMat for matrices, MulMatId for experts, Mul for norm scales, Add for biases, GetRows for the embedding
};
const RoleInfo& role_info(Role role);
// Whether a role's tensor must be F32: what element-wise ops, softmax and
// rope read (norm scales, biases, attention sinks, rope factors).
bool role_reads_f32(Role role);
// The GGUF name of a role's tensor: "blk.3.attn_q.weight", "output_norm.weight".
std::string tensor_name(Role role, int layer = -1);

// One row of an architecture's tensor table.
struct TensorSpec {
  Role role;
  std::array<int64_t, kMaxDims> ne;  // ggml order, from the hyper-parameters
  bool required = true;
  // Optional for loading (llama.cpp loads files without it) but in the
  // published models (gpt-oss's q/k/v biases, DeepSeek V3's exp_probs_b):
  // qlens synth writes it.
  bool published = false;
};

// An architecture's tensor table and keys, for writers of model files (qlens
// synth): the rows of the global tensors (il < 0) or of layer il for these
// hyper-parameters, and every `<arch>.*` key that Model::load reads back.
// Both throw for an architecture qlens does not run.
std::vector<TensorSpec> architecture_tensors(const HParams& hp, int il);
// The general.architecture names qlens runs.
std::vector<std::string> architecture_names();
void write_architecture_hparams(gguf::Writer& w, const HParams& hp);

class Architecture;
class AttentionBlock;
class SequenceState;

// Throws an error naming the file, the tensor and its type when the tensor's
// type is one the engine can name and size but not compute with (MXFP4, the
// IQ2/IQ3 types, ...): the tools that would compute with it call this before
// any work. qlens inspect lists such tensors and qlens quantize copies them.
void require_computable(const gguf::File& file, const gguf::TensorInfo& tensor);

class Model {
 public:
  // Loads a GGUF file of an architecture qlens knows (src/model/arch/) and
  // validates its tensors against the architecture's table: a missing
  // required tensor, a wrong shape or type, or a tensor the table does not
  // know is an error naming it and the file. A tensor of a type the engine
  // cannot compute with is refused first, before anything else is read.
  static std::unique_ptr<Model> load(const std::string& path);
  // Loads the file as `arch` whatever its general.architecture says (tests
  // run a file's weights through another layer graph this way).
  static std::unique_ptr<Model> load(const std::string& path, const Architecture& arch);

  const std::string& path() const { return file_->path(); }
  const gguf::File& file() const { return *file_; }
  const HParams& hparams() const { return hp_; }
  const Architecture& arch() const { return *arch_; }
  // The attention block of layer il, which the architecture picked
  // (src/model/attention.h).
  const AttentionBlock& attention_block(int il) const { return *attention_[il]; }
  const Vocab& vocab() const { return *vocab_; }

  // A weight by role (and layer for per-layer roles); null when an optional
  // tensor is absent. Role::Output is the token embedding when tied.
  Tensor* get(Role role, int layer = -1) const;
  Tensor* token_embd() const { return get(Role::TokenEmbd); }
  Tensor* output_norm() const { return get(Role::OutputNorm); }
  Tensor* output() const { return get(Role::Output); }
  bool output_is_tied() const { return output() == token_embd(); }
  // The roles of a weight (two for a tied embedding: TokenEmbd and Output).
  std::vector<Role> roles_of(const Tensor* weight) const;
  // The per-tensor scale a matrix's products are multiplied by ("NAME.scale"
  // beside "NAME.weight": NVFP4's second-level scale, as llama.cpp loads
  // it), or null.
  Tensor* scale_of(const Tensor* weight) const;
  // Every weight tensor by GGUF name.
  const std::map<std::string, Tensor*>& weights() const { return weights_; }
  int64_t n_params() const;
  size_t weight_bytes() const;

  ~Model();

 private:
  Model() = default;
  static std::unique_ptr<Model> load(std::unique_ptr<gguf::File> file, const Architecture& arch);
  Tensor* bind(const TensorSpec& spec, int layer);
  void check_expert_forms() const;
  void bind_scales();

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Vocab> vocab_;
  const Architecture* arch_ = nullptr;
  HParams hp_;
  std::deque<Tensor> storage_;
  std::map<std::string, Tensor*> weights_;
  std::array<Tensor*, kRoleCount> globals_{};
  std::vector<std::array<Tensor*, kRoleCount>> layers_;
  std::map<const Tensor*, Tensor*> scales_;  // weight -> its ".scale"
  std::vector<std::unique_ptr<AttentionBlock>> attention_;
};

struct ContextOptions {
  int64_t n_ctx = 0;      // 0: the model's training context, capped at 4096
  int64_t n_batch = 512;  // tokens per graph evaluation
  int n_threads = 0;      // 0: one per core
  CpuOptions cpu;         // the CPU backend's kernels (qlens/backend.h)
  VulkanOptions vulkan;   // a Vulkan device's (qlens/backend.h)
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
  // decode with the logits of tokens first_logit onwards only (logits(i) for
  // those i): the output matrix is applied to those rows alone, as llama.cpp's
  // perplexity asks for the scored half of each chunk. On a 262k vocabulary
  // the output matrix is most of a small model's work.
  bool decode_logits_from(std::span<const Token> tokens, int64_t first_logit);
  // Decodes `tokens` through layers [first, last) only (0 <= first <= last <=
  // n_layer, first < last unless first is 0 or n_layer): how sensitivity
  // reuses what the unmodified model computes before the layer a probe
  // changes. `in` holds the residual stream entering layer `first`, tokens x
  // n_embd floats (unused when first is 0: the embedding is computed). With
  // `out`, the stream leaving layer last - 1 (the embedding when last is 0)
  // goes there and no logits are computed; without, last must be n_layer and
  // the logits of tokens first_logit onwards are (logits(i) for those i; the
  // output matrix is applied to those rows only). The KV cache of the other
  // layers is not written. A model whose layers read more than the residual
  // stream (HParams::layers_read_beyond_residual) computes the range from its
  // embedding, `in` unused.
  bool decode_layers(std::span<const Token> tokens, int first, int last, const float* in, std::vector<float>* out,
                     int64_t first_logit = 0);
  // Logits of the i-th token of the last decode (i < number of rows computed).
  std::span<const float> logits(int64_t i) const;
  // Logits of the last token of the last decode.
  std::span<const float> last_logits() const;

  void clear();  // starts a new sequence: empties the caches, zeroes recurrent states
  // Hands the matrices the CPU runs (every one not offloaded to the device)
  // to the CPU backend to prepare for generation (Backend::prepare_weights:
  // packed copies for its matrix-vector kernels, kept by the backend). For
  // the tools that generate token by token. Returns the bytes added.
  size_t pack_for_generation();
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

  const ContextOptions& options() const { return options_; }
  // The per-layer state (KV caches, recurrent states) graphs of this context
  // read and write (src/model/sequence_state.h; the state is the sequence's,
  // not part of what a const Context promises to keep).
  SequenceState& state() const { return *state_; }
  // Moves the position past a batch that a graph computed into this
  // context's cache outside decode (ContextPair).
  void advance(int64_t n_tokens) { n_past_ += n_tokens; }

 private:
  // The layers [first, last) of one batch (decode: all of them); see decode_layers.
  struct LayerRange {
    int first = 0, last = 0;
    const float* in = nullptr;   // the batch's rows of the stream entering `first`
    float* out = nullptr;        // the batch's rows of the stream leaving last - 1
    int64_t first_logit = 0;     // out null: logits of the batch's rows from this one on (none past the batch)
  };
  bool decode_batch(std::span<const Token> tokens, bool all_logits, const LayerRange* range = nullptr);
  void check_tokens(std::span<const Token> tokens) const;

  const Model& model_;
  ContextOptions options_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  void offload(const ContextOptions& options);
  // Whether the device runs `reader` (the op of the weight's role) on `w`.
  bool device_runs(const Tensor& w, Op reader) const;
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
  std::unique_ptr<SequenceState> state_;
  Graph graph_;  // the last batch's, its memory kept for the next
  std::vector<float> logits_;
  int64_t logits_rows_ = 0;
  int64_t logits_first_ = 0;  // the token of the last decode whose logits are logits_'s first row
  GraphObserver observer_;
};

}  // namespace qlens
