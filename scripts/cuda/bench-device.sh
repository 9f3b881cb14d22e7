#!/bin/bash
# On the GPU machine: writes random-weight Llama-3 1B and 8B bf16 checkpoints to /tmp (never
# committed) and runs the model benchmark on CUDA for each. Needs MLXB_NATIVE_PATH (build-device.sh).
#   bash scripts/cuda/bench-device.sh [shapes...]   (default: 1b 8b)
set -u
cd "$(dirname "$0")/../.."
for shape in "${@:-1b 8b}"; do
  for s in $shape; do
    node scripts/bench/make-checkpoint.mjs --shape "$s" --out "/tmp/ck-$s" | tail -1
    node scripts/bench/bench.mjs --model "/tmp/ck-$s" --device cuda --runs 2
  done
done
