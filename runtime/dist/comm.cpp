// The process group over MPI. Every collective is started non-blocking and completed by one wait
// loop (wait_all) that polls MPI_Testall, so each wait is bounded by the timeout and errors come
// back as return codes (MPI_ERRORS_RETURN) that become dist::Error.
#include "metagrad/dist/comm.hpp"

#include "metagrad/detail/cat.hpp"
#include "metagrad/shape/view.hpp"  // detail::cat

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace metagrad::dist {

using metagrad::detail::cat;

namespace {

struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  bool owned = false;   // we called MPI_Init, so we finalize
  bool broken = false;  // a collective failed half-way: the ranks can no longer agree
  double timeout = 300;
};
Group group;

void finalize_at_exit() {
  int done = 0;
  MPI_Finalized(&done);
  if (done) return;
  if (group.broken) {
    std::fflush(stdout);
    MPI_Abort(group.comm == MPI_COMM_NULL ? MPI_COMM_WORLD : group.comm, 1);
  }
  if (group.comm != MPI_COMM_NULL) MPI_Comm_free(&group.comm);
  MPI_Finalize();
}

[[noreturn]] void fail(const char* op, const std::string& why, bool breaks) {
  if (breaks) group.broken = true;
  throw Error(cat("dist: ", op, " (rank ", std::to_string(group.rank), " of ", std::to_string(group.size),
                  "): ", why));
}

void check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(op, cat("MPI error: ", std::string(msg, static_cast<std::size_t>(len))), true);
}

MPI_Datatype mpi_type(DType d, const char* op) {
  if (d == dtypes::float32) return MPI_FLOAT;
  if (d == dtypes::float64) return MPI_DOUBLE;
  if (d == dtypes::int32) return MPI_INT32_T;
  if (d == dtypes::int64) return MPI_INT64_T;
  if (d == dtypes::int8) return MPI_INT8_T;
  if (d == dtypes::uint8) return MPI_UINT8_T;
  if (d == dtypes::int16) return MPI_INT16_T;
  if (d == dtypes::uint16) return MPI_UINT16_T;
  if (d == dtypes::uint32) return MPI_UINT32_T;
  if (d == dtypes::uint64) return MPI_UINT64_T;
  fail(op, cat("cannot sum ", d.name, " (MPI has no such type; cast to float32 first)"), false);
}

// Polls until every request is done. Spins (yielding) for the first millisecond, where a step's
// collective usually completes, then sleeps between polls so that waiting ranks leave the cores to
// ranks still computing (mpirun --oversubscribe).
void wait_all(std::vector<MPI_Request>& reqs, const char* op) {
  auto start = std::chrono::steady_clock::now();
  for (long polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), op);
    if (done) return;
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > group.timeout)
      fail(op,
           cat("waited ", std::to_string(static_cast<long>(waited)),
               " s for the other ranks (METAGRAD_DIST_TIMEOUT): a rank has stopped or takes part in "
               "another collective; the group is broken"),
           true);
    if (waited < 1e-3)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// MPI counts are int: big buffers go in chunks of at most 2^28 elements.
constexpr std::size_t kChunk = std::size_t{1} << 28;

std::uint64_t fnv1a(const std::string& s, std::uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Every rank's items, gathered (only after check_same saw a difference).
std::vector<std::vector<std::string>> gather_items(const std::vector<std::string>& items, const char* op) {
  std::string mine;
  for (const auto& s : items) mine += s + '\x1f';
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(group.size)), offs(lens.size());
  std::vector<MPI_Request> r(1);
  check(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, group.comm, &r[0]), op);
  wait_all(r, op);
  int total = 0;
  for (std::size_t i = 0; i < lens.size(); ++i) offs[i] = total, total += lens[i];
  std::string all(static_cast<std::size_t>(total), '\0');
  check(MPI_Iallgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR,
                        group.comm, &r[0]),
        op);
  wait_all(r, op);
  std::vector<std::vector<std::string>> out(lens.size());
  for (std::size_t i = 0; i < lens.size(); ++i) {
    std::string s = all.substr(static_cast<std::size_t>(offs[i]), static_cast<std::size_t>(lens[i]));
    for (std::size_t a = 0, b; (b = s.find('\x1f', a)) != std::string::npos; a = b + 1)
      out[i].push_back(s.substr(a, b - a));
  }
  return out;
}

std::string describe_difference(const std::vector<std::vector<std::string>>& all) {
  const auto& first = all[0];
  for (std::size_t r = 1; r < all.size(); ++r) {
    const auto& other = all[r];
    if (other.size() != first.size())
      return cat("rank 0 passes ", std::to_string(first.size()), " tensors, rank ", std::to_string(r),
                 " passes ", std::to_string(other.size()));
    for (std::size_t i = 0; i < first.size(); ++i)
      if (other[i] != first[i])
        return cat(first.size() > 1 ? cat("tensor ", std::to_string(i), ": ") : "", "rank 0 has ", first[i],
                   ", rank ", std::to_string(r), " has ", other[i]);
  }
  return "the ranks' descriptions differ only in their hashes";  // not reachable but for a collision
}

}  // namespace

void init() {
  if (group.comm != MPI_COMM_NULL) return;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      throw Error("dist: init: MPI_Init_thread failed");
    group.owned = true;
    std::atexit(finalize_at_exit);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  // A communicator of our own: the library's collectives never match a user's MPI calls.
  check(MPI_Comm_dup(MPI_COMM_WORLD, &group.comm), "init");
  MPI_Comm_set_errhandler(group.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(group.comm, &group.rank);
  MPI_Comm_size(group.comm, &group.size);
  std::string t = getenv("METAGRAD_DIST_TIMEOUT", "300");
  char* end = nullptr;
  double secs = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || *end || !(secs > 0))
    throw Error(cat("dist: init: METAGRAD_DIST_TIMEOUT='", t, "' is not a positive number of seconds"));
  group.timeout = secs;
}

