// How well an importance matrix fits the model it is used on (quantize,
// sensitivity): which weights it covers, which of its entries name nothing in
// the model, and whether it was collected on another model. A matrix whose
// names match but which covers part of the model (a run stopped early, a
// --tensors filter) or comes from another model of the same shapes quantizes
// without an error, and badly; the summary and warnings say so up front.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tools/imatrix/imatrix_file.h"

namespace qlens::tools {

struct ImatrixCoverage {
  std::string path;
  int64_t n_weights = 0;                // weights that would use importance
  std::vector<std::string> missing;     // of those, the ones without an entry
  std::vector<std::string> no_data;     // with an entry that counted no rows
  std::vector<std::string> unmatched;   // entries naming no weight of the model
  std::string collected_on, model_name; // general.name of each, when known
  int64_t chunk_count = 0;
  std::vector<std::string> datasets;

  int64_t n_covered() const { return n_weights - static_cast<int64_t>(missing.size() + no_data.size()); }
  bool other_model() const { return !collected_on.empty() && !model_name.empty() && collected_on != model_name; }
  // One line per problem, each a full sentence; empty when the matrix fits.
  std::vector<std::string> warnings() const;
};

// `weights`: the weights that would use importance (quantized matrices other
// than token_embd, whose rows are looked up, not multiplied); `all_weights`:
// every tensor name of the model; `model_name`: its general.name ("" unknown).
ImatrixCoverage imatrix_coverage(const Imatrix& m, const std::vector<std::string>& weights,
                                 const std::vector<std::string>& all_weights, const std::string& model_name);

// "imatrix F: 40 of 42 weights covered, 12 chunks of wiki.txt" and the
// warnings, each on its own line starting with "warning: ".
void print_imatrix_coverage(std::ostream& out, const ImatrixCoverage& c);

}  // namespace qlens::tools
