#!/bin/bash
# On the GPU machine: build, check and A/B the split paged decode attention (MLXB_PAGED_SPLIT)
# in one call: cuda_ops_check --paged (paged cases incl. split vs single-block kernel and rows
# alone == batch, then kernel timings), engine-check on the fixtures and the random 1B checkpoint
# (concurrent == alone, both modes), then 32-stream serving of the random 1B / 8B checkpoints with
# the switch off and on. Logs: $OUT/logs.tgz; summaries on stdout.
#   source .device/prelude.sh; cd DEST && tar -xJf .test-deps.tar.xz && bash scripts/cuda/paged-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
out=${OUT:-/tmp}
logs=/tmp/paged-logs
mkdir -p "$logs"
STEP_LOGS=$logs STEP_TAIL=40
source scripts/cuda/steps.sh  # stamp, step NAME LIMIT FILTER CMD...
ckpt() {
  timeout 200 node scripts/bench/make-checkpoint.mjs --shape "$1" --out "/tmp/ck-$1" > "$logs/ck-$1.log" 2>&1 && touch "/tmp/ck-$1.done"
}
wait_ckpt() { for _ in $(seq 200); do [[ -f /tmp/ck-$1.done ]] && return 0; sleep 1; done; echo "  checkpoint $1 not ready"; return 1; }
(ckpt 1b; ckpt 8b) &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; tar -czf "$out/logs.tgz" -C /tmp paged-logs; exit 1; }
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
step ops_paged 90 'FAIL|PASSED|failures|paged decode|exception' ./build-dev/cuda_ops_check --paged
step ops_paged_512 90 'FAIL|PASSED|failures|exception' env MLXB_PAGED_SPLIT_KEYS=512 ./build-dev/cuda_ops_check --paged
step engine_fixtures 100 '.' node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama test/fixtures/models/qwen3 \
  test/fixtures/models/gemma3_text test/fixtures/models/gemma2
serve=(node scripts/bench/serve.mjs --device cuda --prompt 512 --gen 128 --prefill-chunk 512 --prefill-budget 4096 --streams 32 --direct)
wait_ckpt 1b && {
  step engine_1b 60 '.' node scripts/cuda/engine-check.mjs --device cuda /tmp/ck-1b
  step serve_1b_old 60 'TTFT|aggregate' env MLXB_PAGED_SPLIT=0 "${serve[@]}" --model /tmp/ck-1b
  for k in 128 256 512; do
    step serve_1b_k$k 60 'TTFT|aggregate' env MLXB_PAGED_SPLIT_KEYS=$k "${serve[@]}" --model /tmp/ck-1b
  done
}
wait_ckpt 8b && {
  step serve_8b_old 75 'TTFT|aggregate' env MLXB_PAGED_SPLIT=0 "${serve[@]}" --model /tmp/ck-8b --kv-gb 8
  for k in 128 256 512; do
    step serve_8b_k$k 75 'TTFT|aggregate' env MLXB_PAGED_SPLIT_KEYS=$k "${serve[@]}" --model /tmp/ck-8b --kv-gb 8
  done
}
stamp done
tar -czf "$out/logs.tgz" -C /tmp paged-logs
