#!/bin/bash
# On the GPU machine: the CUDA verification of a staged checkout in one call (device time is
# scarce), most important first: build (sm_90); op checks (cuda_ops_check, cuda_fused_check,
# cuda_quant_check); decode graphs vs eager; engine batch invariance; L2 of the quantized
# fixtures; L1 vs transformers; the opt-in vitest GPU files; then the benchmarks (1B / 8B bf16
# single stream, 1B / 8B 32-stream serving with and without --batch-invariant, 8B 32 streams with
# MLXB_CUBLASLT_TUNE=0, 8B 256 streams). Every step has
# its own time limit; full logs go to $OUT (default /tmp), summaries to stdout.
# Stage here with `bash scripts/cuda/stage.sh DEST --tests`, then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/verify-device.sh [--no-8b]
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
out=${OUT:-/tmp}
big=1
[[ ${1:-} == --no-8b ]] && big=0
STEP_LOGS=$out STEP_TAIL=16
source scripts/cuda/steps.sh  # stamp, step NAME LIMIT FILTER CMD... (full output in $OUT/NAME.txt)
ckpt() {  # once per machine: a second caller (an earlier background start) only waits for .done
  [[ -e /tmp/ck-$1.started ]] && return 0
  touch "/tmp/ck-$1.started"
  timeout 240 node scripts/bench/make-checkpoint.mjs --shape "$1" --out "/tmp/ck-$1" > "/tmp/ck-$1.log" 2>&1 && touch "/tmp/ck-$1.done"
}
wait_ckpt() { for _ in $(seq 240); do [[ -f /tmp/ck-$1.done ]] && return 0; sleep 1; done; echo "  checkpoint $1 not ready"; return 1; }
(ckpt 1b; [[ $big == 1 ]] && ckpt 8b) &
[[ -f .test-deps.tar.xz ]] && tar -xJf .test-deps.tar.xz
stamp "build"
bash scripts/cuda/build-device.sh || exit 1
ln -sfn build-dev build   # test/cuda-ops.test.ts runs the native checks from build/
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
step cuda_ops_check 120 'FAIL|PASSED|failures' ./build-dev/cuda_ops_check
step cuda_fused_check 60 'FAIL|PASSED|failures' ./build-dev/cuda_fused_check
step cuda_quant_check 90 'FAIL|PASSED|failures' ./build-dev/cuda_quant_check
step graph_check 120 'FAIL|CHECK' node scripts/cuda/graph-check.mjs 100
step engine_check 150 '.' node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama test/fixtures/models/qwen3 \
  test/fixtures/models/gemma3_text test/fixtures/models/gemma2
step quant_l2 120 'FAIL|L2 ' node scripts/cuda/quant-l2-check.mjs
stamp "L1"
timeout 150 python3 scripts/cuda/l1_oracle.py test/fixtures/models /tmp/l1 > "$out/l1-oracle.txt" 2>&1 || echo "  (l1 oracle failed)"
step l1_check 60 '.' node scripts/cuda/l1-check.mjs /tmp/l1
step vitest_gpu 150 'Test Files|Tests|FAIL|✗|×' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-ops.test.ts \
  test/cuda-runop.test.ts test/cuda-quant.test.ts test/cuda-sampling.test.ts test/addon.test.ts
wait_ckpt 1b && {
  step bench_1b 100 '^prefill|^decode' node scripts/bench/bench.mjs --model /tmp/ck-1b --device cuda --runs 3
  step serve_1b 90 'TTFT|aggregate' "${serve32[@]}" --model /tmp/ck-1b
  step serve_1b_inv 90 'TTFT|aggregate' "${serve32[@]}" --model /tmp/ck-1b --batch-invariant
}
[[ $big == 1 ]] && wait_ckpt 8b && {
  step bench_8b 120 '^prefill|^decode' node scripts/bench/bench.mjs --model /tmp/ck-8b --device cuda --runs 2
  step serve_8b 90 'TTFT|aggregate' "${serve32[@]}" --model /tmp/ck-8b --kv-gb 8
  step serve_8b_inv 90 'TTFT|aggregate' "${serve32[@]}" --model /tmp/ck-8b --kv-gb 8 --batch-invariant
  step serve_8b_notune 90 'TTFT|aggregate' env MLXB_CUBLASLT_TUNE=0 "${serve32[@]}" --model /tmp/ck-8b --kv-gb 8
  step serve_8b_256 90 'TTFT|aggregate' "${serve32[@]}" --model /tmp/ck-8b --kv-gb 24 --streams 256
}
stamp "done"
