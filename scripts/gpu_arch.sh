#!/usr/bin/env bash
# GPU checks for issue 8 (the stage-kind table and the ABI record). What changed on the CUDA
# path: wino/runtime/cuda.py packs each kernel's kernargs and binds its buffers from the
# manifest's abi record (FORMAT 2), and the build writes wino_kernels.h beside the manifest.
# The kernel sources and PTX are byte-identical (golden unchanged).
# Run from the repo root on the H200 machine (CuPy, PyTorch, nvcc; PYTHONPATH with doit and
# jsonschema set by the caller). Prints "gpu_arch: all passed" at the end.
set -euo pipefail
python -m pytest -q -m gpu tests/test_runtime_cuda.py
root=$(mktemp -d /tmp/wino-gpu-arch-XXXX)
python - "$root" <<'PY'
import sys
from pathlib import Path

import cupy as cp
import numpy as np

from tests import cuda_cache
from wino.builder.header import HEADER
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.verify import bound_for
from wino.vocab import Tile

root = Path(sys.argv[1])
problem = Problem(N=2, C=64, H=14, W=14, K=64, pad_h=1, pad_w=1, dtype="fp16")
specs = default_stage_specs(problem, Tile(4, 4), target="cuda")
manifest = cuda_cache.build(specs.values(), root)
header = (manifest.directory / HEADER).read_text()
assert all(f"{s.name}(struct wino_args_" in header for s in specs.values()), "header lacks a kernel"
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 14, 14, 64)).astype(np.float16)
w = rng.standard_normal((64, 3, 3, 64)).astype(np.float16)
plan = dispatch(problem, target="cuda", cache_root=root, tile="F4x4")
y = cp.asnumpy(plan.run(cp.asarray(x), cp.asarray(w)))
err = relative_error(y, conv2d_reference(x, w, (1, 1)))
bound = bound_for("F4x4", "fp16", plan.xdtype)
print(f"gpu_arch: abi-bound fp16 F4x4 run: err {err:.2e} <= bound {bound:.1e}")
assert err <= bound
PY
echo "gpu_arch: all passed"
