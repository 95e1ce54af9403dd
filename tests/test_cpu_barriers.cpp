// Where the CPU backend's threads meet between nodes (barriers.h), and the
// promise that lets element-wise chains skip them: a kernel of Split::Pieces
// or PiecesOfRows writes, on thread ith of nth, exactly the pieces
// for_each_piece gives that thread. The op-case table's multi-thread runs
// (test_backend_ops: 2, 3 and 7 threads bit for bit against one) run every
// case graph with the barriers these tests place.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cpu/barriers.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend_ops_cases.h"
#include "qlens/tensor.h"
#include "test_util.h"

namespace qlens::cpu {
namespace {

std::vector<MemoryAccess> node_accesses(const Graph& g) {
  std::vector<MemoryAccess> v;
  for (const Tensor* n : g.nodes())
    if (!op_is_view(n->op)) v.push_back(MemoryAccess::node(*n, kernel_of(n->op).split, false));
  return v;
}


Tensor* leaf(Graph& g, std::initializer_list<int64_t> ne, const char* name) {
  Tensor* t = g.new_tensor(DType::F32, ne, name);
  t->flags |= kFlagInput;
  return t;
}

// A generated token's attention input, as the standard block builds it: norm,
// its scaling, then the q, k and v products of the same row.
TEST(CpuBarriers, ProductsOfOneRowShareASegment) {
  Graph g;
  Tensor* x = leaf(g, {64, 1}, "x");
  Tensor* w = leaf(g, {64}, "w");
  Tensor* wq = leaf(g, {64, 64}, "wq");
  Tensor* wk = leaf(g, {64, 16}, "wk");
  Tensor* wv = leaf(g, {64, 16}, "wv");
  Tensor* normed = mul(g, rms_norm(g, x, 1e-5f), w);
  Tensor* q = mul_mat(g, wq, normed);
  Tensor* k = mul_mat(g, wk, normed);
  Tensor* v = mul_mat(g, wv, normed);
  for (Tensor* t : {q, k, v}) g.build(t);
  Tensor* sum = add(g, add(g, q, q), k);  // reads q and k: after a barrier
  g.build(sum);
  g.build(v);
  std::vector<char> buf;
  test::plan_into(g, buf);
  const std::vector<uint8_t> b = barriers_before(node_accesses(g));
  // rms_norm, mul (its own pieces) | q, k, v | add, add (its own pieces; k is
  // from the segment before)
  ASSERT_EQ(b.size(), 7u);
  EXPECT_EQ(b, (std::vector<uint8_t>{0, 0, 1, 0, 0, 1, 0}));
}

// A norm reads whole rows of the sum before it (a barrier), its scaling only
// the elements its own thread normed (none).
TEST(CpuBarriers, AScalingAfterANormRunsBesideIt) {
  Graph g;
  Tensor* x = leaf(g, {64, 1}, "x");
  Tensor* w = leaf(g, {64}, "w");
  Tensor* sum = add(g, x, x);
  sum->flags |= kFlagOutput;  // read again later, as a residual is: its bytes are not reused
  Tensor* scaled = mul(g, rms_norm(g, sum, 1e-5f), w);
  g.build(scaled);
  std::vector<char> buf;
  test::plan_into(g, buf);
  EXPECT_EQ(barriers_before(node_accesses(g)), (std::vector<uint8_t>{0, 1, 0}));
}

TEST(CpuBarriers, ReadsOfOtherPiecesWait) {
  Graph g;
  Tensor* x = leaf(g, {64, 4}, "x");
  Tensor* y = leaf(g, {64, 1}, "y");
  Tensor* s = scale(g, x, 2.0f);                         // pieces of a [64, 4]
  Tensor* row = scale(g, y, 3.0f);                       // pieces of a [64, 1]
  Tensor* broadcast = mul(g, s, row);                    // reads s by its pieces, row broadcast: wait
  Tensor* normed = rms_norm(g, broadcast, 1e-5f);        // whole rows of broadcast: wait
  Tensor* again = scale(g, normed, 0.5f);                // the norm's own pieces: no wait
  g.build(again);
  for (Tensor* n : g.nodes()) n->flags |= kFlagOutput;  // no bytes reused
  std::vector<char> buf;
  test::plan_into(g, buf);
  EXPECT_EQ(barriers_before(node_accesses(g)), (std::vector<uint8_t>{0, 0, 1, 1, 0}));
}

// Conflicts by address: a node that overwrites what an earlier node of its
// segment reads (the memory plan reused the bytes) or writes waits.
TEST(CpuBarriers, OverwritingWhatTheSegmentTouchesWaits) {
  Graph g;
  Tensor* a = leaf(g, {64}, "a");
  Tensor* b = leaf(g, {64}, "b");
  Tensor* first = scale(g, a, 2.0f);
  Tensor* second = scale(g, b, 2.0f);
  g.build(first);
  g.build(second);
  std::vector<float> mem(4 * 64);
  a->data = mem.data();
  b->data = mem.data() + 64;
  first->data = mem.data() + 128;
  second->data = mem.data() + 192;
  EXPECT_EQ(barriers_before(node_accesses(g)), (std::vector<uint8_t>{0, 0}));
  second->data = a->data;  // over what first reads, element for element: each thread its own pieces
  EXPECT_EQ(barriers_before(node_accesses(g)), (std::vector<uint8_t>{0, 0}));
  second->data = mem.data() + 16;  // over what first reads, other elements
  EXPECT_EQ(barriers_before(node_accesses(g)), (std::vector<uint8_t>{0, 1}));
  second->data = mem.data() + 128 + 32;  // write after write (half of first)
  EXPECT_EQ(barriers_before(node_accesses(g)), (std::vector<uint8_t>{0, 1}));
  second->data = mem.data() + 192;
  b->data = mem.data() + 128 + 16;  // read after write, other pieces' bytes
  EXPECT_EQ(barriers_before(node_accesses(g)), (std::vector<uint8_t>{0, 1}));
}

TEST(CpuBarriers, NodesWithSharedScratchRunAlone) {
  Graph g;
  Tensor* a = leaf(g, {64}, "a");
  Tensor* b = leaf(g, {64}, "b");
  Tensor* c = leaf(g, {64}, "c");
  std::vector<MemoryAccess> items;
  for (Tensor* x : {a, b, c}) {
    Tensor* s = scale(g, x, 2.0f);
    g.build(s);
  }
  std::vector<char> buf;
  test::plan_into(g, buf);
  const auto& n = g.nodes();
  items.push_back(MemoryAccess::node(*n[0], Split::Pieces, false));
  items.push_back(MemoryAccess::node(*n[1], Split::Pieces, true));
  items.push_back(MemoryAccess::node(*n[2], Split::Pieces, false));
  EXPECT_EQ(barriers_before(items), (std::vector<uint8_t>{0, 1, 1}));
}

// GatedDeltaNet reads six tensors, more than an access holds: it runs alone.
TEST(CpuBarriers, ANodeReadingMoreThanAnAccessHoldsRunsAlone) {
  Graph g;
  std::vector<Tensor*> in;
  for (const char* name : {"a", "b", "c", "d"}) in.push_back(leaf(g, {64}, name));
  Tensor* many = g.new_tensor(DType::F32, {64}, "many");
  many->op = Op::Add;  // its sources are what counts here
  for (int i = 0; i < 4; ++i) many->src[i] = in[i];
  Tensor* before = scale(g, leaf(g, {64}, "e"), 2.0f);
  Tensor* after = scale(g, leaf(g, {64}, "f"), 2.0f);
  std::vector<float> mem(9 * 64);
  int k = 0;
  for (Tensor* t : {in[0], in[1], in[2], in[3], many, before, after, before->src[0], after->src[0]}) t->data = mem.data() + 64 * k++;
  const std::vector<MemoryAccess> items = {MemoryAccess::node(*before, Split::Pieces, false),
                                           MemoryAccess::node(*many, Split::Any, false),
                                           MemoryAccess::node(*after, Split::Pieces, false)};
  EXPECT_EQ(barriers_before(items), (std::vector<uint8_t>{0, 1, 1}));
}

// A column-sum tap reads the product's activations, complete before the
// product started: threads go on to it without waiting. A tap on the
// product's result waits for it.
TEST(CpuBarriers, TapsWaitForWhatTheyRead) {
  Graph g;
  Tensor* w = leaf(g, {64, 32}, "w");
  Tensor* x = leaf(g, {64, 2}, "x");
  Tensor* y = mul_mat(g, w, x);
  g.build(y);
  std::vector<char> buf;
  test::plan_into(g, buf);
  char states[2];  // only their addresses are used
  TapState* state = reinterpret_cast<TapState*>(&states[0]);
  TapState* other_state = reinterpret_cast<TapState*>(&states[1]);
  const TapWork column{0, TapKind::ColumnSumSq, nullptr, state};
  const TapWork stats{0, TapKind::Stats, nullptr, other_state};
  const MemoryAccess product = MemoryAccess::node(*y, Split::Any, false);
  EXPECT_EQ(barriers_before(std::vector<MemoryAccess>{product, MemoryAccess::tap(column, *y)}),
            (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(barriers_before(std::vector<MemoryAccess>{product, MemoryAccess::tap(stats, *y)}),
            (std::vector<uint8_t>{0, 1}));
  // Two taps into one state add to the same partials.
  EXPECT_EQ(barriers_before(std::vector<MemoryAccess>{product, MemoryAccess::tap(column, *y),
                                                      MemoryAccess::tap(column, *y)}),
            (std::vector<uint8_t>{0, 0, 1}));
}

// Whether element e of row r belongs to thread ith's pieces.
std::vector<uint8_t> pieces_of_thread(const Tensor& node, int ith, int nth) {
  const int64_t n = node.ne[0];
  const Pieces pieces(node.nrows(), n, nth);
  int64_t p0, p1;
  split_range(pieces.count, ith, nth, &p0, &p1);
  std::vector<uint8_t> mine(node.nelements(), 0);
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r = p / pieces.per_row, e0 = p % pieces.per_row * pieces.length;
    for (int64_t e = e0; e < std::min(n, e0 + pieces.length); ++e) mine[r * n + e] = 1;
  }
  return mine;
}

// Every node of the op-case table whose kernel claims pieces, run as one
// thread of 2 and 3 over a result filled with a marker: the elements that
// thread changed are exactly its pieces.
TEST(CpuBarriers, PiecesKernelsWriteOnlyTheirPieces) {
  const Isa isa = best_isa();
  const KernelOptions options = kernel_options(test::cpu_options(), isa);
  auto cpu = qlens::make_cpu_backend(1, test::cpu_options());
  constexpr uint32_t kMarker = 0x7fa5a5a5u;  // a NaN no kernel makes
  int checked = 0;
  for (const opcases::OpCase& c : opcases::op_cases()) {
    opcases::CaseGraph cg(c.seed);
    for (Tensor* t : c.build(cg)) {
      if (t->op != Op::None) t->flags |= kFlagOutput;
      cg.g.build(t);
    }
    bool claims = false;
    for (Tensor* n : cg.g.nodes()) {
      claims |= kernel_of(n->op).split != Split::Any;
      n->flags |= kFlagOutput;  // every result kept: nodes run again below read their sources
    }
    if (!claims || !std::all_of(cg.g.nodes().begin(), cg.g.nodes().end(), [&](const Tensor* n) {
          return op_is_view(n->op) || cpu->supports_op(*n);
        }))
      continue;
    std::vector<char> buf;
    test::plan_into(cg.g, buf);
    cpu->compute(cg.g);
    for (const Tensor* n : cg.g.nodes()) {
      const Kernel& k = kernel_of(n->op);
      if (k.split == Split::Any || n->type != DType::F32 || !n->is_contiguous()) continue;
      SCOPED_TRACE(c.op + " '" + c.name + "': " + op_name(n->op) + " '" + n->name + "' " + shape_string(*n));
      for (int nth : {2, 3})
        for (int ith = 0; ith < nth; ++ith) {
          auto* out = static_cast<uint32_t*>(n->data);
          std::fill(out, out + n->nelements(), kMarker);
          std::vector<char> scratch(k.scratch(*n, nth, options) + 64);
          char* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
          std::atomic<int64_t> counter{0};
          const KernelCtx ctx{ith, nth, aligned, nullptr, &counter, nullptr, &vec_ops(isa), &options, nullptr};
          k.run(*n, ctx);
          const std::vector<uint8_t> mine = pieces_of_thread(*n, ith, nth);
          int64_t wrong = 0;
          for (int64_t e = 0; e < n->nelements(); ++e) wrong += (out[e] != kMarker) != (mine[e] != 0);
          EXPECT_EQ(wrong, 0) << "thread " << ith << " of " << nth;
        }
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
  std::printf("  %d nodes checked\n", checked);
}

}  // namespace
}  // namespace qlens::cpu
