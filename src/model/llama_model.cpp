// The llama architecture: hyper-parameters and weights from GGUF, and the
// per-batch graph with llama.cpp's node names.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/human_bytes.h"
#include "qlens/error.h"
#include "qlens/model.h"

namespace qlens {

namespace {

std::string shape_text(std::initializer_list<int64_t> shape) {
  std::string s = "{";
  for (auto it = shape.begin(); it != shape.end(); ++it) s += (it == shape.begin() ? "" : ", ") + std::to_string(*it);
  return s + "}";
}

int64_t positive_key(const gguf::File& f, const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
  std::optional<int64_t> v = f.try_int(key);
  if (!v) {
    if (fallback) return *fallback;
    throw Error(f.path() + ": missing metadata key '" + key + "'");
  }
  if (*v <= 0 || *v > (int64_t{1} << 31))
    throw Error(f.path() + ": metadata key '" + key + "' has invalid value " + std::to_string(*v));
  return *v;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = gguf::File::open(path);
  const gguf::File& f = *m->file_;
  LlamaHParams& hp = m->hp_;

  hp.arch = f.try_string("general.architecture").value_or("");
  if (hp.arch != "llama" && hp.arch != "mistral")
    throw Error(path + ": architecture '" + hp.arch + "' is not supported (qlens runs 'llama' and 'mistral')");
  const std::string a = hp.arch + ".";
  hp.n_embd = positive_key(f, a + "embedding_length");
  hp.n_ff = positive_key(f, a + "feed_forward_length");
  hp.n_layer = positive_key(f, a + "block_count");
  hp.n_head = positive_key(f, a + "attention.head_count");
  hp.n_head_kv = positive_key(f, a + "attention.head_count_kv", hp.n_head);
  hp.n_ctx_train = positive_key(f, a + "context_length", 2048);
  if (hp.n_head % hp.n_head_kv != 0)
    throw Error(path + ": head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " +
                std::to_string(hp.n_head_kv));
  hp.head_dim = positive_key(f, a + "attention.key_length", hp.n_embd / hp.n_head);
  if (hp.head_dim * hp.n_head != hp.n_embd && !f.find(a + "attention.key_length"))
    throw Error(path + ": embedding_length " + std::to_string(hp.n_embd) + " is not divisible by head_count " +
                std::to_string(hp.n_head));
  if (auto vlen = f.try_int(a + "attention.value_length"); vlen && *vlen != hp.head_dim)
    throw Error(path + ": attention.value_length differs from key_length; not supported");
  hp.n_rot = positive_key(f, a + "rope.dimension_count", hp.head_dim);
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
    throw Error(path + ": rope.dimension_count " + std::to_string(hp.n_rot) + " must be even and at most the head size " +
                std::to_string(hp.head_dim));
  if (auto eps = f.try_float(a + "attention.layer_norm_rms_epsilon")) hp.rms_eps = static_cast<float>(*eps);
  if (auto base = f.try_float(a + "rope.freq_base")) hp.rope_freq_base = static_cast<float>(*base);
  if (auto type = f.try_string(a + "rope.scaling.type"); type && *type != "none" && *type != "linear")
    throw Error(path + ": rope scaling type '" + *type + "' is not supported");
  if (auto factor = f.try_float(a + "rope.scaling.factor"); factor && *factor > 0) hp.rope_freq_scale = 1.0f / *factor;
  if (auto factor = f.try_float(a + "rope.scale_linear"); factor && *factor > 0) hp.rope_freq_scale = 1.0f / *factor;
  if (!(hp.rms_eps > 0) || !(hp.rope_freq_base > 0)) throw Error(path + ": invalid rms epsilon or rope base");

  m->vocab_ = Vocab::from_gguf(f);
  hp.n_vocab = m->vocab_->n_tokens();

  const int64_t E = hp.n_embd, KV = hp.n_embd_kv(), Q = hp.head_dim * hp.n_head;
  m->token_embd_ = m->weight("token_embd.weight", {E, hp.n_vocab});
  m->output_norm_ = m->weight("output_norm.weight", {E});
  m->output_ = m->weight("output.weight", {E, hp.n_vocab}, false);
  if (!m->output_) m->output_ = m->token_embd_;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LlamaLayer L;
    L.attn_norm = m->weight(p + "attn_norm.weight", {E});
    L.wq = m->weight(p + "attn_q.weight", {E, Q});
    L.wk = m->weight(p + "attn_k.weight", {E, KV});
    L.wv = m->weight(p + "attn_v.weight", {E, KV});
    L.wo = m->weight(p + "attn_output.weight", {Q, E});
    L.ffn_norm = m->weight(p + "ffn_norm.weight", {E});
    L.ffn_gate = m->weight(p + "ffn_gate.weight", {E, hp.n_ff});
    L.ffn_up = m->weight(p + "ffn_up.weight", {E, hp.n_ff});
    L.ffn_down = m->weight(p + "ffn_down.weight", {hp.n_ff, E});
    m->layers_.push_back(L);
  }
  for (const auto& info : f.tensors())
    if (!m->weights_.count(info.name))
      throw Error(path + ": unexpected tensor '" + info.name + "' for architecture " + hp.arch);
  return m;
}

Tensor* Model::weight(const std::string& name, std::initializer_list<int64_t> shape, bool required) {
  const gguf::TensorInfo* info = file_->find_tensor(name);
  if (!info) {
    if (required) throw Error(file_->path() + ": missing tensor '" + name + "'");
    return nullptr;
  }
  std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};
  std::copy(shape.begin(), shape.end(), ne.begin());
  if (info->ne != ne)
    throw Error(file_->path() + ": tensor '" + name + "' has shape {" + std::to_string(info->ne[0]) + ", " +
                std::to_string(info->ne[1]) + ", " + std::to_string(info->ne[2]) + ", " + std::to_string(info->ne[3]) +
                "}, expected " + shape_text(shape));
  const TypeTraits& tt = type_traits(info->type);
  if (!tt.to_float)
    throw Error(file_->path() + ": tensor '" + name + "' has type " + tt.name + ", which qlens cannot compute with yet");
  if (shape.size() == 1 && info->type != DType::F32)
    throw Error(file_->path() + ": norm tensor '" + name + "' must be F32, is " + tt.name);
  Tensor& t = storage_.emplace_back();
  t.type = info->type;
  t.ne = ne;
  t.nb = contiguous_strides(t.type, ne);
  t.name = name;
  t.flags = kFlagWeight;
  t.data = const_cast<uint8_t*>(file_->tensor_data(*info));
  weights_[name] = &t;
  return &t;
}

