#include "tools/imatrix/imatrix.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>

#include "qlens/error.h"
#include "dist/bytes.h"
#include "tools/common/chunks.h"
#include "tools/common/layer_pipeline.h"
#include "tools/common/tensor_names.h"
#include "tools/perplexity/perplexity.h"

namespace qlens::tools {

bool imatrix_collects(const std::string& name, bool process_output) {
  return name.rfind("blk.", 0) == 0 || (process_output && name == "output.weight");
}

ImatrixChunkRange imatrix_chunk_range(int64_t n_tokens, const ImatrixOptions& opt, const Imatrix& m) {
  if (opt.n_ctx < 4) throw Error("imatrix: context size -c must be at least 4, got " + std::to_string(opt.n_ctx));
  if (opt.first_chunk < 0) throw Error("imatrix: --chunk must not be negative");
  const int64_t available = n_tokens / opt.n_ctx;
  if (available == 0)
    throw Error("imatrix: the text has " + std::to_string(n_tokens) + " tokens, fewer than one chunk of -c " +
                std::to_string(opt.n_ctx) + "; use a longer text or a smaller -c");
  if (opt.first_chunk >= available)
    throw Error("imatrix: --chunk " + std::to_string(opt.first_chunk) + " is past the end of the text (" +
                std::to_string(available) + " chunks of " + std::to_string(opt.n_ctx) + ")");
  ImatrixChunkRange r;
  r.end = opt.max_chunks >= 0 ? std::min(available, opt.first_chunk + opt.max_chunks) : available;
  r.first = m.run.next_chunk >= 0 ? m.run.next_chunk : opt.first_chunk;
  r.first = std::min(r.first, r.end);
  return r;
}

void check_imatrix_matches_model(Imatrix& m, const Model& model) {
  for (auto& [name, e] : m.entries) {
    auto it = model.weights().find(name);
    if (it == model.weights().end())
      throw Error(m.path + ": entry '" + name + "' is not a weight of " + model.path() +
                  " (an importance matrix of another model?)");
    const Tensor& w = *it->second;
    const int64_t n_mat = w.ne[2];  // experts of a 3-D expert tensor, else 1
    // A legacy .dat holds an expert tensor as one row of all experts' columns
    // with one count, and llama-imatrix so writes a dense 3-D weight
    // (DeepSeek's attn_k_b): give it the matrices' shape (llama.cpp
    // broadcasts too).
    if (e.n_mat == 1 && n_mat > 1 && e.n_cols == w.ne[0] * n_mat) {
      e.n_cols = w.ne[0];
      e.n_mat = n_mat;
      e.counts.assign(n_mat, e.counts[0]);
      e.one_count = role_info(model.roles_of(&w).at(0)).reader == Op::MulMat;
    }
    if (w.ne[0] != e.n_cols || n_mat != e.n_mat)
      throw Error(m.path + ": entry '" + name + "' has " + std::to_string(e.n_mat) + " x " + std::to_string(e.n_cols) +
                  " columns, the weight in " + model.path() + " has " + std::to_string(n_mat) + " x " +
                  std::to_string(w.ne[0]) + " (an importance matrix of another model?)");
  }
}

void add_column_sums(Imatrix& m, const std::map<std::string, TapResult>& chunk) {
  // Non-finite activations (an overflow, a broken weight) would poison the
  // sums for good: named by tensor and expert before anything is added.
  for (const auto& [name, r] : chunk) {
    const size_t n_mat = r.expert_rows.empty() ? 1 : r.expert_rows.size();
    const size_t n_cols = r.column_sum_sq.size() / n_mat;
    std::string bad;
    int64_t n_bad = 0;
    for (size_t x = 0; x < n_mat; ++x)
      for (size_t k = 0; k < n_cols; ++k)
        if (!std::isfinite(r.column_sum_sq[x * n_cols + k])) {
          if (n_bad++ < 8) {
            if (!bad.empty()) bad += ", ";
            bad += std::to_string(x);
          }
          break;
        }
    if (n_bad > 0)
      throw Error("non-finite activations (NaN or Inf) entering " + name +
                  (n_mat > 1 ? ", expert" + std::string(n_bad > 1 ? "s " : " ") + bad + (n_bad > 8 ? ", ..." : "")
                             : std::string()) +
                  "; this chunk is not added");
  }
  for (const auto& [name, r] : chunk) {
    if (r.rows == 0) continue;
    // Expert tensors: one matrix per expert, each with its own count; a
    // dense 3-D weight's matrices see the same rows (one count in the file).
    const int64_t n_mat = !r.expert_rows.empty() ? static_cast<int64_t>(r.expert_rows.size())
                          : r.batch_matrices > 0 ? r.batch_matrices
                                                 : 1;
    const int64_t n_cols = static_cast<int64_t>(r.column_sum_sq.size()) / n_mat;
    auto [it, fresh] = m.entries.try_emplace(name);
    ImatrixEntry& e = it->second;
    if (fresh) {
      e.n_cols = n_cols;
      e.n_mat = n_mat;
      e.sum2.assign(n_cols * n_mat, 0.0);
      e.counts.assign(n_mat, 0.0);
      e.one_count = r.batch_matrices > 0;
    }
    if (e.n_cols != n_cols || e.n_mat != n_mat)
      throw Error(m.path + ": entry '" + name + "' has " + std::to_string(e.n_mat) + " x " + std::to_string(e.n_cols) +
                  " columns, the model's " + std::to_string(n_mat) + " x " + std::to_string(n_cols));
    for (int64_t k = 0; k < n_cols * n_mat; ++k)
      e.sum2[k] = static_cast<float>(e.sum2[k] + r.column_sum_sq[k]);
    for (int64_t x = 0; x < n_mat; ++x) {
      const double rows = !r.expert_rows.empty() ? static_cast<double>(r.expert_rows[x])
                          : static_cast<double>(r.rows) / n_mat;
      e.counts[x] = static_cast<float>(e.counts[x] + rows);
    }
  }
}

namespace {

// The run's settings recorded in m, which must agree with those it was made with.
void start_run(Imatrix& m, const Model& model, const ImatrixOptions& opt) {
  check_imatrix_matches_model(m, model);
  if (m.chunk_size != 0 && m.chunk_size != opt.n_ctx)
    throw Error(m.path + ": made with chunks of " + std::to_string(m.chunk_size) + " tokens, this run uses -c " +
                std::to_string(opt.n_ctx));
  m.chunk_size = opt.n_ctx;
  if (m.model_name.empty()) m.model_name = model.file().try_string("general.name").value_or("");
  if (!opt.dataset.empty() && std::find(m.datasets.begin(), m.datasets.end(), opt.dataset) == m.datasets.end())
    m.datasets.push_back(opt.dataset);
}

// One chunk's contribution: what the rank that ran it sends to rank 0, which
// adds the chunks in their order.
struct ChunkResult {
  int64_t chunk = -1;  // -1: none (a rank without a chunk in the last round)
  std::map<std::string, TapResult> sums;
  ImatrixRunState run;  // the chunk's perplexity terms
  std::string error;    // why the chunk failed (nothing else is set then)
};

std::string serialize(const ChunkResult& r) {
  dist::ByteWriter w;
  w.put(r.chunk);
  w.put(r.error);
  w.put(r.run.nll_sum);
  w.put(r.run.nll_sq_sum);
  w.put(r.run.n_scored);
  w.put(static_cast<uint64_t>(r.sums.size()));
  for (const auto& [name, t] : r.sums) {
    w.put(name);
    w.put(t.column_sum_sq);
    w.put(t.rows);
    w.put(t.expert_rows);
    w.put(t.batch_matrices);
  }
  return w.take();
}

ChunkResult parse_chunk_result(const std::string& bytes) {
  dist::ByteReader in(bytes);
  ChunkResult r;
  r.chunk = in.get<int64_t>();
  r.error = in.get_string();
  r.run.nll_sum = in.get<double>();
  r.run.nll_sq_sum = in.get<double>();
  r.run.n_scored = in.get<int64_t>();
  const auto n = in.get<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    const std::string name = in.get_string();
    TapResult& t = r.sums[name];
    t.kind = TapKind::ColumnSumSq;
    t.column_sum_sq = in.get_vector<double>();
    t.rows = in.get<int64_t>();
    t.expert_rows = in.get_vector<int64_t>();
    t.batch_matrices = in.get<int64_t>();
  }
  return r;
}

// Entries of a matrix as bytes, and back into (over) a matrix's.
std::string serialize_entries(const std::map<std::string, ImatrixEntry>& entries) {
  dist::ByteWriter w;
  w.put(static_cast<uint64_t>(entries.size()));
  for (const auto& [name, e] : entries) {
    w.put(name);
    w.put(e.n_cols);
    w.put(e.n_mat);
    w.put(e.sum2);
    w.put(e.counts);
    w.put(e.one_count);
  }
  return w.take();
}

void parse_entries_into(const std::string& bytes, std::map<std::string, ImatrixEntry>& entries) {
  dist::ByteReader in(bytes);
  const auto n = in.get<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    ImatrixEntry& e = entries[in.get_string()];
    e.n_cols = in.get<int64_t>();
    e.n_mat = in.get<int64_t>();
    e.sum2 = in.get_vector<double>();
    e.counts = in.get_vector<double>();
    e.one_count = in.get<bool>();
  }
}

