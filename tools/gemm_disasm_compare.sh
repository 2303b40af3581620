#!/bin/sh
# The GEMM's machine code in two builds of the runtime library (say libmetagrad.so saved before a
# change to the kernel or its plan, and after): every function of cpu::detail::Gemm (fixed::detail::
# Gemm before the shared CPU layer) in each ISA copy, disassembled with addresses, jump targets and
# the namespace stripped, then compared function by function. Prints the functions whose code
# differs; a structural change should leave the loops (tile, the mg_gemm_* functions of
# gemm_kernel.h, few_rows, dots) identical.
#   tools/gemm_disasm_compare.sh before/libmetagrad.so after/libmetagrad.so
set -eu
dir=${TMPDIR:-/tmp}/gemm_disasm_compare.$$
mkdir -p "$dir"
dump() {
  objdump -d --no-show-raw-insn -C "$1" | awk '
    /^[0-9a-f]+ <.*>:$/ {
      name = $0; sub(/^[0-9a-f]+ </, "", name); sub(/>:$/, "", name)
      keep = name ~ /::Gemm<(float|double)>::/ && name !~ /@plt/
      gsub(/fixed::|cpu::/, "", name); next
    }
    keep && NF {
      line = $0; sub(/^ *[0-9a-f]+:\t/, "", line); sub(/ *#.*$/, "", line)
      sub(/ [0-9a-f]+ <.*$/, " ADDR", line); gsub(/0x[0-9a-f]+\(%rip\)/, "RIP", line)
      print name "\t" line
    }' | sort -s -t '	' -k1,1
}
dump "$1" > "$dir/before"
dump "$2" > "$dir/after"
echo "functions: $(cut -f1 "$dir/before" | sort -u | wc -l) before, $(cut -f1 "$dir/after" | sort -u | wc -l) after"
changed=$(diff "$dir/before" "$dir/after" | grep '^[<>]' | cut -f1 | sed 's/^[<>] //; s/(.*//' | sort -u || true)
if [ -z "$changed" ]; then echo "every function's code is the same"; else echo "code differs in:"; echo "$changed" | sed 's/^/  /'; fi
rm -rf "$dir"
