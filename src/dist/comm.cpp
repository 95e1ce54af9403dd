#include "dist/comm.h"

#include <cstdlib>

#include "qlens/error.h"

namespace qlens::dist {

namespace {

class SingleProcess final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> gather(const std::string& bytes, int) override { return {bytes}; }
  std::string broadcast(const std::string& bytes, int) override { return bytes; }
  void send(const std::string&, int to) override {
    throw Error("a single process cannot send to rank " + std::to_string(to));
  }
  void post(std::string, int to) override { send({}, to); }
  std::string receive(int from) override {
    throw Error("a single process cannot receive from rank " + std::to_string(from));
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

}  // namespace

Comm& single_process() {
  static SingleProcess comm;
  return comm;
}

std::string rank_prefix() {
  const Comm& w = world();
  if (w.size() == 1) return "";
  return "rank " + std::to_string(w.rank()) + " of " + std::to_string(w.size()) + ": ";
}

}  // namespace qlens::dist
