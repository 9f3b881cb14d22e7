#!/bin/bash
# On the GPU machine, one call: the same tree built twice, once as staged and once with some files
# replaced by older copies (AB_OLD="cpp/path.cu=older/copy.cu ..."; incremental rebuild), then
# bench.mjs decode of the random 1B and 8B bf16 alternating the two addons (MLXB_NATIVE_PATH).
# Logs: $OUT/ab-build-logs.tgz; summaries on stdout.
set -u
cd "$(dirname "$0")/../.."
source scripts/cuda/env.sh
STEP_TAIL=${STEP_TAIL:-1}
source scripts/cuda/steps.sh
device_setup ab-build-logs ${AB_BUDGET:-400}
(ckpt 1b && touch "$ck/ck-1b.done"; ckpt 8b && touch "$ck/ck-8b.done") &
stamp build new
bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
cp build-dev/mlxb.node /tmp/new.node
for pair in ${AB_OLD:-}; do cp "${pair#*=}" "${pair%%=*}"; done
stamp build old
bash scripts/cuda/build-device.sh > "$logs/build-old.txt" 2>&1 || { tail -30 "$logs/build-old.txt"; exit 1; }
cp build-dev/mlxb.node /tmp/old.node
for s in 1b 8b; do
  wait_for ck-$s || continue
  for r in 1 2; do
    for v in old new; do
      [[ $(left) -lt 25 ]] && break 3
      step "bench_${s}_${v}_$r" 60 '^decode' env MLXB_NATIVE_PATH=/tmp/$v.node node scripts/bench/bench.mjs --model "$ck/ck-$s" --device cuda --runs 3
    done
  done
done
stamp done
