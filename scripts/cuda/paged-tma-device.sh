#!/bin/bash
# On the GPU machine: the paged split kernel fetching whole pages with tensor copies (the default
# on sm_90) against the cp.async ring (MLXB_PAGED_TMA=0). Build; the paged checks both ways
# (split vs single-block vs CPU, rows alone / reordered == batch); kernel timings of the 32-row
# decode shape both ways; 8B then 1B 32-stream serving alternating (MLXB_ENGINE_PROFILE=1: the
# GPU wait per step); greedy tokens of 32 concurrent engine requests on the random 1B (D = 64) and
# 8B (D = 128) both ways (same products in the same order: must be equal). Checkpoints already
# made by an earlier script of the same call ($ck/ck-SHAPE.done) are reused.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/paged-tma-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-4}
source scripts/cuda/steps.sh
device_setup paged-tma-logs ${TMA_BUDGET:-560}
test_deps
build_with_ckpts 8b 1b
step paged_check_tma 90 'FAIL|PASSED|failures' ./build-dev/cuda_ops_check --paged-check
step paged_check_ring 90 'FAIL|PASSED|failures' env MLXB_PAGED_TMA=0 ./build-dev/cuda_ops_check --paged-check
step paged_bench_ring 60 'rows=' env MLXB_PAGED_TMA=0 ./build-dev/cuda_ops_check --paged-bench
step paged_bench_tma 60 'rows=' ./build-dev/cuda_ops_check --paged-bench
tokens() {  # NAME DIR
  for c in ring:0 tma:1; do
    timeout 90 env MLXB_PAGED_TMA=${c#*:} node scripts/cuda/engine-tokens.mjs --device cuda "$2" > "$logs/tok-$1-${c%%:*}.txt" 2>&1
    echo "  $1 ${c%%:*}: $(head -1 "$logs/tok-$1-${c%%:*}.txt" | cut -c1-100)"
  done
  cmp -s "$logs/tok-$1-ring.txt" "$logs/tok-$1-tma.txt" && echo "  $1 tokens: ring == tma" || echo "  $1 tokens: DIFFER"
}
wait_for ck-8b && serve_ab 8b ${TMA_ROUNDS:-3} 30 'aggregate|mlxb profile' "ring:MLXB_PAGED_TMA=0" "tma:MLXB_PAGED_TMA=1" -- \
  env MLXB_ENGINE_PROFILE=1 "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
wait_for ck-1b && tokens 1b "$ck/ck-1b"
wait_for ck-8b && tokens 8b "$ck/ck-8b"
serve_ab 1b 2 20 'aggregate' "ring:MLXB_PAGED_TMA=0" "tma:MLXB_PAGED_TMA=1" -- "${serve32[@]}" --model "$ck/ck-1b" --kv-gb 8
stamp done
