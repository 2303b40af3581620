#!/usr/bin/env bash
# Compile cost of the static path (not a test): cpu time, wall time and peak memory (/usr/bin/time -v)
# of compiling, with g++ and clang++-14 at -O2, one translation unit each of
#   examples/fashion_mnist_static.cpp    the static MLP's forward + fixed::grad + SGD, and the loader
#   bench/compile_cost_static_step.cpp   the same step alone
#   bench/compile_cost_eigen_step.cpp    the same step written by hand with Eigen
# then the static step's cost over the Eigen step's per compiler (the goal: at most 1). The static units
# are compiled as a program linked against metagrad::metagrad compiles them, with the define that target
# exports (METAGRAD_PREBUILT: the GEMM and the thread pool are the library's); "header-only" compiles
# the step without it, as a program using metagrad::headers alone does, its own GEMM included.
# usage: bench/compile_cost.sh [repetitions]   (from anywhere; default 3, the least cpu time of them
# is shown, as the one least disturbed by other work; needs `time`, see tools/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A cpu_of rss_of
printf "%-46s %-10s %8s %8s %11s\n" "translation unit" compiler "cpu (s)" "wall (s)" "peak (MiB)"
units=("examples/fashion_mnist_static.cpp" "bench/compile_cost_static_step.cpp"
  "bench/compile_cost_static_step.cpp header-only" "bench/compile_cost_eigen_step.cpp")
for unit in "${units[@]}"; do
  src=${unit%% *} defs=-DMETAGRAD_PREBUILT
  [[ $unit == *header-only || $src == *eigen* ]] && defs=
  for cc in g++ clang++-14; do
    best_cpu="" best_wall="" rss=0
    for ((r = 0; r < reps; r++)); do
      /usr/bin/time -v -o "$out/t" "$cc" -std=c++20 -O2 -DNDEBUG $defs -Iinclude -Idetail -Ibench -isystem /usr/include/eigen3 \
        -c "$src" -o "$out/o.o" 2>"$out/err" || { echo "$cc failed on $src:"; cat "$out/err"; exit 1; }
      wall=$(awk -F': ' '/Elapsed/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$out/t")
      cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$out/t")
      r_mib=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$out/t")
      if [[ -z $best_cpu ]] || awk -v a="$cpu" -v b="$best_cpu" 'BEGIN {exit !(a < b)}'; then
        best_cpu=$cpu best_wall=$wall
      fi
      ((r_mib > rss)) && rss=$r_mib
    done
    cpu_of[$unit $cc]=$best_cpu rss_of[$unit $cc]=$rss
    printf "%-46s %-10s %8.1f %8.1f %11s\n" "$unit" "$cc" "$best_cpu" "$best_wall" "$rss"
  done
done
echo "(cpu = user + system time of the compiler, the least of $reps runs; wall also counts waiting on a loaded machine)"
echo
printf "%-46s %-10s %8s %11s\n" "static step / Eigen step" compiler "cpu" "peak"
e=bench/compile_cost_eigen_step.cpp
for s in bench/compile_cost_static_step.cpp "bench/compile_cost_static_step.cpp header-only"; do
  for cc in g++ clang++-14; do
    awk -v u="${s#bench/compile_cost_static_step.cpp}" -v cc="$cc" -v sc="${cpu_of[$s $cc]}" -v ec="${cpu_of[$e $cc]}" \
      -v sr="${rss_of[$s $cc]}" -v er="${rss_of[$e $cc]}" \
      'BEGIN {printf "%-46s %-10s %7.2fx %10.2fx\n", u, cc, sc / ec, sr / er}'
  done
done
