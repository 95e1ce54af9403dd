#include "tools/imatrix/imatrix_run.h"

#include <limits>
#include <sstream>

#include "core/json_writer.h"
#include "qlens/error.h"
#include "tools/imatrix/imatrix_stats.h"
#include "tools/common/json_header.h"
#include "tools/common/tensor_names.h"

namespace qlens::tools {

ImatrixFormat imatrix_output_format(const std::string& flag, const std::string& out_path) {
  const std::string format = !flag.empty() ? flag : out_path.ends_with(".dat") ? "dat" : "gguf";
  if (format != "gguf" && format != "dat")
    throw Error("qlens imatrix: --output-format must be gguf or dat, got '" + format + "'");
  return format == "dat" ? ImatrixFormat::Dat : ImatrixFormat::Gguf;
}

void save_imatrix(const Imatrix& m, const std::string& path, ImatrixFormat format) {
  if (format == ImatrixFormat::Dat)
    save_imatrix_dat(m, path);
  else
    save_imatrix_gguf(m, path);
}

Imatrix imatrix_run_start(const std::string& resume_path, const std::vector<std::string>& in_files, int64_t n_ctx,
                          const std::string& out_path) {
  if (!resume_path.empty()) {
    Imatrix m = load_imatrix(resume_path);
    if (m.run.next_chunk < 0)
      throw Error("qlens imatrix: --resume " + resume_path +
                  " is not a qlens checkpoint (no qlens.imatrix.next_chunk key; checkpoints are GGUF files)");
    if (m.chunk_size != n_ctx)
      throw Error("qlens imatrix: --resume " + resume_path + " was made with -c " + std::to_string(m.chunk_size) +
                  ", this run has -c " + std::to_string(n_ctx));
    return m;
  }
  if (!in_files.empty()) {
    Imatrix m = combine_imatrix_files(in_files);
    convert_counts_to_rows(m, n_ctx);
    m.run = {};
    return m;
  }
  Imatrix m;
  m.path = out_path;
  return m;
}

std::string imatrix_checkpoint_path(const std::string& out_path, int64_t chunk_count) {
  return out_path + ".at_" + std::to_string(chunk_count);
}

std::string imatrix_partial_path(const std::string& out_path) { return out_path + ".partial.gguf"; }

ImatrixSavesDue imatrix_saves_due(const ImatrixSaving& saving, int64_t done, int64_t chunk_count) {
  ImatrixSavesDue due;
  due.output = saving.output_frequency > 0 && done % saving.output_frequency == 0;
  if (saving.save_frequency > 0 && done % saving.save_frequency == 0)
    due.checkpoint = imatrix_checkpoint_path(saving.out_path, chunk_count);
  return due;
}

ImatrixRunStats collect_imatrix_saving(const Model& model, const std::vector<Token>& tokens,
                                       const ImatrixOptions& opt, Imatrix& m, const ImatrixSaving& saving,
                                       std::ostream& log, const std::function<void(const ImatrixChunkReport&)>& on_chunk) {
  ImatrixRunStats stats;
  try {
    collect_imatrix(
        model, tokens, opt, m,
        [&](const ImatrixChunkReport& r, const Imatrix& cur) {
          if (on_chunk) on_chunk(r);
          stats.tokens_per_second = r.tokens_per_second;
          stats.chunks_this_run = r.done;
          const ImatrixSavesDue due = imatrix_saves_due(saving, r.done, cur.chunk_count);
          if (due.output) save_imatrix(cur, saving.out_path, saving.format);
          if (!due.checkpoint.empty()) save_imatrix_gguf(cur, due.checkpoint);
          return true;
        },
        dist::world(),
        [&](int64_t done) {
          const ImatrixSavesDue due = imatrix_saves_due(saving, done, 0);
          return due.output || !due.checkpoint.empty();
        });
  } catch (const Error&) {
    // What was collected before the failure is kept (a checkpoint that
    // --resume continues from the failing chunk); with --split-layers the
    // other ranks' entries are not here to save.
    if (m.chunk_count > 0 && !(opt.split_layers && dist::world().size() > 1)) {
      const std::string partial = imatrix_partial_path(saving.out_path);
      save_imatrix_gguf(m, partial);
      log << "saved the " << m.chunk_count << " chunks collected so far to " << partial << "\n";
      log.flush();
    }
    throw;
  }
  return stats;
}

std::optional<PerplexityEstimate> imatrix_run_perplexity(const Imatrix& m, bool compute_ppl) {
  if (!compute_ppl || m.run.n_scored <= 0) return std::nullopt;
  return perplexity_from_sums(m.run.nll_sum, m.run.nll_sq_sum, m.run.n_scored);
}

namespace {

void write_settings(JsonWriter& w, const ImatrixOptions& opt) {
  w.key("settings");
  w.begin_object();
  w.key("statistics"); w.value(false);  // a collection run (--show-statistics files say true)
  w.key("n_ctx"); w.value(opt.n_ctx);
  w.key("n_batch"); w.value(opt.n_batch);
  w.key("first_chunk"); w.value(opt.first_chunk);
  w.key("n_chunks"); if (opt.max_chunks >= 0) w.value(opt.max_chunks); else w.null();
  w.key("collect"); w.value(opt.collect == ImatrixCollect::Taps ? "taps" : "callback");
  w.key("device"); w.value(opt.device);
  w.end_object();
}

void write_tensors(JsonWriter& w, const Imatrix& m) {
  w.key("tensors");
  w.begin_array();
  for (const auto& [name, e] : m.entries) {
    double rows = 0;
    for (double c : e.counts) rows += c;
    w.begin_object();
    w.key("tensor"); w.value(name);
    w.key("layer"); layer_or_null(w, tensor_layer(name));
    w.key("role"); w.value(tensor_role(name));
    w.key("n_cols"); w.value(e.n_cols);
    w.key("n_mat"); w.value(e.n_mat);
    w.key("rows"); w.value(rows);
    w.end_object();
  }
  w.end_array();
}

}  // namespace

std::string imatrix_run_json(const ImatrixRunSummary& s, const Imatrix& m) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::ostringstream out;
  JsonWriter w(out, /*pretty=*/true);
  write_json_header(w, "qlens imatrix", kImatrixStatisticsJsonSchemaVersion,
                    {{"model", s.model_path}, {"text", s.text_path}, {"resume", s.resume_path}});
  write_settings(w, s.options);
  w.key("outputs");
  w.begin_object();
  w.key("imatrix"); w.value(s.out_path);
  w.end_object();
  w.key("chunks_this_run"); w.value(s.stats.chunks_this_run);
  w.key("chunk_count"); w.value(m.chunk_count);
  w.key("n_tokens_evaluated"); w.value(s.stats.chunks_this_run * s.options.n_ctx);
  w.key("tokens_per_second"); w.value(s.stats.tokens_per_second);
  w.key("ppl");
  w.begin_object();
  w.key("value"); w.value(s.ppl ? s.ppl->ppl : nan);  // NaN (--no-ppl): null
  w.key("error"); w.value(s.ppl ? s.ppl->ppl_error : nan);
  w.end_object();
  w.key("n_tokens_scored"); w.value(m.run.n_scored);
  write_tensors(w, m);
  w.key("unrouted_experts");
  w.array(s.unrouted_experts);
  w.end_object();
  out << "\n";
  return out.str();
}

}  // namespace qlens::tools
