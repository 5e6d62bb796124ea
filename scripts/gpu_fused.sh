#!/usr/bin/env bash
# The fused kernel on an H200 (run from the repository root, CuPy + PyTorch + nvcc +
# compute-sanitizer present, wino's own dependencies on PYTHONPATH):
#   1. build the CUDA kernels this needs into $WINO_BUILD (default /tmp/wino-fused-build),
#   2. check every grid fused kernel on CUDA against the float64 reference (PASS/FAIL lines),
#   3. time fused vs unfused vs cuDNN (fp16 and bf16, NHWC, U cached) on five public layers,
#   4. compute-sanitizer memcheck, racecheck and initcheck on a small fused plan.
# Each step prints its own result; the script's status is nonzero when any step failed.
set -uo pipefail
export WINO_BUILD="${WINO_BUILD:-/tmp/wino-fused-build}"
export PYTHONUNBUFFERED=1
status=0
python3 scripts/gpu_fused.py build || exit 1
python3 scripts/gpu_fused.py check || status=1
python3 scripts/gpu_fused.py time fp16 || status=1
python3 scripts/gpu_fused.py time bf16 || status=1
for tool in memcheck racecheck initcheck; do
  compute-sanitizer --tool "$tool" --error-exitcode 9 python3 scripts/gpu_fused.py sanitize \
    2>&1 | tail -n 4
  rc=${PIPESTATUS[0]}
  echo "compute-sanitizer $tool: exit $rc"
  [ "$rc" -eq 0 ] || status=1
done
exit "$status"
