// The curve section of qlens report: from `qlens curve --json`, KLD and the
// PPL ratio against bits per weight, qlens's plans beside the mixes.
#include <algorithm>
#include <cmath>
#include <map>

#include "tools/report/report_html.h"
#include "tools/report/report_sections.h"

namespace qlens::tools::report_detail {

namespace {

using html::format_bytes;
using html::format_number;
using html::kNaN;

struct CurveModel {
  std::string point, kind, note;
  bool measured = false;
  double bytes = kNaN, bpw = kNaN, kld = kNaN, kld_error = kNaN, ppl_ratio = kNaN, same_top = kNaN;
};

std::vector<CurveModel> read_rows(const JsonValue& doc) {
  std::vector<CurveModel> rows;
  for (const JsonValue& r : doc.at("rows").as_array()) {
    CurveModel m;
    m.point = r.at("point").as_string();
    m.kind = r.at("kind").as_string();
    m.note = optional_string(r, "note");
    m.measured = r.at("measured").as_bool();
    m.bytes = optional_number(r, "bytes");
    m.bpw = optional_number(r, "bits_per_weight");
    m.kld = value_of(r, "kld");
    m.kld_error = error_of(r, "kld");
    m.same_top = value_of(r, "same_top");
    m.ppl_ratio = optional_number(r, "ppl_ratio");
    rows.push_back(std::move(m));
  }
  return rows;
}

// One chart of `y` against bits per weight: the plans and the mixes.
std::string chart(const std::vector<CurveModel>& rows, const std::string& id, const std::string& y_label, bool log_y,
                  double CurveModel::*y, const std::string& title, const std::string& caption) {
  html::XYChart c;
  c.id = id;
  c.x.label = "bits per weight";
  c.y.label = y_label;
  c.y.log = log_y;
  c.plot_height = 300;
  html::Series mixes("llama.cpp's mixes");
  mixes.colour = html::categorical_colour(0);
  html::Series plans("qlens plans at the same sizes");
  plans.colour = html::categorical_colour(2);
  std::vector<CurveModel> sorted = rows;
  std::stable_sort(sorted.begin(), sorted.end(), [](const CurveModel& a, const CurveModel& b) { return a.bpw < b.bpw; });
  for (const CurveModel& r : sorted) {
    if (!r.measured || std::isnan(r.*y)) continue;
    const bool is_kld = y == &CurveModel::kld;
    const std::string hover = (r.kind == "plan" ? "plan at " + r.point : r.point) + ": " + format_number(r.bpw) +
                              " bpw, " + format_bytes(r.bytes) + ", KLD " + html::format_with_error(r.kld, r.kld_error) +
                              ", PPL ratio " + format_number(r.ppl_ratio, 4);
    const html::Point p{r.bpw, r.*y, is_kld ? r.kld - r.kld_error : kNaN, is_kld ? r.kld + r.kld_error : kNaN,
                        r.kind == "mix" ? r.point : "", hover};
    (r.kind == "plan" ? plans : mixes).points.push_back(p);
  }
  c.series.push_back(mixes);
  c.series.push_back(plans);
  return html::figure(title, html::xy_chart_svg(c), caption);
}

std::string table(const std::vector<CurveModel>& rows) {
  html::Table t({{"point", false}, {"mix bpw"}, {"mix KLD"}, {"plan bpw"}, {"plan KLD"}, {"plan / mix KLD"},
                 {"mix PPL ratio"}, {"plan PPL ratio"}});
  std::vector<std::string> order;
  for (const CurveModel& r : rows)
    if (std::find(order.begin(), order.end(), r.point) == order.end()) order.push_back(r.point);
  for (const std::string& point : order) {
    const CurveModel* plan = nullptr;
    const CurveModel* mix = nullptr;
    for (const CurveModel& r : rows)
      if (r.point == point) (r.kind == "plan" ? plan : mix) = &r;
    auto kld = [](const CurveModel* m) {
      return m && m->measured ? html::format_with_error(m->kld, m->kld_error) : std::string("-");
    };
    auto num = [](const CurveModel* m, double CurveModel::*f, int digits) {
      return m && m->measured ? format_number(m->*f, digits) : std::string("-");
    };
    const bool both = plan && mix && plan->measured && mix->measured;
    t.add_row({point, num(mix, &CurveModel::bpw, 4), kld(mix), num(plan, &CurveModel::bpw, 4),
               plan && !plan->measured ? "no plan: smaller than the table allows" : kld(plan), both ? format_number(plan->kld / mix->kld, 3) : "-",
               num(mix, &CurveModel::ppl_ratio, 4), num(plan, &CurveModel::ppl_ratio, 4)});
  }
  return t.render("curve-table");
}

}  // namespace

Section curve_section(const InputDocument& input, const ReportOptions&) {
  Section section{"curve", "Size against quality: plans and mixes", ""};
  const JsonValue& d = input.doc;
  const std::vector<CurveModel> rows = read_rows(d);
  const JsonValue* complete = d.find("complete");
  section.html = facts({{"reference", first_string(d, {"inputs.model"})},
                        {"sensitivity", first_string(d, {"inputs.sensitivity"})},
                        {"imatrix", first_string(d, {"inputs.imatrix"})},
                        {"held-out text", first_string(d, {"inputs.held_out_text"})},
                        {"chunks", html::format_integer(first_number(d, {"settings.max_chunks"})) + " of " +
                                       html::format_integer(first_number(d, {"settings.n_ctx"})) + " tokens"}});
  if (complete && complete->is_bool() && !complete->as_bool())
    section.html += note("This curve is from a run still going or interrupted: `qlens curve ... --resume` completes it.");
  if (rows.empty()) return section.html += note("The curve holds no model."), section;
  section.html += chart(rows, "curve-kld", "mean KLD vs the reference (nats, log scale)", true, &CurveModel::kld,
                        "KLD against size",
                        "each point is a model quantized and compared with the reference on held-out text; lower is "
                        "closer. A plan is made at each mix's size (no more tensor bytes), from one sensitivity "
                        "table. Bars: ± one standard error.");
  section.html += chart(rows, "curve-ppl", "perplexity / the reference's", false, &CurveModel::ppl_ratio,
                        "Perplexity ratio against size", "the perplexity of each model over the reference's, on the "
                        "same held-out text.");
  section.html += table(rows);
  return section;
}

}  // namespace qlens::tools::report_detail
