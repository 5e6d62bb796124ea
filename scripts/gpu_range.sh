#!/usr/bin/env bash
# The fp32 range change on an H200 (from the repo root; CuPy, nvcc, PyTorch optional; wino's
# dependencies on PYTHONPATH): 1. the fp32 extremes and bit-identity on CUDA
# (tests/test_range_cuda.py), 2. fp32 scaled vs unscaled K2 timed on two public layers
# (scripts/gpu_range.py). Logs under $OUT (default /tmp/out); nonzero status when a step failed.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 WINO_BUILD="${WINO_BUILD:-/tmp/wino-range-build}"
status=0
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_range_cuda.py 2>&1 \
  | tee "$OUT/range_cuda.log" || status=1
timeout 200 python3 scripts/gpu_range.py build 2>&1 | tee "$OUT/range_time.log" || status=1
timeout 200 python3 scripts/gpu_range.py time 2>&1 | tee -a "$OUT/range_time.log" || status=1
exit $status
