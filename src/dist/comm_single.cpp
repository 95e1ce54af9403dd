// A build without MPI: every run is one process.
#include "dist/comm.h"

namespace qlens::dist {

void start(int*, char***) {}
void finish() {}
Comm& world() { return single_process(); }
bool built_with_mpi() { return false; }

}  // namespace qlens::dist
