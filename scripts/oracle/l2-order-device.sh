#!/bin/bash
# On the GPU machine: tells apart the causes of test/cuda-quant.test.ts failing for
# gemma3_text_bf16_q4 with float32 activations in the verify run of 22:13 (vitest ran five GPU test
# files at once) while scripts/cuda/quant-l2-check.mjs passed it when it was the first fixture of
# its process. In order, full output to $OUT/l2-order.txt and failures on stdout:
#  1. test/cuda-quant.test.ts alone (no other GPU test process): the failure message;
#  2. quant-l2-check float32 in the manifest's order (gemma3_text_bf16_q4 last, as in the test);
#  3. quant-l2-check float32, gemma3_text_bf16_q4 alone;
#  4. as 2 with MLXB_CUDA_GRAPH=0 (no recorded decode steps);
#  5. compute-sanitizer --tool initcheck on llama_q4 then gemma3_text_bf16_q4 (float32), if present.
# 1 fails and 2 passes: a per-process / concurrency effect (e.g. GPU memory with several processes);
# 2 fails and 3 passes: state carried between models in one process (memory reuse, caches).
# Expects a staged checkout (scripts/cuda/stage.sh --tests) with build-dev/mlxb.node built.
#   bash scripts/cuda/build-device.sh && bash scripts/oracle/l2-order-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
out=${OUT:-/tmp}
log=$out/l2-order.txt
: > "$log"
[[ -f .test-deps.tar.xz && ! -d node_modules/vitest ]] && tar -xJf .test-deps.tar.xz
t0=$(date +%s)
step() {  # step NAME LIMIT FILTER CMD...: FILTER (extended regex) picks the lines shown on stdout
  local name=$1 limit=$2 filter=$3; shift 3
  echo "[$(($(date +%s) - t0)) s] $name" | tee -a "$log"
  timeout "$limit" "$@" > /tmp/l2-order-step.txt 2>&1
  local rc=$?
  cat /tmp/l2-order-step.txt >> "$log"
  grep -E "$filter" /tmp/l2-order-step.txt | head -30 | cut -c1-300
  echo "  (exit $rc)" | tee -a "$log"
}
ORDER=$(node -e "console.log(Object.keys(JSON.parse(require('fs').readFileSync('test/fixtures/quant/manifest.json','utf8')).fixtures).join(','))")
step "vitest cuda-quant alone" 120 'Error|expected|Tests |✓|×' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-quant.test.ts
step "quant-l2-check float32, manifest order ($ORDER)" 90 '^FAIL|^  +row|^L2 |Error' env MLXB_L2_ONLY="$ORDER" node scripts/cuda/quant-l2-check.mjs float32
step "quant-l2-check float32, gemma3_text_bf16_q4 alone" 60 '^FAIL|^  +row|^L2 |Error' env MLXB_L2_ONLY=gemma3_text_bf16_q4 node scripts/cuda/quant-l2-check.mjs float32
step "quant-l2-check float32, manifest order, MLXB_CUDA_GRAPH=0" 90 '^FAIL|^  +row|^L2 |Error' env MLXB_CUDA_GRAPH=0 MLXB_L2_ONLY="$ORDER" node scripts/cuda/quant-l2-check.mjs float32
if command -v compute-sanitizer >/dev/null; then
  step "initcheck llama_q4 then gemma3_text_bf16_q4 (float32)" 240 '=====|Uninitialized|ERROR SUMMARY|^FAIL|^L2 ' env MLXB_L2_ONLY=llama_q4,gemma3_text_bf16_q4 \
    compute-sanitizer --tool initcheck --target-processes all --print-limit 20 node scripts/cuda/quant-l2-check.mjs float32
else
  echo "no compute-sanitizer" | tee -a "$log"
fi
echo "[$(($(date +%s) - t0)) s] done; full output in $log"
