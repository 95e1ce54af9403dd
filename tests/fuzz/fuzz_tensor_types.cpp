// Fuzz target "tensor_types": the tensor-type file of `qlens quantize
// --tensor-type-file` / `--tensor-type REGEX=TYPE` (what `qlens plan`
// writes): parse_tensor_type_rules on arbitrary text, then the rules applied
// as quantize applies them (each REGEX compiled by user_regex, each TYPE
// looked up, every tensor of a small model matched) by a dry-run plan of a
// synthetic model, under the mix the first byte picks (or rules only).
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qlens/gguf.h"
#include "tools/quantize/quantize.h"
#include "tools/synth/synth.h"

using namespace qlens;

namespace {

struct Models {
  std::vector<std::unique_ptr<gguf::File>> files;
};

const Models& models() {
  static const Models m = [] {
    Models out;
    // A dense llama and a mixture of experts (the expert rules).
    for (const char* preset : {"tiny", "qwen3moe-tiny"}) {
      tools::SynthOptions opt;
      opt.preset = preset;
      opt.n_vocab = 300;
      const std::string path = fuzz::scratch_path(".tensor_types.") + preset + ".gguf";
      tools::synth_model(opt, path);
      out.files.push_back(gguf::File::open(path));
      std::remove(path.c_str());  // stays mapped
    }
    return out;
  }();
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> mixes = [] {
    std::vector<std::string> v = tools::mix_names();
    v.insert(v.begin(), "");  // the rules alone must type every matrix
    return v;
  }();
  if (size == 0) return 0;
  const std::string& mix = mixes[data[0] % mixes.size()];
  const gguf::File& file = *models().files[(data[0] / mixes.size()) % models().files.size()];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  tools::QuantizeOptions opt;
  if (!fuzz::expect_error_or_success([&] { opt.tensor_types = tools::parse_tensor_type_rules(text, "fuzz.txt"); }))
    return 0;
  opt.mix = mix;
  opt.allow_requantize = true;
  fuzz::expect_error_or_success([&] { (void)tools::plan_quantization(file, opt); });
  return 0;
}