bool initialized() { return group.comm != MPI_COMM_NULL; }
int rank() {
  init();
  return group.rank;
}
int world_size() {
  init();
  return group.size;
}
double timeout() {
  init();
  return group.timeout;
}

void barrier() {
  init();
  std::vector<MPI_Request> r(1);
  check(MPI_Ibarrier(group.comm, &r[0]), "barrier");
  wait_all(r, "barrier");
}

void check_same(const std::string& op, const std::vector<std::string>& items) {
  init();
  if (group.broken) fail(op.c_str(), "the group is broken by an earlier error", false);
  std::uint64_t h = fnv1a(std::to_string(items.size()));
  for (const auto& s : items) h = fnv1a(s + '\x1f', h);
  // max(h) == h and max(~h) == ~h (so min(h) == h) on every rank exactly when all hashes are equal.
  std::uint64_t v[2] = {h, ~h};
  std::vector<MPI_Request> r(1);
  check(MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, group.comm, &r[0]), op.c_str());
  wait_all(r, op.c_str());
  if (v[0] == h && v[1] == ~h) return;
  fail(op.c_str(), cat("the ranks disagree: ", describe_difference(gather_items(items, op.c_str()))), false);
}

// ---- requests ----

struct Request::Impl {
  std::vector<MPI_Request> reqs;
  const char* op;
};

Request::Request() = default;
Request::~Request() {
  if (!active()) return;
  try {
    wait();
  } catch (const Error&) {  // already marked broken: the process aborts at exit
  }
}
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    Request dying(std::move(*this));
    impl_ = std::move(o.impl_);
  }
  return *this;
}
bool Request::active() const { return impl_ != nullptr; }
bool Request::test() {
  if (!impl_) return true;
  int done = 0;
  check(MPI_Testall(static_cast<int>(impl_->reqs.size()), impl_->reqs.data(), &done, MPI_STATUSES_IGNORE),
        impl_->op);
  if (done) impl_.reset();
  return done != 0;
}
void Request::wait() {
  if (!impl_) return;
  std::unique_ptr<Impl> i = std::move(impl_);
  wait_all(i->reqs, i->op);
}

Request iallreduce(void* data, std::size_t count, DType dtype, const char* op) {
  init();
  MPI_Datatype t = mpi_type(dtype, op);
  Request r;
  r.impl_ = std::make_unique<Request::Impl>(Request::Impl{{}, op});
  auto* p = static_cast<std::byte*>(data);
  std::size_t chunks = count == 0 ? 1 : (count + kChunk - 1) / kChunk;  // zero elements: still one call
  for (std::size_t c = 0; c < chunks; ++c) {
    std::size_t at = c * kChunk, n = std::min(kChunk, count - at);
    MPI_Request q;
    check(MPI_Iallreduce(MPI_IN_PLACE, p + at * static_cast<std::size_t>(dtype.itemsize), static_cast<int>(n),
                         t, MPI_SUM, group.comm, &q),
          op);
    r.impl_->reqs.push_back(q);
  }
  return r;
}

void allreduce_sum(void* data, std::size_t count, DType dtype, const char* op) {
  iallreduce(data, count, dtype, op).wait();
}

void allreduce_sum(const void* in, void* out, std::size_t count, DType dtype, const char* op) {
  init();
  MPI_Datatype t = mpi_type(dtype, op);
  std::vector<MPI_Request> reqs;
  auto bytes = static_cast<std::size_t>(dtype.itemsize);
  for (std::size_t at = 0; at < count; at += kChunk) {
    MPI_Request q;
    check(MPI_Iallreduce(static_cast<const std::byte*>(in) + at * bytes,
                         static_cast<std::byte*>(out) + at * bytes,
                         static_cast<int>(std::min(kChunk, count - at)), t, MPI_SUM, group.comm, &q),
          op);
    reqs.push_back(q);
  }
  wait_all(reqs, op);
}

void broadcast_bytes(void* data, std::size_t nbytes, int root, const char* op) {
  // Every rank names the same root, or every rank throws (with different roots, MPI_Bcast would
  // leave each rank its own data or hang): checked as the tensors' shapes are.
  check_same(op, {"root " + std::to_string(root)});
  if (root < 0 || root >= group.size)
    fail(op, cat("root ", std::to_string(root), " is not a rank of ", std::to_string(group.size)), false);
  std::vector<MPI_Request> reqs;
  for (std::size_t at = 0; at < nbytes; at += kChunk) {
    MPI_Request q;
    check(MPI_Ibcast(static_cast<std::byte*>(data) + at, static_cast<int>(std::min(kChunk, nbytes - at)),
                     MPI_BYTE, root, group.comm, &q),
          op);
    reqs.push_back(q);
  }
  wait_all(reqs, op);
}

void scale_by_world(void* data, std::size_t count, DType dtype, const char* op) {
  init();
  if (dtype == dtypes::float32) {
    float s = 1.0f / static_cast<float>(group.size), *p = static_cast<float*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] *= s;
  } else if (dtype == dtypes::float64) {
    double s = 1.0 / group.size, *p = static_cast<double*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] *= s;
  } else {
    fail(op, cat("MEAN needs float32 or float64, not ", dtype.name, " (use SUM)"), false);
  }
}

}  // namespace metagrad::dist
