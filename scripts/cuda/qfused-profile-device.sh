#!/bin/bash
# On the GPU machine, one call: where the fused quantized decode step's time goes. Random 1B (and,
# while time is left, 8B) checkpoints quantized 4-bit g64; bench.mjs decode alternating the
# default (every fusion), MLXB_QFUSED_NORM=0 (residual adds fused, norms separate),
# MLXB_CUDA_FUSED=0 (the unfused layer loop) and MLXB_QGEMV_PDL=0; then nsys kernel summaries of
# 100 recorded 1B decode steps, fused and unfused (decode-profile.mjs). ~6 minutes warm.
#   bash scripts/cuda/stage.sh DEST --tests; on the device:
#   source .device/prelude.sh; cd DEST && bash scripts/cuda/qfused-profile-device.sh
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=6
source scripts/cuda/steps.sh  # stamp, step, step_logs, memory_dir, ckpt, quant_q4, wait_for
step_logs qprof-logs
memory_dir
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
start=$(date +%s)
deadline=$((start + 560))  # one deadline for every wait
left() { echo $((deadline - $(date +%s))); }
stamp build
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
(ckpt 1b; quant_q4 1b; ckpt 8b; quant_q4 8b) &
configs=("default:" "norm0:MLXB_QFUSED_NORM=0" "unfused:MLXB_CUDA_FUSED=0" "pdl0:MLXB_QGEMV_PDL=0")
bench_all() {
  for r in 1 2; do
    for c in "${configs[@]}"; do
      [[ $(left) -lt 60 ]] && return
      step "bench_$1_${c%%:*}_$r" 60 '^decode' env ${c#*:} node scripts/bench/bench.mjs --model "$ck/ck-$1-q4" --device cuda --runs 2
    done
  done
}
wait_for ck-1b-q4 && bench_all 1b
if command -v nsys >/dev/null; then
  for c in "default:" "unfused:MLXB_CUDA_FUSED=0"; do
    [[ $(left) -lt 70 ]] && break
    n=${c%%:*}
    stamp "nsys 1b $n"
    timeout 60 env ${c#*:} nsys profile -t cuda --cuda-graph-trace=node -o /tmp/qp-$n --force-overwrite true \
      node scripts/cuda/decode-profile.mjs "$ck/ck-1b-q4" 3 100 > "$logs/nsys-$n.txt" 2>&1
    timeout 40 nsys stats -r cuda_gpu_kern_sum --format csv -o "$logs/k-$n" /tmp/qp-$n.nsys-rep >> "$logs/nsys-$n.txt" 2>&1
    grep "ms per step" "$logs/nsys-$n.txt"
    # name, instances, total ns: the 14 largest
    python3 -c "
import csv,sys
rows=list(csv.DictReader(open(sys.argv[1])))
for r in rows[:14]: print('%6.1f%% %8s x %9.1f us  %s' % (float(r['Time (%)']), r['Instances'], float(r['Avg (ns)'])/1e3, r['Name'][:110]))
" "$logs/k-${n}_cuda_gpu_kern_sum.csv" 2>&1 | head -16
  done
else
  echo "no nsys"
fi
wait_for ck-8b-q4 && configs=("default:" "norm0:MLXB_QFUSED_NORM=0" "unfused:MLXB_CUDA_FUSED=0") && bench_all 8b
stamp done
