#!/bin/bash
# On the GPU machine, after build-device.sh (MLXB_NATIVE_PATH set): engine batch-invariance check
# on the fixtures, then bench:serve on random-weight Llama-3 1B / 8B bf16 checkpoints (issue #6
# targets: prompts 512, 128 generated). Each step has its own time limit and appends to $OUT.
#   bash scripts/cuda/engine-device.sh [steps...]   (default: check 1b 8b inv)
# Steps: ck (write both checkpoints; run it in the background while building, then `wait`,
# `wait1b` or `wait8b`), ops (cuda_ops_check), check, 1b, 8b, inv, http, single runs 1b32 8b32
# 8b256 inv1b inv8b (--batch-invariant), ab1b / ab8b
# (32 streams with recorded decode steps off: MLXB_ROWS_GRAPH=0), prof (MLXB_ENGINE_PROFILE=2
# op-group timings, 8B 32 streams).
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
log=$out/engine-device.log
run() { local limit=$1; shift; echo "+ $*" >> "$log"; timeout "$limit" "$@" >> "$log" 2>&1 || echo "  (exit $?)" >> "$log"; }
# serve [ENV=VALUE...] -- ARGS: one bench:serve run (the step's profile lines go to the log too).
serve() {
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  run 90 env MLXB_ENGINE_PROFILE=1 "${envs[@]}" node scripts/bench/serve.mjs --device cuda --prompt 512 --gen 128 \
    --prefill-chunk 512 --prefill-budget 4096 "$@"
}
ckpt() {
  [[ -f /tmp/ck-$1.done ]] && return
  timeout 240 node scripts/bench/make-checkpoint.mjs --shape "$1" --out "/tmp/ck-$1" > "/tmp/ck-$1.log" 2>&1 && touch "/tmp/ck-$1.done"
}
wait_ckpt() { for _ in $(seq 300); do [[ -f /tmp/ck-$1.done ]] && return; sleep 1; done; echo "  checkpoint $1 not ready" >> "$log"; }
for step in "${@:-check 1b 8b inv}"; do
  for s in $step; do
    case $s in
      ck) ckpt 1b & ckpt 8b; wait ;;
      wait) wait_ckpt 1b; wait_ckpt 8b ;;
      ops) run 180 ./build-dev/cuda_ops_check ;;
      check) run 150 node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama test/fixtures/models/qwen3 test/fixtures/models/gemma3_text test/fixtures/models/gemma2 ;;
      1b)
        ckpt 1b
        serve -- --model /tmp/ck-1b --streams 32 --direct
        serve -- --model /tmp/ck-1b --streams 256 --direct --kv-gb 8 ;;
      8b)
        ckpt 8b
        serve -- --model /tmp/ck-8b --streams 32 --direct --kv-gb 8
        serve -- --model /tmp/ck-8b --streams 256 --direct --kv-gb 24 ;;
      1b32) serve -- --model /tmp/ck-1b --streams 32 --direct ;;
      wait1b) wait_ckpt 1b ;;
      wait8b) wait_ckpt 8b ;;
      8b32) serve -- --model /tmp/ck-8b --streams 32 --direct --kv-gb 8 ;;
      8b256) serve -- --model /tmp/ck-8b --streams 256 --direct --kv-gb 24 ;;
      inv1b) serve -- --model /tmp/ck-1b --streams 32 --direct --batch-invariant ;;
      inv8b) serve -- --model /tmp/ck-8b --streams 32 --direct --kv-gb 8 --batch-invariant ;;
      ab1b) serve MLXB_ROWS_GRAPH=0 -- --model /tmp/ck-1b --streams 32 --direct ;;
      ab8b) serve MLXB_ROWS_GRAPH=0 -- --model /tmp/ck-8b --streams 32 --direct --kv-gb 8 ;;
      prof) serve MLXB_ENGINE_PROFILE=2 -- --model /tmp/ck-8b --streams 32 --direct --kv-gb 8 ;;
      http)
        serve -- --model /tmp/ck-1b --streams 32
        serve -- --model /tmp/ck-8b --streams 32 --kv-gb 8 ;;
      inv)
        serve -- --model /tmp/ck-1b --streams 32 --direct --batch-invariant
        serve -- --model /tmp/ck-8b --streams 32 --direct --kv-gb 8 --batch-invariant ;;
    esac
  done
done
