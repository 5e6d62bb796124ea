#!/usr/bin/env bash
# Every engine of `wino bench --engines` on the H200 (issue 9), from the repo root with CuPy,
# PyTorch and nvcc; doit, jsonschema and simpleeval importable. Logs, CSV and table go to $OUT
# (default /tmp/out).
#   1. the cuda cache: python3 -m doit -n 16 compile:cuda (about 25 s; nothing when built)
#   2. the public layers with C, K >= 64 (cases/public.txt, 3x3 stride 1) into $OUT/cases.txt
#   3. wino bench --target cuda --engines fused,unfused,baked,cudnn --verify, fp16 then bf16,
#      into $OUT/engines.csv (the baked engine compiles 3-4 kernels per case with nvcc)
#   4. wino plot --engines: the table per layer and the geomeans per dtype (best wino engine vs
#      cuDNN, U cached, over every layer and over those with C, K >= 256; the fused engine vs
#      cuDNN over those with 64 <= C <= 128 at 56x56 and more: issue 9's three goals; the
#      shape-generic cost, unfused vs baked), also in $OUT/engines.md, and
#      the pictures $OUT/engines_<dtype>.png (each engine's speedup per layer, U cached and K1)
#   5. scripts/engine_ceilings.py: per layer, the most any engine of the tile could reach (the
#      Winograd MMA at the run's tensor rate, x + y at its copy rate) into $OUT/ceilings.md
# TILES (e.g. F4x4,F2x2,F6x4) restricts the tiles; DTYPES (default "fp16 bf16") the dtypes;
# BENCH_LIMIT (s, default 270) bounds each dtype's sweep: the CSV is merged after every case, so
# a sweep cut short still gives the table of the cases it measured (one `run` call: 600 s).
set -u -o pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"  # $OUT, status, step LIMIT LOG COMMAND...
step "${BUILD_LIMIT:-300}" build.log python3 -m doit -n "${JOBS:-16}" compile:cuda
python3 - "$OUT/cases.txt" <<'PY' || status=1
import sys
from wino.problem import Problem

lines = []
for line in open("cases/public.txt", encoding="utf-8"):
    text = line.split("#", 1)[0].strip()
    if not text:
        continue
    p = Problem.from_miopen(text)
    if (p.R, p.S, p.stride_h, p.stride_w) == (3, 3, 1, 1) and min(p.C, p.K) >= 64:
        lines.append(text)
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines) + "\n")
print(f"{len(lines)} layers with C, K >= 64 -> {sys.argv[1]}")
PY
tiles=()
if [ -n "${TILES:-}" ]; then tiles=(--tile "$TILES"); fi
for dtype in ${DTYPES:-fp16 bf16}; do
  step "${BENCH_LIMIT:-270}" bench.log python3 -m wino.cli bench --target cuda \
    --miopen-file "$OUT/cases.txt" --dtype "$dtype" "${tiles[@]}" \
    --engines fused,unfused,baked,cudnn --verify --results "$OUT/engines.csv" --skip-measured \
    --baked-root "${BAKED_ROOT:-/tmp/wino-baked}"
done
step 60 table.log python3 -m wino.cli plot "$OUT/engines.csv" --engines -o "$OUT/engines.png"
cp "$OUT/table.log" "$OUT/engines.md" 2>/dev/null
step 30 ceilings.md python3 scripts/engine_ceilings.py "$OUT/engines.csv"
exit $status
