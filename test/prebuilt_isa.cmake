# A unit built with METAGRAD_PREBUILT calls the runtime library's GEMM only where its flags give the
# ISA of a library copy (fixed/gemm.hpp); under any other flags it compiles its own, so it never
# runs instructions its flags did not allow. Each flag set's program must link against the library,
# and nm says whose Gemm<float>::run it calls. Run with -DCXX= -DSOURCE=<repo> -DLIBRARY=<libmetagrad.so>
# -DWORK=<dir> [-DX86=ON: the x86 flag sets too] -P.
cmake_minimum_required(VERSION 3.20)
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/product.cpp [=[
#include <cstdio>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 40, 30> a;
  fx::Tensor<float, 30, 20> b;
  for (long i = 0; i < 1200; ++i) a.data()[i] = float(i % 7), b.data()[i % 600] = float(i % 5);
  fx::Tensor<float, 40, 20> c = fx::matmul(a, b);
  double s = 0, want = 0;
  for (long i = 0; i < 40; ++i)
    for (long j = 0; j < 20; ++j)
      for (long k = 0; k < 30; ++k) want += double(a(i, k)) * b(k, j);
  for (float v : c) s += v;
  std::printf("%g %g\n", s, want);
  return s == want ? 0 : 1;
}
]=])
get_filename_component(libdir ${LIBRARY} DIRECTORY)
# flags -> whose kernel: the library's where they are exactly a library copy's ISA
set(cases "|library" "-mavx2 -mfma|library" "-mavx512f -mavx512vl -mavx512dq -mavx512bw -mfma -mavx2|library"
          "-mavx|own" "-mavx2|own" "-mavx512f -mfma|own")
if(NOT X86)
  set(cases "|library")
endif()
set(n 0)
foreach(case IN LISTS cases)
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 flags)
  list(GET parts 1 want)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  math(EXPR n "${n} + 1")
  set(exe ${WORK}/product_${n})
  execute_process(COMMAND ${CXX} -std=c++20 -O1 ${flag_list} -DMETAGRAD_PREBUILT -I${SOURCE}/include -I${SOURCE}/detail
                          ${WORK}/product.cpp -L${libdir} -lmetagrad -Wl,-rpath,${libdir} -o ${exe}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[${flags}]: the program did not build against the library:\n${err}")
  endif()
  execute_process(COMMAND nm -C ${exe} OUTPUT_VARIABLE syms)
  if(syms MATCHES " U [^\n]*Gemm<float[^>]*>::run\\(")
    set(got library)
  elseif(syms MATCHES " [TW] [^\n]*Gemm<float[^>]*>::run(_here)?\\(")  # (a unit's own run, a wrapper, may inline: run_here stays)
    set(got own)
  else()
    message(FATAL_ERROR "[${flags}]: no Gemm<float>::run in the program")
  endif()
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "[${flags}]: calls its ${got} GEMM, expected its ${want}")
  endif()
  if(flags STREQUAL "")  # the baseline runs anywhere: its product must be right
    execute_process(COMMAND ${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "[baseline]: wrong product (sum, expected): ${out}")
    endif()
  endif()
  message(STATUS "[${flags}] ${got}")
endforeach()
