#!/bin/bash
# On the GPU machine, the decode-speed work of one call (device time is scarce), most important
# first: build (sm_90), the fused-op check with its timings, the op check, the 1B / 8B bf16
# benchmark without and with programmatic dependent launch (MLXB_CUDA_PDL=1), decode graphs vs
# eager (fused vs unfused layers) in both modes, a per-kernel profile of 1B decode replays when
# ncu works here, then L1 against transformers. Logs go to $OUT (default /tmp).
#   source .device/prelude.sh; bash scripts/cuda/speed-device.sh [quick]
# quick: build, checks, the benchmark in the default mode and graph-check only (~90 s).
set -u
quick=${1:-}
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
out=${OUT:-/tmp}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
for s in 1b 8b; do
  (node scripts/bench/make-checkpoint.mjs --shape "$s" --out "/tmp/ck-$s" > "/tmp/ck-$s.log" 2>&1; echo "exit $?" >> "/tmp/ck-$s.log") &
done
stamp "build"
bash scripts/cuda/build-device.sh || exit 1
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
stamp "cuda_fused_check --bench"
timeout 60 ./build-dev/cuda_fused_check $([[ -z $quick ]] && echo --bench) > "$out/fused.txt" 2>&1; grep -v '^ok ' "$out/fused.txt"
stamp "cuda_ops_check"
timeout 90 ./build-dev/cuda_ops_check > "$out/ops.txt" 2>&1; grep -v '^ok ' "$out/ops.txt" | tail -4
bench() {  # shape pdl
  while ! grep -q '^exit' "/tmp/ck-$1.log"; do sleep 1; done
  stamp "bench $1 MLXB_CUDA_PDL=$2"
  MLXB_CUDA_PDL=$2 timeout 100 node scripts/bench/bench.mjs --model "/tmp/ck-$1" --device cuda --runs 3 2>&1 | tail -3 | tee -a "$out/bench.txt"
}
[[ -z $quick ]] && bench 1b 0
bench 1b 1
[[ -z $quick ]] && bench 8b 0
bench 8b 1
modes="0 1"; [[ -n $quick ]] && modes=1
for p in $modes; do
  stamp "graph vs eager MLXB_CUDA_PDL=$p"
  MLXB_CUDA_PDL=$p timeout 100 node scripts/cuda/graph-check.mjs 100 > "$out/graph-$p.txt" 2>&1; tail -11 "$out/graph-$p.txt" | cut -c1-150
done
[[ -n $quick ]] && { stamp "done"; exit 0; }
if command -v ncu >/dev/null; then
  stamp "ncu (1B, 3 decode steps)"
  timeout 60 ncu --graph-profiling node --clock-control none --metrics gpu__time_duration.sum --csv \
    node scripts/cuda/decode-profile.mjs /tmp/ck-1b 3 0 > "$out/ncu-1b.csv" 2> "$out/ncu-1b.err"
  echo "ncu exit $?; $(wc -l < "$out/ncu-1b.csv") lines"
fi
stamp "L1"
timeout 150 python3 scripts/cuda/l1_oracle.py test/fixtures/models /tmp/l1 > "$out/l1-oracle.txt" 2>&1 && \
  timeout 60 node scripts/cuda/l1-check.mjs /tmp/l1 > "$out/l1.txt" 2>&1; tail -14 "$out/l1.txt"
stamp "done"
