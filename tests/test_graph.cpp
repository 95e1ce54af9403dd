// Core: type conversions, graph building (shapes, views, order) and memory planning.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <unordered_map>

#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/pointer_map.h"
#include "qlens/tensor.h"
#include "qlens/types.h"
#include "ops/op_table.h"

namespace qlens {
namespace {

// Reference rounding of a float to half through double arithmetic.
uint16_t fp16_reference(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity
  // Find the best of all 0x7c00 finite magnitudes by nearest-even search.
  int lo = 0, hi = 0x7bff;
  while (lo < hi) {  // largest code with value <= a
    int mid = (lo + hi + 1) / 2;
    if (fp16_to_fp32(static_cast<uint16_t>(mid)) <= a) lo = mid; else hi = mid - 1;
  }
  double below = fp16_to_fp32(static_cast<uint16_t>(lo));
  if (below == a || lo == 0x7bff) return sign | static_cast<uint16_t>(lo);
  double above = fp16_to_fp32(static_cast<uint16_t>(lo + 1));
  int pick = (a - below < above - a) ? lo : (a - below > above - a) ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return sign | static_cast<uint16_t>(pick);
}

TEST(Types, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
      continue;
    }
    EXPECT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(Types, HalfRoundsToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f;
    uint32_t b = bits(rng);
    std::memcpy(&f, &b, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), fp16_reference(f)) << "float " << f;
  }
  // Ties: 1 + 2^-11 lies halfway between 1 and the next half; even is 1.
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(1e6f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -26)), 0x0000);  // below half of it
}

TEST(Types, BFloat16) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1).
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
}

TEST(Types, TraitsTable) {
  EXPECT_EQ(type_traits(DType::Q4_K).block_size, 256);
  EXPECT_EQ(type_traits(DType::Q4_K).block_bytes, 144u);
  EXPECT_EQ(type_traits(DType::Q8_0).block_bytes, 34u);
  EXPECT_EQ(find_type_traits(4), nullptr);   // removed Q4_2
  EXPECT_EQ(find_type_traits(99), nullptr);
  EXPECT_EQ(type_from_name("bf16"), DType::BF16);
  EXPECT_FALSE(type_from_name("Q9_9").has_value());
  EXPECT_EQ(row_bytes(DType::Q4_0, 64), 36u);
  EXPECT_EQ(row_bytes(DType::F16, 7), 14u);
}

TEST(Graph, ShapesOfBuilders) {
  Graph g;
  Tensor* w = g.new_tensor(DType::F16, {64, 32}, "w");
  Tensor* x = g.new_tensor(DType::F32, {64, 5}, "x");
  Tensor* y = mul_mat(g, w, x);
  EXPECT_EQ(y->ne, (std::array<int64_t, 4>{32, 5, 1, 1}));
  EXPECT_EQ(y->type, DType::F32);
  Tensor* r = reshape(g, y, {8, 4, 5});
  EXPECT_EQ(r->ne, (std::array<int64_t, 4>{8, 4, 5, 1}));
  EXPECT_EQ(r->view_src, y);
  Tensor* p = permute(g, r, 0, 2, 1, 3);
  EXPECT_EQ(p->ne, (std::array<int64_t, 4>{8, 5, 4, 1}));
  EXPECT_EQ(p->nb[1], r->nb[2]);
  EXPECT_EQ(p->nb[2], r->nb[1]);
  EXPECT_FALSE(p->is_contiguous());
  Tensor* t = transpose(g, y);
  EXPECT_EQ(t->ne, (std::array<int64_t, 4>{5, 32, 1, 1}));
  EXPECT_TRUE(t->is_transposed());
  EXPECT_EQ(t->nbytes(), y->nbytes());
  Tensor* c = cont(g, p);
  EXPECT_TRUE(c->is_contiguous());
  EXPECT_EQ(c->view_src, nullptr);
}

