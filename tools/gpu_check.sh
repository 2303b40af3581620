#!/bin/bash
# The GPU checks of docs/cuda.md in one run, for a machine with an NVIDIA GPU (and PyTorch for the
# comparison) but no build of its own: run from a folder holding libmetagrad.so.0, metagrad_tests,
# bench_cuda and bench_cuda_torch.py (stripped copies from a Release build elsewhere), and for the
# OpenCL suites on NVIDIA's own driver the ICD loader and metagrad's OpenCL plugin, e.g.
#   mkdir g && cp build/libmetagrad.so.0 build/libmetagrad_opencl.so build/test/metagrad_tests \
#     build/bench/bench_cuda bench/bench_cuda_torch.py tools/gpu_check.sh \
#     /usr/lib/x86_64-linux-gnu/libOpenCL.so.1 g/ && strip g/*.so* g/metagrad_tests g/bench_cuda
#   OUT=/tmp/out g/gpu_check.sh
# Prints the [cuda] tests, each tensor suite on DEVICE=CUDA and DEVICE=OPENCL (in parallel), the
# figures beside PyTorch's (TinyJit as CUDA graphs, then kernel by kernel) and, with TOP=N, the GPT
# step's N slowest kernels (DEBUG=2); the logs go to $OUT/logs.tar.gz.
# SUITES, OCL_SUITES, SUITE_S (each suite's time limit), BENCH_S and TOP change it.
G=$(cd "$(dirname "$0")" && pwd)
cd "$G" || exit 1
export LD_LIBRARY_PATH=$G METAGRAD_CACHE=${METAGRAD_CACHE:-/tmp/mgcache}
L=/tmp/gpu_logs
mkdir -p "$L" "${OUT:=/tmp}"
SUITES="${SUITES:-math reduce movement processing loss nn creation threads}"
OCL_SUITES="${OCL_SUITES:-$SUITES}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
# NVRTC: the toolkit's where installed, else the one PyTorch's wheels bring.
if [ -z "$METAGRAD_NVRTC" ] && ! ls /usr/local/cuda/lib64/libnvrtc.so* > /dev/null 2>&1; then
  NV=$(python3 -c "import nvidia.cuda_nvrtc as m; print(list(m.__path__)[0])" 2> /dev/null)
  [ -n "$NV" ] && export METAGRAD_NVRTC=$(ls "$NV"/lib/libnvrtc.so* 2> /dev/null | head -1)
fi
echo "METAGRAD_NVRTC=${METAGRAD_NVRTC:-the system default}"
# OpenCL: NVIDIA's driver through the ICD loader beside the binaries.
OCL=$(find /usr/lib* /usr/local/nvidia -name 'libnvidia-opencl.so*' 2> /dev/null | head -1)
if [ -n "$OCL" ]; then
  mkdir -p /tmp/icd && echo "$OCL" > /tmp/icd/nvidia.icd && export OCL_ICD_VENDORS=/tmp/icd
else
  OCL_SUITES=""
fi
echo "OpenCL driver: ${OCL:-none}"
T0=$SECONDS
DEBUG=1 timeout 120 ./metagrad_tests "[cuda]" > $L/cuda.log 2>&1
echo "[cuda] rc=$? ($((SECONDS - T0)) s)"
tail -3 $L/cuda.log
DEVICE=CPU timeout 60 ./metagrad_tests "[cuda_render]" > $L/cuda_render.log 2>&1
echo "[cuda_render] rc=$?"
tail -2 $L/cuda_render.log
run_suite() {  # device, suite
  DEVICE=$1 timeout "${SUITE_S:-200}" ./metagrad_tests "[$2]" > "$L/$1_$2.log" 2>&1
  echo "$1 [$2] rc=$? ($((SECONDS - T0)) s): $(tail -2 "$L/$1_$2.log" | tr '\n' ' ')"
}
for s in $SUITES; do run_suite CUDA "$s" & done
for s in $OCL_SUITES; do run_suite OPENCL "$s" & done
wait
for f in $L/*.log; do
  grep -m3 -B3 -A14 "FAILED\|terminate\|Segmentation\|failed" "$f" | head -50 | sed "s|^|$(basename "$f"): |"
done | head -120
T1=$SECONDS
mkdir -p /tmp/gpt_init
timeout "${BENCH_S:-110}" ./bench_cuda --gpt-dir=/tmp/gpt_init > $L/bench.txt 2> $L/bench.err
echo "bench rc=$? ($((SECONDS - T1)) s)"
grep -v "^===" $L/bench.err | tail -3
timeout 90 python3 bench_cuda_torch.py $L/bench.txt /tmp/gpt_init 2>&1 | tail -18
echo "== kernel by kernel (METAGRAD_JIT_GRAPH=0):"
METAGRAD_JIT_GRAPH=0 timeout 60 ./bench_cuda --only=W6,GPT --steps=12 2> /dev/null | grep -v "first"
if [ "${TOP:-0}" -gt 0 ]; then
  DEBUG=2 timeout 60 ./bench_cuda --only=GPT --steps=6 > /dev/null 2> $L/dbg.txt
  for m in eager jit; do
    awk -v L="=== step 5 $m" '$0==L{on=1;next} /^=== /{on=0} on' $L/dbg.txt > $L/last_$m.txt
    echo "== GPT step 5 $m: $(grep -c '^\*\*\*' $L/last_$m.txt) kernels"
    grep '^\*\*\* *[0-9]' $L/last_$m.txt | awk '{n=$3; t=$6; if($7=="ms") t*=1000; tot+=t; a[n]+=t; c[n]++}
      END {for(k in a) printf "%9.1f us %4d %s\n", a[k], c[k], k; printf "%9.1f total\n", tot}' |
      sort -rn | head -"$TOP"
  done
fi
tar czf "$OUT/logs.tar.gz" -C /tmp gpu_logs
echo "total $SECONDS s"
