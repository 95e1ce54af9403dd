// Fuzz target "gguf": the GGUF reader (header, metadata, tensor infos and
// data bounds) on arbitrary bytes, then what is built on it: the tokenizer
// from the metadata, and when the file is a model of a known architecture,
// loading it and computing one graph (two tokens) on a tiny context.
//
// Hostile sizes must be rejected by the reader or the model loader with a
// qlens::Error before anything is allocated for them (libFuzzer's
// -rss_limit_mb / -malloc_limit_mb turn a huge allocation into a crash).
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "qlens/vocab.h"

using namespace qlens;

namespace {

// Reads every metadata value the way the tools do (inspect's display, the
// typed getter of its type).
void walk_metadata(const gguf::File& f) {
  for (const gguf::KeyValue& kv : f.metadata()) {
    (void)kv.value.to_string();
    const gguf::Value& v = kv.value;
    if (v.type == gguf::ValueType::String) {
      (void)f.get_string(kv.key);
    } else if (v.type == gguf::ValueType::Array) {
      if (v.elem_type == gguf::ValueType::String)
        fuzz::expect_error_or_success([&] { (void)f.try_string_array(kv.key); });
      else if (v.elem_type == gguf::ValueType::F32 || v.elem_type == gguf::ValueType::F64)
        fuzz::expect_error_or_success([&] { (void)f.try_float_array(kv.key); });
      else
        fuzz::expect_error_or_success([&] { (void)f.try_int_array(kv.key); });
    } else if (v.is_float()) {
      (void)f.get_float(kv.key);
    } else {
      fuzz::expect_error_or_success([&] { (void)f.get_int(kv.key); });
    }
  }
  fuzz::expect_error_or_success([&] { (void)f.try_string("general.architecture"); });
  fuzz::expect_error_or_success([&] { (void)f.try_int("general.alignment"); });
}

// Touches the first and last byte of every tensor (the reader promised they
// lie inside the mapping).
unsigned walk_tensors(const gguf::File& f) {
  unsigned sum = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    sum += static_cast<unsigned>(t.nelements());
    if (t.nbytes == 0) continue;
    const uint8_t* p = f.tensor_data(t);
    sum += p[0] + p[t.nbytes - 1];
    if (f.find_tensor(t.name) == nullptr) __builtin_trap();
  }
  return sum;
}

void run_vocab(const gguf::File& f) {
  const std::unique_ptr<Vocab> v = Vocab::from_gguf(f);
  const std::vector<Token> ids = v->tokenize("Hello world, <s> \xE2\x96\x81 caf\xC3\xA9 \xFF", true, true);
  (void)v->detokenize(ids);
}

void run_model(const std::string& path) {
  const std::unique_ptr<Model> model = Model::load(path);
  ContextOptions opt;
  opt.n_ctx = 4;
  opt.n_batch = 4;
  opt.n_threads = 1;
  Context ctx(*model, opt);
  const int32_t n_vocab = model->vocab().n_tokens();
  std::vector<Token> tokens = {model->vocab().bos() >= 0 ? model->vocab().bos() : 0, n_vocab > 1 ? 1 : 0};
  if (ctx.decode(tokens, false)) (void)ctx.last_logits();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch(data, size, ".gguf");
  std::unique_ptr<gguf::File> f;
  if (!fuzz::expect_error_or_success([&] { f = gguf::File::open(path); })) return 0;
  walk_metadata(*f);
  (void)walk_tensors(*f);
  fuzz::expect_error_or_success([&] { run_vocab(*f); });
  if (f->find("general.architecture") != nullptr) fuzz::expect_error_or_success([&] { run_model(path); });
  return 0;
}
