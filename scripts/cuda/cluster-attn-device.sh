#!/bin/bash
# On the GPU machine, one call: the cluster decode attention (attention_cluster.cu, opt-in
# MLXB_ATTN_CLUSTER=1): op checks and decode graphs vs eager with it, then bench.mjs decode on
# random 1B checkpoints (4-bit g64 and bf16) alternating without / with it.
#   bash scripts/cuda/stage.sh DEST --tests; on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/cluster-attn-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=4
source scripts/cuda/steps.sh
device_setup cluster-logs "${MLXB_DEADLINE:-420}"
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
(ckpt 1b; quant_q4 1b keep; touch $ck/ck-1b.done) &
step cuda_ops_check 150 'FAIL|PASSED|failures|cluster' env MLXB_ATTN_CLUSTER=1 ./build-dev/cuda_ops_check
step graph_check 60 'FAIL|CHECK' env MLXB_ATTN_CLUSTER=1 node scripts/cuda/graph-check.mjs 50
b() { local name=$1 model=$2; shift 2; [[ $(left) -lt 30 ]] && return; step "$name" 60 '^decode' env "$@" node scripts/bench/bench.mjs --model "$model" --device cuda --runs 2; }
wait_for ck-1b-q4 && for r in 1 2; do for c in 0 1; do b "q1b_c${c}_$r" $ck/ck-1b-q4 MLXB_ATTN_CLUSTER=$c; done; done
wait_for ck-1b && for r in 1 2; do for c in 0 1; do b "b1b_c${c}_$r" $ck/ck-1b MLXB_ATTN_CLUSTER=$c; done; done
stamp done
