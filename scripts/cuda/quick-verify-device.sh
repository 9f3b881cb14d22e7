#!/bin/bash
# On the GPU machine: the short CUDA verification for a call with little device time left (~6
# minutes in all): build (sm_90), every op check, the quantized L2 fixtures in the manifest's
# order (gemma3_text_bf16_q4 last: it failed there when KV buffers held stale memory), the opt-in
# vitest GPU files, decode graphs vs eager, engine batch invariance, then 32-stream serving of the
# random 1B and 8B checkpoints. verify-device.sh is the full one (L1, single-stream benches, 256
# streams). Each step has a time limit; logs in $OUT/quick-logs.tgz, summaries on stdout.
# MLXB_QV_Q4=1 also quantizes both checkpoints (4-bit g64, our tool) after the build and runs
# bench.mjs decode on them at the end.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/quick-verify-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=12
source scripts/cuda/steps.sh  # stamp, step NAME LIMIT FILTER CMD..., step_logs, memory_dir
step_logs quick-logs
memory_dir
ckpt() {  # reuses one an earlier script of the same call made
  [[ -f $ck/ck-$1.done ]] || { timeout 200 node scripts/bench/make-checkpoint.mjs --shape "$1" --out "$ck/ck-$1" > "$logs/ck-$1.log" 2>&1 && touch "$ck/ck-$1.done"; }
}
wait_ckpt() { for _ in $(seq 200); do [[ -f $ck/ck-$1.done ]] && return 0; sleep 1; done; echo "  checkpoint $1 not ready"; return 1; }
[[ -f .test-deps.tar.xz && ! -d node_modules/vitest ]] && tar -xJf .test-deps.tar.xz
(ckpt 1b; ckpt 8b) &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
ln -sfn build-dev build
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
quant() {
  wait_ckpt "$1" && timeout 240 node dist/cli/main.js quantize --model "$ck/ck-$1" --out "$ck/ck-$1-q4" --bits 4 --group-size 64 \
    > "$logs/q-$1.log" 2>&1 && touch "$ck/ck-$1-q4.done"
}
[[ -n ${MLXB_QV_Q4:-} ]] && (quant 1b; quant 8b) &
ORDER=$(node -e "console.log(Object.keys(JSON.parse(require('fs').readFileSync('test/fixtures/quant/manifest.json','utf8')).fixtures).join(','))")
step quant_l2_order 60 '^FAIL|^L2 ' env MLXB_L2_ONLY="$ORDER" node scripts/cuda/quant-l2-check.mjs float32
step quant_l2 90 '^FAIL|^L2 ' node scripts/cuda/quant-l2-check.mjs
step vitest_gpu 120 'Test Files|Tests |FAIL|×' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-ops.test.ts \
  test/cuda-runop.test.ts test/cuda-quant.test.ts test/cuda-sampling.test.ts test/addon.test.ts
step cuda_ops_check 120 'FAIL|PASSED|failures' ./build-dev/cuda_ops_check
step cuda_fused_check 45 'FAIL|PASSED|failures' ./build-dev/cuda_fused_check
step cuda_quant_check 60 'FAIL|PASSED|failures' ./build-dev/cuda_quant_check
step graph_check 60 'FAIL|CHECK' node scripts/cuda/graph-check.mjs 50
step engine_check 90 'concurrent|alone|FAIL|Error' node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama \
  test/fixtures/models/qwen3 test/fixtures/models/gemma3_text test/fixtures/models/gemma2
wait_ckpt 1b && step serve_1b 60 'TTFT|aggregate' "${serve32[@]}" --model "$ck/ck-1b"
wait_ckpt 8b && step serve_8b 80 'TTFT|aggregate' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
if [[ -n ${MLXB_QV_Q4:-} ]]; then
  for s in 1b 8b; do
    wait_ckpt "$s-q4" && step "bench_${s}q4" 90 '^(prefill|decode)' node scripts/bench/bench.mjs --model "$ck/ck-$s-q4" --device cuda --runs 2
  done
fi
stamp done
