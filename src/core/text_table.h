// Plain-text tables for the tools' reports.
#pragma once

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

namespace qlens {

// Columns sized to their widest cell; names left-aligned, numbers right-aligned.
class TextTable {
 public:
  struct Column {
    std::string header;
    bool left_aligned = false;
  };
  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

  void print(std::ostream& out) const {
    std::vector<size_t> widths(columns_.size());
    for (size_t c = 0; c < columns_.size(); ++c) {
      widths[c] = columns_[c].header.size();
      for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].size());
    }
    std::vector<std::string> header;
    for (const Column& c : columns_) header.push_back(c.header);
    print_row(out, header, widths);
    for (const auto& row : rows_) print_row(out, row, widths);
  }

 private:
  void print_row(std::ostream& out, const std::vector<std::string>& cells, const std::vector<size_t>& widths) const {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line += "  ";
      const std::string padding(widths[c] - cells[c].size(), ' ');
      line += columns_[c].left_aligned ? cells[c] + padding : padding + cells[c];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }

  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace qlens
