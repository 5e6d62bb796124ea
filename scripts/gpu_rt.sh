#!/usr/bin/env bash
# The runtime's GPU checks (issue 10), from the repo root on an H200 with CuPy, PyTorch (with
# torchvision) and nvcc; doit and jsonschema on PYTHONPATH. Logs go to $OUT (default /tmp/out).
#   1. GPU tests: the caller's stream, CUDA graphs, wino.torch in fp16 (tests/test_runtime_streams.py)
#      and the existing numeric suite (tests/test_runtime_cuda.py)
#   2. wino bench --overhead (fp16 1x64x8x8) on cuda
#   3. examples/torch_resnet.py: ResNet-50 and VGG-16 fp16 (EXAMPLE_ARGS, default batch 32)
set -u -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
python3 -m pytest -q -p no:cacheprovider tests/test_runtime_streams.py tests/test_runtime_cuda.py \
  2>&1 | tee "$OUT/pytest.log" || status=1
python3 -m wino.cli bench --overhead --target cuda 2>&1 | tee "$OUT/overhead.log" || status=1
python3 -m wino.cli bench --overhead --target cuda --miopen-cmd \
  "convfp16 -n 32 -c 256 -H 14 -W 14 -k 256 -y 3 -x 3 -p 1 -q 1" 2>&1 | tee -a "$OUT/overhead.log" || status=1
python3 examples/torch_resnet.py ${EXAMPLE_ARGS:---batch 32} --json "$OUT/resnet.json" \
  2>&1 | tee "$OUT/example.log" || status=1
exit $status
