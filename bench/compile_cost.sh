#!/usr/bin/env bash
# Compile cost of the static path (not a test): wall time and peak memory (/usr/bin/time -v) of
# compiling, with g++ and clang++-14 at -O2, one translation unit each of
#   examples/fashion_mnist_static.cpp    the static MLP's forward + fixed::grad + SGD, and the loader
#   bench/compile_cost_static_step.cpp   the same step alone
#   bench/compile_cost_eigen_step.cpp    the same step written by hand with Eigen
# usage: bench/compile_cost.sh   (from anywhere; needs `time`, see tools/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf "%-38s %-10s %8s %8s %11s\n" "translation unit" compiler "cpu (s)" "wall (s)" "peak (MiB)"
for src in examples/fashion_mnist_static.cpp bench/compile_cost_static_step.cpp bench/compile_cost_eigen_step.cpp; do
  for cc in g++ clang++-14; do
    /usr/bin/time -v -o "$out/t" "$cc" -std=c++20 -O2 -DNDEBUG -Iinclude -Idetail -Ibench -isystem /usr/include/eigen3 \
      -c "$src" -o "$out/o.o" 2>"$out/err" || { echo "$cc failed on $src:"; cat "$out/err"; exit 1; }
    wall=$(awk -F': ' '/Elapsed/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$out/t")
    cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$out/t")
    rss=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$out/t")
    printf "%-38s %-10s %8.1f %8.1f %11s\n" "$src" "$cc" "$cpu" "$wall" "$rss"
  done
done
echo "(cpu = user + system time of the compiler; wall also counts waiting on a loaded machine)"
