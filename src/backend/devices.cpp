// Device discovery and backend creation by id ("cpu", "vulkan:N").
#include <fstream>
#include <thread>

#include "backend/cpu/isa.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#ifdef QLENS_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace qlens {

namespace {

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "CPU";
}

}  // namespace

DeviceInfo cpu_device_info(const CpuOptions& options) {
  const cpu::Isa isa = cpu::isa_for(options.isa);
  const char* int8 = options.int8_gemm ? cpu::int8_kernel_name(isa, options.vnni) : "off";
  DeviceInfo cpu;
  cpu.id = "cpu";
  cpu.name = cpu_name() + " (" + std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " threads, " +
             cpu::isa_name(isa) + " kernels, int8 GEMM: " + int8 +
             (cpu::kernel_options(options, isa).grid_gathers ? ", grids by gathers" : "") + ")";
  cpu.kind = "cpu";
  return cpu;
}

std::vector<DeviceInfo> list_devices(const CpuOptions& cpu) {
  std::vector<DeviceInfo> out = {cpu_device_info(cpu)};
#ifdef QLENS_VULKAN
  for (DeviceInfo& d : vulkan::devices()) out.push_back(std::move(d));
#endif
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& device, int n_threads, const CpuOptions& cpu,
                                      const VulkanOptions& vulkan) {
  if (device.empty() || device == "cpu") return make_cpu_backend(n_threads, cpu);
#ifdef QLENS_VULKAN
  if (device.rfind("vulkan:", 0) == 0) {
    const std::string index = device.substr(7);
    if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos) {
      const auto devices = vulkan::devices();
      const size_t i = std::stoul(index);
      if (i < devices.size()) return vulkan::make_backend(static_cast<int>(i), vulkan);
    }
  }
#else
  (void)vulkan;
#endif
  std::string known;
  for (const DeviceInfo& d : list_devices()) known += (known.empty() ? "" : ", ") + d.id;
  throw Error("no device '" + device + "' (devices here: " + known + ")");
}

}  // namespace qlens
