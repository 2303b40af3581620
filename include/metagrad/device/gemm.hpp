#pragma once
// The runtime's matrix product: the shared CPU layer's blocked kernel (cpu/gemm.hpp) compiled once per
// ISA into the library and chosen by CPUID, or by env METAGRAD_ISA=generic|avx2|avx512 (to see
// what an AVX2-only processor gets, on an AVX-512 one). The compiled devices run every float32
// contraction kernel through it (codegen/gemm.hpp finds them).
//
// Cache blocking: the ISA's default derived from the host's caches, or, with env BEAM=n (n > 0), the
// fastest of a search over candidates timed on the machine for that shape and thread count; the
// choice is kept in the kernel cache directory keyed by the CPU, and reused by every later process.
#include <cstdint>
#include <string>

#include "metagrad/cpu/gemm.hpp"

namespace metagrad::gemm {

enum class Isa : std::uint8_t { generic, avx2, avx512 };
std::string to_string(Isa isa);
Isa best_isa();  // the widest this CPU runs
Isa isa();  // the one in use: METAGRAD_ISA if set (std::runtime_error if the CPU lacks it), else best_isa()

using cpu::GemmBlocking;

// C (m x n, row stride ldc) = A B, A[i][p] = a[i * ars + p * acs], B[p][j] = b[p * brs + j * bcs],
// or, with gather_b, B as that packs it (a conv's windows, gathered panel by panel); `done`, C's
// epilogue, called on each block of C's rows once final (cpu::GemmRowsDone).
struct Problem {
  std::int64_t m, n, k;
  const float* a;
  std::int64_t ars, acs;
  const float* b;
  std::int64_t brs, bcs;
  float* c;
  std::int64_t ldc;
  const cpu::GemmGatherB<float>* gather_b = nullptr;
  const cpu::GemmRowsDone* done = nullptr;
};

// Runs p with `isa`'s kernel and blocking `bk` ({} means the blocking chosen for p's shape).
void sgemm(const Problem& p, const GemmBlocking& bk = {}, Isa isa = gemm::isa());

// The blocking for an m x n x k product on this machine: a BEAM result from memory or disk, a new
// search when BEAM > 0, else the ISA's default.
GemmBlocking choose_blocking(std::int64_t m, std::int64_t n, std::int64_t k, Isa isa = gemm::isa());
GemmBlocking default_blocking(Isa isa = gemm::isa());

// Static-path products that units built without ISA flags handed from the library's baseline copy
// to a wider one the CPU runs (cpu/gemm.hpp), in this process.
std::int64_t widened_products();

// Whether the host devices run contractions through the GEMM: yes unless env METAGRAD_GEMM=0.
bool enabled();

// What the tuner did in this process: searches run, choices read from disk.
struct TuneStats {
  std::int64_t searches = 0, disk_hits = 0;
};
TuneStats tune_stats();

}  // namespace metagrad::gemm
