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
