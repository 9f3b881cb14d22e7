#!/bin/bash
# On the GPU machine, one call: which cuBLASLt algorithm serves the 32-row decode step best.
# Builds (sm_90), times every heuristic candidate and split-K variant at 32 rows (cuda_ops_check
# --lt-sweep; $OUT has the whole list), serves the random 8B checkpoint with 32 streams with the
# heuristic's first choice and with the sweep's picks (MLXB_CUBLASLT_PICK), alternating, then
# profiles the split paged attention kernel at that shape with ncu. ~2 minutes warm.
#   bash scripts/cuda/stage.sh DEST --tests; on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/lt-sweep-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=12
source scripts/cuda/steps.sh  # stamp, step NAME LIMIT FILTER CMD..., step_logs, memory_dir
step_logs lt-logs
memory_dir
ckpt() { timeout 200 node scripts/bench/make-checkpoint.mjs --shape "$1" --out "$ck/ck-$1" > "$logs/ck-$1.log" 2>&1 && touch "$ck/ck-$1.done"; }
wait_for() { for _ in $(seq 200); do [[ -f $ck/$1.done ]] && return 0; sleep 1; done; echo "  $1 not ready"; return 1; }
[[ -f .test-deps.tar.xz && ! -d node_modules/vitest ]] && tar -xJf .test-deps.tar.xz
ckpt 8b &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
step lt_sweep 120 '^pick|FAIL' ./build-dev/cuda_ops_check --lt-sweep 32
picks=$(grep '^pick' "$logs/lt_sweep.txt" | awk '{print $2}' | paste -sd, -)
echo "MLXB_CUBLASLT_PICK=$picks"
if wait_for ck-8b; then
  step serve_8b_default 80 'TTFT|aggregate' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_picks 80 'TTFT|aggregate' env MLXB_CUBLASLT_PICK="$picks" "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_default2 80 'TTFT|aggregate' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_picks2 80 'TTFT|aggregate' env MLXB_CUBLASLT_PICK="$picks" "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
fi
if command -v ncu >/dev/null; then
  # The split kernel at the 32-row 8B shape with its default unit (launches 403..: see bench_paged).
  step ncu_paged 90 'Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers|Theoretical Occ|Stall|L2 Hit|Memory Throughput' \
    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    -k regex:paged_split --launch-skip 403 --launch-count 1 ./build-dev/cuda_ops_check --paged-bench
fi
stamp done