int64_t Model::n_params() const {
  int64_t n = 0;
  for (const auto& [name, t] : weights_) n += t->nelements();
  return n;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : weights_) n += t->nbytes();
  return n;
}

// ---------------------------------------------------------------------------
// Context

Context::Context(const Model& model, const ContextOptions& options) : model_(model), options_(options) {
  const LlamaHParams& hp = model.hparams();
  n_ctx_ = options.n_ctx > 0 ? options.n_ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  if (options_.n_batch <= 0) throw Error("batch size must be positive, got " + std::to_string(options_.n_batch));
  if (options.cache_type != DType::F32 && options.cache_type != DType::F16 && options.cache_type != DType::BF16)
    throw Error("KV cache type must be F32, F16 or BF16");
  backend_ = make_cpu_backend(options.n_threads);
  if (options.device_backend) {
    device_ = options.device_backend;
  } else if (!options.device.empty() && options.device != "cpu") {
    owned_device_ = make_backend(options.device, options.n_threads);
    device_ = owned_device_.get();
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    for (const char* kind : {"cache_k_l", "cache_v_l"}) {
      Tensor& t = cache_.emplace_back();
      t.type = options.cache_type;
      t.ne = {hp.n_embd_kv() * n_ctx_, 1, 1, 1};
      t.nb = contiguous_strides(t.type, t.ne);
      t.name = kind + std::to_string(il);
    }
  }
  if (device_) offload(options);
  for (Tensor& t : cache_)
    if (!t.data) t.data = cache_data_.emplace_back(t.nbytes()).data();
  sched_ = device_ ? std::make_unique<Scheduler>(std::vector<Backend*>{device_, backend_.get()})
                   : std::make_unique<Scheduler>(*backend_);
}

