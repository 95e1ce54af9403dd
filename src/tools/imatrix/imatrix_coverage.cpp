#include "tools/imatrix/imatrix_coverage.h"

#include <algorithm>
#include <set>

namespace qlens::tools {

namespace {

// "a, b, c and 4 more": a list that stays one readable line.
std::string some_of(const std::vector<std::string>& names, size_t shown = 4) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

}  // namespace

ImatrixCoverage imatrix_coverage(const Imatrix& m, const std::vector<std::string>& weights,
                                 const std::vector<std::string>& all_weights, const std::string& model_name) {
  ImatrixCoverage c;
  c.path = m.path;
  c.n_weights = static_cast<int64_t>(weights.size());
  c.collected_on = m.model_name;
  c.model_name = model_name;
  c.chunk_count = m.chunk_count;
  c.datasets = m.datasets;
  for (const std::string& name : weights) {
    const auto it = m.entries.find(name);
    if (it == m.entries.end())
      c.missing.push_back(name);
    else if (std::none_of(it->second.counts.begin(), it->second.counts.end(), [](double n) { return n > 0; }))
      c.no_data.push_back(name);
  }
  const std::set<std::string> names(all_weights.begin(), all_weights.end());
  for (const auto& [name, entry] : m.entries)
    if (!names.count(name)) c.unmatched.push_back(name);
  return c;
}

std::vector<std::string> ImatrixCoverage::warnings() const {
  std::vector<std::string> w;
  if (other_model())
    w.push_back(path + " was collected on '" + collected_on + "', not on '" + model_name +
                "': an importance matrix of another model (even of the same shapes) steers the quantizer wrongly");
  if (!unmatched.empty())
    w.push_back(path + " has " + std::to_string(unmatched.size()) + " entries that name no weight of this model (" +
                some_of(unmatched) + "): was it made on another model?");
  if (!missing.empty())
    w.push_back(std::to_string(missing.size()) + " of " + std::to_string(n_weights) + " weights have no entry in " +
                path + " (" + some_of(missing) + "); they are quantized without importance");
  if (!no_data.empty())
    w.push_back(std::to_string(no_data.size()) + " weights have entries without data in " + path + " (" +
                some_of(no_data) + "); they are quantized without importance");
  if (chunk_count > 0 && chunk_count < 10)
    w.push_back(path + " holds " + std::to_string(chunk_count) +
                " chunks only: importance from so little text is noisy (llama.cpp's users collect 100 or more)");
  return w;
}

void print_imatrix_coverage(std::ostream& out, const ImatrixCoverage& c) {
  out << "imatrix " << c.path << ": " << c.n_covered() << " of " << c.n_weights << " weights covered";
  if (c.chunk_count > 0) out << ", " << c.chunk_count << " chunks";
  if (!c.datasets.empty()) out << " of " << some_of(c.datasets, 2);
  if (!c.collected_on.empty()) out << ", collected on '" << c.collected_on << "'";
  out << "\n";
  for (const std::string& w : c.warnings()) out << "warning: " << w << "\n";
}

}  // namespace qlens::tools
