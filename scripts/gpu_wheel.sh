#!/usr/bin/env bash
# The wheel on the H200, with no compiler: install a wino wheel (built by `doit wheel` on the
# development machine) into a fresh folder with `pip install --no-deps --target`, take nvcc off
# PATH, and run wino.conv2d on CuPy arrays (fp32, fp16) for the public layers at batch 2 against
# the float64 reference, from the wheel's packaged cuda cache.
#
#   scripts/gpu_wheel.sh dist/wino-0.1.0-py3-none-linux_x86_64.whl
#
# Needs python3 with CuPy and wino's dependencies (numpy, pyyaml, jinja2, ml-dtypes, jsonschema,
# doit) importable (PYTHONPATH is kept); prints the wheel's size, one line per case
# (PASS/FAIL/REFUSED, error and bound), and exits non-zero if a case fails or anything is off.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

wheel=$(realpath "${1:?usage: scripts/gpu_wheel.sh dist/wino-*.whl}")
cases=$(realpath cases/public.txt)
echo "wheel: $wheel ($(stat -c %s "$wheel") bytes, $(du -h "$wheel" | cut -f1))"

python=$(command -v python3)  # resolved before nvcc's folders leave PATH
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip install --quiet --no-deps --no-index --target "$work/site" "$wheel"

# No compiler: drop every PATH entry that holds nvcc, then make sure none is left.
path=""
IFS=: read -r -a entries <<<"$PATH"
for entry in "${entries[@]}"; do
    if [[ -n $entry && ! -x $entry/nvcc ]]; then path+="${path:+:}$entry"; fi
done
export PATH=$path
if command -v nvcc >/dev/null; then
    echo "gpu_wheel: nvcc still on PATH at $(command -v nvcc)" >&2
    exit 1
fi
echo "nvcc on PATH: none"

# A folder without build/ or a checkout, so only the wheel can serve the kernels.
mkdir "$work/run"
cd "$work/run"
unset WINO_BUILD WINO_ROOT
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
"$python" - "$cases" "$work/site" <<'EOF'
import sys
from dataclasses import replace
from pathlib import Path

import cupy
import numpy as np

import wino
from wino.problem import Problem
from wino.refusals import Refused
from wino.runtime import conv2d_reference, relative_error
from wino.runtime.verify import bound_for

cases, site = Path(sys.argv[1]), Path(sys.argv[2])
assert Path(wino.__file__).is_relative_to(site), f"wino imported from {wino.__file__}, not {site}"
lines = [ln.strip() for ln in cases.read_text().splitlines() if ln.split("#", 1)[0].strip()]
rng = np.random.default_rng(0)
failed, shown = 0, False
for line in lines:
    for dtype in ("fp32", "fp16"):
        problem = replace(Problem.from_miopen(line), N=2, dtype=wino.DType.parse(dtype))
        try:
            plan = wino.dispatch(problem, target="cuda")
        except Refused as refused:
            print(f"REFUSED {problem.label()} [{refused.rule}]")
            continue
        if not shown:
            print("\n".join(plan.explain().splitlines()[:2]))
            assert "(the installed package)" in plan.explain().splitlines()[1]
            shown = True
        np_dtype = np.float32 if dtype == "fp32" else np.float16
        x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C)).astype(np_dtype)
        w = rng.standard_normal((problem.K, 3, 3, problem.Cg)).astype(np_dtype)
        y = wino.conv2d(cupy.asarray(x), cupy.asarray(w), padding=(problem.pad_h, problem.pad_w))
        assert isinstance(y, cupy.ndarray)
        ref = conv2d_reference(x, w, (problem.pad_h, problem.pad_w))
        error, bound = relative_error(cupy.asnumpy(y), ref), bound_for(plan.tile, dtype)
        status = "PASS" if error <= bound else "FAIL"
        failed += status == "FAIL"
        print(f"{status} {problem.label()} {plan.tile.name} error {error:.2e} bound {bound:.0e}")
print(f"gpu_wheel: {failed} failed")
sys.exit(1 if failed else 0)
EOF
