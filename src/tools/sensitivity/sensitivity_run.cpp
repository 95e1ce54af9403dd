#include "tools/sensitivity/sensitivity_run.h"

#include <algorithm>
#include <filesystem>
#include <vector>

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

namespace {

// The JSON.rank<R> files beside `json_path`.
std::vector<std::string> rank_checkpoints(const std::string& json_path) {
  std::vector<std::string> found;
  const std::filesystem::path p(json_path);
  const std::filesystem::path dir = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  const std::string prefix = p.filename().string() + ".rank";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
      found.push_back(entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

SensitivityResult checked_checkpoint(const std::string& path, const std::string& model_path,
                                     const SensitivityOptions& opt) {
  SensitivityResult previous = sensitivity_from_json(read_text_file(path), path);
  if (previous.model_path != model_path)
    throw Error("--resume: " + path + " was made for " + previous.model_path + ", not " + model_path);
  SensitivityOptions then = previous.settings;
  if (!previous.settings_recorded) {  // schema 1: only the mode was written
    then = opt;
    then.mode = previous.mode;
  }
  if (const std::string mismatch = sensitivity_settings_mismatch(then, opt); !mismatch.empty())
    throw Error("--resume: " + path + " was made with other settings (" + mismatch +
                "); give the same flags, or another --json file to start afresh");
  return previous;
}

}  // namespace

std::optional<SensitivityResult> sensitivity_resume_point(const std::string& json_path, const std::string& model_path,
                                                          const SensitivityOptions& opt) {
  std::vector<std::string> files = rank_checkpoints(json_path);
  if (std::filesystem::exists(json_path)) files.insert(files.begin(), json_path);
  if (files.empty()) return std::nullopt;
  std::optional<SensitivityResult> pooled;
  for (const std::string& file : files) {
    SensitivityResult part = checked_checkpoint(file, model_path, opt);
    if (!pooled) {
      pooled = std::move(part);
      continue;
    }
    for (auto list : {&SensitivityResult::tensors, &SensitivityResult::groups})
      for (SensitivityTensor& t : part.*list) {
        auto& into = (*pooled).*list;
        if (std::none_of(into.begin(), into.end(), [&](const SensitivityTensor& u) { return u.name == t.name; }))
          into.push_back(std::move(t));
      }
  }
  return pooled;
}

std::string sensitivity_rank_checkpoint(const std::string& json_path, int rank) {
  return rank == 0 ? json_path : json_path + ".rank" + std::to_string(rank);
}

void remove_sensitivity_rank_checkpoints(const std::string& json_path, int rank) {
  std::error_code ec;
  if (rank > 0) {
    std::filesystem::remove(sensitivity_rank_checkpoint(json_path, rank), ec);
    return;
  }
  for (const std::string& file : rank_checkpoints(json_path)) std::filesystem::remove(file, ec);
}

void write_sensitivity_checkpoint(const std::string& json_path, const SensitivityResult& r,
                                  const std::string& text_path) {
  SensitivityResult copy = r;
  copy.text_path = text_path;
  write_file_atomic(json_path, sensitivity_json(copy));
}

}  // namespace qlens::tools
