#!/bin/bash
# On the GPU machine, after build-device.sh (MLXB_NATIVE_PATH set): engine batch-invariance check
# on the fixtures, then bench:serve on random-weight Llama-3 1B / 8B bf16 checkpoints (issue #6
# targets: prompts 512, 128 generated). Each step has its own time limit and appends to $OUT.
#   bash scripts/cuda/engine-device.sh [steps...]   (default: check 1b 8b inv)
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
run() { local limit=$1; shift; echo "+ $*" >> "$out/engine-device.log"; timeout "$limit" "$@" >> "$out/engine-device.log" 2>&1 || echo "  (exit $?)" >> "$out/engine-device.log"; }
serve() { run 90 node scripts/bench/serve.mjs --device cuda --prompt 512 --gen 128 --prefill-chunk 512 --prefill-budget 4096 "$@"; }
for step in "${@:-check 1b 8b inv}"; do
  for s in $step; do
    case $s in
      check) run 120 node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama test/fixtures/models/qwen3 test/fixtures/models/gemma3_text test/fixtures/models/gemma2 ;;
      1b)
        run 60 node scripts/bench/make-checkpoint.mjs --shape 1b --out /tmp/ck-1b
        serve --model /tmp/ck-1b --streams 32 --direct
        serve --model /tmp/ck-1b --streams 32
        serve --model /tmp/ck-1b --streams 256 --direct --kv-gb 8
        serve --model /tmp/ck-1b --streams 256 --direct --kv-gb 8 --no-device-argmax ;;
      8b)
        run 150 node scripts/bench/make-checkpoint.mjs --shape 8b --out /tmp/ck-8b
        serve --model /tmp/ck-8b --streams 32 --direct --kv-gb 8
        serve --model /tmp/ck-8b --streams 256 --direct --kv-gb 24
        serve --model /tmp/ck-8b --streams 32 --kv-gb 8 ;;
      inv)
        serve --model /tmp/ck-1b --streams 32 --direct --batch-invariant
        serve --model /tmp/ck-8b --streams 32 --direct --kv-gb 8 --batch-invariant ;;
    esac
  done
done
