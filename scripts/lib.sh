# What the GPU scripts share (source it: `. "$(dirname "$0")/lib.sh"`): $OUT made, unbuffered
# Python, and step(), which runs one step under a time limit, logs it and records a failure.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0

step() {  # step LIMIT LOG COMMAND...: COMMAND under `timeout LIMIT`, its output into $OUT/LOG
  local limit=$1 log=$2
  shift 2
  echo "== $*" | tee -a "$OUT/$log"
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/$log" || status=1
}
