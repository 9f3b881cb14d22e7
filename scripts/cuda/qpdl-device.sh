#!/bin/bash
# On the GPU machine, one call: the programmatic launch of the 4-bit GEMV (MLXB_QGEMV_PDL=1,
# qgemv_tcp.cu) against the default on random-weight 1B and 8B checkpoints quantized 4-bit g64
# by our own tool: op check under it, greedy tokens equal (default / PDL / PDL with eager steps,
# quant-same.mjs), then bench.mjs decode with and without it, alternating. ~4 minutes warm.
#   bash scripts/cuda/stage.sh DEST --tests; on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/qpdl-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=12
source scripts/cuda/steps.sh  # stamp, step, step_logs, memory_dir, ckpt, quant_q4, wait_for
step_logs qpdl-logs
memory_dir
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node  # before the background jobs: quantize loads the addon
deadline=$(($(date +%s) + 420))
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
(ckpt 1b; quant_q4 1b; ckpt 8b; quant_q4 8b) &
step qcheck_pdl 60 'FAIL|PASSED|failures' env MLXB_QGEMV_PDL=1 ./build-dev/cuda_quant_check
for s in 1b 8b; do
  wait_for "ck-$s-q4" || { tail -5 "$logs/q-$s.log"; continue; }
  node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-a.txt" 2> "$logs/same-$s-a.err"
  MLXB_QGEMV_PDL=1 node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-b.txt" 2> "$logs/same-$s-b.err"
  MLXB_QGEMV_PDL=1 MLXB_CUDA_GRAPH=0 node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-c.txt" 2> "$logs/same-$s-c.err"
  cmp -s "$logs/same-$s-a.txt" "$logs/same-$s-b.txt" && cmp -s "$logs/same-$s-a.txt" "$logs/same-$s-c.txt" &&
    echo "same tokens $s PDL: PASSED ($(tr ' ' '\n' < "$logs/same-$s-a.txt" | sort -u | wc -l) distinct of 200)" ||
    echo "same tokens $s PDL: FAILED"
  for r in 1 2; do
    step "bench_${s}q4_$r" 90 '^(prefill|decode)' node scripts/bench/bench.mjs --model "$ck/ck-$s-q4" --device cuda --runs 2
    step "bench_${s}q4_pdl_$r" 90 '^(prefill|decode)' env MLXB_QGEMV_PDL=1 node scripts/bench/bench.mjs --model "$ck/ck-$s-q4" --device cuda --runs 2
  done
done
stamp done
