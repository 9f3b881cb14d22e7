#!/bin/bash
# On the GPU machine, one call: ncu's detail sections (speed of light, occupancy, warp states,
# memory) for the four one-row bf16 GEMVs of one 8B decode layer in a recorded step
# (fused_gemv_kernel: q/k/v + norm + rope, o + add, norm + gate/up, down + add), real clocks, caches
# not flushed. Logs: $OUT/gemv-ncu-logs.tgz; the key lines on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/gemv-ncu-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-40}
source scripts/cuda/steps.sh
device_setup gemv-ncu-logs ${NCU_BUDGET:-300}
(ckpt ${SHAPE:-8b} && touch "$ck/ck-${SHAPE:-8b}.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
wait_for ck-${SHAPE:-8b} || exit 1
stamp ncu
timeout 150 ncu --graph-profiling node --clock-control none --cache-control none --kernel-name regex:fused_gemv \
  --launch-skip 8 --launch-count 4 --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats \
  node scripts/cuda/decode-profile.mjs "$ck/ck-${SHAPE:-8b}" 2 0 > "$logs/ncu.txt" 2> "$logs/ncu.err"
echo "ncu exit $?"
grep -E 'fused_gemv_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Eligible Warps|Issued Warp|No Eligible|Active Warps Per|Warp Cycles Per Issued|Stall|L2 Hit|Waves Per SM|Block Limit' "$logs/ncu.txt" | cut -c1-150 | head -${NCU_LINES:-120}
stamp done
