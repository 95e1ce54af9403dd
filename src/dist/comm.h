// The processes of one run. A run started by an MPI launcher (mpirun, or
// Slurm's srun) in a build with MPI (-DQLENS_MPI=ON) is one process per rank
// of MPI's world; every other run is a single process, rank 0 of 1, and the
// same code paths serve both. The tools split their work by rank (chunks of
// a text, sensitivity probes, layer ranges) and move their results as bytes
// (dist/bytes.h) through these few collectives. Nothing here is a protocol of
// our own: each call is one MPI call (or two: a size, then the bytes).
#pragma once

#include <string>
#include <vector>

namespace qlens::dist {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool is_root() const { return rank() == 0; }

  // Every rank's bytes, in rank order, on `root` (its own included); an
  // empty list on the other ranks. Apart from send/post/receive: a message
  // on its way between two ranks is not taken for a gather's.
  virtual std::vector<std::string> gather(const std::string& bytes, int root) = 0;
  // `root`'s bytes on every rank.
  virtual std::string broadcast(const std::string& bytes, int root) = 0;
  // Point to point, in order between two ranks. send returns once `to`
  // has the bytes (or MPI has buffered them); post returns at once, keeping
  // the bytes until they are sent (in order with send's to the same rank):
  // what a rank hands on while it goes on computing, so that two ranks
  // sending each other never wait on each other.
  virtual void send(const std::string& bytes, int to) = 0;
  virtual void post(std::string bytes, int to) = 0;
  virtual std::string receive(int from) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the run with `code` (MPI_Abort); a single process exits.
  [[noreturn]] virtual void abort(int code) = 0;
};

// Joins the run's processes: MPI_Init when this build has MPI and the
// environment shows an MPI launcher, else nothing (a single process). Call
// once, first thing in main; `finish` at a normal exit.
void start(int* argc, char*** argv);
void finish();

// The run's processes (a single process before start).
Comm& world();

// Whether this build can run as several processes (built with MPI).
bool built_with_mpi();

// "rank R of N: " when the run has several processes, else "": the prefix
// of a rank's errors, so that they name their rank.
std::string rank_prefix();

// The single process's Comm (what world() is without MPI).
Comm& single_process();

}  // namespace qlens::dist
