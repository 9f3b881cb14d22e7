#!/bin/bash
# On the GPU machine, one call for the TMA one-row 4-bit GEMV (backend/cuda/qgemv_tma.cu): build;
# cuda_quant_check with MLXB_QGEMV_TMA=1 (qgemv_tma where it fits); the one-row timings of qgemv_tma
# vs qgemv_tcp (--tma-bench; also with a ring of 8 stages, and 8 stages x 2 blocks per SM); random
# 1B / 8B checkpoints quantized 4-bit g64 by our tool; greedy tokens of each equal recorded and eager; bench.mjs decode
# alternating MLXB_QGEMV_TMA=1 with =0 (qgemv_tcp) and the settings in QTMA_EXTRA (NAME:A=1,B=2 ...;
# default: with MLXB_QFUSED_NORM=1, the norm folded into the GEMVs' x staging), QTMA_ROUNDS rounds (default 2;
# the 1B in the first only).
# Logs: $OUT/qtma-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/qtma-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-6}
source scripts/cuda/steps.sh
device_setup qtma-logs 560
(ckpt 1b && touch "$ck/ck-1b.done"; ckpt 8b && touch "$ck/ck-8b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
(wait_for ck-1b && quant_q4 1b; wait_for ck-8b && quant_q4 8b) &
STEP_TAIL=12 step qcheck 150 'FAIL|PASSED|failures|qgemv_tma ran' env MLXB_QGEMV_TMA=1 ./build-dev/cuda_quant_check
grep -q 'PASSED' "$logs/qcheck.txt" || { stamp "quant checks did not pass: stopping"; exit 1; }
STEP_TAIL=30 step tma_bench 120 'M=1|qgated' ./build-dev/cuda_quant_check --tma-bench
STEP_TAIL=30 step tma_bench8 120 'variant 12' env MLXB_QTMA_STAGES=8 ./build-dev/cuda_quant_check --tma-bench
STEP_TAIL=30 step tma_bench8x2 120 'variant 12' env MLXB_QTMA_STAGES=8 MLXB_QTMA_GRID=2 ./build-dev/cuda_quant_check --tma-bench
for s in 1b 8b; do
  wait_for "ck-$s-q4" || continue
  timeout 60 env MLXB_QGEMV_TMA=1 node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-default.txt" 2>&1
  for c in "eager:MLXB_QGEMV_TMA=1,MLXB_CUDA_GRAPH=0" "tcp:MLXB_QGEMV_TMA=0"; do
    timeout 60 env $(tr , " " <<< "${c#*:}") node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-${c%%:*}.txt" 2>&1
    if [[ -s $logs/same-$s-default.txt ]] && cmp -s "$logs/same-$s-default.txt" "$logs/same-$s-${c%%:*}.txt"; then
      echo "$s 4-bit tokens: default == ${c%%:*}"
    else
      echo "$s 4-bit tokens: default != ${c%%:*}$([[ ${c%%:*} == eager ]] && echo ' (FAIL)')"
    fi
  done
done
for r in $(seq 1 ${QTMA_ROUNDS:-2}); do
  for s in 8b 1b; do
    [[ -f $ck/ck-$s-q4.done && ( $s == 8b || $r == 1 ) ]] || continue
    for c in "tma:MLXB_QGEMV_TMA=1" "tcp:MLXB_QGEMV_TMA=0" ${QTMA_EXTRA:-"norm:MLXB_QGEMV_TMA=1,MLXB_QFUSED_NORM=1"}; do
      [[ $(left) -lt 30 ]] && break 3
      step "bench_${s}q4_${c%%:*}_$r" 60 '^decode' env $(tr , " " <<< "${c#*:}") node scripts/bench/bench.mjs --model "$ck/ck-$s-q4" --device cuda --runs 2
    done
  done
done
stamp done
