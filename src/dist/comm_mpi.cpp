// A build with MPI (-DQLENS_MPI=ON): a run started by an MPI launcher is one
// process per rank of MPI_COMM_WORLD; any other run is a single process and
// never calls MPI, so the same binary runs plainly too.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "dist/comm.h"
#include "qlens/error.h"

namespace qlens::dist {

namespace {

// MPI counts are ints: bytes go in pieces of at most 1 GiB.
constexpr int64_t kPiece = int64_t{1} << 30;

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw Error(std::string("MPI: ") + call + " failed (error " + std::to_string(rc) + ")");
}

void send_bytes(const char* data, int64_t n, int to, int tag) {
  for (int64_t at = 0; at < n; at += kPiece) {
    const int piece = static_cast<int>(std::min(kPiece, n - at));
    check(MPI_Send(data + at, piece, MPI_BYTE, to, tag, MPI_COMM_WORLD), "MPI_Send");
  }
}

void receive_bytes(char* data, int64_t n, int from, int tag) {
  for (int64_t at = 0; at < n; at += kPiece) {
    const int piece = static_cast<int>(std::min(kPiece, n - at));
    check(MPI_Recv(data + at, piece, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  }
}

class MpiWorld final : public Comm {
 public:
  MpiWorld() {
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Point-to-point under the hood: the root receives rank by rank, which
  // also keeps each piece within MPI's int counts. Its own tag keeps it apart
  // from the messages send and post have on their way, as MPI_Gather is.
  std::vector<std::string> gather(const std::string& bytes, int root) override {
    std::vector<std::string> all;
    if (rank_ != root) {
      send_tagged(bytes, root, kGatherTag);
      return all;
    }
    all.resize(size_);
    for (int r = 0; r < size_; ++r) all[r] = r == root ? bytes : receive_tagged(r, kGatherTag);
    return all;
  }

  std::string broadcast(const std::string& bytes, int root) override {
    int64_t n = rank_ == root ? static_cast<int64_t>(bytes.size()) : 0;
    check(MPI_Bcast(&n, 1, MPI_INT64_T, root, MPI_COMM_WORLD), "MPI_Bcast");
    std::string out = rank_ == root ? bytes : std::string(n, '\0');
    for (int64_t at = 0; at < n; at += kPiece) {
      const int piece = static_cast<int>(std::min(kPiece, n - at));
      check(MPI_Bcast(out.data() + at, piece, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
    return out;
  }

  // The posted messages and their requests; finished ones are dropped as
  // later calls come (and all are waited for before MPI ends).
  struct Posted {
    std::unique_ptr<int64_t> size;
    std::string bytes;
    std::vector<MPI_Request> requests;
  };

  void post(std::string bytes, int to) override {
    auto msg = std::make_unique<Posted>();
    msg->size = std::make_unique<int64_t>(static_cast<int64_t>(bytes.size()));
    msg->bytes = std::move(bytes);
    MPI_Request r;
    check(MPI_Isend(msg->size.get(), 1, MPI_INT64_T, to, kTag, MPI_COMM_WORLD, &r), "MPI_Isend");
    msg->requests.push_back(r);
    const int64_t n = *msg->size;
    for (int64_t at = 0; at < n; at += kPiece) {
      const int piece = static_cast<int>(std::min(kPiece, n - at));
      check(MPI_Isend(msg->bytes.data() + at, piece, MPI_BYTE, to, kTag, MPI_COMM_WORLD, &r), "MPI_Isend");
      msg->requests.push_back(r);
    }
    posted_.push_back(std::move(msg));
    drop_finished();
  }

  void wait_posted() {
    for (auto& msg : posted_)
      check(MPI_Waitall(static_cast<int>(msg->requests.size()), msg->requests.data(), MPI_STATUSES_IGNORE),
            "MPI_Waitall");
    posted_.clear();
  }

  void send(const std::string& bytes, int to) override { send_tagged(bytes, to, kTag); }
  std::string receive(int from) override { return receive_tagged(from, kTag); }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);  // MPI_Abort does not return; if it did, still end
  }

 private:
  void send_tagged(const std::string& bytes, int to, int tag) {
    drop_finished();
    const int64_t n = static_cast<int64_t>(bytes.size());
    check(MPI_Send(&n, 1, MPI_INT64_T, to, tag, MPI_COMM_WORLD), "MPI_Send");
    send_bytes(bytes.data(), n, to, tag);
  }

  std::string receive_tagged(int from, int tag) {
    int64_t n = 0;
    check(MPI_Recv(&n, 1, MPI_INT64_T, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
    std::string out(n, '\0');
    receive_bytes(out.data(), n, from, tag);
    return out;
  }

  void drop_finished() {
    std::erase_if(posted_, [](const std::unique_ptr<Posted>& msg) {
      int done = 0;
      check(MPI_Testall(static_cast<int>(msg->requests.size()), msg->requests.data(), &done, MPI_STATUSES_IGNORE),
            "MPI_Testall");
      return done != 0;
    });
  }

  static constexpr int kTag = 7, kGatherTag = 8;
  int rank_ = 0, size_ = 1;
  std::vector<std::unique_ptr<Posted>> posted_;
};

// The variables MPI launchers give each process: Open MPI's mpirun, PMIx
// (Open MPI 4+, srun --mpi=pmix), PMI/PMI2 (MPICH's hydra, srun --mpi=pmi2).
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::unique_ptr<MpiWorld>& mpi_world() {
  static std::unique_ptr<MpiWorld> w;
  return w;
}

}  // namespace

void start(int* argc, char*** argv) {
  if (mpi_world() || !launched_by_mpi()) return;
  // Only the main thread calls MPI; the compute threads never do.
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  // Errors come back as codes (thrown as qlens::Error) instead of ending the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  mpi_world() = std::make_unique<MpiWorld>();
}

void finish() {
  if (!mpi_world()) return;
  mpi_world()->wait_posted();
  mpi_world().reset();
  MPI_Finalize();
}

Comm& world() {
  if (mpi_world()) return *mpi_world();
  return single_process();
}

bool built_with_mpi() { return true; }

}  // namespace qlens::dist
