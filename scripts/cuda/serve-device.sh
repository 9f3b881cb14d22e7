#!/bin/bash
# On the GPU machine, one call for the batched-decode (serving) work, most important first, within
# a wall-clock budget: build (mlxb + cuda_ops_check), then cuda_ops_check and engine-check (in
# parallel, while the random 8B checkpoint is still being written), then bench:serve 8B at 32
# streams, 8B at 256, 1B at 32, the A/B runs of this work's switches (MLXB_CUBLASLT_TUNE=0,
# MLXB_PAGED_PREFETCH=0), and the op-group profile (MLXB_ENGINE_PROFILE=2) of 8B at 32 streams if
# time is left. Logs go to $OUT (ops.txt, engine-check.txt, serve.txt, profile.txt; summary on stdout).
# Stage with `bash scripts/cuda/stage.sh DEST --tests` (the runtime packages: dist/ imports
# @huggingface/jinja and @huggingface/tokenizers). Writing the random 8B checkpoint takes ~105 s
# there, so the serve runs start at ~110 s; the whole list needs a budget of ~240 s.
#   source .device/prelude.sh; bash scripts/cuda/serve-device.sh [budget_s]
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
budget=${1:-240}
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
for s in 8b 1b; do
  (node scripts/bench/make-checkpoint.mjs --shape "$s" --out "/tmp/ck-$s" > "/tmp/ck-$s.log" 2>&1; echo "exit $?" >> "/tmp/ck-$s.log") &
done
[[ -f .test-deps.tar.xz ]] && tar -xJf .test-deps.tar.xz
stamp "build"
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_JS_INC=$PWD/.nodehdr/include;$PWD/.nodehdr/node-addon-api" > /dev/null || exit 1
cmake --build build-dev -j "$(nproc)" --target mlxb cuda_ops_check | tail -1
[[ -f build-dev/mlxb.node ]] || { echo "build failed"; exit 1; }
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
stamp "cuda_ops_check + engine-check"
(timeout 100 ./build-dev/cuda_ops_check > "$out/ops.txt" 2>&1; echo "exit $?" >> "$out/ops.txt") &
ops=$!
(timeout 100 node scripts/cuda/engine-check.mjs --device cuda test/fixtures/models/llama test/fixtures/models/qwen3 \
  test/fixtures/models/gemma3_text test/fixtures/models/gemma2 > "$out/engine-check.txt" 2>&1; echo "exit $?" >> "$out/engine-check.txt") &
chk=$!
wait $ops $chk
grep -v '^ok ' "$out/ops.txt" | tail -5
cat "$out/engine-check.txt"
wait_ck() { while ! grep -q '^exit' "/tmp/ck-$1.log"; do sleep 1; done; }
serve() {  # label model streams kv-gb|- [ENV=VALUE...]
  local label=$1 model=$2 streams=$3 kv=()
  [[ $4 != - ]] && kv=(--kv-gb "$4")
  shift 4
  if (($(left) < 12)); then echo "skip $label (out of time)"; return; fi
  wait_ck "$model"
  stamp "serve $label"
  env "$@" timeout "$(left)" node scripts/bench/serve.mjs --device cuda --prompt 512 --gen 128 --prefill-chunk 512 \
    --prefill-budget 4096 --streams "$streams" --direct --model "/tmp/ck-$model" "${kv[@]}" > /tmp/serve-$label.txt 2>&1
  { echo "== $label $*"; cat /tmp/serve-$label.txt; } >> "$out/serve.txt"
  grep -E 'TTFT|aggregate' /tmp/serve-$label.txt | tr -s ' ' | paste -sd ' '
}
serve 8b32 8b 32 8 MLXB_CUBLASLT_LOG=1
serve 8b256 8b 256 24
serve 1b32 1b 32 -
serve 8b32-tune0 8b 32 8 MLXB_CUBLASLT_TUNE=0
serve 8b32-pf0 8b 32 8 MLXB_PAGED_PREFETCH=0
grep '^cublaslt tune' /tmp/serve-8b32.txt | cut -c1-200 | head -12
if (($(left) > 30)); then  # op-group times (eager, a device sync after each group), 8B at 32 streams
  stamp "profile 8b32"
  MLXB_ENGINE_PROFILE=2 timeout "$(($(left) - 3))" node scripts/bench/serve.mjs --device cuda --prompt 512 --gen 128 \
    --prefill-chunk 512 --prefill-budget 4096 --streams 32 --direct --model /tmp/ck-8b --kv-gb 8 > "$out/profile.txt" 2>&1
  tail -12 "$out/profile.txt" | cut -c1-240
fi
stamp "done"
