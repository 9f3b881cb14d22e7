#!/bin/bash
# On the GPU machine, one short call (~2 minutes): build, then the op checks and decode graphs vs
# eager with the default one-row attention and with the cluster kernel (MLXB_ATTN_CLUSTER=1), for
# changes to the decode attention kernels that need no timing.
#   bash scripts/cuda/stage.sh DEST --tests; on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/attn-check-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=4
source scripts/cuda/steps.sh
device_setup attn-check-logs
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
for c in 0 1; do
  step "cuda_ops_check_cluster$c" 60 'FAIL|PASSED|failures' env MLXB_ATTN_CLUSTER=$c ./build-dev/cuda_ops_check
  step "graph_check_cluster$c" 40 'FAIL|CHECK' env MLXB_ATTN_CLUSTER=$c node scripts/cuda/graph-check.mjs 50
done
stamp done
