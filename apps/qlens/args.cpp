#include "args.h"

#include <cstdio>

#include "qlens/backend.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <iostream>
#include <sstream>
#include <thread>

#include "core/parallel.h"
#include "dist/comm.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/common/layer_pipeline.h"

namespace qlens::cli {

namespace {

template <typename T>
T parse_number(const std::string& command, const std::string& name, const std::string& value) {
  T v{};
  const char* first = value.data();
  const char* last = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || ptr != last || value.empty()) {
    const char* what = std::is_integral_v<T> ? "an integer" : "a number";
    throw Error("qlens " + command + ": option " + name + ": '" + value + "' is not " + what);
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) throw Error("qlens " + command + ": option " + name + ": '" + value + "' is not finite");
  }
  return v;
}

}  // namespace

ArgParser::ArgParser(std::string command, std::string usage, std::string summary)
    : command_(std::move(command)), usage_(std::move(usage)), summary_(std::move(summary)) {}

void ArgParser::add(std::vector<std::string> names, std::string* out, std::string metavar, std::string help) {
  options_.push_back({std::move(names), std::move(metavar), std::move(help),
                      [out](const std::string&, const std::string& v) { *out = v; }});
}

void ArgParser::add(std::vector<std::string> names,
                    std::function<void(const std::string& name, const std::string& value)> set, std::string metavar,
                    std::string help) {
  options_.push_back({std::move(names), std::move(metavar), std::move(help), std::move(set)});
}

// The flags every command shares mean the same everywhere, and values that
// mean nothing are refused before any work (llama.cpp's meaning kept where it
// has one: -t 0 or less is one thread per core, -ngl -1 the default).
static void check_shared_flag(const std::string& command, const std::vector<std::string>& names, const std::string& given,
                       int64_t v) {
  auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  auto fail = [&](const std::string& why) {
    throw Error("qlens " + command + ": " + given + " " + std::to_string(v) + ": " + why);
  };
  if (has("-b") && v < 1) fail("the batch size must be 1 or more");
  if (has("-c") && v < 0) fail("the context size must be positive (0: the model's training context where allowed)");
  if (has("--chunks") && (v == 0 || v < -1)) fail("the number of chunks must be 1 or more (-1: all of them)");
  if (has("-ngl") && v < -1) fail("the number of layers must be 0 or more (-1: the default, all)");
}

void ArgParser::add(std::vector<std::string> names, int64_t* out, std::string metavar, std::string help) {
  const std::vector<std::string> all = names;
  options_.push_back({std::move(names), std::move(metavar), std::move(help),
                      [this, out, all](const std::string& n, const std::string& v) {
                        *out = parse_number<int64_t>(command_, n, v);
                        check_shared_flag(command_, all, n, *out);
                      }});
}

void ArgParser::add(std::vector<std::string> names, int* out, std::string metavar, std::string help) {
  const std::vector<std::string> all = names;
  options_.push_back({std::move(names), std::move(metavar), std::move(help),
                      [this, out, all](const std::string& n, const std::string& v) {
                        *out = parse_number<int>(command_, n, v);
                        check_shared_flag(command_, all, n, *out);
                      }});
}

void ArgParser::add(std::vector<std::string> names, double* out, std::string metavar, std::string help) {
  options_.push_back({std::move(names), std::move(metavar), std::move(help),
                      [this, out](const std::string& n, const std::string& v) {
                        *out = parse_number<double>(command_, n, v);
                      }});
}

void ArgParser::add(std::vector<std::string> names, float* out, std::string metavar, std::string help) {
  options_.push_back({std::move(names), std::move(metavar), std::move(help),
                      [this, out](const std::string& n, const std::string& v) {
                        *out = parse_number<float>(command_, n, v);
                      }});
}

void ArgParser::add(std::vector<std::string> names, std::vector<std::string>* out, std::string metavar,
                    std::string help) {
  options_.push_back({std::move(names), std::move(metavar), std::move(help),
                      [out](const std::string&, const std::string& v) { out->push_back(v); }});
}

