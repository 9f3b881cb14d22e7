#!/bin/bash
# On the GPU machine, one call: rope_kv_write folded into the paged split attention kernel
# (ops::rope_paged_attention; MLXB_PAGED_ROPE=1 folds them, =0 runs the two ops). Build; every op check (the
# fused op against the two ops bit for bit is among the paged cases); graphs vs eager on the
# fixtures; engine batch invariance on two fixtures; greedy tokens of 32 concurrent engine requests
# on the random 1B and 8B fused vs unfused (must be equal); then 32-stream serving alternating
# fused / unfused, and the split unit 512 against the default 640 (MLXB_PAGED_SPLIT_KEYS).
# Logs: $OUT/rope-paged-logs.tgz; summaries on stdout.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/rope-paged-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-6}
source scripts/cuda/steps.sh
device_setup rope-paged-logs 570
test_deps
(ckpt 1b && touch "$ck/ck-1b.done"; ckpt 8b && touch "$ck/ck-8b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
step ops_check 120 'FAIL|PASSED|failures' ./build-dev/cuda_ops_check
grep -E 'rope_paged' "$logs/ops_check.txt" | cut -c1-150 | head -12
step graph_check 60 'FAIL|CHECK' node scripts/cuda/graph-check.mjs 50
step engine_check 60 'concurrent|FAIL|Error' node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama test/fixtures/models/qwen3
tokens() {  # NAME DIR
  for c in fused:1 unfused:0; do
    timeout 90 env MLXB_PAGED_ROPE=${c#*:} node scripts/cuda/engine-tokens.mjs --device cuda "$2" > "$logs/tok-$1-${c%%:*}.txt" 2>&1
  done
  head -1 "$logs/tok-$1-fused.txt" | cut -c1-120
  if cmp -s "$logs/tok-$1-fused.txt" "$logs/tok-$1-unfused.txt" && [[ -s $logs/tok-$1-fused.txt ]]; then echo "  $1: fused == unfused"; else echo "  $1: fused != unfused (FAIL)"; tail -3 "$logs/tok-$1-unfused.txt"; fi
}
wait_for ck-1b && tokens 1b "$ck/ck-1b"
wait_for ck-8b && tokens 8b "$ck/ck-8b"
serve_ab 8b 3 30 'aggregate|TTFT' "fused:MLXB_PAGED_ROPE=1" "unfused:MLXB_PAGED_ROPE=0" \
  "fused512:MLXB_PAGED_ROPE=1 MLXB_PAGED_SPLIT_KEYS=512" -- "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
serve_ab 1b 1 20 'aggregate' "fused:MLXB_PAGED_ROPE=1" "unfused:MLXB_PAGED_ROPE=0" -- "${serve32[@]}" --model "$ck/ck-1b" --kv-gb 8
stamp done
