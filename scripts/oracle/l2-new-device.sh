#!/bin/bash
# On the GPU machine, one call: L2 of the bfloat16 hidden-256 quantized fixtures (the shapes the
# default 4-bit tensor-core CUDA GEMVs take: qgemv_tcp for one row, qgemv_tcf for 2-8 rows).
#  1. the oracle (scripts/oracle/dequant_oracle.py: our files unpacked with numpy, transformers
#     float32 on CPU) for the new fixtures only, its outputs copied into test/fixtures/quant/<name>/;
#  2. node scripts/cuda/quant-l2-check.mjs on every fixture (old and new), float32 and bfloat16
#     activations, default kernels: the pass/fail of record;
#  3. the new fixtures again, bfloat16 activations, under MLXB_QGEMV_VARIANT=8 (qgemv_tcp forced,
#     2 stages), 7 (qgemv_tcf only), 10 (the staged qgemv_tc.cu kernel, the default before),
#     2 (the CUDA-core GEMV) and with MLXB_CUDA_FUSED=0: all must pass; the logits' SHA-256
#     prefixes of each path are tabled against the default's (equal digests = same arithmetic);
#  4. when ncu exists (and MLXB_L2_NCU is not 0): the GEMV kernels the default actually launches
#     for each new fixture (bfloat16), counted by name (at most 90 s per fixture);
#  5. packs the oracle outputs and the log into $OUT/l2-new-oracle.tar (one file).
# Expects, in the repository root this script sits in (e.g. .wt-quant): dist/ built (tsc), the
# addon built at build-dev/mlxb.node (scripts/cuda/build-device.sh, run before this in the same
# call), the committed inputs of the new fixtures, python3 with numpy + torch + transformers +
# safetensors. Exit status: that of step 2 (or 3 when 2 passed); the tar is written either way.
#   bash scripts/cuda/build-device.sh && bash scripts/oracle/l2-new-device.sh
set -u
cd "$(dirname "$0")/../.."
NEW="llama_bf16_q4 qwen3_bf16_q4g128 gemma3_text_bf16_q4"
NEW_CSV=${NEW// /,}
out=${OUT:-/tmp/l2-new-out}
mkdir -p "$out"
work=/tmp/l2-new
rm -rf "$work" && mkdir -p "$work/oracle"
log=$work/l2-new-log.txt
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$log"; }
run() { "$@" 2>&1 | tee -a "$log"; return "${PIPESTATUS[0]}"; }
[[ -f build-dev/mlxb.node ]] || { echo "build-dev/mlxb.node missing: run scripts/cuda/build-device.sh first"; exit 2; }
source scripts/cuda/env.sh
export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
git log -1 --format='commit %H' 2>/dev/null | tee -a "$log"

stamp "oracle (dequant_oracle.py) for $NEW"
run timeout 300 python3 scripts/oracle/dequant_oracle.py test/fixtures/quant "$work/oracle" $NEW
oracle_rc=$?
for n in $NEW; do
  for f in logits.f32 greedy_logits.f32 oracle.json; do
    [[ -f "$work/oracle/$n/$f" ]] && cp "$work/oracle/$n/$f" "test/fixtures/quant/$n/$f"
  done
done
(cd "$work/oracle" && sha256sum */* ) | tee -a "$log"

rc=$oracle_rc
if [[ $oracle_rc -eq 0 ]]; then
  stamp "L2 on CUDA, every fixture, default kernels"
  timeout 240 node scripts/cuda/quant-l2-check.mjs > "$work/default.txt" 2>&1
  rc=$?
  cat "$work/default.txt" >> "$log"
  # On the console: every line of the new fixtures, and of the others only what did not pass.
  grep -E "_bf16_|^L2 " "$work/default.txt"
  grep -vE "_bf16_|^ok  |^L2 " "$work/default.txt"
  if grep -q '^skip' "$work/default.txt"; then echo "a fixture was skipped (no oracle outputs)"; rc=1; fi
  for v in 8 7 10 2 fused0; do
    stamp "L2 on CUDA, new fixtures, bfloat16, ${v/fused0/MLXB_CUDA_FUSED=0}"
    if [[ $v == fused0 ]]; then
      MLXB_CUDA_FUSED=0 MLXB_L2_ONLY=$NEW_CSV timeout 120 node scripts/cuda/quant-l2-check.mjs bfloat16 > "$work/v$v.txt" 2>&1
    else
      MLXB_QGEMV_VARIANT=$v MLXB_L2_ONLY=$NEW_CSV timeout 120 node scripts/cuda/quant-l2-check.mjs bfloat16 > "$work/v$v.txt" 2>&1
    fi
    r=$?
    grep -v '^ok  ' "$work/v$v.txt" | tee -a "$log"
    [[ $r -ne 0 && $rc -eq 0 ]] && rc=$r
  done
  stamp "logits digests of the new fixtures (bfloat16): default | v8 tcp | v7 tcf | v10 staged tc | v2 cuda-core | fused off"
  for n in $NEW; do
    for p in prefill chunked decode; do
      row="$n $p:"
      for f in default v8 v7 v10 v2 vfused0; do
        d=$(grep -E "^(ok  |FAIL) $n +bfloat16 $p " "$work/$f.txt" | grep -oE 'sha [0-9a-f]+' | cut -c5-)
        row="$row ${d:-none}"
      done
      echo "$row" | tee -a "$log"
    done
  done
  if command -v ncu >/dev/null && [[ ${MLXB_L2_NCU:-1} != 0 ]]; then
    for n in $NEW; do
      stamp "ncu: GEMV kernels the default launches for $n, bfloat16 (prefill, chunked 24 + 6 + 2, 32 decode steps)"
      MLXB_L2_ONLY=$n timeout 90 ncu --kernel-name regex:gemv --metrics gpu__time_duration.sum --csv \
        --log-file "$work/ncu-$n.csv" node scripts/cuda/quant-l2-check.mjs bfloat16 > "$work/ncu-app-$n.txt" 2>&1
      echo "ncu exit $?; $(tail -1 "$work/ncu-app-$n.txt"); launches by kernel:" | tee -a "$log"
      grep '^"' "$work/ncu-$n.csv" 2>/dev/null | grep -oE '[A-Za-z0-9_]*gemv[A-Za-z0-9_]*_kernel' | sort | uniq -c | tee -a "$log"
    done
  else
    stamp "ncu absent or MLXB_L2_NCU=0: kernel names not listed"
  fi
fi
stamp "pack"
cp "$work"/*.txt "$work/oracle/" 2>/dev/null
for f in "$work"/ncu-*.csv; do [[ -f $f ]] && head -c 1000000 "$f" > "$work/oracle/$(basename "$f")"; done
tar -cf "$out/l2-new-oracle.tar" -C "$work/oracle" .
ls -la "$out/l2-new-oracle.tar"
stamp "done, exit $rc"
exit $rc
