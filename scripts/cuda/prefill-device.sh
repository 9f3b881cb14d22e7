#!/bin/bash
# On the GPU machine, the prefill work of one call, most important first: build (the addon and
# cuda_ops_check only), the op checks with kernel timings, decode graphs vs eager, L1 against
# transformers, the 1B / 8B benchmarks, prefill A/B runs (mma flash kernel off, fused prefill ops
# off; last-row logits compared with the default), then, while time is left, an nsys kernel
# summary of 8B prefills. Logs go to $OUT (default /tmp).
#   source .device/prelude.sh; bash scripts/cuda/prefill-device.sh [budget seconds, default 240]
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
out=${OUT:-/tmp}
budget=${1:-240}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
left() { echo $((budget - ($(date +%s) - t0))); }
ckpt() {
  timeout 200 node scripts/bench/make-checkpoint.mjs --shape "$1" --out "/tmp/ck-$1" > "/tmp/ck-$1.log" 2>&1 && touch "/tmp/ck-$1.done"
}
wait_ckpt() { for _ in $(seq 200); do [[ -f /tmp/ck-$1.done ]] && return 0; sleep 1; done; echo "  checkpoint $1 not ready"; return 1; }
(ckpt 1b; ckpt 8b) &
stamp "build"
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_JS_INC=$PWD/.nodehdr/include;$PWD/.nodehdr/node-addon-api" >/dev/null || exit 1
cmake --build build-dev -j "$(nproc)" --target mlxb cuda_ops_check | tail -1
[[ ${PIPESTATUS[0]} -ne 0 ]] && exit 1
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
stamp "cuda_ops_check --bench"
timeout 120 ./build-dev/cuda_ops_check --bench > "$out/ops.txt" 2>&1; echo "  exit $?"
grep -E 'FAIL|PASSED|FAILED|flash|gemm' "$out/ops.txt" | cut -c1-160
stamp "graph-check"
timeout 90 node scripts/cuda/graph-check.mjs 100 > "$out/graph.txt" 2>&1; echo "  exit $?"; grep -E 'FAIL|CHECK' "$out/graph.txt" | tail -4 | cut -c1-160
stamp "L1"
timeout 120 python3 scripts/cuda/l1_oracle.py test/fixtures/models /tmp/l1 > "$out/l1-oracle.txt" 2>&1 && \
  timeout 60 node scripts/cuda/l1-check.mjs /tmp/l1 > "$out/l1.txt" 2>&1; echo "  exit $?"; tail -14 "$out/l1.txt" | cut -c1-170
for s in 1b 8b; do
  wait_ckpt $s || continue
  stamp "bench $s"
  timeout 90 node scripts/bench/bench.mjs --model "/tmp/ck-$s" --device cuda --runs 3 2>&1 | grep -E '^prefill|^decode' | tee -a "$out/bench.txt"
  stamp "A/B $s"
  pp() { timeout 60 env "$@" node scripts/cuda/prefill-profile.mjs "/tmp/ck-$s" 5 512 "/tmp/$s-$1.bin" 2>&1 | tail -1; }
  echo "  default: $(pp MLXB_FLASH_MMA=1)"
  echo "  MLXB_FLASH_MMA=0: $(pp MLXB_FLASH_MMA=0)"
  echo "  MLXB_CUDA_PREFILL_FUSED=0: $(pp MLXB_CUDA_PREFILL_FUSED=0)"
  echo "  mma vs wmma $(node scripts/cuda/prefill-profile.mjs --compare /tmp/$s-MLXB_FLASH_MMA=1.bin /tmp/$s-MLXB_FLASH_MMA=0.bin)"
  echo "  fused vs unfused $(node scripts/cuda/prefill-profile.mjs --compare /tmp/$s-MLXB_FLASH_MMA=1.bin /tmp/$s-MLXB_CUDA_PREFILL_FUSED=0.bin)"
done
if command -v nsys >/dev/null && [[ $(left) -gt 45 ]]; then
  stamp "nsys 8B prefill"
  timeout $(($(left) - 10)) nsys profile -t cuda -o /tmp/pf --force-overwrite true node scripts/cuda/prefill-profile.mjs /tmp/ck-8b 3 512 \
    > "$out/nsys.txt" 2>&1
  timeout $(($(left) - 2)) nsys stats -r cuda_gpu_kern_sum,cuda_api_sum --format csv -o "$out/pf" /tmp/pf.nsys-rep >> "$out/nsys.txt" 2>&1
  ls "$out" | grep pf
  [[ -f $out/pf_cuda_gpu_kern_sum.csv ]] && head -25 "$out/pf_cuda_gpu_kern_sum.csv" | cut -d, -f1-4,9 | cut -c1-150
else
  echo "no nsys or no time left ($(left) s)"
fi
stamp "done"
