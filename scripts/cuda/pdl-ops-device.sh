#!/bin/bash
# On the GPU machine, one call: programmatic launch of the small kernels around the GEMVs/GEMMs
# (MLXB_CUDA_PDL_OPS: rms_norm / add_rms_norm "norm", rope_kv_write "rope", the gated activation
# "act", the paged split attention "paged", one-row decode attention "attn"; unset = all, 0 = none).
# Build, graphs vs eager on the fixtures, engine batch invariance, greedy tokens of the random 1B
# (4-bit and bf16) and 8B 4-bit equal with all / none / eager, then alternating A/Bs: decode of
# the 4-bit and bf16 checkpoints (all vs without "attn" vs none) and 32-stream serving of the 8B.
# Logs: $OUT/pdl-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/pdl-ops-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=4
source scripts/cuda/steps.sh  # stamp, step, step_logs, memory_dir, ckpt, wait_for
device_setup pdl-logs 570
test_deps
q4() {  # keeps the bf16 checkpoint
  timeout 240 node dist/cli/main.js quantize --model "$ck/ck-$1" --out "$ck/ck-$1-q4" --bits 4 --group-size 64 > "$logs/q-$1.log" 2>&1 &&
    touch "$ck/ck-$1-q4.done"
}
(ckpt 1b && touch "$ck/ck-1b.done"; ckpt 8b && touch "$ck/ck-8b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
(wait_for ck-1b && q4 1b; wait_for ck-8b && q4 8b) &  # quantize loads the addon: after the build
step graph_check 60 'FAIL|CHECK' node scripts/cuda/graph-check.mjs 50
step engine_check 60 'concurrent|FAIL|Error' node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama test/fixtures/models/qwen3
same() {  # NAME DIR: greedy tokens equal under every launch setting
  local a=$logs/same-$1-all.txt
  timeout 60 node scripts/cuda/quant-same.mjs "$2" 200 > "$a" 2>&1
  for c in "none:MLXB_CUDA_PDL_OPS=0" "eager:MLXB_CUDA_GRAPH=0"; do
    local b=$logs/same-$1-${c%%:*}.txt
    timeout 60 env ${c#*:} node scripts/cuda/quant-same.mjs "$2" 200 > "$b" 2>&1
    if cmp -s "$a" "$b" && [[ -s $a ]]; then echo "  $1: all == ${c%%:*}"; else echo "  $1: all != ${c%%:*} (FAIL)"; fi
  done
}
bench() {  # NAME CHECKPOINT: bench.mjs decode, alternating the settings
  for r in 1 2; do
    for c in "all:" "noattn:MLXB_CUDA_PDL_OPS=norm,rope,act,paged" "none:MLXB_CUDA_PDL_OPS=0"; do
      [[ $(left) -lt 40 ]] && return
      step "bench_$1_${c%%:*}_$r" 60 '^decode' env ${c#*:} node scripts/bench/bench.mjs --model "$2" --device cuda --runs 2
    done
  done
}
wait_for ck-1b-q4 && same 1bq4 "$ck/ck-1b-q4" && bench 1bq4 "$ck/ck-1b-q4"
same 1b "$ck/ck-1b"; bench 1b "$ck/ck-1b"
wait_for ck-8b-q4 && same 8bq4 "$ck/ck-8b-q4" && bench 8bq4 "$ck/ck-8b-q4"
bench 8b "$ck/ck-8b"
for r in 1 2; do
  [[ $(left) -lt 30 ]] && break
  step "serve_8b_$r" 30 'aggregate' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
done
stamp done
