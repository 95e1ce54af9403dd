// Loading a model: the architecture's hyper-parameters, the vocabulary, and
// the weights validated against its tensor table.
#include <algorithm>
#include <regex>
#include <sstream>

#include "core/parallel.h"
#include "model/arch/architecture.h"
#include "qlens/error.h"
#include "qlens/model.h"

namespace qlens {

namespace {

constexpr RoleInfo kRoles[kRoleCount] = {
    {"token_embd", "weight", false, Op::GetRows},  {"output_norm", "weight", false, Op::Mul},
    {"output", "weight", false, Op::MulMat},       {"attn_norm", "weight", true, Op::Mul},
    {"attn_q", "weight", true, Op::MulMat},        {"attn_k", "weight", true, Op::MulMat},
    {"attn_v", "weight", true, Op::MulMat},        {"attn_output", "weight", true, Op::MulMat},
    {"attn_q_norm", "weight", true, Op::Mul},      {"attn_k_norm", "weight", true, Op::Mul},
    {"post_attention_norm", "weight", true, Op::Mul}, {"ffn_norm", "weight", true, Op::Mul},
    {"ffn_gate", "weight", true, Op::MulMat},      {"ffn_up", "weight", true, Op::MulMat},
    {"ffn_down", "weight", true, Op::MulMat},      {"post_ffw_norm", "weight", true, Op::Mul},
    {"rope_freqs", "weight", false, Op::Rope},     {"attn_q", "bias", true, Op::Add},
    {"attn_k", "bias", true, Op::Add},             {"attn_v", "bias", true, Op::Add},
    {"attn_qkv", "weight", true, Op::MulMat},      {"ffn_gate_inp", "weight", true, Op::MulMat},
    {"ffn_gate_exps", "weight", true, Op::MulMatId}, {"ffn_up_exps", "weight", true, Op::MulMatId},
    {"ffn_down_exps", "weight", true, Op::MulMatId},
    {"attn_output", "bias", true, Op::Add},        {"attn_sinks", "weight", true, Op::SoftMax},
    {"ffn_gate_inp", "bias", true, Op::Add},       {"ffn_gate_exps", "bias", true, Op::AddId},
    {"ffn_up_exps", "bias", true, Op::AddId},      {"ffn_down_exps", "bias", true, Op::AddId},
    {"attn_q_a", "weight", true, Op::MulMat},      {"attn_q_a_norm", "weight", true, Op::Mul},
    {"attn_q_b", "weight", true, Op::MulMat},      {"attn_kv_a_mqa", "weight", true, Op::MulMat},
    {"attn_kv_a_norm", "weight", true, Op::Mul},   {"attn_k_b", "weight", true, Op::MulMat},
    {"attn_v_b", "weight", true, Op::MulMat},      {"exp_probs_b", "bias", true, Op::Add},
    {"ffn_gate_shexp", "weight", true, Op::MulMat}, {"ffn_up_shexp", "weight", true, Op::MulMat},
    {"ffn_down_shexp", "weight", true, Op::MulMat},
    {"nextn.eh_proj", "weight", true, Op::MulMat},  {"nextn.enorm", "weight", true, Op::Mul},
    {"nextn.hnorm", "weight", true, Op::Mul},       {"nextn.embed_tokens", "weight", true, Op::GetRows},
    {"nextn.shared_head_head", "weight", true, Op::MulMat}, {"nextn.shared_head_norm", "weight", true, Op::Mul},
    {"attn_gate", "weight", true, Op::MulMat},     {"ssm_conv1d", "weight", true, Op::SsmConv},
    {"ssm_dt", "bias", true, Op::Add},             {"ssm_a", "", true, Op::Mul},
    {"ssm_beta", "weight", true, Op::MulMat},      {"ssm_alpha", "weight", true, Op::MulMat},
    {"ssm_norm", "weight", true, Op::Mul},         {"ssm_out", "weight", true, Op::MulMat},
    {"ffn_gate_inp_shexp", "weight", true, Op::MulMat},
    {"per_layer_token_embd", "weight", false, Op::GetRows}, {"per_layer_model_proj", "weight", false, Op::MulMat},
    {"per_layer_proj_norm", "weight", false, Op::Mul}, {"inp_gate", "weight", true, Op::MulMat},
    {"proj", "weight", true, Op::MulMat},          {"post_norm", "weight", true, Op::Mul},
    {"layer_output_scale", "weight", true, Op::Mul}, {"pre_ffw_norm_2", "weight", true, Op::Mul},
    {"post_ffw_norm_1", "weight", true, Op::Mul},  {"post_ffw_norm_2", "weight", true, Op::Mul},
    {"ffn_gate_inp", "scale", true, Op::Mul},      {"ffn_down_exps", "scale", true, Op::Mul},
    {"ffn_gate_up_exps", "weight", true, Op::MulMatId},
};

std::string shape_text(const std::array<int64_t, kMaxDims>& ne) {
  int n = kMaxDims;
  while (n > 1 && ne[n - 1] == 1) --n;
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

template <typename T>
std::string text(T v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::string list(const std::vector<int64_t>& v) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size(); ++i) o << (i ? " " : "") << v[i];
  return o.str();
}

}  // namespace

const RoleInfo& role_info(Role role) { return kRoles[static_cast<int>(role)]; }

bool role_reads_f32(Role role) {
  const Op reader = role_info(role).reader;
  return reader == Op::Mul || reader == Op::Add || reader == Op::AddId || reader == Op::Rope || reader == Op::SoftMax ||
         reader == Op::SsmConv;
}

std::string tensor_name(Role role, int layer) {
  const RoleInfo& r = role_info(role);
  // ssm_a has no suffix: "blk.0.ssm_a", as llama.cpp names it.
  const std::string base = *r.suffix ? std::string(r.name) + "." + r.suffix : std::string(r.name);
  return r.per_layer ? "blk." + std::to_string(layer) + "." + base : base;
}

std::vector<std::pair<std::string, std::string>> HParams::fields() const {
  std::string swa;
  for (bool s : swa_layers) swa += s ? '1' : '0';
  std::string recurrent;
  for (bool r : recurrent_layers) recurrent += r ? '1' : '0';
  return {{"architecture", arch},
          {"layer count", text(n_layer)},
          {"NextN layers", text(n_layer_nextn)},
          {"embedding length", text(n_embd)},
          {"feed-forward length", text(n_ff)},
          {"head count", text(n_head)},
          {"KV head count", text(n_head_kv)},
          {"head dimension", text(head_dim)},
          {"value head dimension", text(head_dim_v)},
          {"vocabulary size", text(n_vocab)},
          {"rope dimensions", text(n_rot)},
          {"rope base", text(rope_freq_base)},
          {"rope scale", text(rope_freq_scale)},
          {"rope mode", text(static_cast<int>(rope_mode))},
          {"rms epsilon", text(rms_eps)},
          {"sliding window", text(n_swa)},
          {"sliding layers", swa},
          {"local rope base", text(rope_freq_base_swa)},
          {"local rope scale", text(rope_freq_scale_swa)},
          {"expert count", text(n_expert)},
          {"experts used", text(n_expert_used)},
          {"expert feed-forward length", text(n_ff_exp)},
          {"expert weights normalized", text(expert_weights_norm)},
          {"expert weights scale", text(expert_weights_scale)},
          {"expert gating", expert_gating == ExpertGating::Softmax         ? "softmax"
                            : expert_gating == ExpertGating::SoftmaxWeight ? "softmax of the chosen"
                                                                           : "sigmoid"},
          {"expert groups", text(n_expert_groups) + " (" + text(n_group_used) + " used)"},
          {"shared experts", text(n_expert_shared)},
          {"leading dense layers", text(n_layer_dense_lead)},
          {"YaRN log multiplier", text(rope_yarn_log_mul)},
          {"latent attention ranks (q, kv)", text(n_lora_q) + " " + text(n_lora_kv)},
          {"latent attention head dims (k, v)", text(head_dim_k_mla) + " " + text(head_dim_v_mla)},
          {"YaRN", text(rope_yarn.ext_factor) + " " + text(rope_yarn.attn_factor) + " " + text(rope_yarn.beta_fast) +
                       " " + text(rope_yarn.beta_slow) + " " + text(rope_yarn.n_ctx_orig)},
          {"rope sections", text(rope_sections[0]) + " " + text(rope_sections[1]) + " " + text(rope_sections[2]) + " " +
                                text(rope_sections[3])},
          {"DeltaNet (conv, inner, state, v heads, k heads)", text(ssm_d_conv) + " " + text(ssm_d_inner) + " " +
                                                               text(ssm_d_state) + " " + text(ssm_dt_rank) + " " +
                                                               text(ssm_n_group)},
          {"DeltaNet layers", recurrent},
          {"shared expert feed-forward length", text(n_ff_shexp)},
          {"sliding layers' head dimension, rope dimensions", text(head_dim_swa) + " " + text(n_rot_swa)},
          {"KV head counts per layer", list(n_head_kv_layers)},
          {"feed-forward lengths per layer", list(n_ff_layers)},
          {"layers with a KV cache", text(n_layer_kv)},
          {"per-layer embedding length", text(n_embd_per_layer)},
          {"final logit soft-cap", text(final_logit_softcap)}};
}

Model::~Model() = default;

void require_computable(const gguf::File& file, const gguf::TensorInfo& tensor) {
  const TypeTraits& tt = type_traits(tensor.type);
  if (!tt.to_float)
    throw Error(file.path() + ": tensor '" + tensor.name + "' has type " + tt.name +
                ", which qlens cannot compute with yet (qlens inspect lists such tensors; qlens quantize copies "
                "them unchanged)");
}

namespace {

// general.tensor_extra.prec_a4 (which tensors may take 4-bit activations on
// the back-ends that have them) checked as llama.cpp checks it: a bool array
// as long as general.tensor_extra.name. It changes nothing here: qlens's
// activations are 8-bit or wider.
void check_prec_a4(const gguf::File& f) {
  const gguf::Value* names = f.find("general.tensor_extra.name");
  if (!names) return;
  const std::string key = "general.tensor_extra.prec_a4";
  const gguf::Value* values = f.find(key);
  if (!values || values->type != gguf::ValueType::Array || values->elem_type != gguf::ValueType::Bool)
    throw Error(f.path() + ": " + key + " must be a bool array");
  if (names->type != gguf::ValueType::Array || values->arr.size() != names->arr.size())
    throw Error(f.path() + ": " + key + " tensor/value length mismatch (" + std::to_string(names->arr.size()) +
                " vs " + std::to_string(values->arr.size()) + ")");
}

// The file, refused first when a tensor has a type the engine cannot compute.
std::unique_ptr<gguf::File> open_computable(const std::string& path) {
  auto file = gguf::File::open(path);
  for (const gguf::TensorInfo& t : file->tensors()) require_computable(*file, t);
  return file;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path) {
  auto file = open_computable(path);
  const std::string name = file->try_string("general.architecture").value_or("");
  const Architecture* arch = find_architecture(name);
  if (!arch) {
    std::string known;
    for (const auto& n : architecture_names()) known += (known.empty() ? "'" : ", '") + n + "'";
    throw Error(path + ": architecture '" + name + "' is not supported (qlens runs " + known + ")");
  }
  return load(std::move(file), *arch);
}

std::unique_ptr<Model> Model::load(const std::string& path, const Architecture& arch) {
  return load(open_computable(path), arch);
}

std::unique_ptr<Model> Model::load(std::unique_ptr<gguf::File> file, const Architecture& arch) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  const gguf::File& f = *m->file_;
  const std::string& path = f.path();
  HParams& hp = m->hp_;
  hp.arch = f.try_string("general.architecture").value_or("");
  m->arch_ = &arch;
  read_common_hparams(f, hp);
  m->arch_->read_hparams(f, hp);
  m->vocab_ = Vocab::from_gguf(f);
  hp.n_vocab = m->vocab_->n_tokens();
  for (int il = 0; il < hp.n_layer; ++il) {
    m->attention_.push_back(m->arch_->attention(hp, il));
    if (std::string(m->attention_.back()->kind()) == "standard" && hp.head_dim_v != hp.head_dim)
      throw Error(m->path() + ": attention.value_length " + std::to_string(hp.head_dim_v) + " differs from key_length " +
                  std::to_string(hp.head_dim) + "; the standard attention of '" + hp.arch + "' needs them equal");
  }

