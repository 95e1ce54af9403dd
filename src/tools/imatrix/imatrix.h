// Collecting an importance matrix: run a model over calibration text chunk by
// chunk (llama.cpp's imatrix method: chunks of n_ctx tokens, BOS first, all
// logits, perplexity over the second half of each chunk) and accumulate, for
// every mul_mat whose weight is a model weight (`blk.*`, and `output.weight`
// when asked), the sum of squared activations per input column and the number
// of activation rows.
//
// The sums come from taps on the backend running each node; the host-callback
// path (observe callback + host reduction) gives the same numbers and is the
// oracle for the taps.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "qlens/model.h"
#include "tools/imatrix/imatrix_file.h"

namespace qlens::tools {

enum class ImatrixCollect { Taps, Callback };

struct ImatrixOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 512;     // capped at n_ctx
  int64_t first_chunk = 0;   // skip this many chunks of the text
  int64_t max_chunks = -1;   // < 0: every whole chunk after first_chunk
  int n_threads = 0;
  CpuOptions cpu;  // the CPU backend's kernels (see ContextOptions)
  VulkanOptions vulkan;  // a Vulkan device's (see ContextOptions)
  bool process_output = false;
  std::string device = "cpu";  // see ContextOptions
  int n_gpu_layers = -1;
  // The KV cache: F32 by default, unlike perplexity's F16, because an
  // imatrix should hold the model's activations, not the rounding of its
  // cache: on stories260K an F16 cache moves columns by up to 8e-4 relative,
  // and by a different 4e-4 on each backend (one key rounding to another
  // half), while F32 caches agree across backends within 1e-6. The cache is
  // small at imatrix context sizes (-c 512: 320 MiB for a 70B model); F16 and
  // BF16 stay available to save memory.
  DType cache_type = DType::F32;
  bool compute_ppl = true;
  ImatrixCollect collect = ImatrixCollect::Taps;
  // Under mpirun: the model across the ranks by layers (each collecting its
  // own layers; tools/common/layer_pipeline.h) instead of chunks per rank.
  bool split_layers = false;
  std::string dataset;  // recorded in imatrix.datasets (the text file's name)
};

struct ImatrixChunkReport {
  int64_t chunk = 0;       // index of the chunk in the text
  int64_t done = 0;        // chunks processed in this run
  int64_t total = 0;       // chunks this run will process
  double ppl = 0;          // running perplexity over every scored chunk (0 without)
  double tokens_per_second = 0;
};

// Whether a mul_mat with weight `name` is collected.
bool imatrix_collects(const std::string& weight_name, bool process_output);

// The chunks [first, end) a run over `n_tokens` tokens processes, given what
// `m` already holds (a resumed checkpoint continues at m.run.next_chunk).
struct ImatrixChunkRange {
  int64_t first = 0, end = 0;
};
ImatrixChunkRange imatrix_chunk_range(int64_t n_tokens, const ImatrixOptions& opt, const Imatrix& m);

// Checks that the entries of `m` (from --in-file or a checkpoint) belong to
// this model: every entry names one of its weights, with the same row length
// and expert count. A legacy .dat's flat expert entries get their experts'
// shape here.
void check_imatrix_matches_model(Imatrix& m, const Model& model);

// Adds one chunk's column sums (ColumnSumSq tap results keyed by weight name)
// to the matrix, rounding to F32 as the file stores them.
void add_column_sums(Imatrix& m, const std::map<std::string, TapResult>& chunk);

// Collects into `m`, which may already hold data (combined files or a
// checkpoint): Σx² and counts add up, chunk_count grows, m.run records where
// to resume. After each chunk, on_chunk gets the report and `m` (to print, to
// save checkpoints); returning false stops after that chunk.
// Sums are rounded to F32 after every chunk, as the file stores them, so that
// a run resumed from a checkpoint ends with exactly the same file.
//
// Across the processes of `comm` (mpirun -np N): every rank calls this with
// the same model, text and options; the chunks go round-robin to the ranks,
// one round at a time, and rank 0, which alone holds `m` (the others' is left
// as it is) and alone calls on_chunk, adds each round's chunks in their
// order, so the matrix and its perplexity are exactly those of one process.
// With opt.split_layers, every rank runs its layers of every chunk and keeps
// its layers' entries; rank 0's `m` holds the whole matrix after the chunks
// for which whole_matrix_due(chunks done in this run) is true and after the
// last (in between, the other ranks' entries are those of the last such
// chunk), and on_chunk's false does not stop the run.
void collect_imatrix(const Model& model, const std::vector<Token>& tokens, const ImatrixOptions& opt, Imatrix& m,
                     const std::function<bool(const ImatrixChunkReport&, const Imatrix&)>& on_chunk = {},
                     dist::Comm& comm = dist::world(), const std::function<bool(int64_t)>& whole_matrix_due = {});

}  // namespace qlens::tools
