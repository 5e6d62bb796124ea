#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and initcheck over every stage of a representative set
# (every tile, both K2 paths, fused and split prescale; scripts/gpu_sanitize.py lists it), on the
# H200, from the repo root, with PYTHONPATH holding wino and its dependencies (doit, jsonschema,
# simpleeval). Prints one summary line per tool; exits 1 when a tool reports an error.
# Logs stay in the folder printed first.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(mktemp -d "${TMPDIR:-/tmp}/wino-sanitize.XXXXXX")
echo "sanitize: build and logs in $root"
python3 scripts/gpu_sanitize.py build "$root" || exit 2
status=0
for tool in memcheck racecheck initcheck; do
    log="$root/$tool.log"
    compute-sanitizer --tool "$tool" --print-limit 1000000 \
        python3 scripts/gpu_sanitize.py run "$root" >"$log" 2>&1
    python3 scripts/gpu_sanitize.py summarize "$tool" "$log" || status=1
done
exit "$status"
