#!/bin/bash
# On the GPU machine, one call: paged_split2_kernel with the keys loaded straight into registers
# (MLXB_PAGED_REGK=1: 2 blocks per SM at D = 128) against the default ring of cp.async copies.
# Build; the paged checks (split vs single-block vs CPU, rows alone / reordered == batch) and the
# full op check under =1; kernel timings of the 32-row decode shape (cuda_ops_check --paged-bench);
# greedy tokens of 32 concurrent engine requests on the random 1B and 8B under each setting
# (reported, not required equal: the sum over the head dim runs in another order); then 32-stream
# serving alternating.
# Logs: $OUT/paged-regk-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/paged-regk-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-6}
source scripts/cuda/steps.sh
device_setup paged-regk-logs ${REGK_BUDGET:-540}
test_deps
(ckpt 1b && touch "$ck/ck-1b.done"; ckpt 8b && touch "$ck/ck-8b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
step paged_check_regk1 60 'FAIL|PASSED|failures' env MLXB_PAGED_REGK=1 ./build-dev/cuda_ops_check --paged-check
step ops_check_regk1 120 'FAIL|PASSED|failures' env MLXB_PAGED_REGK=1 ./build-dev/cuda_ops_check
step paged_bench 60 'rows=' ./build-dev/cuda_ops_check --paged-bench
tokens() {  # NAME DIR
  for c in ring:0 regk2:1; do
    timeout 90 env MLXB_PAGED_REGK=${c#*:} node scripts/cuda/engine-tokens.mjs --device cuda "$2" > "$logs/tok-$1-${c%%:*}.txt" 2>&1
    echo "  $1 ${c%%:*}: $(head -1 "$logs/tok-$1-${c%%:*}.txt" | cut -c1-110)"
  done
}
wait_for ck-1b && tokens 1b "$ck/ck-1b"
wait_for ck-8b && tokens 8b "$ck/ck-8b"
variants=("ring:MLXB_PAGED_REGK=0" "regk2:MLXB_PAGED_REGK=1")
serve_ab 8b 3 30 'aggregate|TTFT' "${variants[@]}" -- "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
serve_ab 1b 1 20 'aggregate' "${variants[@]}" -- "${serve32[@]}" --model "$ck/ck-1b" --kv-gb 8
stamp done
