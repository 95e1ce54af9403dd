// A collecting run of `qlens imatrix` and its files: the output's format,
// the matrix a run starts from (empty, the --in-file matrices combined, or a
// checkpoint it resumes), the files it writes as it goes (the output every N
// chunks, checkpoints OUT.at_<chunks>, and after a failure what was collected
// before it in OUT.partial.gguf), its final perplexity and its --json summary
// (docs/JSON.md). collect_imatrix (imatrix.h) does the collecting itself.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "qlens/model.h"
#include "tools/imatrix/imatrix.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/perplexity/perplexity.h"

namespace qlens::tools {

enum class ImatrixFormat { Gguf, Dat };

// --output-format: "gguf" or "dat"; empty: dat when `out_path` ends in .dat,
// else gguf. Throws Error for another value.
ImatrixFormat imatrix_output_format(const std::string& flag, const std::string& out_path);
void save_imatrix(const Imatrix& m, const std::string& path, ImatrixFormat format);

// The matrix a collecting run starts from: the checkpoint `resume_path`
// (a qlens GGUF checkpoint made with chunks of n_ctx tokens; it holds where to
// go on and the perplexity sums so far), else the `in_files` combined (in
// rows, with no run state), else an empty matrix named `out_path`. Errors
// name the checkpoint and what is wrong with it.
Imatrix imatrix_run_start(const std::string& resume_path, const std::vector<std::string>& in_files, int64_t n_ctx,
                          const std::string& out_path);

// What a run writes as it goes.
struct ImatrixSaving {
  std::string out_path;
  ImatrixFormat format = ImatrixFormat::Gguf;
  int64_t output_frequency = 10;  // the output every N chunks of this run (0: at the end only)
  int64_t save_frequency = 0;     // also a checkpoint every N chunks (0: none)
};

// The checkpoint after `chunk_count` chunks (OUT.at_<chunk_count>, GGUF) and
// the file a failed run leaves (OUT.partial.gguf): both resumable.
std::string imatrix_checkpoint_path(const std::string& out_path, int64_t chunk_count);
std::string imatrix_partial_path(const std::string& out_path);

// What is due after the `done`-th chunk of this run, the matrix then holding
// `chunk_count` chunks: the output (every output_frequency chunks of the run)
// and a checkpoint (every save_frequency; empty path: none).
struct ImatrixSavesDue {
  bool output = false;
  std::string checkpoint;
};
ImatrixSavesDue imatrix_saves_due(const ImatrixSaving& saving, int64_t done, int64_t chunk_count);

struct ImatrixRunStats {
  int64_t chunks_this_run = 0;
  double tokens_per_second = 0;  // as of the last chunk
};

// collect_imatrix with the run's files: after each chunk, on_chunk (to print
// progress), then the saves due. When a chunk fails (qlens::Error), the whole
// chunks before it are saved to imatrix_partial_path(out_path) (a checkpoint
// that --resume continues from the failing chunk), said on `log`, and the
// error is rethrown. The output is not written at the end: save_imatrix.
ImatrixRunStats collect_imatrix_saving(const Model& model, const std::vector<Token>& tokens,
                                       const ImatrixOptions& opt, Imatrix& m, const ImatrixSaving& saving,
                                       std::ostream& log,
                                       const std::function<void(const ImatrixChunkReport&)>& on_chunk = {});

// The perplexity over every prediction the matrix's run scored (a resumed
// checkpoint's included); none with compute_ppl false or nothing scored.
std::optional<PerplexityEstimate> imatrix_run_perplexity(const Imatrix& m, bool compute_ppl);

// `qlens imatrix -m M -f T --json FILE`: the run's inputs, settings, output,
// figures, each tensor collected and the experts the text left without data.
struct ImatrixRunSummary {
  std::string model_path, text_path, resume_path, out_path;
  ImatrixOptions options;
  ImatrixRunStats stats;
  std::optional<PerplexityEstimate> ppl;         // null in the JSON when absent
  std::vector<std::string> unrouted_experts;  // describe_unrouted_experts
};
// Pretty-printed, ending in a newline.
std::string imatrix_run_json(const ImatrixRunSummary& summary, const Imatrix& m);

}  // namespace qlens::tools
