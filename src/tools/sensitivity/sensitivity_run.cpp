#include "tools/sensitivity/sensitivity_run.h"

#include <filesystem>

#include "core/text_file.h"
#include "qlens/error.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/common/tensor_names.h"

namespace qlens::tools {

void require_unquantized_model(const Model& model, const std::string& model_path) {
  for (const auto& [name, w] : model.weights())
    if (type_traits(w->type).is_quantized)
      throw Error("qlens sensitivity: " + model_path + " is quantized (" + name + " is " +
                  std::string(type_name(w->type)) + "); give the F32/F16/BF16 model");
}

ImatrixCoverage sensitivity_imatrix_coverage(const Model& model, const SensitivityOptions& opt) {
  std::vector<std::string> probed, all;
  for (const Tensor* w : sensitivity_probed_weights(model, opt.tensors_regex))
    if (tensor_role(w->name) != "token_embd") probed.push_back(w->name);
  for (const auto& [name, w] : model.weights()) all.push_back(name);
  return imatrix_coverage(load_imatrix(opt.imatrix_path), probed, all,
                          model.file().try_string("general.name").value_or(""));
}

std::optional<SensitivityResult> sensitivity_resume_point(const std::string& json_path, const std::string& model_path,
                                                          const SensitivityOptions& opt) {
  if (!std::filesystem::exists(json_path)) return std::nullopt;
  SensitivityResult previous = sensitivity_from_json(read_text_file(json_path), json_path);
  if (previous.model_path != model_path)
    throw Error("--resume: " + json_path + " was made for " + previous.model_path + ", not " + model_path);
  SensitivityOptions then = previous.settings;
  if (!previous.settings_recorded) {  // schema 1: only the mode was written
    then = opt;
    then.mode = previous.mode;
  }
  if (const std::string mismatch = sensitivity_settings_mismatch(then, opt); !mismatch.empty())
    throw Error("--resume: " + json_path + " was made with other settings (" + mismatch +
                "); give the same flags, or another --json file to start afresh");
  return previous;
}

void write_sensitivity_checkpoint(const std::string& json_path, const SensitivityResult& r,
                                  const std::string& text_path) {
  SensitivityResult copy = r;
  copy.text_path = text_path;
  write_file_atomic(json_path, sensitivity_json(copy));
}

}  // namespace qlens::tools
