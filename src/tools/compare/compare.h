// qlens compare: a reference and a test model (or one model on two devices)
// on the same token chunks, side by side. Per named node: each model's
// statistics and the error between them, reduced on the backend by taps
// (ContextPair keeps each reference node alive until its partner is
// computed), streamed over all tokens; per token: KL divergence and the rest
// of llama.cpp's --kl-divergence figures, from one run of both models.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "qlens/model.h"
#include "tools/compare/compare_logits.h"
#include "tools/compare/compare_report.h"

namespace qlens::tools {

struct CompareOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 512;    // capped at n_ctx
  int64_t max_chunks = -1;  // < 0: every whole chunk
  int n_threads = 0;
  CpuOptions cpu;  // the CPU backend's kernels (see ContextOptions)
  VulkanOptions vulkan;  // a Vulkan device's (see ContextOptions)
  std::string nodes_regex;  // only nodes whose label matches (ECMAScript, searched); empty: all
  bool logits_only = false; // no node at all: the output distributions only
  std::string device_ref = "cpu", device = "cpu";
  int n_gpu_layers = -1;    // for each model on its device
  DType cache_type = DType::F16;  // KV cache: F16 (default), F32, BF16
  // How the per-node reductions are made: on the backends (taps), or by
  // copying every node to the host (the oracle; slow).
  bool host_reductions = false;
  // Over the ranks of compare_models' `comm`: each rank runs its layers of
  // both models (tools/common/layer_pipeline.h) and measures their nodes.
  bool split_layers = false;
  // Called per chunk with its n_ctx text tokens, then per scored position with
  // the reference's logits, in order (what llama.cpp's --kl-divergence-base
  // file of the reference holds: LlamaLogitsWriter).
  std::function<void(std::span<const Token>)> on_chunk_tokens;
  std::function<void(std::span<const float>)> on_ref_scored_logits;
};

struct CompareResult {
  CompareMeta meta;
  std::vector<NodeComparison> nodes;  // graph order
  LogitSummary logits;
  ErrorGrowth growth;
  std::vector<RouterAgreement> routers;  // per MoE layer; empty for dense models
  double seconds = 0;
  double tokens_per_second = 0;  // tokens through both models
};

// Calls on_chunk(done, total, running mean KLD) after each chunk.
// With opt.split_layers over the ranks of `comm` (every rank calls it): rank
// 0's result, and its on_chunk, are one process's (the last rank sends each
// chunk's token figures, every rank its nodes and routers at the end); the
// other ranks return an empty result.
CompareResult compare_models(const Model& ref, const Model& test, const std::vector<Token>& tokens,
                             const CompareOptions& opt,
                             const std::function<void(int64_t, int64_t, double)>& on_chunk = {},
                             dist::Comm& comm = dist::world());

// The report `qlens compare` prints: the logits, the layer table of `metric`,
// where the error grows, the experts' routing (MoE models), and the `top`
// worst nodes (none when top <= 0), each under a "== title ==" line.
void print_compare(std::ostream& out, const CompareResult& r, Metric metric, int64_t top);

// --json (write_compare_json's document, ending in a newline): of a
// comparison, and of one against llama.cpp's log-probability file, which has
// logits only (no node; the file's n_ctx as chunk and batch size).
std::string compare_json(const CompareResult& r);
std::string compare_logits_file_json(const std::string& base_path, const std::string& test_path, int64_t n_ctx,
                                     int64_t n_chunks, const LogitSummary& logits);

}  // namespace qlens::tools
