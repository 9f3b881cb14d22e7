#!/bin/bash
# On the GPU machine, one call: the few-row GEMM (matmul_rows.cu, MLXB_ROWS_GEMM=1) against cuBLASLt
# for the 9..32-row products of the batched decode step. Build; its checks and timings
# (cuda_ops_check --rows); every op check with it on; engine batch invariance on two fixtures with it
# on; then 32-stream serving of the random 8B alternating on / off, and the 1B once each way.
# ROWS_QUICK=1 skips the full op check and engine-check; ROWS_ROUNDS=N sets the 8B serving rounds (3).
# Logs: $OUT/rows-gemm-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/rows-gemm-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-6}
source scripts/cuda/steps.sh
device_setup rows-gemm-logs 560
test_deps
(ckpt 8b && touch "$ck/ck-8b.done"; ckpt 1b && touch "$ck/ck-1b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
STEP_TAIL=40 step rows 100 'FAIL|PASSED|failures|^rows M' ./build-dev/cuda_ops_check --rows
grep -q 'PASSED' "$logs/rows.txt" || { stamp "rows checks did not pass: stopping"; exit 1; }
if [[ -z ${ROWS_QUICK:-} ]]; then  # ROWS_QUICK=1: the few-row checks and timings, then serving only
step ops_check 120 'FAIL|PASSED|failures' env MLXB_ROWS_GEMM=1 ./build-dev/cuda_ops_check
step engine_check 60 'concurrent|FAIL|Error' env MLXB_ROWS_GEMM=1 node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama test/fixtures/models/qwen3
fi
wait_for ck-8b && for r in $(seq 1 ${ROWS_ROUNDS:-3}); do
  for c in "rows:MLXB_ROWS_GEMM=1" "lt:MLXB_ROWS_GEMM=0"; do
    [[ $(left) -lt 30 ]] && break 2
    step "serve_8b_${c%%:*}_$r" 40 'aggregate|TTFT' env ${c#*:} "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  done
done
wait_for ck-1b && for c in "rows:MLXB_ROWS_GEMM=1" "lt:MLXB_ROWS_GEMM=0"; do
  [[ $(left) -lt 20 ]] && break
  step "serve_1b_${c%%:*}" 25 'aggregate' env ${c#*:} "${serve32[@]}" --model "$ck/ck-1b" --kv-gb 8
done
stamp done
