#!/bin/bash
# On the GPU machine: build, check and A/B the split paged decode attention in one call:
# cuda_ops_check --paged (the paged cases incl. split vs single-block kernel and rows alone ==
# batch, then kernel timings of both split kernels, unit and balanced splits, single-block), the
# checks again with unit splits / the first split kernel / 128-key units, the SASS size of the
# split kernels, engine-check on the random 1B checkpoint (head dim 64, 4 query heads per kv head:
# the split kernel's path), then 32-stream serving of the random 8B checkpoint with
# MLXB_PAGED_SPLIT=0, the first split kernel (unit splits of 512, its default) and the default,
# alternating.
# Logs: $OUT/paged-logs.tgz; summaries on stdout.
#   source .device/prelude.sh; cd DEST && tar -xJf .test-deps.tar.xz && bash scripts/cuda/paged-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=40
source scripts/cuda/steps.sh  # stamp, step NAME LIMIT FILTER CMD..., step_logs, memory_dir
step_logs paged-logs
memory_dir
mk() { timeout 200 node scripts/bench/make-checkpoint.mjs --shape "$1" --out "$ck/ck-$1" > "$logs/ck-$1.log" 2>&1 && touch "$ck/ck-$1.done"; }
deadline=$(($(date +%s) + 330))
(mk 1b; mk 8b) &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
step ops_paged 90 'FAIL|PASSED|failures|paged decode|exception' ./build-dev/cuda_ops_check --paged
step check_unit 60 'FAIL|PASSED|failures|exception' env MLXB_PAGED_SPLIT_BALANCED=0 ./build-dev/cuda_ops_check --paged-check
step check_first 60 'FAIL|PASSED|failures|exception' env MLXB_PAGED_SPLIT_KERNEL=1 ./build-dev/cuda_ops_check --paged-check
step check_k128 60 'FAIL|PASSED|failures|exception' env MLXB_PAGED_SPLIT_KEYS=128 ./build-dev/cuda_ops_check --paged-check
obj=$(find build-dev -name 'paged_attention_bf16.cu.o' | head -1)
if command -v cuobjdump >/dev/null && [[ -n $obj ]]; then
  cuobjdump -sass "$obj" > "$logs/sass.txt" 2>&1
  awk '/Function :/ {f=$3} /^ +\/\*[0-9a-f]+\*\// {n[f]++} END {for (k in n) if (k ~ /split/) print n[k], k}' "$logs/sass.txt" | sort -k2
fi
wait_for ck-1b && step engine_1b 60 '.' node scripts/cuda/engine-check.mjs --device cuda "$ck/ck-1b"
if wait_for ck-8b; then
  first=(env MLXB_PAGED_SPLIT_KERNEL=1 MLXB_PAGED_SPLIT_BALANCED=0 MLXB_PAGED_SPLIT_KEYS=512)
  step serve_8b_first 75 'TTFT|aggregate' "${first[@]}" "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_default 75 'TTFT|aggregate' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_single 75 'TTFT|aggregate' env MLXB_PAGED_SPLIT=0 "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_default2 75 'TTFT|aggregate' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_first2 75 'TTFT|aggregate' "${first[@]}" "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_single2 75 'TTFT|aggregate' env MLXB_PAGED_SPLIT=0 "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  step serve_8b_default3 75 'TTFT|aggregate' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
fi
stamp done
