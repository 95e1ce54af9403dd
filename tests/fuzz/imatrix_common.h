// What the two imatrix targets do with a matrix that loaded: what
// `qlens quantize --imatrix`, `imatrix --in-file ... --show-statistics` and
// combining do with it.
#pragma once

#include <sstream>

#include "fuzz_util.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/imatrix/imatrix_stats.h"

namespace qlens::fuzz {

inline void use_imatrix(tools::Imatrix& m) {
  for (const auto& entry : m.entries) {
    const std::string& name = entry.first;
    const tools::ImatrixEntry& e = entry.second;
    expect_error_or_success([&] { (void)m.tensor_importance(name, e.n_cols, e.n_mat); });
    // A legacy .dat expert tensor: one flat row read as two matrices.
    if (e.n_cols % 2 == 0 && e.n_cols > 0)
      expect_error_or_success([&] { (void)m.tensor_importance(name, e.n_cols / 2, 2); });
  }
  expect_error_or_success([&] {
    const tools::ImatrixStatistics s = tools::compute_imatrix_statistics(m);
    std::ostringstream text, json;
    tools::print_imatrix_statistics(text, s);
    tools::write_imatrix_statistics_json(json, s);
  });
  expect_error_or_success([&] {
    tools::Imatrix copy = m;
    tools::combine_imatrix(copy, m);
  });
  expect_error_or_success([&] { tools::convert_counts_to_rows(m, 512); });
}

}  // namespace qlens::fuzz
