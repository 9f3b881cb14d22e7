#!/bin/bash
# On the GPU machine, one call: where the few-row GEMM (matmul_rows.cu) loses time. Build; its
# timings with programmatic launch on and off; ncu on one steady-state launch at the 8B q/k/v
# shape (32 rows, default slice). Logs: $OUT/rows-prof-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/rows-prof-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-20}
source scripts/cuda/steps.sh
device_setup rows-prof-logs 400
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
step bench_pdl 60 '^rows' ./build-dev/cuda_ops_check --rows-bench
step bench_nopdl 60 '^rows' env MLXB_CUDA_PDL=0 ./build-dev/cuda_ops_check --rows-bench
if command -v ncu >/dev/null; then
  STEP_TAIL=90 step ncu_rows 120 '[A-Za-z]' ncu --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section LaunchStats --section SchedulerStats \
    -k regex:rows_gemm --launch-skip 20 --launch-count 1 ./build-dev/cuda_ops_check --rows-bench
fi
stamp done
