#include "backend/vulkan/vk_profile.h"

#include <algorithm>
#include <cstdio>

#include "backend/vulkan/vk_device.h"

namespace qlens::vulkan {

namespace {
constexpr uint32_t kQueries = 8192;
}

Profiler::Profiler(Device& device) : device_(device) {
  if (!device.options().profile || device.timestamp_period() <= 0) return;
  auto info = vk_struct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
  info.queryType = VK_QUERY_TYPE_TIMESTAMP;
  info.queryCount = kQueries;
  if (vkCreateQueryPool(device.handle(), &info, nullptr, &pool_) != VK_SUCCESS) pool_ = VK_NULL_HANDLE;
}

Profiler::~Profiler() {
  if (!enabled()) return;
  vkDestroyQueryPool(device_.handle(), pool_, nullptr);
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  double all = 0;
  for (const auto& [name, t] : rows) all += t.ns;
  std::fprintf(stderr, "%s: time per shader (timestamps)\n%-24s %10s %10s %9s %6s\n", device_.name().c_str(), "shader",
               "ms", "dispatches", "us/disp", "%");
  for (const auto& [name, t] : rows)
    std::fprintf(stderr, "%-24s %10.2f %10llu %9.1f %6.1f\n", name.c_str(), t.ns * 1e-6,
                 static_cast<unsigned long long>(t.dispatches), t.ns * 1e-3 / static_cast<double>(t.dispatches),
                 all > 0 ? 100.0 * t.ns / all : 0.0);
  if (untimed_) std::fprintf(stderr, "(%llu dispatches not timed)\n", static_cast<unsigned long long>(untimed_));
}

void Profiler::begin(VkCommandBuffer cmd) {
  if (!enabled()) return;
  pending_.clear();
  vkCmdResetQueryPool(cmd, pool_, 0, kQueries);
  vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, 0);
}

void Profiler::mark(VkCommandBuffer cmd, const std::string& shader) {
  if (!enabled()) return;
  if (pending_.size() + 1 >= kQueries) {
    ++untimed_;
    return;
  }
  pending_.push_back(shader);
  vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, static_cast<uint32_t>(pending_.size()));
}

void Profiler::collect() {
  if (!enabled() || pending_.empty()) return;
  std::vector<uint64_t> ts(pending_.size() + 1);
  if (vkGetQueryPoolResults(device_.handle(), pool_, 0, static_cast<uint32_t>(ts.size()), ts.size() * sizeof(uint64_t),
                            ts.data(), sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
    return;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Total& t = totals_[pending_[i]];
    t.ns += static_cast<double>(ts[i + 1] - ts[i]) * device_.timestamp_period();
    ++t.dispatches;
  }
  pending_.clear();
}

}  // namespace qlens::vulkan
