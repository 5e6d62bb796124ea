#!/usr/bin/env bash
# The leaner unfused pipeline on an H200 (run from the repository root, CuPy + PyTorch + nvcc +
# ncu present, wino's own dependencies on PYTHONPATH); logs into $LOGS (default /tmp/wino-lean):
#   1. build the CUDA kernels scripts/gpu_lean.py needs into $WINO_BUILD (unless a cache is there),
#   2. table.txt: per public layer, fp16 and bf16, each stage's time, bytes, GB/s and % of the
#      copy bandwidth, M in fp32 (old) against the default pick, chain vs cuDNN, geomeans,
#   3. ncu.txt: Nsight Compute on K2 (fp16 N64 C64 56x56: blocks 256 and 64, held and streamed;
#      --clock-control none),
#   4. stages.txt: every K2 and K4 candidate of every public layer timed alone (fp16).
set -uo pipefail
export WINO_BUILD="${WINO_BUILD:-/tmp/wino-lean-build}" PYTHONUNBUFFERED=1
LOGS="${LOGS:-/tmp/wino-lean}"
mkdir -p "$LOGS"
status=0
if ! ls "$WINO_BUILD"/cache/v*/cuda/*/manifest.json >/dev/null 2>&1; then
  timeout 120 python3 scripts/gpu_lean.py build 2>&1 | tail -n 3 || exit 1
fi
timeout 150 python3 scripts/gpu_lean.py table 2>&1 | tee "$LOGS/table.txt" || status=1
K2="regex:k2_f4x4_ifp16_xfp16_v4_b(64|256)_reg_pfused(_s1)?$"
for case in "conv -n 64 -c 64 -H 56 -W 56 -k 64 -p 1 -q 1"; do
  WINO_LEAN_DTYPES=fp16 timeout 90 ncu --clock-control none -k "$K2" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section WarpStateStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum \
    python3 scripts/gpu_lean.py once "$case" >>"$LOGS/ncu.txt" 2>&1 || status=1
done
grep -v "^ran " "$LOGS/ncu.txt" | grep -E "k2_|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|dram__bytes|sectors|requests|Theoretical Occ|Block Limit Reg|Stall" | head -n 80
WINO_LEAN_DTYPES=fp16 timeout 100 python3 scripts/gpu_lean.py stages 2>&1 | tee "$LOGS/stages.txt" | tail -n 30 || status=1
exit "$status"