void ArgParser::add_switch(std::vector<std::string> names, bool* out, std::string help) {
  options_.push_back({std::move(names), "", std::move(help), [out](const std::string&, const std::string&) { *out = true; }});
}

void ArgParser::add_positional(std::string metavar, std::string* out, bool required, std::string help) {
  positionals_.push_back({std::move(metavar), out, required, std::move(help)});
}

ArgParser::Option* ArgParser::find(const std::string& name) {
  for (auto& o : options_)
    for (const auto& n : o.names)
      if (n == name) return &o;
  return nullptr;
}

const ArgParser::Option* ArgParser::find(const std::string& name) const {
  return const_cast<ArgParser*>(this)->find(name);
}

bool ArgParser::was_set(const std::string& name) const {
  const Option* o = find(name);
  return o && o->seen;
}

bool ArgParser::parse(int argc, char** argv) {
  size_t next_positional = 0;
  bool only_positionals = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (!only_positionals && (arg == "-h" || arg == "--help")) {
      std::cout << help();
      return false;
    }
    if (!only_positionals && arg == "--") {
      only_positionals = true;
      continue;
    }
    if (!only_positionals && arg.size() > 1 && arg[0] == '-' && !(arg.size() > 1 && (std::isdigit(arg[1]) || arg[1] == '.'))) {
      std::string name = arg, value;
      bool has_inline = false;
      if (auto eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        has_inline = true;
      }
      Option* o = find(name);
      if (!o) throw Error("qlens " + command_ + ": unknown option '" + name + "' (see qlens " + command_ + " --help)");
      if (o->metavar.empty()) {
        if (has_inline) throw Error("qlens " + command_ + ": option " + name + " takes no value");
      } else if (!has_inline) {
        if (i + 1 >= argc) throw Error("qlens " + command_ + ": option " + name + " needs a value (" + o->metavar + ")");
        value = argv[++i];
      }
      o->set(name, value);
      o->seen = true;
      continue;
    }
    if (next_positional >= positionals_.size())
      throw Error("qlens " + command_ + ": unexpected argument '" + arg + "' (see qlens " + command_ + " --help)");
    *positionals_[next_positional++].out = arg;
  }
  for (size_t p = next_positional; p < positionals_.size(); ++p)
    if (positionals_[p].required)
      throw Error("qlens " + command_ + ": missing argument " + positionals_[p].metavar + " (usage: " + usage_ + ")");
  return true;
}

std::string ArgParser::help() const {
  std::ostringstream s;
  s << "usage: " << usage_ << "\n\n" << summary_ << "\n";
  if (!positionals_.empty()) {
    s << "\narguments:\n";
    for (const auto& p : positionals_) s << "  " << p.metavar << std::string(p.metavar.size() < 28 ? 28 - p.metavar.size() : 1, ' ') << p.help << "\n";
  }
  s << "\noptions:\n";
  for (const auto& o : options_) {
    std::string left;
    for (size_t i = 0; i < o.names.size(); ++i) left += (i ? ", " : "") + o.names[i];
    if (!o.metavar.empty()) left += " " + o.metavar;
    s << "  " << left << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << o.help << "\n";
  }
  s << "  -h, --help" << std::string(18, ' ') << "show this help\n";
  for (const auto& n : notes_) s << "\n" << n << "\n";
  return s.str();
}

void add_device_options(ArgParser& p, DeviceFlags* flags) {
  p.add({"--device", "-dev"}, &flags->device, "ID", "device to run on: cpu, vulkan:0, ... (see qlens devices)");
  p.add({"-ngl", "--n-gpu-layers"}, &flags->n_gpu_layers, "N",
        "layers to run on the device, from the last (default: all; more than the layers: the output too)");
}

void add_split_layers_option(ArgParser& p, bool* out) {
  p.add_switch({"--split-layers"}, out,
               "under mpirun: run the model across the ranks by layers (each rank reads only its layers'\n"
               "weights), for a model larger than one machine's memory");
}