TEST(Graph, BuildersRejectBadShapesNamingTensors) {
  Graph g;
  Tensor* w = g.new_tensor(DType::F32, {64, 32}, "blk.0.attn_q.weight");
  Tensor* x = g.new_tensor(DType::F32, {63, 5}, "x");
  try {
    mul_mat(g, w, x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add(g, w, x), Error);
  EXPECT_THROW(reshape(g, w, {7, 7}), Error);
  EXPECT_THROW(reshape(g, transpose(g, w), {32, 64}), Error);  // not contiguous
  EXPECT_THROW(view(g, w, {64, 33}, {256}, 0), Error);          // past the end
  EXPECT_THROW(permute(g, w, 0, 0, 1, 2), Error);
  EXPECT_THROW(g.new_tensor(DType::Q4_0, {33}, "q"), Error);    // not whole blocks
}

// One rule, read twice: a builder refuses a node in the op table's words
// (naming the tensors), and every backend declines the same node made by hand.
TEST(Graph, BuildersCheckNodesByTheOpTable) {
  Graph g;
  Tensor* scores = g.new_tensor(DType::F32, {8, 4}, "kq");
  Tensor* mask = g.new_tensor(DType::F32, {8, 2}, "KQ_mask");
  Tensor* w = g.new_tensor(DType::F32, {64, 32}, "blk.0.attn_q.weight");
  Tensor* x = g.new_tensor(DType::F32, {63, 5}, "x");
  struct Broken {
    Op op;
    std::function<void()> build;
    std::array<Tensor*, 2> src;
    std::array<int64_t, 4> ne;
    const char* words;
  };
  const Broken cases[] = {
      {Op::SoftMax, [&] { soft_max(g, scores, mask, 1.0f); }, {scores, mask}, scores->ne,
       "'KQ_mask' {8, 2, 1, 1} does not cover 'kq' {8, 4, 1, 1}"},
      {Op::MulMat, [&] { mul_mat(g, w, x); }, {w, x}, {32, 5, 1, 1},
       "row lengths differ: 'blk.0.attn_q.weight' {64, 32, 1, 1} and 'x' {63, 5, 1, 1}"},
      {Op::Add, [&] { add(g, w, x); }, {w, x}, w->ne, "'x' {63, 5, 1, 1} cannot be broadcast to"},
  };
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_reference_backend());
  for (const DeviceInfo& d : list_devices()) backends.push_back(make_backend(d.id, 1));  // the CPU, Vulkan devices
  for (const Broken& c : cases) {
    std::string built;
    try {
      c.build();
      ADD_FAILURE() << op_name(c.op) << " built";
    } catch (const Error& e) {
      built = e.what();
    }
    Tensor* node = g.new_tensor(DType::F32, c.ne, "by hand");
    node->op = c.op;
    node->src[0] = c.src[0];
    node->src[1] = c.src[1];
    const std::string rule = op_def(c.op).invalid(*node);
    EXPECT_NE(rule.find(c.words), std::string::npos) << rule;
    EXPECT_EQ(built, op_lower_name(c.op) + ": " + rule);
    for (const auto& b : backends) EXPECT_FALSE(b->supports_op(*node)) << b->name() << ": " << built;
  }
}