// Chunk by chunk: the column sums of the activations entering the collected
// weights, and the chunk's perplexity terms.
class ChunkCollector {
 public:
  // With `split`, this rank's layers of each chunk (pipeline_decode).
  ChunkCollector(const Model& model, const std::vector<Token>& tokens, const ImatrixOptions& opt,
                 const LayerSplit* split = nullptr, dist::Comm* comm = nullptr)
      : split_(split),
        comm_(comm),
        model_(model),
        opt_(opt),
        ctx_(model, run_context(opt, opt.n_ctx, opt.n_batch)),
        chunks_(tokens, opt.n_ctx, model.vocab(), "imatrix") {
    if (opt.collect == ImatrixCollect::Taps) {
      ctx_.set_tap_selector([this](const Tensor& t, std::vector<TapRequest>& r) {
        if (wanted(t)) r.push_back({TapKind::ColumnSumSq, t.src[0]->name});
      });
    } else {
      ctx_.set_observe_callback([this](const Tensor& t, bool ask) { return add_on_host(t, ask); });
    }
  }

  // Runs chunk c: its sums and perplexity terms, or why they are spoilt.
  ChunkResult run(int64_t c) {
    const bool has_logits = decode(c);
    ChunkResult r;
    r.chunk = c;
    try {
      const std::exception_ptr logits_error = opt_.compute_ppl && has_logits ? score(c, r.run) : nullptr;
      r.sums = chunk_sums();
      // Spoilt logits come from non-finite activations, which the sums name
      // by tensor: check those first (into a scratch matrix).
      if (logits_error) {
        Imatrix scratch;
        add_column_sums(scratch, r.sums);
        std::rethrow_exception(logits_error);
      }
    } catch (const Error& e) {
      r = ChunkResult{};
      r.chunk = c;
      r.error = e.what();
    }
    return r;
  }

