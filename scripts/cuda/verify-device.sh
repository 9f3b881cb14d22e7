#!/bin/bash
# On the GPU machine: the CUDA verification of a staged checkout in one call (device time is
# scarce): build (sm_90), op checks, graph vs eager decode, the opt-in vitest GPU files, L1 vs
# transformers, and the 1B bf16 benchmark. Stage here with `bash scripts/cuda/stage.sh DEST --tests`.
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/verify-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
(node scripts/bench/make-checkpoint.mjs --shape 1b --out /tmp/ck-1b > /tmp/ck-1b.log 2>&1; echo "exit $?" >> /tmp/ck-1b.log) &
[[ -f .test-deps.tar.xz ]] && tar -xJf .test-deps.tar.xz
stamp "build"
bash scripts/cuda/build-device.sh || exit 1
ln -sfn build-dev build   # test/cuda-ops.test.ts runs the native checks from build/
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
stamp "cuda_ops_check"; ./build-dev/cuda_ops_check 2>&1 | grep -v '^ok ' | tail -6
stamp "cuda_quant_check"; ./build-dev/cuda_quant_check 2>&1 | grep -v '^ok ' | tail -4
stamp "graph vs eager"; node scripts/cuda/graph-check.mjs 300 2>&1 | tail -4
stamp "vitest (MLXB_TEST_CUDA=1)"
MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-ops.test.ts test/cuda-runop.test.ts test/cuda-quant.test.ts test/addon.test.ts 2>&1 | grep -E 'Test Files|Tests|FAIL|✗|×' | head -12
stamp "L1"; python3 scripts/cuda/l1_oracle.py test/fixtures/models /tmp/l1 >/dev/null 2>&1 && node scripts/cuda/l1-check.mjs /tmp/l1 2>&1 | tail -14
while ! grep -q '^exit' /tmp/ck-1b.log; do sleep 1; done
stamp "bench 1b bf16"; node scripts/bench/bench.mjs --model /tmp/ck-1b --device cuda --runs 2 2>&1 | tail -4
stamp "done"
