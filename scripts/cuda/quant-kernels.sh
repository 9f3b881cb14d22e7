#!/bin/bash
# On the GPU machine, one call for the quantized GEMV kernels (device time is scarce): builds the
# addon and cuda_quant_check (sm_90), runs the op check under each kernel variant of
# MLXB_CHECK_VARIANTS (default "0 7 9 10", in parallel; MLXB_QGEMV_VARIANT, see
# backend/cuda/qmm.cuh), the kernel timings (cuda_quant_check --bench), the quantized L2 check
# under each variant of MLXB_L2_VARIANTS (default "0"), the model bench on random-weight 4-bit g64
# checkpoints for each shape of MLXB_BENCH_SHAPES (default "1b"; written while the build runs)
# and variant of MLXB_BENCH_VARIANTS (default "0"). MLXB_QGEMV_PDL_TOO=1 adds the opt-in
# programmatic launch of the M = 1 GEMV (MLXB_QGEMV_PDL=1, qgemv_tcp.cu): the op check and
# timings under it, greedy tokens of each shape equal with it and with it in eager steps
# (quant-same.mjs), and the model bench with it. Last, a profile of one launch per timed
# variant when ncu exists ($OUT/ncu.txt) and fewer than MLXB_NCU_BEFORE seconds (default 600) have passed.
#   source .device/prelude.sh; bash scripts/cuda/quant-kernels.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
out=${OUT:-/tmp}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
shapes=${MLXB_BENCH_SHAPES:-1b}
for s in $shapes; do
  (node scripts/bench/make-checkpoint.mjs --shape "$s" --out "/tmp/ck-$s" > "/tmp/ck-$s.log" 2>&1; echo "exit $?" >> "/tmp/ck-$s.log") &
done
stamp "build"
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_JS_INC=$PWD/.nodehdr/include;$PWD/.nodehdr/node-addon-api" >/dev/null || exit 1
cmake --build build-dev -j "$(nproc)" --target mlxb cuda_quant_check | tail -1
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
cvars=${MLXB_CHECK_VARIANTS:-0 7 9 10}
stamp "op check: variants $cvars"
pids=()
for v in $cvars; do MLXB_QGEMV_VARIANT=$v ./build-dev/cuda_quant_check > "/tmp/qc$v.log" 2>&1 & pids+=($!); done
wait "${pids[@]}"
for v in $cvars; do echo "variant $v: $(grep -c '^FAIL' "/tmp/qc$v.log") FAIL, $(tail -1 "/tmp/qc$v.log")"; grep '^FAIL' "/tmp/qc$v.log" | head -5; done
stamp "timings"
./build-dev/cuda_quant_check --bench | sed -n '/-- timing/,$p' | grep -E '^(qgemv 4b g64 M=1|qgated)'
if [ -n "${MLXB_QGEMV_PDL_TOO:-}" ]; then
  stamp "op check and timings with MLXB_QGEMV_PDL=1"
  MLXB_QGEMV_PDL=1 ./build-dev/cuda_quant_check --bench > /tmp/qc-pdl.log 2>&1
  grep '^FAIL' /tmp/qc-pdl.log | head -5; grep -E '^(PASSED|FAILED)' /tmp/qc-pdl.log
  sed -n '/-- timing/,$p' /tmp/qc-pdl.log | grep -E '^(qgemv 4b g64 M=1|qgated)' | grep -v variant
fi
for v in ${MLXB_L2_VARIANTS:-0}; do
  stamp "L2 (quantized fixtures), variant $v"
  MLXB_QGEMV_VARIANT=$v node scripts/cuda/quant-l2-check.mjs ${MLXB_L2_DTYPES:-} > "/tmp/l2-$v.log" 2>&1
  grep -E '^FAIL' "/tmp/l2-$v.log" | head -5; tail -1 "/tmp/l2-$v.log"
done
for s in $shapes; do
  while ! grep -q '^exit' "/tmp/ck-$s.log"; do sleep 1; done
  stamp "quantize $s"
  node dist/cli/main.js quantize --model "/tmp/ck-$s" --out "/tmp/ck-$s-q4" --bits 4 --group-size 64 2>/dev/null | tail -1
  rm -rf "/tmp/ck-$s"
  if [ -n "${MLXB_QGEMV_PDL_TOO:-}" ]; then
    # Launch settings that must not change a value: greedy tokens equal with the programmatic
    # launch, recorded and eager.
    stamp "same tokens $s: default / MLXB_QGEMV_PDL=1 / + MLXB_CUDA_GRAPH=0"
    node scripts/cuda/quant-same.mjs "/tmp/ck-$s-q4" 200 > /tmp/same-a.txt
    MLXB_QGEMV_PDL=1 node scripts/cuda/quant-same.mjs "/tmp/ck-$s-q4" 200 > /tmp/same-b.txt
    MLXB_QGEMV_PDL=1 MLXB_CUDA_GRAPH=0 node scripts/cuda/quant-same.mjs "/tmp/ck-$s-q4" 200 > /tmp/same-c.txt
    cmp -s /tmp/same-a.txt /tmp/same-b.txt && cmp -s /tmp/same-a.txt /tmp/same-c.txt && echo "same tokens $s: PASSED" ||
      echo "same tokens $s: FAILED ($(head -c 80 /tmp/same-a.txt) | $(head -c 80 /tmp/same-b.txt) | $(head -c 80 /tmp/same-c.txt))"
    echo "distinct tokens: $(tr ' ' '\n' < /tmp/same-a.txt | sort -u | wc -l) of 200"
  fi
  for v in ${MLXB_BENCH_VARIANTS:-0}; do
    stamp "bench $s 4-bit g64, variant $v"
    MLXB_QGEMV_VARIANT=$v node scripts/bench/bench.mjs --model "/tmp/ck-$s-q4" --device cuda --runs 2 | grep -E '^(prefill|decode)'
  done
  if [ -n "${MLXB_QGEMV_PDL_TOO:-}" ]; then
    stamp "bench $s 4-bit g64, MLXB_QGEMV_PDL=1"
    MLXB_QGEMV_PDL=1 node scripts/bench/bench.mjs --model "/tmp/ck-$s-q4" --device cuda --runs 2 | grep -E '^(prefill|decode)'
  fi
done
if command -v ncu >/dev/null && [ $(($(date +%s) - t0)) -lt "${MLXB_NCU_BEFORE:-600}" ]; then
  stamp "ncu"
  timeout 30 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    ./build-dev/cuda_quant_check --profile > "$out/ncu.txt" 2>&1
  grep -E 'qgemv|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued' "$out/ncu.txt" | head -40
fi
stamp "done"
