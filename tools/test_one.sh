#!/usr/bin/env bash
# Builds the runtime library in BUILD_DIR (default build-one) and one test file into its own binary,
# then runs it: for working on one test file while others edit theirs.
# usage: tools/test_one.sh test/test_x.cpp [catch2 args...]
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1; shift
dir=${BUILD_DIR:-build-one}
[ -f "$dir/build.ninja" ] || cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMETAGRAD_BUILD_TESTS=OFF \
  -DMETAGRAD_BUILD_BENCH=OFF -DMETAGRAD_BUILD_EXAMPLES=OFF >/dev/null
targets=metagrad; grep -q "metagrad_llvm" "$dir/build.ninja" && targets="metagrad metagrad_llvm"
log=$(cmake --build "$dir" --target $targets 2>&1) || { echo "$log"; exit 1; }
[ -f "$dir/catch_main.o" ] || c++ -std=c++20 -O1 -c test/main.cpp -o "$dir/catch_main.o"
bin="$dir/$(basename "$src" .cpp)"
c++ -std=c++20 -O2 -g -Wall -Wextra -Wpedantic -Werror -Wno-restrict -Iinclude -Idetail -Itest "$src" \
  "$dir/catch_main.o" -L"$dir" -lmetagrad -Wl,-rpath,"$(realpath "$dir")" -o "$bin"
"$bin" "$@"
