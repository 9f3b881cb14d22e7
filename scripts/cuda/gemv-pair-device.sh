#!/bin/bash
# On the GPU machine, one call: the one-row bf16 GEMVs with two rows per unit (gemv_fused.cu).
# Build; cuda_fused_check (every fused op bit-identical to the ops it fuses); graph-check on the
# fixtures (recorded == eager tokens and logits); bench.mjs decode of the random 1B and 8B bf16;
# the per-kernel ncu sum of an 8B decode step (as decode-ncu-device.sh).
# Logs: $OUT/gemv-pair-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/gemv-pair-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-8}
source scripts/cuda/steps.sh
device_setup gemv-pair-logs ${PAIR_BUDGET:-420}
test_deps
(ckpt 1b && touch "$ck/ck-1b.done"; ckpt 8b && touch "$ck/ck-8b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
step fused_check 60 'FAIL|PASSED|failures|differ' ./build-dev/cuda_fused_check
step graph_check 90 'FAIL|CHECK|equal|differ' node scripts/cuda/graph-check.mjs 50
for s in 1b 8b; do
  wait_for ck-$s || continue
  for r in 1 2; do
    step "bench_${s}_$r" 90 'decode|prefill' node scripts/bench/bench.mjs --model "$ck/ck-$s" --device cuda --runs 3
  done
done
if [[ $(left) -gt 60 ]]; then
  for n in 0 4; do
    timeout 90 ncu --graph-profiling node --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      node scripts/cuda/decode-profile.mjs "$ck/ck-8b" $n 0 > "$logs/ncu-8b-$n.csv" 2> "$logs/ncu-8b-$n.err"
  done
  node scripts/cuda/ncu-sum.mjs "$logs/ncu-8b-4.csv" "$logs/ncu-8b-0.csv" 4 | head -8
fi
stamp done