  for (const TensorSpec& spec : m->arch_->tensors(hp, -1)) m->globals_[static_cast<int>(spec.role)] = m->bind(spec, -1);
  if (!m->globals_[static_cast<int>(Role::Output)])
    m->globals_[static_cast<int>(Role::Output)] = m->globals_[static_cast<int>(Role::TokenEmbd)];
  // The NextN layers after the trunk are bound and checked like the others;
  // no graph reads them.
  m->layers_.resize(hp.n_layer + hp.n_layer_nextn);
  for (int il = 0; il < hp.n_layer + hp.n_layer_nextn; ++il)
    for (const TensorSpec& spec : m->arch_->tensors(hp, il))
      m->layers_[il][static_cast<int>(spec.role)] = m->bind(spec, il);
  m->check_expert_forms();
  m->bind_scales();
  check_prec_a4(f);
  for (const auto& info : f.tensors())
    if (!m->weights_.count(info.name))
      throw Error(path + ": unexpected tensor '" + info.name + "' for architecture " + hp.arch);
  return m;
}

// Makes the tensor of one table row, its data in the mapped file; null for an
// absent optional tensor.
Tensor* Model::bind(const TensorSpec& spec, int layer) {
  const std::string name = tensor_name(spec.role, layer);
  const gguf::TensorInfo* info = file_->find_tensor(name);
  if (!info) {
    if (spec.required) throw Error(file_->path() + ": missing tensor '" + name + "'");
    return nullptr;
  }
  if (info->ne != spec.ne)
    throw Error(file_->path() + ": tensor '" + name + "' has shape " + shape_text(info->ne) + ", expected " +
                shape_text(spec.ne));
  const TypeTraits& tt = type_traits(info->type);
  // Element-wise kernels and rope read their second or third operand as F32.
  if (role_reads_f32(spec.role) && info->type != DType::F32)
    throw Error(file_->path() + ": tensor '" + name + "' (a norm scale, bias, sink or rope factor) must be F32, is " +
                tt.name);
  Tensor& t = storage_.emplace_back();
  t.type = info->type;
  t.ne = info->ne;
  t.nb = contiguous_strides(t.type, t.ne);
  t.name = name;
  t.flags = kFlagWeight;
  t.data = const_cast<uint8_t*>(file_->tensor_data(*info));  // mapped read-only; weights are never written
  weights_[name] = &t;
  return &t;
}

// The experts' gate and up matrices are two tensors or one fused tensor
// (the tables make all three optional): exactly one form per layer.
void Model::check_expert_forms() const {
  for (size_t il = 0; il < layers_.size(); ++il) {
    const auto& l = layers_[il];
    auto has = [&](Role r) { return l[static_cast<int>(r)] != nullptr; };
    const bool split = has(Role::FfnGateExps) || has(Role::FfnUpExps), fused = has(Role::FfnGateUpExps);
    const std::string blk = "blk." + std::to_string(il) + ".";
    if (split && fused)
      throw Error(file_->path() + ": layer " + std::to_string(il) + " has both " + blk + "ffn_gate_up_exps and " +
                  blk + "ffn_gate_exps / ffn_up_exps; a file holds one form of the experts' gate and up matrices");
    if (split && !(has(Role::FfnGateExps) && has(Role::FfnUpExps)))
      throw Error(file_->path() + ": missing tensor '" + blk +
                  (has(Role::FfnGateExps) ? "ffn_up_exps" : "ffn_gate_exps") + ".weight'");
    if (has(Role::FfnDownExps) && !split && !fused)
      throw Error(file_->path() + ": missing tensor '" + blk + "ffn_gate_exps.weight' (or '" + blk +
                  "ffn_gate_up_exps.weight')");
  }
}

// A matrix's optional ".scale" (llama.cpp's generic pass: shape [1] for a
// matrix, [n_expert] for an expert tensor), F32.
void Model::bind_scales() {
  // The matrices llama.cpp looks for a scale beside (the layers' projections).
  static const std::regex kScaled(
      R"(blk\.\d+\.(attn_(q|k|v|qkv|output)|ffn_(gate|up|down)(_shexp|_exps)?|ffn_gate_up_exps)\.weight)");
  std::vector<std::pair<std::string, Tensor*>> matrices;
  for (const auto& [name, t] : weights_)
    if (std::regex_match(name, kScaled)) matrices.push_back({name, t});
  for (const auto& [name, w] : matrices) {
    const std::string scale_name = name.substr(0, name.size() - 7) + ".scale";
    const gguf::TensorInfo* info = file_->find_tensor(scale_name);
    if (!info) continue;
    if (auto table = weights_.find(scale_name); table != weights_.end()) {  // a row of the architecture's table
      scales_[w] = table->second;
      continue;
    }
    // An expert tensor's scale has one value per expert (Gemma 4's ffn_down_exps.scale).
    const std::array<int64_t, 4> want = {w->ne[2], 1, 1, 1};
    if (info->ne != want || info->type != DType::F32)
      throw Error(file_->path() + ": tensor '" + scale_name + "' must be " +
                  (w->ne[2] > 1 ? "one F32 value per expert " + shape_text(want) : std::string("one F32 value")) +
                  ", is " + std::string(type_name(info->type)) + " " + shape_text(info->ne));
    Tensor& t = storage_.emplace_back();
    t.type = DType::F32;
    t.ne = info->ne;
    t.nb = contiguous_strides(t.type, t.ne);
    t.name = scale_name;
    t.flags = kFlagWeight;
    t.data = const_cast<uint8_t*>(file_->tensor_data(*info));
    weights_[scale_name] = &t;
    scales_[w] = &t;
  }
}

Tensor* Model::scale_of(const Tensor* weight) const {
  const auto it = scales_.find(weight);
  return it == scales_.end() ? nullptr : it->second;
}

Tensor* Model::get(Role role, int layer) const {
  if (!role_info(role).per_layer) return globals_[static_cast<int>(role)];
  if (layer < 0 || layer >= static_cast<int>(layers_.size()))
    throw Error("model: layer " + std::to_string(layer) + " of " + std::string(role_info(role).name) +
                " is out of range (" + std::to_string(layers_.size()) + " layers)");
  return layers_[layer][static_cast<int>(role)];
}

std::vector<Role> Model::roles_of(const Tensor* weight) const {
  std::vector<Role> roles;
  for (int r = 0; r < kRoleCount; ++r)
    if (globals_[r] == weight) roles.push_back(static_cast<Role>(r));
  for (const auto& layer : layers_)
    for (int r = 0; r < kRoleCount; ++r)
      if (layer[r] == weight) roles.push_back(static_cast<Role>(r));
  return roles;
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

}  // namespace qlens
