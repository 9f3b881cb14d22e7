# Sourced by the device scripts: timed steps with their logs kept.
#   STEP_LOGS=DIR STEP_TAIL=N; source scripts/cuda/steps.sh
# stamp MSG prints MSG with the seconds since sourcing; step NAME LIMIT FILTER CMD... runs CMD
# under `timeout LIMIT`, writes its whole output to $STEP_LOGS/NAME.txt and prints the last
# $STEP_TAIL lines that FILTER (an extended regex) selects, then the exit status if not 0.
# step_logs NAME: logs (and STEP_LOGS) = /tmp/NAME, packed into $OUT/NAME.tgz when the script
# exits. memory_dir: ck = /dev/shm when it has room for an 8B checkpoint and its 4-bit copy,
# else /tmp.
STEP_LOGS=${STEP_LOGS:-/tmp}
STEP_TAIL=${STEP_TAIL:-16}
_step_t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - _step_t0)) s] $*"; }
step() {
  local name=$1 limit=$2 filter=$3; shift 3
  stamp "$name"
  timeout "$limit" "$@" > "$STEP_LOGS/$name.txt" 2>&1
  local rc=$?
  grep -E "$filter" "$STEP_LOGS/$name.txt" | tail -"$STEP_TAIL" | cut -c1-220
  [[ $rc -ne 0 ]] && echo "  ($name: exit $rc)"
  return 0
}
step_logs() {
  logs=/tmp/$1
  STEP_LOGS=$logs
  mkdir -p "$logs"
  _step_pack=$1
  trap 'tar -czf "${OUT:-/tmp}/$_step_pack.tgz" -C /tmp "$_step_pack"' EXIT
}
memory_dir() {
  ck=/tmp
  [[ $(df -k --output=avail /dev/shm 2>/dev/null | tail -1) -gt 24000000 ]] 2>/dev/null && ck=/dev/shm
  return 0
}

# ckpt SHAPE: a random-weight checkpoint in $ck/ck-SHAPE (make-checkpoint.mjs); quant_q4 SHAPE: its
# 4-bit g64 copy by our quantizer in $ck/ck-SHAPE-q4, marked by $ck/ck-SHAPE-q4.done, the bf16 one
# then removed unless `quant_q4 SHAPE keep` (MLXB_NATIVE_PATH must be exported before: quantize
# loads the addon). wait_for NAME:
# until $ck/NAME.done exists or the script's one deadline ($deadline, epoch seconds) has passed.
ckpt() { timeout 200 node scripts/bench/make-checkpoint.mjs --shape "$1" --out "$ck/ck-$1" > "$logs/ck-$1.log" 2>&1; }
quant_q4() {
  timeout 240 node dist/cli/main.js quantize --model "$ck/ck-$1" --out "$ck/ck-$1-q4" --bits 4 --group-size 64 > "$logs/q-$1.log" 2>&1 &&
    touch "$ck/ck-$1-q4.done"
  [[ ${2:-} == keep ]] || rm -rf "$ck/ck-$1"
}
wait_for() { while [[ $(date +%s) -lt $deadline ]]; do [[ -f $ck/$1.done ]] && return 0; sleep 1; done; echo "  $1 not ready"; return 1; }

# device_setup NAME [SECONDS]: the preamble of a device script after sourcing this file: step_logs
# NAME, memory_dir, MLXB_NATIVE_PATH = the addon build-device.sh makes, and one deadline SECONDS
# (default 570) from now for every wait, with left() printing the seconds to it. test_deps: the
# vitest and runtime packages stage.sh --tests packed, unpacked unless already there.
device_setup() {
  step_logs "$1"
  memory_dir
  export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
  deadline=$(($(date +%s) + ${2:-570}))
}
left() { echo $((deadline - $(date +%s))); }
# build_with_ckpts SHAPE...: prints the GPU, makes in the background the checkpoints an earlier
# script of the same call has not (each marked by $ck/ck-SHAPE.done, for wait_for), then runs
# build-device.sh (the script exits if it fails; skipped with PREBUILT=1 when build-dev/mlxb.node
# is there) and links build -> build-dev.
build_with_ckpts() {
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
  local shape
  (for shape in "$@"; do [[ -f $ck/ck-$shape.done ]] || { ckpt "$shape" && touch "$ck/ck-$shape.done"; }; done) &
  if [[ -n ${PREBUILT:-} && -f build-dev/mlxb.node ]]; then  # PREBUILT=1: an addon built elsewhere for sm_90 (no native checks)
    stamp "prebuilt addon"
  else
    stamp build
    bash scripts/cuda/build-device.sh > "$logs/build.txt" 2>&1 || { tail -30 "$logs/build.txt"; exit 1; }
  fi
  ln -sfn build-dev build
}
test_deps() { [[ -f .test-deps.tar.xz && ! -d node_modules/vitest ]] && tar -xJf .test-deps.tar.xz; return 0; }

# The issue-6 serving benchmark: 32 streams through the engine API, 512-token prompts, 128 generated.
serve32=(node scripts/bench/serve.mjs --device cuda --prompt 512 --gen 128 --prefill-chunk 512 --prefill-budget 4096 --streams 32 --direct)

# serve_ab TAG ROUNDS LIMIT FILTER VARIANT... -- CMD...: the serving A/B, alternating. Each of
# ROUNDS rounds runs every VARIANT ("LABEL:VAR=VALUE [VAR=VALUE ..]") in order as
# `step serve_TAG_LABEL_ROUND LIMIT FILTER env VAR=VALUE.. CMD...` (no _ROUND when ROUNDS is 1);
# stops (returning 0) once fewer than LIMIT seconds are left to the deadline.
#   serve_ab 8b 3 30 'aggregate|TTFT' "a:X=0" "b:X=1" -- "${serve32[@]}" --model "$ck/ck-8b" --kv-gb 8
serve_ab() {
  local tag=$1 rounds=$2 limit=$3 filter=$4 r v name
  shift 4
  local -a variants=()
  while [[ $# -gt 0 && $1 != -- ]]; do variants+=("$1"); shift; done
  shift  # the --
  for ((r = 1; r <= rounds; r++)); do
    for v in "${variants[@]}"; do
      [[ $(left) -lt $limit ]] && return 0
      name=serve_${tag}_${v%%:*}
      ((rounds > 1)) && name+=_$r
      # shellcheck disable=SC2086  # the variant's settings split into words, as env arguments
      step "$name" "$limit" "$filter" env ${v#*:} "$@"
    done
  done
}
