#!/bin/bash
# On the GPU machine: folded RMSNorm weights (MLXB_FOLD_NORMS=1, cpp/models/fold_norms.h) in one
# call. Build; the new ops' GPU runOp cases; fold-check.mjs (greedy tokens and logprobs of 32
# concurrent engine requests, folded against unfolded) on the fixtures; 8B 32-stream serving
# alternating MLXB_FOLD_NORMS=0 / 1 (FOLD_ROUNDS rounds, default 3); then, as time allows,
# fold-check on the random 1B, 1B serving and the 8B's fold-check.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/fold-device.sh
# FOLD_BUDGET (s, default 520) bounds every wait.
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-6}
source scripts/cuda/steps.sh
device_setup fold-logs "${FOLD_BUDGET:-520}"
test_deps
build_with_ckpts 8b 1b
step runop 120 'passed|failed|FAIL|Error' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-runop.test.ts
step fold_fixtures 120 'folded|Error|left off' node scripts/cuda/fold-check.mjs --device cuda \
  test/fixtures/models/llama test/fixtures/models/mistral test/fixtures/models/phi3 test/fixtures/models/llama_yarn
wait_for ck-8b && serve_ab 8b "${FOLD_ROUNDS:-3}" 40 'aggregate|TTFT' "off:MLXB_FOLD_NORMS=0" "on:MLXB_FOLD_NORMS=1" -- \
  "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
[[ $(left) -gt 40 ]] && wait_for ck-1b && step fold_1b 60 'folded|Error' node scripts/cuda/fold-check.mjs --device cuda "$ck/ck-1b"
[[ $(left) -gt 60 ]] && serve_ab 1b 1 30 'aggregate|TTFT' "off:MLXB_FOLD_NORMS=0" "on:MLXB_FOLD_NORMS=1" -- \
  "${serve32[@]}" --model "$ck/ck-1b" --kv-gb 8
[[ $(left) -gt 60 ]] && step fold_8b 90 'folded|Error' node scripts/cuda/fold-check.mjs --device cuda "$ck/ck-8b"
stamp done