 private:
  bool wanted(const Tensor& t) const {
    return (t.op == Op::MulMat || t.op == Op::MulMatId) && t.src[0] && (t.src[0]->flags & kFlagWeight) &&
           imatrix_collects(t.src[0]->name, opt_.process_output);
  }
  bool add_on_host(const Tensor& t, bool ask) {
    if (ask) return wanted(t);
    TapResult& r = host_sums_[t.src[0]->name];
    r.kind = TapKind::ColumnSumSq;
    tap_accumulate_on_host(t, r);
    return true;
  }

  // Every row goes through every layer (each is collected), but the output
  // matrix (262,144 rows for Gemma 3) needs only the rows perplexity scores,
  // as qlens perplexity computes them; all of them when its own activations
  // are collected (--process-output), none but the last without perplexity.
  // Whether this rank has the chunk's logits (with a split, the last).
  bool decode(int64_t c) {
    ctx_.clear();
    const int64_t n_ctx = opt_.n_ctx;
    const int64_t first_logit = opt_.process_output ? 0 : opt_.compute_ppl ? chunks_.first_scored() : n_ctx - 1;
    if (split_) {
      if (pipeline_decode(ctx_, *comm_, *split_, chunks_.chunk(c), first_logit)) return true;
      if (split_->is_last(comm_->rank())) throw Error("imatrix: the computation was stopped");
      return false;
    }
    if (!ctx_.decode_logits_from(chunks_.chunk(c), first_logit)) throw Error("imatrix: the computation was stopped");
    return true;
  }

