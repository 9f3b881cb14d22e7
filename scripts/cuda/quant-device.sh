#!/bin/bash
# On the GPU machine, everything for the quantized CUDA kernels in one go (device time is scarce):
# builds the addon and the quantized op check for sm_90 (plain cmake, Node-API headers from
# .nodehdr/, see stage.sh), runs the op check (with --bench timings), the L2 check of the
# quantized fixtures against transformers on the dequantized weights, then writes random-weight
# Llama-3 checkpoints for each shape (bf16, make-checkpoint.mjs), quantizes them with
# `mlx-bun quantize --bits 4 --group-size 64` and runs the model benchmark on CUDA.
# Checkpoints go to /tmp (never committed); their generation starts while the build runs.
# MLXB_DEADLINE (seconds, default 600): a shape whose quantize would start later is skipped.
#   source .device/prelude.sh; bash scripts/cuda/quant-device.sh [shapes...]   (default: 1b 8b)
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
shapes=${*:-1b 8b}
deadline=${MLXB_DEADLINE:-600}
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }
stamp() { echo "[$(elapsed) s] $*"; }
for s in $shapes; do
  (node scripts/bench/make-checkpoint.mjs --shape "$s" --out "/tmp/ck-$s" > "/tmp/ck-$s.log" 2>&1; echo "exit $?" >> "/tmp/ck-$s.log") &
done
stamp "configure + build (mlxb.node, cuda_quant_check)"
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_JS_INC=$PWD/.nodehdr/include;$PWD/.nodehdr/node-addon-api" >/dev/null || exit 1
cmake --build build-dev -j "$(nproc)" --target mlxb cuda_quant_check | tail -1
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
stamp "op check"
./build-dev/cuda_quant_check --bench | grep -v '^ok  '
stamp "L2 (quantized fixtures on CUDA)"
node scripts/cuda/quant-l2-check.mjs ${MLXB_L2_DTYPES:-}  # e.g. MLXB_L2_DTYPES=bfloat16
export MLXB_GRAPH_DEBUG=1  # a decode step that cannot be recorded says why
for s in $shapes; do
  while ! grep -q '^exit' "/tmp/ck-$s.log" && [ "$(elapsed)" -lt "$deadline" ]; do sleep 1; done
  tail -2 "/tmp/ck-$s.log"
  if [ "$(elapsed)" -ge "$deadline" ]; then stamp "deadline: $s skipped"; continue; fi
  stamp "quantize $s"
  node dist/cli/main.js quantize --model "/tmp/ck-$s" --out "/tmp/ck-$s-q4" --bits 4 --group-size 64 2>/dev/null | tail -2
  rm -rf "/tmp/ck-$s"
  stamp "bench $s 4-bit g64"
  node scripts/bench/bench.mjs --model "/tmp/ck-$s-q4" --device cuda --runs 2
done
stamp "done"
