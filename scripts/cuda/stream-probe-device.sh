#!/bin/bash
# On the GPU machine, one call: streaming rates of register loads, cp.async rings and 2-D tensor
# copies (TMA) at 1-4 blocks per SM (cuda_ops_check --stream-probe, stream_probe.cu). Build, probe.
# Logs: $OUT/stream-probe-logs.tgz; the table on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/stream-probe-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-60}
source scripts/cuda/steps.sh
device_setup stream-probe-logs 300
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
step probe 120 '^stream|FAIL' ./build-dev/cuda_ops_check --stream-probe
stamp done