  // Adds the chunk's scored predictions to run; returns the error of a
  // spoilt logit, if any, for run() to report after the sums.
  std::exception_ptr score(int64_t c, ImatrixRunState& run) const {
    const int64_t n_vocab = model_.hparams().n_vocab;
    try {
      for (int64_t j = chunks_.first_scored(); j < opt_.n_ctx - 1; ++j) {
        const double v = token_nll(ctx_.logits(j).data(), n_vocab, chunks_.next(c, j));
        run.nll_sum += v;
        run.nll_sq_sum += v * v;
        ++run.n_scored;
      }
    } catch (const Error&) {
      return std::current_exception();
    }
    return nullptr;
  }

  std::map<std::string, TapResult> chunk_sums() {
    std::map<std::string, TapResult> sums;
    if (opt_.collect == ImatrixCollect::Taps)
      sums = ctx_.read_taps(/*reset=*/true);
    else
      sums.swap(host_sums_);
    return sums;
  }

  const LayerSplit* split_;
  dist::Comm* comm_;
  const Model& model_;
  const ImatrixOptions& opt_;
  Context ctx_;
  TextChunks chunks_;
  std::map<std::string, TapResult> host_sums_;  // the callback path's chunk sums
};

// Adds a chunk's sums to m, which holds `chunk_count` chunks (a failed chunk
// adds nothing).
void add_chunk_sums(Imatrix& m, const ChunkResult& r, const Model& model, int64_t chunk_count) {
  try {
    if (!r.error.empty()) throw Error(r.error);
    add_column_sums(m, r.sums);
  } catch (const Error& e) {
    throw Error("imatrix: chunk " + std::to_string(r.chunk) + " of " + model.path() + ": " + e.what() + " (" +
                std::to_string(chunk_count) + " chunks collected before it)");
  }
}

// The chunk's perplexity terms and the run's count.
void add_chunk_run(Imatrix& m, const ChunkResult& r) {
  m.run.nll_sum += r.run.nll_sum;
  m.run.nll_sq_sum += r.run.nll_sq_sum;
  m.run.n_scored += r.run.n_scored;
  ++m.chunk_count;
  m.run.next_chunk = r.chunk + 1;
}

void update_report(ImatrixChunkReport& report, const Imatrix& m, int64_t c, int64_t n_ctx,
                   std::chrono::steady_clock::time_point t0) {
  ++report.done;
  report.chunk = c;
  report.ppl = m.run.n_scored > 0 ? perplexity_from_sums(m.run.nll_sum, m.run.nll_sq_sum, m.run.n_scored).ppl : 0.0;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.tokens_per_second = seconds > 0 ? report.done * n_ctx / seconds : 0;
}

// A round of chunks, one per rank (c < 0: none on this rank): rank 0 gets
// them all in rank order (its own as it is, the others' through their
// bytes), the others an empty list. One process sends nothing.
std::vector<ChunkResult> run_round(ChunkCollector& collector, int64_t c, dist::Comm& comm) {
  ChunkResult mine = c >= 0 ? collector.run(c) : ChunkResult{};
  std::vector<ChunkResult> round;
  if (comm.size() == 1) {
    round.push_back(std::move(mine));
    return round;
  }
  const std::vector<std::string> bytes = comm.gather(comm.is_root() ? std::string() : serialize(mine), 0);
  for (int r = 0; r < static_cast<int>(bytes.size()); ++r)
    round.push_back(r == comm.rank() ? std::move(mine) : parse_chunk_result(bytes[r]));
  return round;
}

// The rank that owns an entry's layer (the output matrix: the last rank).
int entry_owner(const std::string& name, const LayerSplit& split) {
  const int il = tensor_layer(name);
  for (int r = 0; r < split.n_ranks(); ++r)
    if (il >= split.first(r) && il < split.last(r)) return r;
  return split.n_ranks() - 1;
}