// Copies the weights of the offloaded layers into one device buffer and puts
// their KV cache there. A weight whose op the device cannot run stays in host
// memory (its node then runs on the CPU).
void Context::offload(const ContextOptions& options) {
  const LlamaHParams& hp = model_.hparams();
  const int64_t n_layer = hp.n_layer;
  const int64_t ngl = options.n_gpu_layers < 0 ? n_layer + 1 : options.n_gpu_layers;
  n_offloaded_ = std::min<int64_t>(ngl, n_layer);
  const int64_t first = n_layer - n_offloaded_;
  const bool output_too = ngl > n_layer;

  std::vector<const Tensor*> to_upload;
  for (int64_t il = first; il < n_layer; ++il) {
    const LlamaLayer& L = model_.layers()[il];
    for (const Tensor* w : {L.attn_norm, L.wq, L.wk, L.wv, L.wo, L.ffn_norm, L.ffn_gate, L.ffn_up, L.ffn_down})
      if (device_runs(*w)) to_upload.push_back(w);
  }
  if (output_too)
    for (const Tensor* w : {model_.output_norm(), model_.output()})
      if (device_runs(*w)) to_upload.push_back(w);

  constexpr size_t kAlign = 256;
  auto aligned = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  size_t weight_bytes = 0, cache_bytes = 0;
  for (const Tensor* w : to_upload) weight_bytes += aligned(w->nbytes());
  for (int64_t il = first; il < n_layer; ++il) cache_bytes += 2 * aligned(cache_[2 * il].nbytes());
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
    for (int kv = 0; kv < 2; ++kv) {
      Tensor& t = cache_[2 * il + kv];
      t.buffer = device_cache_buffer_.get();
      t.data = device_cache_buffer_->base() + offset;
      offset += aligned(t.nbytes());
    }
}

