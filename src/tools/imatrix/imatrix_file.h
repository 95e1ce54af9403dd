// Importance matrices as llama.cpp stores them, in both of its formats:
//  - GGUF (`general.type` = "imatrix"): per weight tensor `<name>.in_sum2`
//    (F32 [n_cols, n_mat], sums of squared activations) and `<name>.counts`
//    (F32 [1, n_mat], activation rows seen), 1-D ([n_cols] and [1]) for a
//    dense weight as llama-imatrix writes them (earlier qlens versions wrote
//    [n_cols, 1] and [1, 1]; both are read); `imatrix.datasets`,
//    `imatrix.chunk_count`, `imatrix.chunk_size`;
//  - legacy .dat: int32 entry count; per entry int32 name length, name,
//    int32 ncall, int32 nval, float[nval] = mean(x^2) * ncall; then optionally
//    int32 last chunk and a dataset name (int32 length + bytes). ncall is the
//    number of chunks the tensor saw: ceil(rows / chunk_size) when writing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace qlens::tools {

struct ImatrixEntry {
  int64_t n_cols = 0;
  int64_t n_mat = 1;               // experts (1 for dense weights)
  std::vector<double> sum2;        // [n_mat][n_cols]: sum of x^2 per input column
  std::vector<double> counts;      // [n_mat]: activation rows accumulated
  // A dense 3-D weight's matrices (DeepSeek's attn_k_b, one per head) see the
  // same rows: llama-imatrix writes one count and the sums as one row of
  // n_cols * n_mat, and so does qlens.
  bool one_count = false;
};

// Where a collecting run stands, so that a checkpoint can be resumed (qlens's
// own GGUF keys `qlens.imatrix.*`; other readers ignore them).
struct ImatrixRunState {
  int64_t next_chunk = -1;  // index in the text of the next chunk to process; -1: unknown
  double nll_sum = 0;       // perplexity so far: sums over scored predictions
  double nll_sq_sum = 0;
  int64_t n_scored = 0;
};

struct Imatrix {
  std::string path;
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name
  std::vector<std::string> datasets;
  std::string model_name;  // general.name of the model it was collected on ("" unknown); qlens.imatrix.model_name
  int64_t chunk_count = 0;
  int64_t chunk_size = 0;
  // Counts in chunks rather than rows: a legacy .dat (its ncall); the sums
  // are then mean(x^2) * ncall. convert_counts_to_rows gives them row units.
  bool counts_in_chunks = false;
  ImatrixRunState run;

  // Per-column importance (mean of x^2) of a weight, matrix `mat`, or empty when
  // the tensor is absent. Throws Error when present with another row length.
  std::vector<float> importance(const std::string& tensor, int64_t n_cols, int64_t mat = 0) const;
  // The importance of a whole weight of n_mat matrices (a 3-D expert
  // tensor's experts, 1 for a matrix): each matrix's n_cols values, one after
  // the other; empty when the tensor is absent.
  std::vector<float> tensor_importance(const std::string& tensor, int64_t n_cols, int64_t n_mat) const;
};

// Gives a matrix read from a .dat the units of one collected in rows, given
// the chunk size it was made with (llama.cpp's loader does the same):
// counts = ncall * chunk_size, sums = mean(x^2) * counts. No-op otherwise.
void convert_counts_to_rows(Imatrix& m, int64_t chunk_size);

// Reads either format (by magic). Errors name the file and the entry at fault.
Imatrix load_imatrix(const std::string& path);

// Writes the GGUF format (atomically); the .dat format too, for interchange.
void save_imatrix_gguf(const Imatrix& m, const std::string& path);
void save_imatrix_dat(const Imatrix& m, const std::string& path);

}  // namespace qlens::tools
