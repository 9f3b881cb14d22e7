#!/bin/bash
# On the GPU machine, a quick iteration on the quantized GEMV kernels (device time is scarce):
# builds the addon and cuda_quant_check (sm_90), runs the op check with the default kernels and,
# in parallel, with each timing variant of the staged tensor-core GEMV (MLXB_QGEMV_VARIANT 3-6,
# see backend/cuda/qmm.cuh), then the kernel timings, a profile of one launch per variant when
# ncu exists (written to $OUT/ncu.txt if OUT is set), and the 1B 4-bit model bench per variant
# given in MLXB_BENCH_VARIANTS (default "0"; checkpoint written while the build runs).
#   source .device/prelude.sh; bash scripts/cuda/quant-kernels.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
out=${OUT:-/tmp}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
(node scripts/bench/make-checkpoint.mjs --shape 1b --out /tmp/ck-1b > /tmp/ck-1b.log 2>&1; echo "exit $?" >> /tmp/ck-1b.log) &
stamp "build"
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_JS_INC=$PWD/.nodehdr/include;$PWD/.nodehdr/node-addon-api" >/dev/null || exit 1
cmake --build build-dev -j "$(nproc)" --target mlxb cuda_quant_check | tail -1
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
stamp "op check: default and variants 3-7"
pids=()
for v in 0 3 4 5 6 7; do MLXB_QGEMV_VARIANT=$v ./build-dev/cuda_quant_check > "/tmp/qc$v.log" 2>&1 & pids+=($!); done
wait "${pids[@]}"
for v in 0 3 4 5 6 7; do echo "variant $v: $(grep -c '^FAIL' "/tmp/qc$v.log") FAIL, $(tail -1 "/tmp/qc$v.log")"; grep '^FAIL' "/tmp/qc$v.log" | head -5; done
stamp "timings"
./build-dev/cuda_quant_check --bench | sed -n '/-- timing/,$p' | grep -E '^(qgemv 4b g64 M=1|qgated|qmm)'
if command -v ncu >/dev/null; then
  stamp "ncu"
  timeout 30 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    ./build-dev/cuda_quant_check --profile > "$out/ncu.txt" 2>&1
  grep -E 'qgemv|Duration|DRAM Throughput|Achieved Occupancy|Stall|Memory Throughput' "$out/ncu.txt" | head -80
fi
while ! grep -q '^exit' /tmp/ck-1b.log; do sleep 1; done
node dist/cli/main.js quantize --model /tmp/ck-1b --out /tmp/ck-1b-q4 --bits 4 --group-size 64 2>/dev/null | tail -1
for v in ${MLXB_BENCH_VARIANTS:-0}; do
  stamp "bench 1b 4-bit g64, variant $v"
  MLXB_QGEMV_VARIANT=$v node scripts/bench/bench.mjs --model /tmp/ck-1b-q4 --device cuda --runs 2 | grep -E '^(prefill|decode)'
done
stamp "done"
