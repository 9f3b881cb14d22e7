#!/bin/bash
# On the GPU machine, one call for the row-streaming one-row 4-bit GEMV (backend/cuda/qgemv_row.cu):
# build; cuda_quant_check with MLXB_QGEMV_ROW=1 (qgemv_row wherever it fits); its one-row timings
# against qgemv_tcp (--row-bench);
# random 1B / 8B checkpoints quantized 4-bit g64 by our tool; greedy tokens with it equal recorded and
# eager (and compared with qgemv_tcp's); bench.mjs decode alternating MLXB_QGEMV_ROW=1 with =0,
# QROW_ROUNDS rounds (default 2; the 1B in the first only).
# Logs: $OUT/qrow-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/qrow-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-6}
source scripts/cuda/steps.sh
device_setup qrow-logs 560
(ckpt 1b && touch "$ck/ck-1b.done"; ckpt 8b && touch "$ck/ck-8b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
(wait_for ck-1b && quant_q4 1b; wait_for ck-8b && quant_q4 8b) &
STEP_TAIL=12 step qcheck 150 'FAIL|PASSED|failures|qgemv_row ran' env MLXB_QGEMV_ROW=1 ./build-dev/cuda_quant_check
grep -q 'PASSED' "$logs/qcheck.txt" || { stamp "quant checks did not pass: stopping"; exit 1; }
STEP_TAIL=40 step row_bench 120 'M=1|qgated' ./build-dev/cuda_quant_check --row-bench
for s in 1b 8b; do
  wait_for "ck-$s-q4" || continue
  timeout 60 env MLXB_QGEMV_ROW=1 node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-default.txt" 2>&1
  for c in "eager:MLXB_QGEMV_ROW=1,MLXB_CUDA_GRAPH=0" "tcp:MLXB_QGEMV_ROW=0"; do
    timeout 60 env $(tr , " " <<< "${c#*:}") node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-${c%%:*}.txt" 2>&1
    if [[ -s $logs/same-$s-default.txt ]] && cmp -s "$logs/same-$s-default.txt" "$logs/same-$s-${c%%:*}.txt"; then
      echo "$s 4-bit tokens: row == ${c%%:*}"
    else
      echo "$s 4-bit tokens: row != ${c%%:*}$([[ ${c%%:*} == eager ]] && echo ' (FAIL)')"
    fi
  done
done
for r in $(seq 1 ${QROW_ROUNDS:-2}); do
  for s in 8b 1b; do
    [[ -f $ck/ck-$s-q4.done && ( $s == 8b || $r == 1 ) ]] || continue
    for c in "row:MLXB_QGEMV_ROW=1" "tcp:MLXB_QGEMV_ROW=0" ${QROW_EXTRA:-}; do
      [[ $(left) -lt 30 ]] && break 3
      step "bench_${s}q4_${c%%:*}_$r" 60 '^decode' env $(tr , " " <<< "${c#*:}") node scripts/bench/bench.mjs --model "$ck/ck-$s-q4" --device cuda --runs 2
    done
  done
done
stamp done
