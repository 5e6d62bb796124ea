#!/usr/bin/env bash
# The runtime's GPU checks (issue 10), from the repo root on an H200 with CuPy, PyTorch (with
# torchvision) and nvcc, after `python3 -m doit -n 16 compile:cuda` (which also writes each
# manifest's runtime index); doit and jsonschema on PYTHONPATH. Logs go to $OUT (default
# /tmp/out); each step has a time limit (seconds): 560 s in all, so that the cuda build (about
# 25 s) and this script fit one 600 s call.
#   0. the cuda cache's runtime index is current (else the first dispatch validates the manifest)
#   1. wino bench --overhead on cuda: fp16 1x64x8x8 (the case) and 32x256x14x14; each
#      prints the per-call rows against torch and the first call's split in two new processes
#      (as it is, and with the CUDA context made before wino is imported)
#   2. GPU tests: the caller's stream, CUDA graphs, seen calls, wino.torch in fp16
#      (tests/test_runtime_streams.py)
#   3. the numeric suite on the GPU through the launch path (tests/test_runtime_cuda.py)
#   4. examples/torch_resnet.py: ResNet-50 and VGG-16 fp16 (EXAMPLE_ARGS, default --batch 32)
set -u -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
step() {  # step LIMIT LOG COMMAND...
  local limit=$1 log=$2
  shift 2
  echo "== $*" | tee -a "$OUT/$log"
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/$log" || status=1
}
step 20 overhead.log python3 -c "
import json, wino.cache as c, wino.vocab as v
path, _ = c.manifest_state(v.Target.CUDA)
at = path.parent / c.INDEX
index = json.loads(at.read_text()) if at.exists() else {}
fresh = index.get('manifest_sha256') == c._sha256(path.read_bytes())
state = 'current' if fresh else 'STALE' if index else 'MISSING'
print(f'runtime index of {path}: {state}, {len(index.get(\"kernels\", ()))} kernels')
raise SystemExit(0 if fresh else 1)"
step "${BENCH_LIMIT:-80}" overhead.log python3 -m wino.cli bench --overhead --target cuda
step "${BENCH_LIMIT:-80}" overhead.log python3 -m wino.cli bench --overhead --target cuda \
  --miopen-cmd "convfp16 -n 32 -c 256 -H 14 -W 14 -k 256 -y 3 -x 3 -p 1 -q 1"
step "${STREAMS_LIMIT:-140}" pytest.log python3 -m pytest -q -p no:cacheprovider tests/test_runtime_streams.py
step "${CUDA_LIMIT:-140}" pytest.log python3 -m pytest -q -p no:cacheprovider tests/test_runtime_cuda.py
# shellcheck disable=SC2086
step "${EXAMPLE_LIMIT:-100}" example.log python3 examples/torch_resnet.py ${EXAMPLE_ARGS:---batch 32} \
  --json "$OUT/resnet.json"
exit $status