// The builder's error for a refused build ("" when it built).
std::string refusal(const std::function<void()>& build) {
  try {
    build();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// GatedDeltaNet's result packs ggml's way (outputs, then the final states:
// [S H_v, T seqs + S seqs]); its rules name the tensor and the shape it must
// have, and only the final state (K = 1) is kept.
TEST(Graph, GatedDeltaNetShapesAndRules) {
  Graph g;
  const int64_t S = 16, H_k = 2, H = 4, T = 5, seqs = 3;
  const auto f32 = [&](std::initializer_list<int64_t> ne, const char* name) { return g.new_tensor(DType::F32, ne, name); };
  Tensor* q = f32({S, H_k, T, seqs}, "q");
  Tensor* k = f32({S, H_k, T, seqs}, "k");
  Tensor* v = f32({S, H, T, seqs}, "v");
  Tensor* gate = f32({1, H, T, seqs}, "g");
  Tensor* gate_per_key = f32({S, H, T, seqs}, "g_kda");
  Tensor* beta = f32({1, H, T, seqs}, "beta");
  Tensor* state = f32({S, S, H, seqs}, "state");
  for (Tensor* gt : {gate, gate_per_key}) {
    Tensor* r = gated_delta_net(g, q, k, v, gt, beta, state);
    EXPECT_EQ(r->ne, (std::array<int64_t, 4>{S * H, T * seqs + S * seqs, 1, 1}));
    EXPECT_STREQ(op_name(r->op), "GATED_DELTA_NET");
  }
  const struct {
    std::function<void()> build;
    const char* words;
  } refused[] = {
      {[&] { gated_delta_net(g, q, k, v, gate, beta, f32({S, S, H, 2}, "state2")); },
       "state 'state2' {16, 16, 4, 2} must be [16, 16, 4, 3]"},
      {[&] { gated_delta_net(g, f32({S, 3, T, seqs}, "q3"), f32({S, 3, T, seqs}, "k3"), v, gate, beta, state); },
       "with H_k dividing the 4 heads of values 'v'"},
      {[&] { gated_delta_net(g, q, f32({S, 1, T, seqs}, "k1"), v, gate, beta, state); }, "differ in shape"},
      {[&] { gated_delta_net(g, q, k, v, f32({2, H, T, seqs}, "g2"), beta, state); },
       "gate 'g2' {2, 4, 5, 3} must be [1, 4, 5, 3] or [16, 4, 5, 3]"},
      {[&] { gated_delta_net(g, q, k, v, gate, f32({S, H, T, seqs}, "beta16"), state); },
       "beta 'beta16' {16, 4, 5, 3} must be [1, 4, 5, 3]"},
      {[&] { gated_delta_net(g, q, k, v, gate, beta, state, 2); }, "only the final state is kept"},
      {[&] { gated_delta_net(g, q, k, v, gate, beta, nullptr); }, "a source is missing"},
  };
  for (const auto& r : refused) {
    const std::string why = refusal(r.build);
    EXPECT_NE(why.find(r.words), std::string::npos) << why;
    EXPECT_EQ(why.rfind("gated_delta_net: ", 0), 0u) << why;
  }
}

// Multi-section rope takes four positions per token and its sections; the
// other modes one position, and no sections.
TEST(Graph, RopeMultiTakesFourPositionsPerToken) {
  Graph g;
  Tensor* a = g.new_tensor(DType::F32, {64, 2, 5}, "Qcur");
  Tensor* pos4 = g.new_tensor(DType::I32, {20}, "inp_pos");
  Tensor* pos1 = g.new_tensor(DType::I32, {5}, "inp_pos1");
  for (RopeMode mode : {RopeMode::MRope, RopeMode::IMRope}) {
    Tensor* r = rope_multi(g, a, pos4, 64, {11, 11, 10, 0}, mode, 1e7f, 1.0f);
    EXPECT_EQ(r->ne, a->ne);
    EXPECT_EQ(rope_sections(*r), (RopeSections{11, 11, 10, 0}));
  }
  EXPECT_NE(refusal([&] { rope_multi(g, a, pos1, 64, {11, 11, 10, 0}, RopeMode::IMRope, 1e7f, 1.0f); })
                .find("'inp_pos1' {5, 1, 1, 1} must be an I32 vector with four entries per token"),
            std::string::npos);
  EXPECT_NE(refusal([&] { rope(g, a, pos4, 64, RopeMode::NeoX, 1e7f, 1.0f); }).find("one entry per token"),
            std::string::npos);
  EXPECT_NE(refusal([&] { rope(g, a, pos4, 64, RopeMode::IMRope, 1e7f, 1.0f); }).find("rope_multi"), std::string::npos);
  EXPECT_NE(refusal([&] { rope_multi(g, a, pos4, 64, {11, 11, 10, 0}, RopeMode::NeoX, 1e7f, 1.0f); })
                .find("is not MRope or IMRope"),
            std::string::npos);
  for (RopeSections bad : {RopeSections{-1, 11, 10, 0}, RopeSections{0, 0, 0, 8}, RopeSections{30, 30, 10, 0}})
    EXPECT_NE(refusal([&] { rope_multi(g, a, pos4, 64, bad, RopeMode::MRope, 1e7f, 1.0f); }).find("sections {"),
              std::string::npos);
}

// ggml's assignment of pairs to positions (time, height, width, extra):
// Qwen3.5's sections {11, 11, 10, 0} over 32 pairs, MRope in runs, IMRope
// dealt in turn; sections summing to fewer pairs repeat, and IMRope's lane
// for a section ends at 3 s (then the extra position).
TEST(Graph, RopeSectionsAssignPairsAsGgml) {
  const RopeSections qwen{11, 11, 10, 0};
  std::string imrope, mrope;
  for (int64_t i = 0; i < 32; ++i) {
    imrope += "thwe"[rope_position_of(RopeMode::IMRope, qwen, i)];
    mrope += "thwe"[rope_position_of(RopeMode::MRope, qwen, i)];
  }
  EXPECT_EQ(imrope, "thwthwthwthwthwthwthwthwthwthwth");
  EXPECT_EQ(mrope, "ttttttttttthhhhhhhhhhhwwwwwwwwww");
  std::string repeat;
  for (int64_t i = 0; i < 16; ++i) repeat += "thwe"[rope_position_of(RopeMode::IMRope, {4, 2, 1, 1}, i)];
  EXPECT_EQ(repeat, "thwthetethwthete");
  EXPECT_EQ(rope_position_of(RopeMode::NeoX, qwen, 5), 0);
}

TEST(Graph, TopologicalOrderVisitsSharedNodesOnce) {
  Graph g;
  Tensor* a = g.new_tensor(DType::F32, {4}, "a");
  Tensor* b = scale(g, a, 2.0f);
  Tensor* c = add(g, b, b);
  Tensor* d = mul(g, c, b);
  g.build(d);
  g.build(d);  // idempotent
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.nodes()[0], b);
  EXPECT_EQ(g.nodes()[1], c);
  EXPECT_EQ(g.nodes()[2], d);
  ASSERT_EQ(g.leaves().size(), 1u);
  EXPECT_EQ(g.leaves()[0], a);
}

TEST(Graph, DeepChainDoesNotOverflowTheStack) {
  Graph g;
  Tensor* t = g.new_tensor(DType::F32, {4}, "x");
  for (int i = 0; i < 100000; ++i) t = scale(g, t, 1.0f);
  g.build(t);
  EXPECT_EQ(g.nodes().size(), 100000u);
}

TEST(PointerMap, FindsWhatWasInsertedThroughGrowthAndClear) {
  std::vector<Tensor> tensors(1000);  // adjacent addresses: the hash must spread them
  PointerMap<int> map;
  EXPECT_EQ(map.find(&tensors[0]), nullptr);
  for (int i = 0; i < 1000; i += 2) EXPECT_TRUE(map.insert(&tensors[i], i).second);
  EXPECT_EQ(map.size(), 500u);
  for (int i = 0; i < 1000; ++i) {
    const int* v = map.find(&tensors[i]);
    if (i % 2 == 0) {
      ASSERT_NE(v, nullptr) << i;
      EXPECT_EQ(*v, i);
    } else {
      EXPECT_EQ(v, nullptr) << i;
    }
  }
  // insert keeps the first value; operator[] starts from a value-initialized one.
  EXPECT_FALSE(map.insert(&tensors[2], -1).second);
  EXPECT_EQ(*map.find(&tensors[2]), 2);
  EXPECT_EQ(map[&tensors[3]], 0);
  map[&tensors[3]] += 7;
  EXPECT_EQ(*map.find(&tensors[3]), 7);
  map.clear();
  EXPECT_TRUE(map.empty());
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(map.contains(&tensors[i])) << i;
  EXPECT_TRUE(map.insert(&tensors[999], 1).second);
  EXPECT_EQ(*map.find(&tensors[999]), 1);
}

// Checks that no two tensors alive at the same time share bytes.
void expect_no_live_overlap(const Graph& g, const MemoryPlan& plan) {
  const auto& nodes = g.nodes();
  std::unordered_map<const Tensor*, int> first, last;
  auto owner = [](const Tensor* t) { return t->view_src ? t->view_src : t; };
  for (const auto& [t, off] : plan.offsets) first[t] = -1;
  for (int j = 0; j < static_cast<int>(nodes.size()); ++j) {
    if (first.count(nodes[j])) first[nodes[j]] = j;  // computed here; leaves stay at -1
    for (const Tensor* s : nodes[j]->src)
      if (s) last[owner(s)] = j;
    last[owner(nodes[j])] = std::max(last[owner(nodes[j])], j);
  }
  for (const auto& [t, off] : plan.offsets)
    if (t->flags & kFlagOutput || t == nodes.back()) last[t] = 1 << 30;
  for (size_t i = 0; i < plan.offsets.size(); ++i)
    for (size_t k = i + 1; k < plan.offsets.size(); ++k) {
      auto [a, oa] = plan.offsets[i];
      auto [b, ob] = plan.offsets[k];
      const bool live_together = !(last[a] < first[b] || last[b] < first[a]);
      const bool bytes_overlap = oa < ob + b->nbytes() && ob < oa + a->nbytes();
      EXPECT_FALSE(live_together && bytes_overlap) << a->name << " and " << b->name;
    }
}

TEST(MemoryPlan, ChainReusesMemory) {
  Graph g;
  Tensor* t = g.new_tensor(DType::F32, {1024}, "x");
  t->data = reinterpret_cast<void*>(0x1000);  // external leaf
  for (int i = 0; i < 10; ++i) t = named(scale(g, t, 1.0f), "s", i);
  g.build(t);
  MemoryPlan plan = plan_memory(g);
  EXPECT_EQ(plan.offsets.size(), 10u);
  EXPECT_LE(plan.size, 2 * 4096u);  // two buffers ping-pong
  expect_no_live_overlap(g, plan);
}

// A node that does not read the node before it may run beside it on the
// CPU (no barrier between them): it must not write what that node reads.
// A node that reads it waits anyway and may reuse those bytes (a chain
// ping-pongs, above).
TEST(MemoryPlan, ANodeBesideTheOneBeforeDoesNotReuseItsSources) {
  Graph g;
  Tensor* x = g.new_tensor(DType::F32, {1024}, "x");
  x->data = reinterpret_cast<void*>(0x1000);
  Tensor* a = named(scale(g, x, 1.0f), "a");
  Tensor* b = named(scale(g, a, 1.0f), "b");  // a's last reader
  Tensor* c = named(scale(g, x, 1.0f), "c");  // reads neither a nor b
  Tensor* d = named(add(g, b, c), "d");
  g.build(b);
  g.build(c);
  g.build(d);
  MemoryPlan plan = plan_memory(g);
  std::unordered_map<const Tensor*, size_t> off;
  for (auto [t, o] : plan.offsets) off[t] = o;
  EXPECT_NE(off[c], off[a]);
  EXPECT_NE(off[c], off[b]);
  EXPECT_EQ(off[d], off[a]);  // d reads c, the node before it: a's bytes are free
  expect_no_live_overlap(g, plan);
}

TEST(MemoryPlan, KeptTensorsLiveUntilTheirReader) {
  Graph g;
  Tensor* t = g.new_tensor(DType::F32, {1024}, "x");
  t->data = reinterpret_cast<void*>(0x1000);
  std::vector<Tensor*> chain;
  for (int i = 0; i < 8; ++i) chain.push_back(t = named(scale(g, t, 1.0f), "s", i));
  g.keep_until(chain[1], chain[6]);  // s-1 is read (by a tap) when s-6 is computed
  g.build(t);
  MemoryPlan plan = plan_memory(g);
  std::unordered_map<const Tensor*, size_t> off;
  for (auto [x, o] : plan.offsets) off[x] = o;
  for (int i = 2; i <= 6; ++i) EXPECT_NE(off[chain[i]], off[chain[1]]) << i;
  EXPECT_LE(plan.size, 3 * 4096u);
}

TEST(MemoryPlan, OutputsAndInputsAreNeverReused) {
  Graph g;
  Tensor* in = g.new_tensor(DType::F32, {256}, "in");
  in->flags |= kFlagInput;
  Tensor* a = scale(g, in, 2.0f);
  a->flags |= kFlagOutput;
  Tensor* b = scale(g, a, 2.0f);
  Tensor* c = scale(g, b, 2.0f);
  Tensor* d = scale(g, c, 2.0f);
  g.build(d);
  MemoryPlan plan = plan_memory(g);
  std::unordered_map<const Tensor*, size_t> off;
  for (auto [t, o] : plan.offsets) off[t] = o;
  ASSERT_TRUE(off.count(in));
  for (const Tensor* t : {b, c, d}) {
    EXPECT_NE(off[t], off[a]);
    EXPECT_NE(off[t], off[in]);
  }
}

TEST(MemoryPlan, RandomGraphsHaveNoLiveOverlap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    Graph g;
    std::vector<Tensor*> pool;
    for (int i = 0; i < 3; ++i) {
      Tensor* leaf = g.new_tensor(DType::F32, {16 + 16 * i, 4}, "leaf");
      leaf->flags |= kFlagInput;
      pool.push_back(leaf);
    }
    for (int i = 0; i < 40; ++i) {
      Tensor* a = pool[rng() % pool.size()];
      Tensor* r = nullptr;
      switch (rng() % 5) {
        case 0: r = scale(g, a, 1.0f); break;
        case 1: r = add(g, a, a); break;
        case 2: r = cont(g, transpose(g, a)); break;
        case 3: r = silu(g, a); break;
        case 4: r = gelu(g, a); break;
      }
      named(r, "n", i);
      pool.push_back(r);
    }
    Tensor* out = pool.back();
    for (Tensor* t : pool) g.build(t);
    (void)out;
    MemoryPlan plan = plan_memory(g);
    expect_no_live_overlap(g, plan);
    std::vector<uint8_t> buffer(plan.size + 64);
    apply_memory_plan(g, plan, buffer.data());
    for (Tensor* n : g.nodes()) {
      ASSERT_NE(n->data, nullptr);
      if (n->view_src) {
        EXPECT_EQ(n->data, static_cast<char*>(n->view_src->data) + n->view_offset);
      }
    }
  }
}

}  // namespace
}  // namespace qlens
