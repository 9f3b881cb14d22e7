#!/bin/bash
# On the GPU machine, one call: where a recorded one-token decode step goes, per kernel (ncu
# --graph-profiling node, real clocks, caches not flushed; each kernel timed alone, so programmatic
# overlap is not in the figures). For the random 1B bf16, 1B 4-bit g64 and 8B bf16: decode-profile.mjs
# with a 500-token prompt and STEPS steps, minus the same run without steps, summed by kernel name
# (ncu-sum.mjs); then the host-timed ms per step of the same model without the profiler.
# Logs: $OUT/decode-ncu-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/decode-ncu-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-40}
source scripts/cuda/steps.sh
device_setup decode-ncu-logs ${NCU_BUDGET:-420}
STEPS=${STEPS:-4}
(ckpt 1b && touch "$ck/ck-1b.done"; ckpt 8b && touch "$ck/ck-8b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
prof() {  # NAME DIR
  for s in 0 $STEPS; do
    timeout 120 ncu --graph-profiling node --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      node scripts/cuda/decode-profile.mjs "$2" $s 0 > "$logs/ncu-$1-$s.csv" 2> "$logs/ncu-$1-$s.err"
  done
  stamp "profile $1"
  node scripts/cuda/ncu-sum.mjs "$logs/ncu-$1-$STEPS.csv" "$logs/ncu-$1-0.csv" $STEPS | tee "$logs/sum-$1.txt" | head -${NCU_TOP:-24}
  timeout 60 node scripts/cuda/decode-profile.mjs "$2" 2 200 | tail -1
}
wait_for ck-1b && prof 1b-bf16 "$ck/ck-1b"
wait_for ck-8b && prof 8b-bf16 "$ck/ck-8b"
quant_q4 1b
wait_for ck-1b-q4 && prof 1b-q4 "$ck/ck-1b-q4"
stamp done
