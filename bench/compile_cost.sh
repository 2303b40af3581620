#!/usr/bin/env bash
# Compile cost of the static path (not a test): cpu time, wall time and peak memory (/usr/bin/time -v)
# of compiling, with g++ and clang++-14 at -O2, one translation unit each of
#   examples/fashion_mnist_static.cpp    the static MLP's forward + fixed::grad + SGD, and the loader
#   bench/compile_cost_static_step.cpp   the same step alone
#   bench/compile_cost_eigen_step.cpp    the same step written by hand with Eigen
#   bench/compile_cost_user_step.cpp     the step as a new user writes it (issue 63): fx::grad's
#                                        expressions, the loss and a gradient read into tensors, four
#                                        `w -= 0.1f * g` updates, one fx::eval; header-only
#   bench/compile_cost_eigen_user_step.cpp  that program written by hand with Eigen
# then the static steps' cost over their Eigen counterparts' per compiler (the goal: at most 1). The static units
# are compiled as a program linked against metagrad::metagrad compiles them, with the define that target
# exports (METAGRAD_PREBUILT: the GEMM and the thread pool are the library's); "header-only" compiles
# the step without it, as a program using metagrad::headers alone does, its own GEMM included.
# usage: bench/compile_cost.sh [repetitions]   (from anywhere; default 3, the least cpu time of them
# is shown, as the one least disturbed by other work, and the median; needs `time`, see tools/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A cpu_of rss_of wall_of runs_of
units=("examples/fashion_mnist_static.cpp" "bench/compile_cost_static_step.cpp"
  "bench/compile_cost_static_step.cpp header-only" "bench/compile_cost_eigen_step.cpp"
  "bench/compile_cost_user_step.cpp header-only" "bench/compile_cost_eigen_user_step.cpp")
# Repetitions alternate the units (one of each, then again), so that a spell of load on the machine
# falls on all of them alike rather than on whichever unit ran then.
for ((r = 0; r < reps; r++)); do
  for unit in "${units[@]}"; do
    src=${unit%% *} defs=-DMETAGRAD_PREBUILT
    [[ $unit == *header-only || $src == *eigen* ]] && defs=
    for cc in g++ clang++-14; do
      /usr/bin/time -v -o "$out/t" "$cc" -std=c++20 -O2 -DNDEBUG $defs -Iinclude -Idetail -Ibench -isystem /usr/include/eigen3 \
        -c "$src" -o "$out/o.o" 2>"$out/err" || { echo "$cc failed on $src:"; cat "$out/err"; exit 1; }
      wall=$(awk -F': ' '/Elapsed/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$out/t")
      cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$out/t")
      r_mib=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$out/t")
      key="$unit $cc"
      runs_of[$key]="${runs_of[$key]:-} $cpu"
      if [[ -z ${cpu_of[$key]:-} ]] || awk -v a="$cpu" -v b="${cpu_of[$key]}" 'BEGIN {exit !(a < b)}'; then
        cpu_of[$key]=$cpu wall_of[$key]=$wall
      fi
      ((r_mib > ${rss_of[$key]:-0})) && rss_of[$key]=$r_mib
    done
  done
done
median() { tr ' ' '\n' <<<"$1" | awk 'NF' | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
declare -A med_of
printf "%-46s %-10s %8s %8s %8s %11s\n" "translation unit" compiler "cpu (s)" median "wall (s)" "peak (MiB)"
for unit in "${units[@]}"; do
  for cc in g++ clang++-14; do
    key="$unit $cc"
    med_of[$key]=$(median "${runs_of[$key]}")
    printf "%-46s %-10s %8.1f %8.1f %8.1f %11s\n" "$unit" "$cc" "${cpu_of[$key]}" "${med_of[$key]}" "${wall_of[$key]}" \
      "${rss_of[$key]}"
  done
done
echo "(cpu = user + system time of the compiler, the least of $reps runs, and their median; wall (of the least)"
echo " also counts waiting on a loaded machine)"
echo
printf "%-46s %-10s %8s %8s %11s\n" "static step / its Eigen counterpart" compiler "cpu" median "peak"
for pair in "bench/compile_cost_static_step.cpp|bench/compile_cost_eigen_step.cpp" \
  "bench/compile_cost_static_step.cpp header-only|bench/compile_cost_eigen_step.cpp" \
  "bench/compile_cost_user_step.cpp header-only|bench/compile_cost_eigen_user_step.cpp"; do
  s=${pair%|*} e=${pair#*|}
  for cc in g++ clang++-14; do
    awk -v u="${s#bench/compile_cost_}" -v cc="$cc" -v sc="${cpu_of[$s $cc]}" -v ec="${cpu_of[$e $cc]}" \
      -v sm="${med_of[$s $cc]}" -v em="${med_of[$e $cc]}" -v sr="${rss_of[$s $cc]}" -v er="${rss_of[$e $cc]}" \
      'BEGIN {printf "%-46s %-10s %7.2fx %7.2fx %10.2fx\n", u, cc, sc / ec, sm / em, sr / er}'
  done
done
