#!/usr/bin/env bash
# A/B of two trees on the H200, one device call: this tree ("new") against BASE ("base"), a
# copy of another commit made beside it (`git archive REV | tar -x -C .dev/base`; carry .dev
# and .whl). Builds both cuda caches (doit -n 16 compile:cuda, WINO_BUILD=/tmp/wfb_{new,base}),
# then per dtype `wino bench --engines fused,unfused,cudnn --verify --tile F4x4` on CASES (a
# file of MIOpenDriver lines; gpu_engines.sh writes the public C, K >= 64 layers), new then
# base, fp16 twice; fp16 per stage (--timing staged); fp32 unfused; then tests/test_fused_cuda.py
# on the new tree. Everything lands in $OUT/ab.tgz (one file: the device returns few files).
# Needs doit, jsonschema, simpleeval and nvmath-python importable (wheels in .whl, installed
# to /tmp/site here).
set -u
BASE=${BASE:-.dev/base}
CASES=${CASES:-.dev/cases.txt}
ROOT=$PWD
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
tree() { [ "$1" = base ] && echo "$ROOT/$BASE" || echo "$ROOT"; }
for v in new base; do
  (cd "$(tree $v)" && PYTHONPATH=$PWD:/tmp/site WINO_BUILD=/tmp/wfb_$v timeout 200 python3 -m doit -n 16 compile:cuda > "$OUT/build_$v.log" 2>&1; echo "build $v rc $?")
done
bench() {  # bench VARIANT TAG ARGS...
  local v=$1 tag=$2; shift 2
  (cd "$(tree $v)" && PYTHONPATH=$PWD:/tmp/site WINO_BUILD=/tmp/wfb_$v timeout 150 python3 -m wino.cli bench --target cuda \
     --miopen-file "$ROOT/$CASES" --results "$OUT/${tag}_$v.csv" "$@" > "$OUT/${tag}_$v.log" 2>&1; echo "bench $v $tag rc $?")
}
for rep in 1 2; do
  for v in new base; do bench $v fp16_r$rep --dtype fp16 --tile F4x4 --engines fused,unfused,cudnn --verify; done
done
for v in new base; do bench $v bf16 --dtype bf16 --tile F4x4 --engines fused,unfused,cudnn --verify; done
for v in new base; do bench $v staged --dtype fp16 --tile F4x4 --timing staged --verify; done
for v in new base; do bench $v fp32 --dtype fp32 --tile F4x4 --engines unfused,cudnn --verify; done
(PYTHONPATH=$ROOT:/tmp/site WINO_BUILD=/tmp/wfb_new timeout 200 python3 -m pytest -q -x tests/test_fused_cuda.py > "$OUT/test_fused_cuda.log" 2>&1; echo "fused tests rc $?"; tail -1 "$OUT/test_fused_cuda.log")
(cd "$OUT" && tar czf /tmp/ab.tgz --exclude=ab.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/ab.tgz "$OUT/ab.tgz")