void check_layer_split_run(const std::string& command, const Model& model, bool split_layers) {
  const dist::Comm& comm = dist::world();
  if (comm.size() == 1) return;
  if (!split_layers)
    throw Error(command + ": " + std::to_string(comm.size()) +
                " processes: give --split-layers to run the model across them by layers");
  if (comm.is_root())
    std::fprintf(stderr, "%s", tools::describe_layer_split(model, tools::split_layers_by_bytes(model, comm.size())).c_str());
}

void add_cache_type_option(ArgParser& p, DType* out) {
  std::string default_name(type_name(*out));
  for (char& ch : default_name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const std::string help = "KV cache type: f16, f32 or bf16 (default " + default_name + ")";
  p.add({"-ctk", "--cache-type"}, [out](const std::string& name, const std::string& value) {
    const auto type = type_from_name(value);
    if (!type || (*type != DType::F16 && *type != DType::F32 && *type != DType::BF16))
      throw Error(name + ": the KV cache type must be f16, f32 or bf16, got '" + value + "'");
    *out = *type;
  }, "TYPE", help);
}

namespace {

// Every run that loads a model says where it runs, on stderr (llama.cpp's
// users read its device lines the same way); under mpirun, each rank.
void announce_device(const DeviceInfo& d, int n_gpu_layers) {
  const std::string rank = dist::rank_prefix();
  if (d.id == "cpu") {
    std::fprintf(stderr, "%sdevice: cpu, %s\n", rank.c_str(), d.name.c_str());
    return;
  }
  const std::string layers = n_gpu_layers < 0 ? std::string("every layer") : "-ngl " + std::to_string(n_gpu_layers);
  std::fprintf(stderr, "%sdevice: %s, %s (%s; the rest on the CPU)\n", rank.c_str(), d.id.c_str(), d.name.c_str(),
               layers.c_str());
}

}  // namespace

void resolve_device(const ArgParser& p, DeviceFlags& flags) {
  const bool ngl_set = p.was_set("-ngl");
  flags.cpu = cpu_options_from_env();
  flags.vulkan = vulkan_options_from_env();
  if (!flags.device.empty()) {
    // Checked before any model is loaded: a typo costs nothing.
    std::string known;
    for (const DeviceInfo& d : list_devices(flags.cpu)) {
      if (d.id == flags.device) {
        if (!ngl_set) flags.n_gpu_layers = -1;
        announce_device(d, flags.n_gpu_layers);
        return;
      }
      known += (known.empty() ? "" : ", ") + d.id;
    }
    throw Error("--device " + flags.device + ": no such device (devices here: " + known + "; see qlens devices)");
  }
  flags.device = "cpu";
  if (!ngl_set || flags.n_gpu_layers == 0) {
    announce_device(cpu_device_info(flags.cpu), 0);
    return;
  }
  // A software Vulkan device (lavapipe) runs on the CPU cores, slower than
  // the CPU backend: it is used only when named with --device.
  bool software = false;
  for (const DeviceInfo& d : list_devices(flags.cpu)) {
    if (d.id == "cpu") continue;
    if (d.kind.find("software") != std::string::npos || d.kind.rfind("cpu", 0) == 0) {
      software = true;
      continue;
    }
    flags.device = d.id;
    std::fprintf(stderr, "note: -ngl %d: running on %s (%s)\n", flags.n_gpu_layers, d.id.c_str(), d.name.c_str());
    announce_device(d, flags.n_gpu_layers);
    return;
  }
  std::fprintf(stderr, "note: -ngl %d: no GPU device found, running on the CPU%s\n", flags.n_gpu_layers,
               software ? " (software Vulkan devices are used only with --device)" : "");
  announce_device(cpu_device_info(flags.cpu), 0);
}

int default_threads() { return default_thread_count(); }

void resolve_context_size(int64_t& n_ctx, const Model& model, const std::string& command) {
  if (n_ctx != 0) return;
  n_ctx = model.hparams().n_ctx_train;
  std::fprintf(stderr, "note: qlens %s: -c 0: the model's training context, %lld tokens\n", command.c_str(),
               static_cast<long long>(n_ctx));
}

}  // namespace qlens::cli
