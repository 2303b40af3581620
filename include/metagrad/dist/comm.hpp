#pragma once
// The process group of a data-parallel run (component metagrad::dist, built where MPI is found):
// the processes `mpirun -np N program` starts, each a rank in [0, N). Everything here is collective
// (every rank must call it, in the same order, with the same sizes) except rank(), world_size(),
// initialized() and timeout(). MPI itself stays inside the library: these headers need no mpi.h.
//
// Guarantees (docs/distributed.md):
//  - sizes and dtypes are compared across ranks before data moves (check_same); a mismatch throws
//    dist::Error naming both on every rank, instead of MPI truncating or mixing buffers;
//  - every wait is bounded by timeout() seconds (env METAGRAD_DIST_TIMEOUT, default 300): a rank
//    that stops taking part makes the others throw dist::Error rather than wait forever; the group
//    is then broken, and the process ends with MPI_Abort at exit, which stops the whole job;
//  - a rank that dies (a crash, an uncaught exception, exit without MPI_Finalize) is seen by
//    mpirun, which ends the other ranks and exits with an error (Open MPI's default behaviour).
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "metagrad/helpers.hpp"

namespace metagrad::dist {

// How allreduce combines the ranks' values. MEAN is SUM divided by world_size() (float dtypes only).
enum class ReduceOp { SUM, MEAN };

// A failed collective: a mismatch between ranks, an MPI error, a timeout. Thrown on every rank that
// can see the failure.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Joins the group (MPI_Init_thread, FUNNELED: call dist from one thread). Idempotent; every other
// function calls it first. Started without mpirun, the process is a group of one. The group is
// finalized at exit (MPI_Finalize, or MPI_Abort once broken by an error).
void init();
bool initialized();
int rank();
int world_size();
double timeout();  // seconds a collective may wait for the others
void barrier();

// Throws dist::Error on every rank unless every rank passed equal `items` (descriptions, such as
// "(3, 4) float32" per tensor). `op` names the operation in the message, which names the first item
// that differs and both ranks' values. One small allreduce of a hash when all agree.
void check_same(const std::string& op, const std::vector<std::string>& items);

// A non-blocking collective in flight. wait() completes it (bounded by timeout()); test() makes
// progress and says whether it is done. Destroying one in flight waits for it.
class Request {
 public:
  Request();
  ~Request();
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  bool test();
  void wait();
  bool active() const;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend Request iallreduce(void*, std::size_t, DType, const char*);
};

// Sums `count` elements of `dtype` at `data` over the ranks, in place, without checking that the
// ranks agree (callers check first). Blocking and non-blocking. float16, bfloat16 and bool are not summable.
void allreduce_sum(void* data, std::size_t count, DType dtype, const char* op);
// As above, into `out` from `in` (distinct buffers), saving a copy.
void allreduce_sum(const void* in, void* out, std::size_t count, DType dtype, const char* op);
Request iallreduce(void* data, std::size_t count, DType dtype, const char* op);
// Rank `root`'s bytes at `data` to every rank; every rank throws unless all name the same root.
void broadcast_bytes(void* data, std::size_t nbytes, int root, const char* op);
// Divides `count` elements by world_size() (MEAN after SUM); float dtypes only.
void scale_by_world(void* data, std::size_t count, DType dtype, const char* op);

}  // namespace metagrad::dist
