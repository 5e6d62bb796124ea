#!/usr/bin/env bash
# The runtime's GPU checks (issue 10), from the repo root on an H200 with CuPy, PyTorch (with
# torchvision) and nvcc; doit, jsonschema and simpleeval on PYTHONPATH. Logs go to $OUT (default
# /tmp/out); each step has a time limit (seconds). STEPS picks the steps (default: all, in this
# order), so that a short device call runs a part:
#   build     python3 -m doit -n 16 compile:cuda (about 66 s; it writes each manifest's index)
#   index     the cuda cache's runtime index is current (else the first dispatch validates the
#             manifest) and trusted without hashing the manifest (its file state as published)
#   overhead  wino bench --overhead on cuda, fp16 1x64x8x8 (the issue's case): per-call rows
#             against torch, and the first call's split in two
#             new processes (as it is, and with the CUDA context made before wino is imported);
#             OVERHEAD_CASE, a MIOpen line, adds a second case
#   streams   tests/test_runtime_streams.py: the caller's stream, CUDA graphs, seen calls, the
#             plan's own workspaces (a destroyed caller's stream), wino.torch in fp16
#   cuda      tests/test_runtime_cuda.py: the numeric suite through the launch path
#   example   examples/torch_resnet.py: ResNet-50 and VGG-16 fp16 (EXAMPLE_ARGS, --batch 32)
set -u -o pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"  # $OUT, status, step LIMIT LOG COMMAND...
STEPS=${STEPS:-build index overhead streams cuda example}
wants() { [[ " $STEPS " == *" $1 "* ]]; }
if wants build; then
  step "${BUILD_LIMIT:-150}" build.log python3 -m doit -n "${JOBS:-16}" compile:cuda
fi
if wants index; then
  step 20 overhead.log python3 -c "
import wino.cache as c, wino.vocab as v
path, _ = c.manifest_state(v.Target.CUDA)
index, raw = c._read_index(path)
state = 'MISSING or STALE' if index is None else 'hashed' if raw is not None else 'by file state'
count = index.header['kernels'] if index else 0
print(f'runtime index of {path}: {state}, {count} kernels')
raise SystemExit(0 if index is not None and raw is None else 1)"
fi
if wants overhead; then
  step "${BENCH_LIMIT:-80}" overhead.log python3 -m wino.cli bench --overhead --target cuda
  if [[ -n "${OVERHEAD_CASE:-}" ]]; then
    step "${BENCH_LIMIT:-80}" overhead.log python3 -m wino.cli bench --overhead --target cuda \
      --miopen-cmd "$OVERHEAD_CASE"
  fi
fi
if wants streams; then
  step "${STREAMS_LIMIT:-140}" pytest.log python3 -m pytest -q -p no:cacheprovider \
    tests/test_runtime_streams.py
fi
if wants cuda; then
  step "${CUDA_LIMIT:-140}" pytest.log python3 -m pytest -q -p no:cacheprovider \
    tests/test_runtime_cuda.py
fi
if wants example; then
  # shellcheck disable=SC2086
  step "${EXAMPLE_LIMIT:-100}" example.log python3 examples/torch_resnet.py \
    ${EXAMPLE_ARGS:---batch 32} --json "$OUT/resnet.json"
fi
exit $status
