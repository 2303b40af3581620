#!/usr/bin/env bash
# Compile cost of fx::grad over a static GPT (not a test): cpu time, wall time and peak memory
# (/usr/bin/time -v) of compiling bench/compile_cost_gpt.cpp at -O2 for 1, 2 and 4 blocks, with g++
# and clang++-14 where present, as a program linked against metagrad::metagrad compiles it
# (METAGRAD_PREBUILT), then each model's cost over one block's (the goal: linear growth, the 4-block
# model within 4.5x). With --uncut it also compiles the block as one expression (GPT_CUTS=0, with
# METAGRAD_FIXED_MAX_NODES raised past its 22,883 nodes, which fx::grad would refuse), under a
# memory limit (MAX_MIB, default 6000) and a time limit (MAX_S, default 300): it runs out of one.
# usage: bench/compile_cost_gpt.sh [--uncut] [repetitions]   (default 1; the least cpu time is shown)
set -euo pipefail
cd "$(dirname "$0")/.."
uncut=0
[[ ${1:-} == --uncut ]] && { uncut=1; shift; }
reps=${1:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
compilers=(g++)
command -v clang++-14 >/dev/null && compilers+=(clang++-14)
declare -A cpu_of rss_of
printf "%-22s %-10s %8s %8s %11s\n" "model" compiler "cpu (s)" "wall (s)" "peak (MiB)"
run() {  # label compiler defines...
  local label=$1 cc=$2
  shift 2
  local best_cpu="" best_wall="" rss=0 status=ok
  for ((r = 0; r < reps; r++)); do
    if ! (ulimit -v $((${MAX_MIB:-6000} * 1024)) && /usr/bin/time -v -o "$out/t" timeout "${MAX_S:-300}" "$cc" -std=c++20 \
      -O2 -DNDEBUG -DMETAGRAD_PREBUILT "$@" -Iinclude -Idetail -c bench/compile_cost_gpt.cpp -o "$out/o.o" 2>"$out/err"); then
      status="failed: $(grep -m1 -oE 'virtual memory exhausted|out of memory|Killed|std::bad_alloc' "$out/err" || echo "limit ${MAX_S:-300} s")"
    fi
    wall=$(awk -F': ' '/Elapsed/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$out/t")
    cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$out/t")
    r_mib=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$out/t")
    if [[ -z $best_cpu ]] || awk -v a="$cpu" -v b="$best_cpu" 'BEGIN {exit !(a < b)}'; then best_cpu=$cpu best_wall=$wall; fi
    ((r_mib > rss)) && rss=$r_mib
  done
  cpu_of[$label $cc]=$best_cpu rss_of[$label $cc]=$rss
  printf "%-22s %-10s %8.1f %8.1f %11s %s\n" "$label" "$cc" "$best_cpu" "$best_wall" "$rss" \
    "$([[ $status == ok ]] || echo "$status")"
}
for cc in "${compilers[@]}"; do
  ((uncut)) && run "1 block, uncut" "$cc" -DGPT_BLOCKS=1 -DGPT_CUTS=0 -DMETAGRAD_FIXED_MAX_NODES=1000000
  for n in 1 2 4; do run "$n block$([[ $n == 1 ]] || echo s)" "$cc" -DGPT_BLOCKS=$n; done
done
echo "(cpu = user + system time of the compiler, the least of $reps runs; wall also counts waiting on a loaded machine)"
echo
printf "%-22s %-10s %8s %11s\n" "n blocks / 1 block" compiler "cpu" "peak"
for cc in "${compilers[@]}"; do
  for n in 2 4; do
    awk -v l="$n blocks" -v cc="$cc" -v a="${cpu_of[$n blocks $cc]}" -v b="${cpu_of[1 block $cc]}" \
      -v ra="${rss_of[$n blocks $cc]}" -v rb="${rss_of[1 block $cc]}" \
      'BEGIN {printf "%-22s %-10s %7.2fx %10.2fx\n", l, cc, a / b, ra / rb}'
  done
done
