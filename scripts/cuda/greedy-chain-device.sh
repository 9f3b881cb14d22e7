#!/bin/bash
# On the GPU machine: greedy decode steps chained on the device (DecodeGraphs::chain: each replay
# reads its token from the argmax the previous one left on the device, so the host queues step
# i + 1 before it waits for token i) against one host round trip per token (MLXB_GREEDY_CHAIN=0).
# Build (sm_90), graph-check (chained greedy tokens == eager, re-recording as caches grow), then
# bench.mjs decode of the random 1B / 8B, bf16 and 4-bit g64, alternating the two settings, and
# generate() greedy on the 1B (sampling-bench.mjs; one JS round trip per token, not chained).
# Logs: $OUT/chain-logs.tgz.
#   bash scripts/cuda/stage.sh DEST --tests; then on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/greedy-chain-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=3
source scripts/cuda/steps.sh
device_setup chain-logs "${CHAIN_DEADLINE:-575}"
make_ck() { ckpt "$1" && touch "$ck/ck-$1.done" && wait_for build && quant_q4 "$1" keep; }
rm -f "$ck"/*.done
(make_ck 1b; make_ck 8b) &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
touch "$ck/build.done"
step graph_check 120 'FAIL|CHECK|tokens' node scripts/cuda/graph-check.mjs 300
test_deps
step vitest_sampling 120 'Test Files|Tests |FAIL|×' env MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-sampling.test.ts
for r in 1 2; do
  for s in 1b 1b-q4 gen 8b 8b-q4; do
    if [[ $s == gen ]]; then
      [[ $r == 1 ]] && STEP_TAIL=8 step generate_1b 90 'generate|one step' node scripts/bench/sampling-bench.mjs --model "$ck/ck-1b" --gen 256
      continue
    fi
    wait_for "ck-$s" || continue
    for c in 0 1; do
      [[ $(left) -lt 40 ]] && break 3
      step "bench_${s}_chain${c}_$r" 60 '^decode' env MLXB_GREEDY_CHAIN=$c node scripts/bench/bench.mjs --model "$ck/ck-$s" --device cuda --runs 3
    done
  done
done
stamp done
