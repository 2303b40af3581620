#!/bin/sh
# AOT GEMM replay: compares two generated C sources of bench_gemm's AOT library (say
# build/bench/gemm_aot.aot/gemm_aot.c saved before a change to the C GEMM, and the same file after
# it, its gemm_aot.h beside each): the diff of the sources, then each compiled as bench_gemm
# compiles it (cc -O2 -march=native)
# and run on the same operands by tools/aot_gemm_replay.cpp, which says whether every product is
# bitwise the same at 1 and 2 threads.
#   tools/aot_gemm_replay.sh before.c after.c [work dir]
set -eu
before=$1 after=$2 dir=${3:-${TMPDIR:-/tmp}/aot_gemm_replay.$$}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
echo "== source: $(diff "$before" "$after" | grep -c '^[<>]' || true) lines differ (diff -u $before $after)"
for side in before after; do
  eval src=\$$side
  cc -O2 -march=native -fno-math-errno -shared -fPIC -I"$(dirname "$src")" "$src" -o "$dir/$side.so" -lm -lpthread
done
c++ -std=c++20 -O1 "$here/aot_gemm_replay.cpp" -o "$dir/replay" -ldl
"$dir/replay" "$dir/before.so" "$dir/after.so"