// --split-layers: every rank runs its layers of every chunk and keeps the
// entries of its layers (each entry's sums rounded after each chunk on its
// owner, as one process does); rank 0 keeps the run's figures, the last
// rank's perplexity terms reaching it one chunk later, and gathers the
// ranks' entries when the whole matrix is due (whole_matrix_due) and at the
// end.
void collect_split(const Model& model, const std::vector<Token>& tokens, const ImatrixOptions& opt, Imatrix& m,
                   const std::function<bool(const ImatrixChunkReport&, const Imatrix&)>& on_chunk,
                   const std::function<bool(int64_t)>& whole_matrix_due, dist::Comm& comm, ImatrixChunkRange range) {
  const LayerSplit split = split_layers_by_bytes(model, comm.size());
  const int last = comm.size() - 1;
  // The entries a resumed or combined run starts from go to their owners.
  Imatrix own;  // a rank other than 0: the entries of its layers
  if (comm.is_root()) {
    for (int r = 1; r < comm.size(); ++r) {
      std::map<std::string, ImatrixEntry> theirs;
      for (const auto& [name, e] : m.entries)
        if (entry_owner(name, split) == r) theirs.emplace(name, e);
      comm.send(serialize_entries(theirs), r);
    }
  } else {
    parse_entries_into(comm.receive(0), own.entries);
  }
  ChunkCollector collector(model, tokens, opt, &split, &comm);
  const auto t0 = std::chrono::steady_clock::now();
  ImatrixChunkReport report;
  report.total = range.end - range.first;
  ChunkResult pending;  // rank 0: its own last chunk, added when the last rank's terms of it come
  const auto finish_chunk = [&](ChunkResult r, bool whole) {
    const ChunkResult tail = parse_chunk_result(comm.receive(last));
    r.run = tail.run;
    if (r.error.empty()) r.error = tail.error;
    add_chunk_sums(m, r, model, m.chunk_count);
    add_chunk_run(m, r);
    if (whole)
      for (int k = 1; k < comm.size(); ++k) parse_entries_into(comm.receive(k), m.entries);
    update_report(report, m, r.chunk, opt.n_ctx, t0);
    if (on_chunk) on_chunk(report, m);
  };
  const auto whole_after = [&](int64_t c) {
    return c + 1 == range.end || (whole_matrix_due && whole_matrix_due(c - range.first + 1));
  };
  for (int64_t c = range.first; c < range.end; ++c) {
    ChunkResult r = collector.run(c);
    if (!comm.is_root()) {
      add_chunk_sums(own, r, model, 0);
      if (comm.rank() == last) {  // its perplexity terms (or why they failed) for rank 0
        ChunkResult tail;
        tail.chunk = c;
        tail.run = r.run;
        tail.error = r.error;
        comm.post(serialize(tail), 0);
      }
      if (whole_after(c)) comm.post(serialize_entries(own.entries), 0);
      continue;
    }
    if (c > range.first) finish_chunk(std::move(pending), whole_after(c - 1));
    pending = std::move(r);
  }
  if (comm.is_root() && range.end > range.first) finish_chunk(std::move(pending), whole_after(range.end - 1));
}

}  // namespace

void collect_imatrix(const Model& model, const std::vector<Token>& tokens, const ImatrixOptions& opt, Imatrix& m,
                     const std::function<bool(const ImatrixChunkReport&, const Imatrix&)>& on_chunk,
                     dist::Comm& comm, const std::function<bool(int64_t)>& whole_matrix_due) {
  // Rank 0 holds the matrix (and where a resumed run goes on); the others
  // learn the range from it.
  ImatrixChunkRange range;
  if (comm.is_root()) {
    range = imatrix_chunk_range(static_cast<int64_t>(tokens.size()), opt, m);
    start_run(m, model, opt);
  }
  dist::ByteWriter w;
  w.put(range);
  const std::string range_bytes = comm.broadcast(w.bytes(), 0);
  range = dist::ByteReader(range_bytes).get<ImatrixChunkRange>();
  if (opt.split_layers && comm.size() > 1)
    return collect_split(model, tokens, opt, m, on_chunk, whole_matrix_due, comm, range);

  ChunkCollector collector(model, tokens, opt);
  const auto t0 = std::chrono::steady_clock::now();
  ImatrixChunkReport report;
  report.total = range.end - range.first;
  // Rounds of one chunk per rank; rank 0 adds them in chunk order, so the
  // matrix is the one a single process makes.
  for (int64_t base = range.first; base < range.end; base += comm.size()) {
    const int64_t c = base + comm.rank();
    bool go_on = true;
    for (const ChunkResult& r : run_round(collector, c < range.end ? c : -1, comm)) {
      if (r.chunk < 0 || !go_on) continue;
      add_chunk_sums(m, r, model, m.chunk_count);
      add_chunk_run(m, r);
      update_report(report, m, r.chunk, opt.n_ctx, t0);
      if (on_chunk && !on_chunk(report, m)) go_on = false;
    }
    if (comm.broadcast(go_on ? "1" : "0", 0) != "1") break;
  }
}

}  // namespace qlens::tools
