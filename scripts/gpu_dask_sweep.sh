#!/usr/bin/env bash
# The Dask scale-out on a GPU machine (issue 14), from the repository root:
#
#   bash scripts/gpu_dask_sweep.sh
#
# Needs: nvcc, CuPy, PyTorch, and on PYTHONPATH (or installed) wino's dependencies plus doit,
# jsonschema, dask and distributed (the `dask` extra). Environment knobs:
#   WINO_BUILD   the build folder (default /tmp/wino-dask-gpu; reused when it holds the cache)
#   COMPARE_BUILD=0   skip the build comparison (doit vs wino build --dask)
#   SHARDS       shards of the third sweep (default 4)
#   TARGET=c CASES=<file>   a dry run of the same steps on the host target (CPU workers)
#
# 1. builds the CUDA grid twice, with `doit compile:cuda` and with `wino build --dask local`
#    (one worker per core), prints both wall times and checks the caches are byte-identical;
# 2. sweeps a few public layers (fp16, every tile, one candidate per stage, so that the binaries
#    a run picks do not depend on timing) serially, then through a LocalCluster with one worker
#    per visible GPU (one shard per GPU), then with $SHARDS shards; prints the wall times and
#    checks that the three CSVs hold the same content (wino.bench.results.content: timings and
#    errors aside).
# It prints `content identical: yes` per comparison and exits non-zero when one differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export WINO_BUILD=${WINO_BUILD:-/tmp/wino-dask-gpu}
SHARDS=${SHARDS:-4}
TARGET=${TARGET:-cuda}
PY=python3
wino() { "$PY" -m wino.cli "$@"; }
now() { date +%s.%N; }
secs() { "$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }

needs="import distributed, doit, jsonschema"
[[ $TARGET == cuda ]] && needs+=", cupy, torch"
"$PY" -c "$needs" || {
    echo "needs dask + distributed (pip install 'wino[dask]'), doit, jsonschema (+ cupy, torch)" >&2
    exit 2
}
nproc=$(nproc)
if [[ $TARGET == cuda ]]; then
    echo "GPUs: $(nvidia-smi -L | wc -l) visible: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort -u)"
fi

# 1. the build -------------------------------------------------------------------------------
if [[ ${COMPARE_BUILD:-1} != 0 ]]; then
    t0=$(now)
    "$PY" -m doit -n "$nproc" compile:$TARGET >/dev/null
    t1=$(now)
    wino build --target $TARGET --dask local -j "$nproc" --cache-root "$WINO_BUILD-dask"
    t2=$(now)
    echo "build: doit -n $nproc compile:$TARGET $(secs "$t0" "$t1") s; wino build --dask local ($nproc workers) $(secs "$t1" "$t2") s"
    "$PY" - "$WINO_BUILD" "$WINO_BUILD-dask" <<'PYEOF'
import json, sys
from pathlib import Path

def tree(root):
    out = {}
    for p in sorted(Path(root, "cache").rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.parent.name == "bin" and p.suffix == ".json":  # a report: ptxas logs its own time
                report = json.loads(data)
                report.pop("log")
                data = json.dumps(report, sort_keys=True).encode()
            out[p.relative_to(root).as_posix()] = data
    return out

a, b = tree(sys.argv[1]), tree(sys.argv[2])
differ = sorted(set(a) ^ set(b)) + [k for k in a if k in b and a[k] != b[k]]
print(f"build: {len(a)} files; content identical: {'yes' if not differ else 'NO'}")
for name in differ[:20]:
    print("  differs:", name)
sys.exit(1 if differ else 0)
PYEOF
elif ! ls "$WINO_BUILD"/cache/v*/"$TARGET"/*/manifest.json >/dev/null 2>&1; then
    "$PY" -m doit -n "$nproc" compile:$TARGET >/dev/null
fi

# 2. the sweep -------------------------------------------------------------------------------
out=$(mktemp -d)
cases=${CASES:-$out/cases.txt}
[[ -n ${CASES:-} ]] || cat >"$cases" <<'CASES'
conv -n 64 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1
conv -n 64 -c 128 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1
conv -n 64 -c 256 -H 14 -W 14 -k 256 -y 3 -x 3 -p 1 -q 1
conv -n 64 -c 512 -H 7 -W 7 -k 512 -y 3 -x 3 -p 1 -q 1
conv -n 16 -c 64 -H 112 -W 112 -k 128 -y 3 -x 3 -p 1 -q 1
conv -n 16 -c 128 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1
conv -n 16 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1
conv -n 16 -c 512 -H 14 -W 14 -k 512 -y 3 -x 3 -p 1 -q 1
CASES
sweep=(bench --target "$TARGET" --miopen-file "$cases" --dtype fp16 --candidates 1 --verify
    --cache-root "$WINO_BUILD")
run() {  # name, extra arguments...
    local name=$1 t0 t1
    shift
    t0=$(now)
    wino "${sweep[@]}" --results "$out/$name.csv" "$@" >"$out/$name.log" 2>&1 || {
        tail -n 30 "$out/$name.log"
        echo "sweep $name failed" >&2
        exit 1
    }
    t1=$(now)
    echo "sweep $name: $(secs "$t0" "$t1") s; $(tail -n 1 "$out/$name.log")"
}
run serial
run dask-per-gpu --dask local
run "dask-$SHARDS-shards" --dask local --dask-shards "$SHARDS"
grep -h "through Dask" "$out"/dask-*.log
"$PY" - "$out/serial.csv" "$out/dask-per-gpu.csv" "$out/dask-$SHARDS-shards.csv" <<'PYEOF'
import sys
from wino.bench import results

serial = results.read(sys.argv[1])
verified = sum(r["verified"] == "yes" for r in serial)
print(f"serial: {len(serial)} rows, {verified} verified")
bad = 0
for path in sys.argv[2:]:
    other = results.read(path)
    same = results.content(other) == results.content(serial)
    print(f"{path}: {len(other)} rows; content identical: {'yes' if same else 'NO'}")
    if not same:
        bad = 1
        for a, b in zip(results.content(serial), results.content(other)):
            if a != b:
                print("  serial:", a, "\n  dask:  ", b)
                break
sys.exit(bad)
PYEOF
echo "logs and CSVs: $out"
