#!/bin/bash
# On the GPU machine: the open speed targets of issues 4 and 6 on the current tree, in one call.
# Build; 8B 32-stream serving alternating the paged split unit (MLXB_PAGED_SPLIT_KEYS: 640, the
# default, then TARGET_UNITS, default "384 256"); single-stream decode (bench.mjs, median of 3) of
# the 8B after 512 prompt tokens and of the 1B after 512 and after 16 (llama-bench's tg128 decodes
# from an empty context); the decode attention's split A/B; 1B 32 streams, engine-check on the
# fixtures (engine pipelining is on by default for CUDA models), 8B 256 streams, as time allows.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/targets-device.sh
# TARGET_BUDGET (s, default 520) bounds every wait; TARGET_ROUNDS (default 2) serving rounds, each
# started while TARGET_SERVE_LIMIT (default 150) seconds are left; TARGET_VARIANTS adds serving
# variants ("LABEL:VAR=VALUE", e.g. "fold:MLXB_FOLD_NORMS=1") after the units; TARGET_TESTS runs GPU test files
# after the decode rows. PREBUILT=1 (steps.sh) skips the build.
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-4}
source scripts/cuda/steps.sh
device_setup targets-logs "${TARGET_BUDGET:-520}"
test_deps
build_with_ckpts 8b 1b
decode() {  # NAME DIR PROMPT [VAR=VALUE..]
  step "decode_$1" 90 '^decode|^prefill' env "${@:4}" node scripts/bench/bench.mjs --device cuda --model "$2" --prompt "$3" --gen 128 --runs 3
}
# TARGET_RUNOP=1: the GPU runOp cases (every op against its CPU form) before any figure.
[[ -n ${TARGET_RUNOP:-} ]] && step runop 120 'passed|failed|FAIL|Error' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-runop.test.ts
# Issue 6's row first (the card that comes is not always an H200, so the rest is by priority).
variants=("u640:MLXB_PAGED_SPLIT_KEYS=640")
for u in ${TARGET_UNITS-384 256}; do variants+=("u$u:MLXB_PAGED_SPLIT_KEYS=$u"); done
for v in ${TARGET_VARIANTS-}; do variants+=("$v"); done
wait_for ck-8b && serve_ab 8b "${TARGET_ROUNDS:-2}" "${TARGET_SERVE_LIMIT:-150}" 'aggregate|TTFT' "${variants[@]}" -- "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
# TARGET_DECODE=0 leaves the single-stream decode rows out (on a card where they do not count).
if [[ ${TARGET_DECODE:-1} != 0 ]]; then
  wait_for ck-8b && decode 8b_p512 "$ck/ck-8b" 512
  wait_for ck-1b && { decode 1b_p512 "$ck/ck-1b" 512; decode 1b_p16 "$ck/ck-1b" 16; }
fi
# TARGET_TESTS: GPU vitest files (MLXB_TEST_CUDA=1) run here, after the rows above, e.g.
# "test/cuda-embeddings.test.ts test/cuda-session.test.ts"; every test's line is printed.
if [[ -n ${TARGET_TESTS:-} ]]; then
  # shellcheck disable=SC2086  # a list of files
  STEP_TAIL=60 step gpu_tests 180 '✓|×|passed|failed|FAIL|Error|expected' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run $TARGET_TESTS
fi
# The one-row decode attention's keys per split (MLXB_ATTN_SPLIT_KEYS; default: blocks for twice
# the SMs, at least 32 keys each), after 512 prompt tokens: TARGET_ATTN_KEYS, default "64 128".
for n in ${TARGET_ATTN_KEYS-64 128}; do
  [[ $(left) -gt 110 ]] && decode "1b_p512_attn$n" "$ck/ck-1b" 512 MLXB_ATTN_SPLIT_KEYS="$n"
  [[ $(left) -gt 90 ]] && decode "8b_p512_attn$n" "$ck/ck-8b" 512 MLXB_ATTN_SPLIT_KEYS="$n"
done
# TARGET_FOLD_CHECK=1: folded against unfolded greedy tokens and logprobs (fold-check.mjs) on the random 8B and 1B.
if [[ -n ${TARGET_FOLD_CHECK:-} ]]; then
  [[ $(left) -gt 90 ]] && step fold_8b 90 'folded|Error' node scripts/cuda/fold-check.mjs --device cuda "$ck/ck-8b"
  [[ $(left) -gt 60 ]] && step fold_1b 60 'folded|Error' node scripts/cuda/fold-check.mjs --device cuda "$ck/ck-1b"
fi
[[ $(left) -gt 60 ]] && step serve_1b 60 'aggregate|TTFT' "${serve32[@]}" --model "$ck/ck-1b" --kv-gb 8
[[ $(left) -gt 40 ]] && step engine_check 90 'concurrent|alone|FAIL|Error' node scripts/cuda/engine-check.mjs --device cuda \
  test/fixtures/models/llama test/fixtures/models/qwen3 test/fixtures/models/gemma3_text
[[ $(left) -gt 50 ]] && step serve_8b_256 90 'aggregate|TTFT' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 24 --streams 256
stamp done