bool Context::device_runs(const Tensor& w) const {
  Graph probe;
  Tensor* x = probe.new_tensor(DType::F32, {w.ne[0], 1});
  Tensor* weight = const_cast<Tensor*>(&w);
  Tensor* node = w.ne[1] > 1 ? mul_mat(probe, weight, x) : mul(probe, x, weight);
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
  if (device_weight_of_.count(model_weight) && contiguous && device_runs(*replacement)) {
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

Tensor* Context::weight(Tensor* model_weight) const {
  if (auto r = replaced_.find(model_weight); r != replaced_.end()) return r->second.tensor;
  auto it = device_weight_of_.find(model_weight);
  return it == device_weight_of_.end() ? model_weight : it->second;
}

Context::~Context() = default;

void Context::clear() { n_past_ = 0; }

// ---------------------------------------------------------------------------
// The graph of a batch, step by step

LlamaGraphBuilder::Inputs LlamaGraphBuilder::make_inputs(Graph& g, int64_t n_tokens, int64_t n_kv) {
  Inputs in;
  in.tokens = g.new_tensor(DType::I32, {n_tokens}, "inp_tokens");
  in.positions = g.new_tensor(DType::I32, {n_tokens}, "inp_pos");
  in.mask = g.new_tensor(DType::F32, {n_kv, n_tokens}, "KQ_mask");
  for (Tensor* t : {in.tokens, in.positions, in.mask}) t->flags |= kFlagInput;
  return in;
}

LlamaGraphBuilder::LlamaGraphBuilder(const Context& ctx, Graph& g, const Inputs& in, bool all_logits)
    : ctx_(ctx), g_(g), in_(in), all_logits_(all_logits), n_tokens_(in.tokens->ne[0]) {
  if (in.mask->ne[0] != ctx.n_past() + n_tokens_)
    throw Error("graph inputs: the mask covers " + std::to_string(in.mask->ne[0]) + " positions, the context " +
                std::to_string(ctx.n_past() + n_tokens_));
}

Tensor* LlamaGraphBuilder::embed() {
  inpL_ = named(get_rows(g_, ctx_.weight(ctx_.model().token_embd()), in_.tokens), "inp_embd");
  g_.build(inpL_);
  return inpL_;
}

Tensor* LlamaGraphBuilder::layer(int il) {
  const LlamaHParams& hp = ctx_.model().hparams();
  const int64_t N = n_tokens_, n_past = ctx_.n_past(), n_kv = n_past + N, D = hp.head_dim;
  const int64_t n_ctx = ctx_.n_ctx();
  Graph& g = g_;
  const DType ct = ctx_.options_.cache_type;
  const size_t esize = type_traits(ct).block_bytes;
  const size_t k_row = static_cast<size_t>(hp.n_embd_kv()) * esize;  // one token's keys
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(D));
  Tensor* inp_pos = in_.positions;
  Tensor* inpL = inpL_;

  const LlamaLayer& layer = ctx_.model().layers()[il];
  auto w = [&](Tensor* t) { return ctx_.weight(t); };
  const LlamaLayer L{w(layer.attn_norm), w(layer.wq),       w(layer.wk),     w(layer.wv),      w(layer.wo),
                     w(layer.ffn_norm),  w(layer.ffn_gate), w(layer.ffn_up), w(layer.ffn_down)};
  Tensor* cache_k = const_cast<Tensor*>(&ctx_.cache_[2 * il]);
  Tensor* cache_v = const_cast<Tensor*>(&ctx_.cache_[2 * il + 1]);

  Tensor* cur = named(rms_norm(g, inpL, hp.rms_eps), "norm", il);
  cur = named(mul(g, cur, L.attn_norm), "attn_norm", il);

  Tensor* q = named(mul_mat(g, L.wq, cur), "Qcur", il);
  Tensor* k = named(mul_mat(g, L.wk, cur), "Kcur", il);
  Tensor* v = named(mul_mat(g, L.wv, cur), "Vcur", il);
  q = reshape(g, q, {D, hp.n_head, N});
  k = reshape(g, k, {D, hp.n_head_kv, N});
  q = named(rope(g, q, inp_pos, static_cast<int>(hp.n_rot), hp.rope_mode, hp.rope_freq_base, hp.rope_freq_scale),
            "Qcur", il);
  k = named(rope(g, k, inp_pos, static_cast<int>(hp.n_rot), hp.rope_mode, hp.rope_freq_base, hp.rope_freq_scale),
            "Kcur", il);

  // Store this batch's keys (token-major rows) and values (transposed: a row
  // per value dimension, tokens along it) in the cache.
  Tensor* k_dst = named(view(g, cache_k, {N * hp.n_embd_kv()}, {}, n_past * k_row), "k_cache_view", il);
  Tensor* k_stored = cpy(g, k, k_dst);
  Tensor* v_dst = named(view(g, cache_v, {N, hp.n_embd_kv()}, {static_cast<size_t>(n_ctx) * esize},
                             n_past * esize),
                        "v_cache_view", il);
  Tensor* v_stored = cpy(g, transpose(g, v), v_dst);

  // The views that read the cache depend on the copies that wrote it, so
  // every order of the graph stores this batch before attending to it.
  Tensor* kc = named(view(g, cache_k, {D, n_kv, hp.n_head_kv}, {k_row, D * esize}, 0), "k", il);
  Tensor* vc = named(view(g, cache_v, {n_kv, D, hp.n_head_kv},
                          {static_cast<size_t>(n_ctx) * esize, static_cast<size_t>(n_ctx * D) * esize}, 0),
                     "v", il);
  kc->src[1] = k_stored;
  vc->src[1] = v_stored;
  Tensor* qp = named(permute(g, q, 0, 2, 1, 3), "q", il);
  Tensor* kq = named(mul_mat(g, kc, qp), "kq", il);
  kq = named(soft_max(g, kq, in_.mask, kq_scale), "kq_soft_max", il);
  Tensor* kqv = named(mul_mat(g, vc, kq), "kqv", il);
  Tensor* merged = named(permute(g, kqv, 0, 2, 1, 3), "kqv_merged", il);
  cur = named(cont(g, merged), "kqv_merged_cont", il);
  cur = reshape(g, cur, {D * hp.n_head, N});
  cur = named(mul_mat(g, L.wo, cur), "kqv_out", il);
  if (il == hp.n_layer - 1 && !all_logits_ && N > 1) {
    // Only the last token's logits are wanted: the last feed-forward sees only its row.
    cur = view(g, cur, {hp.n_embd}, {}, static_cast<size_t>(N - 1) * cur->nb[1]);
    inpL = view(g, inpL, {hp.n_embd}, {}, static_cast<size_t>(N - 1) * inpL->nb[1]);
  }

  Tensor* ffn_inp = named(add(g, cur, inpL), "ffn_inp", il);
  cur = named(rms_norm(g, ffn_inp, hp.rms_eps), "norm", il);
  cur = named(mul(g, cur, L.ffn_norm), "ffn_norm", il);
  Tensor* gate = named(mul_mat(g, L.ffn_gate, cur), "ffn_gate", il);
  gate = named(silu(g, gate), "ffn_silu", il);
  Tensor* up = named(mul_mat(g, L.ffn_up, cur), "ffn_up", il);
  Tensor* par = named(mul(g, gate, up), "ffn_gate_par", il);
  cur = named(mul_mat(g, L.ffn_down, par), "ffn_out", il);
  inpL_ = named(add(g, cur, ffn_inp), "l_out", il);
  g.build(inpL_);
  return inpL_;
}

Tensor* LlamaGraphBuilder::output() {
  Tensor* cur = named(rms_norm(g_, inpL_, ctx_.model().hparams().rms_eps), "norm");
  cur = named(mul(g_, cur, ctx_.weight(ctx_.model().output_norm())), "result_norm");
  cur = named(mul_mat(g_, ctx_.weight(ctx_.model().output()), cur), "result_output");
  cur->flags |= kFlagOutput;
  g_.build(cur);
  return cur;
}

Tensor* Context::build_graph(Graph& g, int64_t n_tokens, bool all_logits) const {
  LlamaGraphBuilder b(*this, g, LlamaGraphBuilder::make_inputs(g, n_tokens, n_past_ + n_tokens), all_logits);
  b.embed();
  for (int il = 0; il < model_.hparams().n_layer; ++il) b.layer(il);
  return b.output();
}

bool Context::decode(std::span<const Token> tokens, bool all_logits) {
  if (tokens.empty()) throw Error("decode: no tokens");
  const int64_t n_vocab = model_.hparams().n_vocab;
  for (Token t : tokens)
    if (t < 0 || t >= n_vocab)
      throw Error("decode: token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(n_vocab) +
                  " tokens)");
  if (n_past_ + static_cast<int64_t>(tokens.size()) > n_ctx_)
    throw Error("decode: " + std::to_string(n_past_ + tokens.size()) + " tokens exceed the context size " +
                std::to_string(n_ctx_) + " (-c)");
  logits_.clear();
  logits_rows_ = 0;
  for (size_t start = 0; start < tokens.size(); start += options_.n_batch) {
    const size_t n = std::min<size_t>(options_.n_batch, tokens.size() - start);
    if (!all_logits) {  // only the very last row survives
      logits_.clear();
      logits_rows_ = 0;
    }
    if (!decode_batch(tokens.subspan(start, n), all_logits)) {
      logits_.clear();
      logits_rows_ = 0;
      return false;
    }
  }
  return true;
}

bool Context::decode_batch(std::span<const Token> tokens, bool all_logits) {
  const int64_t N = static_cast<int64_t>(tokens.size());
  Graph g;
  Tensor* out = build_graph(g, N, all_logits);
  if (options_.keep_intermediates)
    for (Tensor* node : g.nodes()) node->flags |= kFlagOutput;
  sched_->allocate(g);

  const Tensor& inp_tokens = *g.find("inp_tokens");
  tensor_write(inp_tokens, tokens.data(), 0, N * sizeof(Token));
  std::vector<int32_t> pos(N);
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(n_past_ + i);
  tensor_write(*g.find("inp_pos"), pos.data(), 0, N * sizeof(int32_t));
  // Causal mask: token i sees cache positions up to its own.
  const int64_t n_kv = n_past_ + N;
  std::vector<float> mask(N * n_kv);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < n_kv; ++j)
      mask[i * n_kv + j] = j <= n_past_ + i ? 0.0f : -std::numeric_limits<float>::infinity();
  tensor_write(*g.find("KQ_mask"), mask.data(), 0, mask.size() * sizeof(float));

  if (sched_->compute(g) == ComputeStatus::Stopped) return false;
  if (observer_) observer_(g);
  n_past_ += N;

  const int64_t rows = out->ne[1], n_vocab = out->ne[0];
  const size_t old = logits_.size();
  logits_.resize(old + rows * n_vocab);
  tensor_read(*out, &logits_[old], 0, rows * n_vocab * sizeof(float));
  logits_rows_ += rows;
  return true;
}

std::span<const float> Context::logits(int64_t i) const {
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (i < 0 || i >= logits_rows_) throw Error("logits: row " + std::to_string(i) + " was not computed");
  return {logits_.data() + i * n_vocab, static_cast<size_t>(n_vocab)};
}

std::span<const float> Context::last_logits() const { return logits(logits_rows_ - 1); }

}  // namespace qlens
