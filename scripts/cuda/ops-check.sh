#!/bin/bash
# On the GPU machine: builds test/native/cuda_ops_check for sm_90 with plain cmake (no Node
# headers needed) and runs it, then the quantized-op check (cuda_quant_check). Arguments go to
# both programs (--bench adds timings).
#   source .device/prelude.sh; bash scripts/cuda/ops-check.sh [--bench]
set -eu
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-dev --target cuda_ops_check cuda_quant_check -j "$(nproc)" | tail -1
./build-dev/cuda_ops_check "$@"
./build-dev/cuda_quant_check "$@"
