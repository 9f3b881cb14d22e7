#!/bin/bash
# On the GPU machine, one call: the fused one-row quantized ops (qgemv_fused.cu: the input norm
# inside the q/k/v and gate/up GEMVs, the residual adds inside o and down; decode_fused.cc) against
# MLXB_CUDA_FUSED=0 (the unfused layer loop) on random-weight 1B and 8B checkpoints quantized 4-bit
# g64 by our own tool: the op checks (bit-identical to the ops they replace, strict: the fused
# kernel must have run) and their timings, greedy tokens equal (fused / unfused / fused with eager
# steps, quant-same.mjs), then bench.mjs decode with and without, alternating. ~6 minutes warm.
#   bash scripts/cuda/stage.sh DEST --tests; on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/qfused-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=16
source scripts/cuda/steps.sh  # stamp, step, step_logs, memory_dir, ckpt, quant_q4, wait_for
step_logs qfused-logs
memory_dir
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node  # before the background jobs: quantize loads the addon
deadline=$(($(date +%s) + 400))  # one deadline for every wait (a failed job must not hold the call)
[[ -f .test-deps.tar.xz && ! -d node_modules/vitest ]] && tar -xJf .test-deps.tar.xz
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
(ckpt 1b; quant_q4 1b; ckpt 8b; quant_q4 8b) &
step qcheck 90 'FAIL|PASSED|failures|fused|unfused' ./build-dev/cuda_quant_check --fused-bench
step fused_check 45 'FAIL|PASSED|failures' ./build-dev/cuda_fused_check
for s in 1b 8b; do
  wait_for "ck-$s-q4" || { tail -5 "$logs/q-$s.log"; continue; }
  node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-a.txt" 2> "$logs/same-$s-a.err"
  MLXB_CUDA_FUSED=0 node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-b.txt" 2> "$logs/same-$s-b.err"
  MLXB_CUDA_GRAPH=0 node scripts/cuda/quant-same.mjs "$ck/ck-$s-q4" 200 > "$logs/same-$s-c.txt" 2> "$logs/same-$s-c.err"
  [[ -s $logs/same-$s-a.txt ]] && cmp -s "$logs/same-$s-a.txt" "$logs/same-$s-b.txt" && cmp -s "$logs/same-$s-a.txt" "$logs/same-$s-c.txt" &&
    echo "same tokens $s fused / unfused / eager: PASSED ($(tr ' ' '\n' < "$logs/same-$s-a.txt" | sort -u | wc -l) distinct of 200)" ||
    { echo "same tokens $s: FAILED"; tail -3 "$logs"/same-$s-*.err; }
  for r in 1 2; do
    step "bench_${s}q4_$r" 90 '^(prefill|decode)' node scripts/bench/bench.mjs --model "$ck/ck-$s-q4" --device cuda --runs 2
    step "bench_${s}q4_unfused_$r" 90 '^(prefill|decode)' env MLXB_CUDA_FUSED=0 node scripts/bench/bench.mjs --model "$ck/ck-$s-q4" --device cuda --runs 2
  done
done
stamp done
