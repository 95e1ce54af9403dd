// A context: the per-layer state, the backends and offloading, and decoding batches
// through the architecture's graph.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/human_bytes.h"
#include "core/round_up.h"
#include "model/arch/architecture.h"
#include "model/graph_builder.h"
#include "model/sequence_state.h"
#include "qlens/error.h"
#include "qlens/model.h"

namespace qlens {

// ---------------------------------------------------------------------------
// Context

Context::Context(const Model& model, const ContextOptions& options) : model_(model), options_(options) {
  n_ctx_ = options.n_ctx > 0 ? options.n_ctx : std::min<int64_t>(model.hparams().n_ctx_train, 4096);
  if (options_.n_batch <= 0) throw Error("batch size must be positive, got " + std::to_string(options_.n_batch));
  if (options.cache_type != DType::F32 && options.cache_type != DType::F16 && options.cache_type != DType::BF16)
    throw Error("KV cache type must be F32, F16 or BF16");
  backend_ = make_cpu_backend(options.n_threads, options.cpu);
  if (options.device_backend) {
    device_ = options.device_backend;
  } else if (!options.device.empty() && options.device != "cpu") {
    owned_device_ = make_backend(options.device, options.n_threads, options.cpu, options.vulkan);
    device_ = owned_device_.get();
  }
  state_ = std::make_unique<SequenceState>(model, n_ctx_, options.cache_type);
  if (device_) offload(options);
  state_->allocate_host();
  sched_ = device_ ? std::make_unique<Scheduler>(std::vector<Backend*>{device_, backend_.get()})
                   : std::make_unique<Scheduler>(*backend_);
}

// Copies the weights of the offloaded layers into one device buffer and puts
// their state (KV caches) in another. A weight whose op the device cannot run stays in host
// memory (its node then runs on the CPU).
void Context::offload(const ContextOptions& options) {
  const Architecture& arch = model_.arch();
  const int64_t n_layer = model_.hparams().n_layer;
  const int64_t ngl = options.n_gpu_layers < 0 ? n_layer + 1 : options.n_gpu_layers;
  n_offloaded_ = std::min<int64_t>(ngl, n_layer);
  const int64_t first = n_layer - n_offloaded_;
  const bool output_too = ngl > n_layer;

  // The table says which op reads each weight; the token embedding (read by
  // get_rows) stays in host memory unless it is also the output matrix.
  std::vector<const Tensor*> to_upload;
  auto upload = [&](const TensorSpec& spec, int il) {
    const Tensor* w = model_.get(spec.role, il);
    if (w && device_runs(*w, role_info(spec.role).reader) &&
        std::find(to_upload.begin(), to_upload.end(), w) == to_upload.end())
      to_upload.push_back(w);
  };
  for (int64_t il = first; il < n_layer; ++il)
    for (const TensorSpec& spec : arch.tensors(model_.hparams(), static_cast<int>(il))) upload(spec, static_cast<int>(il));
  if (output_too)
    for (const TensorSpec& spec : arch.tensors(model_.hparams(), -1))
      if (spec.role != Role::TokenEmbd) upload(spec, -1);

  constexpr size_t kAlign = 256;
  auto aligned = [](size_t n) { return round_up(n, kAlign); };
  size_t weight_bytes = 0, cache_bytes = 0;
  for (const Tensor* w : to_upload) weight_bytes += aligned(w->nbytes());
  for (int64_t il = first; il < n_layer; ++il)
    for (const Tensor* t : state_->layer(static_cast<int>(il))) cache_bytes += aligned(t->nbytes());
  try {
    if (weight_bytes > 0) device_weights_buffer_ = device_->alloc_buffer(weight_bytes);
    if (cache_bytes > 0) device_cache_buffer_ = device_->alloc_buffer(cache_bytes);
  } catch (const Error& e) {
    throw Error("offloading " + std::to_string(n_offloaded_) + " layers to " + device_->name() + " (" +
                human_bytes(weight_bytes) + " of weights, " + human_bytes(cache_bytes) + " of KV cache): " +
                e.what() + "; try a smaller -ngl");
  }
  size_t offset = 0;
  for (const Tensor* w : to_upload) {
    Tensor& d = device_weights_.emplace_back(*w);
    d.buffer = device_weights_buffer_.get();
    d.data = device_weights_buffer_->base() + offset;
    tensor_write(d, w->data, 0, w->nbytes());
    device_weight_of_[w] = &d;
    offset += aligned(w->nbytes());
  }
  offset = 0;
  for (int64_t il = first; il < n_layer && cache_bytes > 0; ++il)
    for (Tensor* t : state_->layer(static_cast<int>(il))) {
      t->buffer = device_cache_buffer_.get();
      t->data = device_cache_buffer_->base() + offset;
      offset += aligned(t->nbytes());
    }
}

bool Context::device_runs(const Tensor& w, Op reader) const {
  Graph probe;
  Tensor* x = probe.new_tensor(DType::F32, {w.ne[0], 1});
  // A leaf of the probe graph that aliases w's memory, so nothing of w is
  // handed out writable.
  Tensor* weight = probe.external(w, w.data);
  Tensor* node = nullptr;
  switch (reader) {
    case Op::MulMat:  // a 3-D weight (DeepSeek's attn_k_b) multiplies a batch of its matrices' count
      node = mul_mat(probe, weight, probe.new_tensor(DType::F32, {w.ne[0], 1, w.ne[2], w.ne[3]}));
      break;
    case Op::MulMatId:
      node = mul_mat_id(probe, weight, probe.new_tensor(DType::F32, {w.ne[0], 1, 1}),
                        probe.new_tensor(DType::I32, {1, 1}));
      break;
    case Op::Mul: node = mul(probe, x, weight); break;
    case Op::Add: node = add(probe, x, weight); break;
    case Op::AddId:  // an expert's bias row added to its rows
      node = add_id(probe, probe.new_tensor(DType::F32, {w.ne[0], 1, 1}), weight, probe.new_tensor(DType::I32, {1, 1}));
      break;
    case Op::SoftMax:  // attention sinks: one logit per head
      node = soft_max(probe, probe.new_tensor(DType::F32, {4, 1, w.ne[0]}), nullptr, 1.0f, weight);
      break;
    case Op::Rope:  // rope_freqs: one factor per rotated pair
      node = rope(probe, probe.new_tensor(DType::F32, {2 * w.ne[0], 1, 1}), probe.new_tensor(DType::I32, {1}),
                  static_cast<int>(2 * w.ne[0]), RopeMode::Normal, 10000.0f, 1.0f, weight);
      break;
    case Op::GetRows: node = get_rows(probe, weight, probe.new_tensor(DType::I32, {1})); break;
    case Op::SsmConv:  // DeltaNet's kernels [d_conv, channels] over one token's window
      node = ssm_conv(probe, probe.new_tensor(DType::F32, {w.ne[0], w.ne[1], 1}), weight);
      break;
    default: return false;  // a reader no role has
  }
  return device_->supports_op(*node);
}

void Context::replace_weight(const Tensor* model_weight, Tensor* replacement) {
  if (!replacement || !same_shape(*model_weight, *replacement))
    throw Error("replace_weight: the replacement of '" + model_weight->name + "' must have its shape " +
                shape_string(*model_weight));
  Replacement r;
  r.tensor = replacement;
  // An offloaded weight's replacement goes to the device too, so that its
  // op stays there; if the device cannot run its type or has no room, the
  // op runs on the CPU from host memory.
  const bool contiguous = replacement->nb == contiguous_strides(replacement->type, replacement->ne);
  const std::vector<Role> roles = model_.roles_of(model_weight);
  const Op reader = roles.empty() ? Op::MulMat : role_info(roles.back()).reader;  // a tied embedding: as the output
  if (device_weight_of_.count(model_weight) && contiguous && device_runs(*replacement, reader)) {
    try {
      r.device_buffer = device_->alloc_buffer(replacement->nbytes());
      r.device_copy = std::make_unique<Tensor>(*replacement);
      r.device_copy->buffer = r.device_buffer.get();
      r.device_copy->data = r.device_buffer->base();
      tensor_write(*r.device_copy, replacement->data, 0, replacement->nbytes());
      r.tensor = r.device_copy.get();
    } catch (const Error&) {
      r = Replacement{replacement, nullptr, nullptr};
    }
  }
  replaced_[model_weight] = std::move(r);
}

size_t Context::pack_for_generation() {
  std::vector<const Tensor*> matrices;
  for (const auto& [name, w] : model_.weights()) {
    const std::vector<Role> roles = model_.roles_of(w);
    const bool matrix = std::any_of(roles.begin(), roles.end(), [](Role r) { return role_info(r).reader == Op::MulMat; });
    if (matrix && !device_weight_of_.count(w)) matrices.push_back(w);
  }
  return backend_->prepare_weights(matrices, Op::MulMat);
}

Tensor* Context::weight(Tensor* model_weight) const {
  if (auto r = replaced_.find(model_weight); r != replaced_.end()) return r->second.tensor;
  auto it = device_weight_of_.find(model_weight);
  return it == device_weight_of_.end() ? model_weight : it->second;
}

Context::~Context() = default;

void Context::clear() {
  n_past_ = 0;
  state_->reset();
}

void Context::check_tokens(std::span<const Token> tokens) const {
  if (tokens.empty()) throw Error("decode: no tokens");
  const int64_t n_vocab = model_.hparams().n_vocab;
  for (Token t : tokens)
    if (t < 0 || t >= n_vocab)
      throw Error("decode: token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(n_vocab) +
                  " tokens)");
  if (n_past_ + static_cast<int64_t>(tokens.size()) > n_ctx_)
    throw Error("decode: " + std::to_string(n_past_ + tokens.size()) + " tokens exceed the context size " +
                std::to_string(n_ctx_) + " (-c)");
}

bool Context::decode(std::span<const Token> tokens, bool all_logits) {
  check_tokens(tokens);
  logits_rows_ = 0;
  logits_first_ = 0;
  for (size_t start = 0; start < tokens.size(); start += options_.n_batch) {
    const size_t n = std::min<size_t>(options_.n_batch, tokens.size() - start);
    if (!all_logits) {  // only the very last row survives
      logits_rows_ = 0;
    }
    if (!decode_batch(tokens.subspan(start, n), all_logits)) {
      logits_rows_ = 0;
      return false;
    }
  }
  return true;
}

bool Context::decode_logits_from(std::span<const Token> tokens, int64_t first_logit) {
  return decode_layers(tokens, 0, static_cast<int>(model_.hparams().n_layer), nullptr, nullptr, first_logit);
}

bool Context::decode_layers(std::span<const Token> tokens, int first, int last, const float* in,
                            std::vector<float>* out, int64_t first_logit) {
  const int n_layer = static_cast<int>(model_.hparams().n_layer);
  if (first < 0 || last > n_layer || first > last || (first == last && first != 0 && first != n_layer))
    throw Error("decode_layers: no layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                ") in a model of " + std::to_string(n_layer) + " layers");
  if (first > 0 && !in) throw Error("decode_layers: starting at layer " + std::to_string(first) + " needs its input");
  if (last < n_layer && !out) throw Error("decode_layers: stopping before the output needs a place for the stream");
  if (first == n_layer && out) throw Error("decode_layers: no layer to compute");
  check_tokens(tokens);
  if (!out && (first_logit < 0 || first_logit >= static_cast<int64_t>(tokens.size())))
    throw Error("decode_layers: logits from token " + std::to_string(first_logit) + " of a batch of " +
                std::to_string(tokens.size()));
  const int64_t n_embd = model_.hparams().n_embd;
  if (out) out->resize(tokens.size() * n_embd);
  logits_rows_ = 0;
  logits_first_ = out ? 0 : first_logit;
  for (size_t start = 0; start < tokens.size(); start += options_.n_batch) {
    const size_t n = std::min<size_t>(options_.n_batch, tokens.size() - start);
    const LayerRange range{first, last, in ? in + start * n_embd : nullptr, out ? out->data() + start * n_embd : nullptr,
                           std::max<int64_t>(0, first_logit - static_cast<int64_t>(start))};
    if (!decode_batch(tokens.subspan(start, n), true, &range)) {
      logits_rows_ = 0;
      return false;
    }
  }
  return true;
}

bool Context::decode_batch(std::span<const Token> tokens, bool all_logits, const LayerRange* range) {
  const int64_t N = static_cast<int64_t>(tokens.size());
  const int n_layer = static_cast<int>(model_.hparams().n_layer);
  const LayerRange whole{0, n_layer, nullptr, nullptr};
  const LayerRange& r = range ? *range : whole;
  if (r.first == n_layer && !r.out && r.first_logit >= N) {  // only the output, of no row of this batch
    n_past_ += N;
    return true;
  }
  Graph& g = graph_;
  g.clear();
  GraphBuilder b(*this, g, GraphInputs::make(g, N, n_past_ + N, model_.hparams().has_swa(),
                                                       model_.hparams().n_pos_per_token()), all_logits);
  // Gemma 4's layers read earlier layers' caches and the embedding's
  // per-layer inputs: their range is computed from the embedding on (the
  // same numbers, as the earlier layers are unchanged).
  const int first = model_.hparams().layers_read_beyond_residual() ? 0 : r.first;
  Tensor* residual = first > 0 ? b.residual_input() : b.embed();
  for (int il = first; il < r.last; ++il) b.layer(il);
  // A batch wholly before the first wanted logit computes its layers only.
  const bool logits = r.out == nullptr && r.first_logit < N;
  Tensor* out = logits ? b.output(r.first_logit) : b.current();
  out->flags |= kFlagOutput;
  if (options_.keep_intermediates)
    for (Tensor* node : g.nodes()) node->flags |= kFlagOutput;
  // On the host alone, the output node writes its logits into logits_ (a
  // vocabulary's row copied per token was 1% of Gemma 3 270M's generation).
  // logits_ keeps its size between decodes: resizing it for every token
  // zeroed a vocabulary's worth of floats only to overwrite them.
  const int64_t n_vocab = out->ne[0];
  const size_t logits_at = static_cast<size_t>(logits_rows_ * n_vocab);
  const bool in_place = logits && !device_ && out->type == DType::F32 && !out->view_src && out->is_contiguous();
  if (logits) {
    const size_t need = logits_at + static_cast<size_t>(out->ne[1] * n_vocab);
    if (logits_.size() < need) logits_.resize(need);
    if (in_place) out->data = &logits_[logits_at];
  }
  sched_->allocate(g);

  GraphInputs in;
  in.tokens = g.find("inp_tokens");
  in.positions = g.find("inp_pos");
  in.mask = g.find("KQ_mask");
  in.mask_swa = g.find("KQ_mask_swa");
  in.write(tokens, n_past_, model_.hparams().n_swa);
  if (first > 0) tensor_write(*residual, r.in, 0, residual->nbytes());

  if (compute_batch(*sched_, g, {state_.get()}) == ComputeStatus::Stopped) return false;
  if (observer_) observer_(g);
  n_past_ += N;

  if (!logits) {
    if (r.out) tensor_read(*out, r.out, 0, out->nbytes());
    return true;
  }
  const int64_t rows = out->ne[1];
  if (!in_place) tensor_read(*out, &logits_[logits_at], 0, rows * n_vocab * sizeof(float));
  logits_rows_ += rows;
  return true;
}

std::span<const float> Context::logits(int64_t i) const {
  const int64_t n_vocab = model_.hparams().n_vocab;
  const int64_t row = i - logits_first_;
  if (row < 0 || row >= logits_rows_) throw Error("logits: row " + std::to_string(i) + " was not computed");
  return {logits_.data() + row * n_vocab, static_cast<size_t>(n_vocab)};
}

std::span<const float> Context::last_logits() const { return logits(logits_first_ + logits_rows_ - 1); }

}  // namespace qlens
