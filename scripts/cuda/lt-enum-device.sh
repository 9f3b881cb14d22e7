#!/bin/bash
# On the GPU machine, one call: cuBLASLt configurations beyond its heuristic's list for the 32-row
# 8B serving products. Builds, runs cuda_ops_check --lt-sweep 32 --all (every algorithm id x tile x
# stages x split-K x swizzle x custom option x cluster shape that AlgoCheck accepts, for q/k/v, o
# and down; $OUT has the whole list), then serves the random 8B checkpoint with 32 streams with
# no picks, the built-in ones (cublaslt.cc) and this run's (MLXB_CUBLASLT_PICK=...=@...), alternating;
# cuda_ops_check first (its 32-row cases run the built-in picks against float64).
#   bash scripts/cuda/stage.sh DEST --tests; on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/lt-enum-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=14
source scripts/cuda/steps.sh  # stamp, step, step_logs, memory_dir, ckpt, wait_for
step_logs lt-enum-logs
memory_dir
deadline=$(($(date +%s) + 450))
[[ -f .test-deps.tar.xz && ! -d node_modules/vitest ]] && tar -xJf .test-deps.tar.xz
(ckpt 8b && touch "$ck/ck-8b.done") &
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
step ops_check 150 'FAIL|PASSED|failures|M=32 N=(6144|4096)' ./build-dev/cuda_ops_check
step lt_enum 260 '^pick|^enum .*(stopped|ids)|FAIL' ./build-dev/cuda_ops_check --lt-sweep 32 --all
grep -E '^enum ' "$logs/lt_enum.txt" | grep -v 'ids,' | sort -t' ' -k4 | awk '{print $2, $3, $4}' | head -60 > "$logs/enum_short.txt"
picks=$(grep '^pickall' "$logs/lt_enum.txt" | awk '{print $2}' | paste -sd, -)
echo "MLXB_CUBLASLT_PICK=$picks"
# The built-in picks (cublaslt.cc, on sm_90 by default) against none and against this run's picks.
if [[ -n $picks ]] && wait_for ck-8b; then
  for r in 1 2; do
    step serve_8b_none$r 80 'aggregate' env MLXB_CUBLASLT_PICK=none "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
    step serve_8b_builtin$r 80 'aggregate' "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
    step serve_8b_picks$r 80 'aggregate' env MLXB_CUBLASLT_PICK="$picks" "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
  done
fi
stamp done
