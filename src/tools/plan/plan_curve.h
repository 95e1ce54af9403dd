// The size-quality curve (qlens curve): from one sensitivity table, a plan at
// each of a list of sizes (by default the sizes of llama.cpp's mixes on this
// model), each plan and each mix quantized with the same imatrix and
// measured against the reference on held-out text. What quant publishers
// draw by hand: KLD (and the PPL ratio) against bits per weight, qlens's
// plans beside the uniform mixes.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tools/plan/plan.h"
#include "tools/plan/plan_validate.h"

namespace qlens::tools {

// llama.cpp's mixes from 1.5 to 4.8 bits per weight, the default points.
std::vector<std::string> default_curve_mixes();

// A point of the curve: a mix (its size is the budget; it is measured too),
// or a size alone ("3.5bpw", or bytes of tensor data).
struct CurvePoint {
  std::string label;          // the mix's name, or the size as given
  bool is_mix = false;
  double target_bpw = 0;      // a size in bits per weight (0: none)
  uint64_t target_bytes = 0;  // a size in bytes (0: none)
};

// "IQ2_M" (a mix qlens quantize knows), "3.5bpw", "250M" / "1.5G" / bytes.
CurvePoint parse_curve_point(const std::string& text);

struct CurveOptions {
  ValidateOptions run;  // model, imatrix, held-out text, chunks, device, work_dir
  std::vector<CurvePoint> points;
  // Where a mix's file may already be, as MIX.gguf (made by llama-quantize,
  // say): it is measured as it is instead of quantized by qlens.
  std::string mix_dir;
};

struct CurveRow {
  std::string point;  // CurvePoint::label
  std::string kind;   // "plan" or "mix"
  uint64_t budget_bytes = 0;
  ValidationRow result;
  std::string note;  // why a plan is missing (a budget below the table's reach)
  bool measured = false;
};

// Runs the points in order (skipping rows `done` already holds for the same
// point, kind and budget: a resumed run), calling `on_row` after every row
// measured (to checkpoint). Returns every row, `done`'s included.
std::vector<CurveRow> run_curve(const SensitivityTable& table, const CurveOptions& opt, const std::vector<CurveRow>& done,
                                const std::function<void(const std::vector<CurveRow>&)>& on_row, std::ostream& log);

// One line per point: the mix's size and KLD, the plan's, their ratio.
void print_curve(std::ostream& out, const std::vector<CurveRow>& rows);

struct CurveJsonContext {
  std::string sensitivity_path, model_path, imatrix_path, held_out_text_path, mix_dir;
  int64_t n_ctx = 0, max_chunks = 0;
  std::vector<std::string> types;  // --types; empty: every candidate
  bool complete = false;           // false: written mid-run (a checkpoint)
};

inline constexpr int kCurveJsonSchemaVersion = 1;
// The curve as JSON (docs/SENSITIVITY.md, "qlens curve"): the header, the
// settings and one flat row per model measured (pandas: pd.json_normalize).
std::string curve_json(const std::vector<CurveRow>& rows, const CurveJsonContext& context);
// The rows of a curve JSON (for --resume); errors name `source`.
std::vector<CurveRow> parse_curve_json(std::string_view text, const std::string& source);

}  // namespace qlens::tools
