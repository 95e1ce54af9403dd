// Command-line parsing with llama.cpp's habits: short and long names for one
// option (-m/--model, -ngl/--n-gpu-layers), values as the next argument or
// after '=', --help on every subcommand, and errors that name the flag.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qlens/backend.h"
#include "qlens/types.h"

namespace qlens {
class Model;
}

namespace qlens::cli {

class ArgParser {
 public:
  ArgParser(std::string command, std::string usage, std::string summary);

  void add(std::vector<std::string> names, std::string* out, std::string metavar, std::string help);
  void add(std::vector<std::string> names, int64_t* out, std::string metavar, std::string help);
  void add(std::vector<std::string> names, int* out, std::string metavar, std::string help);
  void add(std::vector<std::string> names, double* out, std::string metavar, std::string help);
  void add(std::vector<std::string> names, float* out, std::string metavar, std::string help);
  void add(std::vector<std::string> names, std::vector<std::string>* out, std::string metavar, std::string help);
  void add_switch(std::vector<std::string> names, bool* out, std::string help);
  // An option whose value `set` parses (and rejects with an Error naming the flag).
  void add(std::vector<std::string> names, std::function<void(const std::string& name, const std::string& value)> set,
           std::string metavar, std::string help);
  // Positional arguments, in order; `required` ones must be present.
  void add_positional(std::string metavar, std::string* out, bool required, std::string help);
  // Free text appended to --help (examples, memory needs, ...).
  void add_note(std::string text) { notes_.push_back(std::move(text)); }

  // Parses argv (after the subcommand name). Returns false when --help was
  // printed. Throws qlens::Error naming the option on bad input.
  bool parse(int argc, char** argv);
  std::string help() const;
  bool was_set(const std::string& name) const;  // any of an option's names

 private:
  struct Option {
    std::vector<std::string> names;
    std::string metavar;  // empty for switches
    std::string help;
    std::function<void(const std::string& name, const std::string& value)> set;
    bool seen = false;
  };
  struct Positional {
    std::string metavar;
    std::string* out;
    bool required;
    std::string help;
  };
  Option* find(const std::string& name);
  const Option* find(const std::string& name) const;

  std::string command_, usage_, summary_;
  std::vector<Option> options_;
  std::vector<Positional> positionals_;
  std::vector<std::string> notes_;
};

// Thread count as -t gives it: <= 0 means one per core.
int default_threads();

// -c 0 as llama.cpp reads it: the model's training context
// (general's context_length), said on stderr. Other values stay.
void resolve_context_size(int64_t& n_ctx, const Model& model, const std::string& command);

// Where a command runs, as llama.cpp users say it: --device ID and
// -ngl/--n-gpu-layers N. add_device_options registers both;
// resolve_device (after parse) settles the pair: an explicit device with no
// -ngl offloads everything; -ngl N > 0 with no --device picks the first GPU
// device (or says there is none and stays on the CPU). It also reads the
// backends' options from the QLENS_CPU_* and QLENS_VULKAN_* variables
// (cpu_options_from_env, vulkan_options_from_env: the one place the command
// line takes them), which every command that runs a model hands to its tool
// with the device.
struct DeviceFlags {
  std::string device;
  int n_gpu_layers = -1;
  CpuOptions cpu{};        // set by resolve_device
  VulkanOptions vulkan{};  // set by resolve_device
};
void add_device_options(ArgParser& p, DeviceFlags* flags);

// -ctk/--cache-type TYPE: the KV cache's type, f16, f32 or bf16. *out holds
// the command's default, which the help names.
void add_cache_type_option(ArgParser& p, DType* out);
// --split-layers: under mpirun, the model across the ranks by layers
// (docs/CLUSTER.md).
void add_split_layers_option(ArgParser& p, bool* out);
// For a command that runs across processes only by layers (perplexity,
// compare): several ranks without --split-layers is an Error naming the
// command; with it, rank 0 prints each rank's layers.
void check_layer_split_run(const std::string& command, const Model& model, bool split_layers);
void resolve_device(const ArgParser& p, DeviceFlags& flags);

}  // namespace qlens::cli
