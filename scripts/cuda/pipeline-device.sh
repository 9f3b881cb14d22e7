#!/bin/bash
# On the GPU machine: engine pipelining (the step after a queued greedy decode step is queued
# before its tokens are read; on by default for CUDA models, MLXB_ENGINE_PIPELINE=0 off) and the paged split kernel's
# tensor copies (MLXB_PAGED_TMA=0: the cp.async ring). Build; the paged checks both ways; greedy
# tokens of 32 concurrent engine requests on the random 1B and 8B, without and with stop ids that
# end rows at different steps, pipelining off vs on (must be equal); then 8B and 1B 32-stream
# serving alternating: neither / tensor copies / both (MLXB_ENGINE_PROFILE=1 on the 8B: host and
# GPU time per step); then the GPU vitest files, cuda_ops_check, graph-check and engine-check.
# Checkpoints an earlier script of the same call made are reused.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/pipeline-device.sh
# PIPE_LEAN=1 / PIPE_MIN=1: shorter calls; PIPE_ROUNDS=N serving rounds; PIPE_DECODE=1 adds bench.mjs decode.
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-4}
source scripts/cuda/steps.sh
device_setup pipeline-logs ${PIPE_BUDGET:-300}
test_deps
short=${PIPE_LEAN:-}${PIPE_MIN:-}  # a short call: no ring variant (measured at stop 33), no 1B serving
build_with_ckpts 8b 1b
step paged_check_tma 90 'FAIL|PASSED|failures' ./build-dev/cuda_ops_check --paged-check
[[ -n $short ]] || step paged_check_ring 90 'FAIL|PASSED|failures' env MLXB_PAGED_TMA=0 ./build-dev/cuda_ops_check --paged-check
tokens() {  # NAME DIR
  for c in off:0 on:1; do
    timeout 120 env MLXB_ENGINE_PIPELINE=${c#*:} node scripts/cuda/engine-tokens.mjs --device cuda "$2" --stops \
      > "$logs/tok-$1-${c%%:*}.txt" 2> "$logs/tok-$1-${c%%:*}.err"
    echo "  $1 pipeline ${c%%:*}: $(head -1 "$logs/tok-$1-${c%%:*}.txt" | cut -c1-80) | $(tail -1 "$logs/tok-$1-${c%%:*}.err")"
  done
  cmp -s "$logs/tok-$1-off.txt" "$logs/tok-$1-on.txt" && echo "  $1 tokens: off == on" || echo "  $1 tokens: DIFFER"
}
wait_for ck-1b && tokens 1b "$ck/ck-1b"
wait_for ck-8b && tokens 8b "$ck/ck-8b"
ring=("ring:MLXB_PAGED_TMA=0 MLXB_ENGINE_PIPELINE=0"); [[ -n $short ]] && ring=()
wait_for ck-8b && serve_ab 8b ${PIPE_ROUNDS:-$([[ -n ${PIPE_MIN:-} ]] && echo 1 || echo 2)} 30 'aggregate|mlxb profile' "${ring[@]}" \
  "tma:MLXB_ENGINE_PIPELINE=0" "both:MLXB_ENGINE_PIPELINE=1" -- env MLXB_ENGINE_PROFILE=1 "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
[[ -n $short ]] || serve_ab 1b 1 20 'aggregate' "ring:MLXB_PAGED_TMA=0 MLXB_ENGINE_PIPELINE=0" "tma:MLXB_ENGINE_PIPELINE=0" "both:MLXB_ENGINE_PIPELINE=1" -- \
  "${serve32[@]}" --model "$ck/ck-1b" --kv-gb 8
# PIPE_DECODE=1: single-stream decode (bench.mjs) of the 1B after a 512-token prompt and after 16
# (llama-bench's tg128 decodes from an empty context), and of the 8B after 512, alternating.
if [[ -n ${PIPE_DECODE:-} ]]; then
  for r in 1 2; do
    step decode_1b_p512_$r 60 '^decode' node scripts/bench/bench.mjs --device cuda --model "$ck/ck-1b" --prompt 512 --gen 128 --runs 3
    step decode_1b_p16_$r 60 '^decode' node scripts/bench/bench.mjs --device cuda --model "$ck/ck-1b" --prompt 16 --gen 128 --runs 3
  done
  step decode_8b_p512 90 '^decode' node scripts/bench/bench.mjs --device cuda --model "$ck/ck-8b" --prompt 512 --gen 128 --runs 3
fi
# The checks of quick-verify-device.sh that these paths touch (the rest of it: quant L2, serving).
# PIPE_MIN=1 (the shortest call): one serving round, engine-check only.
stamp checks
[[ -n ${PIPE_MIN:-} ]] && { step engine_check 90 'concurrent|alone|FAIL|Error' node scripts/cuda/engine-check.mjs --device cuda \
  test/fixtures/models/llama test/fixtures/models/qwen3 test/fixtures/models/gemma3_text; stamp done; exit 0; }
if [[ -n ${PIPE_LEAN:-} ]]; then  # PIPE_LEAN=1: a short call (no 1B serving, no cuda_ops_check, one vitest file)
  step vitest_gpu 120 'Test Files|Tests |FAIL|×' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-sampling.test.ts
else
  step vitest_gpu 120 'Test Files|Tests |FAIL|×' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-ops.test.ts \
    test/cuda-runop.test.ts test/cuda-quant.test.ts test/cuda-sampling.test.ts test/addon.test.ts
  step cuda_ops_check 120 'FAIL|PASSED|failures' ./build-dev/cuda_ops_check
fi
step graph_check 60 'FAIL|CHECK' node scripts/cuda/graph-check.mjs 50
step engine_check 90 'concurrent|alone|FAIL|Error' node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama \
  test/fixtures/models/qwen3 test/fixtures/models/gemma3_text test/fixtures/models/gemma2
stamp done
