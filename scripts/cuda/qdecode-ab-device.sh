#!/bin/bash
# On the GPU machine, after quick-verify-device.sh with MLXB_QV_Q4=1 (which leaves the random 1B
# and 8B 4-bit g64 checkpoints in its memory dir): greedy tokens of the 1B equal under the default,
# MLXB_QGEMV_PDL=0 and eager steps, then bench.mjs decode of both checkpoints alternating the
# default with the launch settings in $MLXB_AB (default: MLXB_QGEMV_PDL=4096, the quantized GEMV
# programmatic only for K >= 4096, and MLXB_ATTN_CLUSTER=1). Logs: $OUT/qab-logs.tgz.
#   source .device/prelude.sh; cd DEST && MLXB_QV_Q4=1 bash scripts/cuda/quick-verify-device.sh; bash scripts/cuda/qdecode-ab-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=2
source scripts/cuda/steps.sh
device_setup qab-logs
if [[ -f $ck/ck-1b-q4.done ]]; then
  timeout 60 node scripts/cuda/quant-same.mjs "$ck/ck-1b-q4" 200 > "$logs/same-default.txt" 2>&1
  for c in "pdl0:MLXB_QGEMV_PDL=0" "eager:MLXB_CUDA_GRAPH=0"; do
    timeout 60 env ${c#*:} node scripts/cuda/quant-same.mjs "$ck/ck-1b-q4" 200 > "$logs/same-${c%%:*}.txt" 2>&1
    if [[ -s $logs/same-default.txt ]] && cmp -s "$logs/same-default.txt" "$logs/same-${c%%:*}.txt"; then
      echo "1B 4-bit tokens: default == ${c%%:*}"
    else
      echo "1B 4-bit tokens: default != ${c%%:*} (FAIL)"
    fi
  done
fi
for r in 1 2; do
  for s in 1b 8b; do
    [[ -f $ck/ck-$s-q4.done ]] || continue
    for c in "default:" ${MLXB_AB:-"k4096:MLXB_QGEMV_PDL=4096" "cluster:MLXB_ATTN_CLUSTER=1"}; do
      step "bench_${s}q4_${c%%:*}_$r" 60 '^decode' env ${c#*:} node scripts/bench/bench.mjs --model "$ck/ck-$s-q4" --device cuda --runs 2
    done
  done
done
stamp done
