// A run of `qlens sensitivity` around measure_sensitivity (sensitivity.h):
// the model it accepts, how the --imatrix given fits the tensors it probes,
// and its checkpoint: the --json file, rewritten after each tensor, that
// --resume continues when it was made for the same model and settings.
#pragma once

#include <optional>
#include <string>

#include "qlens/model.h"
#include "tools/imatrix/imatrix_coverage.h"
#include "tools/sensitivity/sensitivity.h"

namespace qlens::tools {

// Probes measure against the unquantized model: an Error naming the first
// quantized weight otherwise.
void require_unquantized_model(const Model& model, const std::string& model_path);

// The coverage of opt.imatrix_path over the weights the run probes (but
// token_embd, whose rows are looked up, not multiplied).
ImatrixCoverage sensitivity_imatrix_coverage(const Model& model, const SensitivityOptions& opt);

// The result an interrupted run left in `json_path` and in the checkpoints
// of its ranks other than 0 beside it (sensitivity_rank_checkpoint), pooled,
// to continue (--resume); nullopt when there is no such file (the run starts
// afresh). An Error when
// it was made for another model or with settings that change a probe's
// result (sensitivity_settings_mismatch); a schema-1 file recorded its mode
// alone and is taken to have `opt`'s other settings.
std::optional<SensitivityResult> sensitivity_resume_point(const std::string& json_path, const std::string& model_path,
                                                          const SensitivityOptions& opt);

// Where rank `rank` keeps its checkpoint: the --json file for rank 0, and
// JSON.rank<R> beside it for the others (each rank writes its own units).
std::string sensitivity_rank_checkpoint(const std::string& json_path, int rank);
// After rank 0 wrote the whole result: the checkpoint of `rank` (rank 0: every
// JSON.rank<R> it sees, also those of an earlier run with more ranks).
void remove_sensitivity_rank_checkpoints(const std::string& json_path, int rank);

// Writes `r`, the result so far or the final one, to its --json file
// (atomically: an interrupted run leaves a whole file that --resume reads),
// recording the calibration text.
void write_sensitivity_checkpoint(const std::string& json_path, const SensitivityResult& r,
                                  const std::string& text_path);

}  // namespace qlens::tools
