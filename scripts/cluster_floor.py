"""The data-movement floor of FUSED.md's 6-CTA cluster design for the wide layers, measured.

docs/FUSED.md "The wide layers" proposes a fused F4x4 kernel whose 6-CTA cluster splits the 36
bins by column: CTA j of a cluster owns bins (i, j), i = 0..5, for a block of T tiles x Kb output
channels, and loops over the input channels in chunks. Before anyone builds it, this script
measures what its data movement alone costs: a *skeleton* kernel that moves every byte the design
moves, through the same units, and computes nothing:

- per chunk, the chunk's input region (the block's input rows, halo included) by bulk copies
  multicast to all 6 CTAs of the cluster (each CTA issues a sixth of the bytes) and each CTA's 6
  bins of U by one bulk copy (U laid out [channel block][bin column][C][bin row][Kb]), into a
  ring of slots completed on mbarriers; one producer warp issues them, a slot refilled once all
  6 CTAs have arrived on its "empty" mbarrier (remote arrivals), so CTAs drift up to the ring's
  depth;
- every copied byte read back from shared memory once (16-byte loads: the input transform's
  reads, at their least), the CTA's 6 bins of V written and read back once (what the MMA reads);
- after the last chunk, the column fold (4 of 6 values a tile and channel, fp32) written to
  shared memory, read by the cluster's CTAs through distributed shared memory (each a sixth of
  the pairs, from all 6), and y written (16-byte stores).

So its time is a floor for a kernel of that design on that geometry built on this data path: the
real one adds the transforms' arithmetic, the MMAs, y's scattered stores and more than one read
of each region byte (a different data path could move the same bytes faster; none can move them
faster than the shared memory's peak). H100, stop 43: 0.26-0.52x cuDNN's time on every wide
layer and geometry (docs/BENCHMARKS.md).
x is read from a buffer already in the kernel's region layout ([tile block][channel][region
bytes]), as a tensor map or a layout pass would give it; the region bytes and what the input
and U reads saw are checked against numpy (a per-CTA xor of every 16-byte word).

    python3 scripts/cluster_floor.py [--geometry T:KB,...] [--mma-tflops F] [MIOPEN_LINE ...]

Needs an sm_90 GPU, nvcc, CuPy and PyTorch (cuDNN, timed in the same run on channels_last
tensors of the layer). Without lines: the public layers with C, K >= 256. The geometry and
byte-count functions run anywhere (tests/test_cluster_floor.py).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wino.bench.cases import problems_from  # noqa: E402
from wino.problem import Problem  # noqa: E402
from wino.vocab import DType  # noqa: E402

CLUSTER = 6  # CTAs a cluster: one per bin column of F4x4's 6 x 6 bins
BINS = CLUSTER  # bins a CTA owns (its column)
FOLD = 4  # values a (tile, channel) a CTA keeps after folding its column with A^T (F4x4: m = 4)
THREADS = 256
SHARED_LIMIT = 227 * 1024  # the H100's / H200's dynamic shared memory a block may opt into
STAGES = (4, 3, 2)  # ring slots tried, most first, ...
CHUNKS = (16, 8)  # ... each with these channel chunks, largest first, until the ring fits
MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
CASES = Path(__file__).resolve().parents[1] / "cases/public.txt"


@dataclass(frozen=True)
class Geometry:
    """One layer on one cluster geometry (every count an exact integer)."""

    problem: Problem
    tiles: int  # T: tiles a tile block (whole images or whole tile rows)
    kb: int  # output channels a cluster
    chunk: int  # input channels a chunk
    stages: int  # ring slots (chunks in flight)
    tile_blocks: int
    region: int  # bytes of one channel's input region, rounded up to 16
    images: int  # whole images a tile block (0: a block is tile rows of one image)

    @property
    def channel_blocks(self) -> int:
        return self.problem.K // self.kb

    @property
    def clusters(self) -> int:
        return self.tile_blocks * self.channel_blocks

    @property
    def ctas(self) -> int:
        return self.clusters * CLUSTER

    @property
    def chunks(self) -> int:
        return self.problem.C // self.chunk

    @property
    def u_bytes(self) -> int:
        """One bin's U for one chunk: chunk x kb, 16-bit."""
        return self.chunk * self.kb * 2

    @property
    def v_bytes(self) -> int:
        """The CTA's 6 bins of V for one chunk: 6 x T x chunk, 16-bit."""
        return BINS * self.tiles * self.chunk * 2

    @property
    def fold_bytes(self) -> int:
        """The CTA's folded column: 4 x T x kb fp32."""
        return FOLD * self.tiles * self.kb * 4

    @property
    def y_bytes(self) -> int:
        """The CTA's sixth of the block's y: T x 16 x kb 16-bit values / 6, rounded up to 16."""
        return _round16(-(-self.tiles * 16 * self.kb * 2 // CLUSTER))

    @property
    def part(self) -> int:
        """Bytes of a chunk's region each CTA multicasts (a sixth, rounded up to 16)."""
        return _round16(-(-self.chunk * self.region // CLUSTER))

    @property
    def shared(self) -> int:
        """Dynamic shared memory: the ring of chunks (region and U), V, two mbarriers a slot;
        the fold reuses it."""
        ring = self.stages * (self.chunk * self.region + BINS * self.u_bytes) + self.v_bytes
        return max(ring, self.fold_bytes) + 16 * self.stages

    @property
    def accumulators(self) -> int:
        """fp32 accumulators a thread of the real kernel would hold (6 bins x T x kb)."""
        return BINS * self.tiles * self.kb // THREADS


def _round16(n: int) -> int:
    return -(-n // 16) * 16


def geometry(problem: Problem, tiles: int, kb: int) -> Geometry:
    """The cluster geometry of ``problem`` with at most ``tiles`` tiles a block and ``kb``
    output channels a cluster: whole images a block where an image has at most ``tiles`` tiles,
    else whole tile rows of one image (the region: their input rows with the halo, clipped to
    the image). ValueError where kb does not divide K or no channel chunk fits the shared
    memory."""
    p = problem
    if p.K % kb:
        raise ValueError(f"kb {kb} does not divide K {p.K}")
    tile_rows, tile_cols = -(-p.H // 4), -(-p.W // 4)
    per_image = tile_rows * tile_cols
    if per_image <= tiles:
        images = tiles // per_image
        t = images * per_image
        blocks = -(-p.N // images)
        region = _round16(images * p.H * p.W * 2)
    else:
        rows = tiles // tile_cols
        if rows == 0:
            raise ValueError(f"{tiles} tiles hold no whole tile row of {tile_cols}")
        images, t = 0, rows * tile_cols
        blocks = p.N * -(-tile_rows // rows)
        region = _round16(min(4 * rows + 2, p.H) * p.W * 2)
    for stages in STAGES:
        for chunk in CHUNKS:
            g = Geometry(p, t, kb, chunk, stages, blocks, region, images)
            if p.C % chunk == 0 and g.shared <= SHARED_LIMIT:
                return g
    raise ValueError(f"{p.label()}: no chunk of {CHUNKS} fits {tiles} tiles x {kb} channels")


def shared_traffic(g: Geometry) -> int:
    """Bytes the skeleton moves through shared memory, all CTAs: the region and U written by the
    copies and read once, V written and read once, the fold written and read (through the
    cluster), all at least once as the design needs them."""
    per_chunk = 2 * (g.chunk * g.region + BINS * g.u_bytes + g.v_bytes)
    return g.ctas * (g.chunks * per_chunk + 2 * g.fold_bytes)


def l2_traffic(g: Geometry) -> int:
    """Bytes the clusters read from the L2 (each region once a cluster: the multicast; U once
    a CTA) and write (y)."""
    region = g.problem.C * g.region
    u = BINS * g.problem.C * g.u_bytes // g.chunk
    return g.clusters * region + g.ctas * u + g.ctas * g.y_bytes


def mma_floor_us(g: Geometry, tflops: float) -> float:
    """The design's multiply-adds (36 bins x T x K x C a tile block, padded tiles included) at
    ``tflops``."""
    flops = 2 * 36 * g.tiles * g.tile_blocks * g.problem.K * g.problem.C
    return flops / (tflops * 1e12) * 1e6


SOURCE = r"""
#include <cstdint>
#define CL 6
#define THREADS {threads}  // consumer threads; one more warp issues the copies
#define STAGES {stages}
#define CHUNK {chunk}
#define CHUNKS {chunks}
#define C {c}
#define KB {kb}
#define KBLOCKS {kblocks}
#define REGION {region}
#define PART {part}  // 16-byte multiple: each CTA multicasts this much of a chunk's region
#define UB {ub}
#define VB {vb}
#define FB {fb}
#define YB {yb}
#define PARTS {parts}  // 1 region, 2 U, 4 V, 8 fold and y: what this build moves
#define STAGE (CHUNK * REGION + CL * UB)  // one ring slot: the chunk's region, the CTA's U

__device__ __forceinline__ uint32_t smem(const void* p) {{
  return (uint32_t)__cvta_generic_to_shared(p);
}}
__device__ __forceinline__ uint32_t rank() {{
  uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r;
}}
__device__ __forceinline__ void cluster_sync() {{
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}}
__device__ __forceinline__ void consumers_sync() {{
  asm volatile("bar.sync 1, %0;" :: "n"(THREADS) : "memory");
}}
__device__ __forceinline__ void init(uint64_t* bar, uint32_t count) {{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem(bar)), "r"(count));
}}
__device__ __forceinline__ void expect(uint64_t* bar, uint32_t bytes) {{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem(bar)), "r"(bytes) : "memory");
}}
__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t parity) {{
  asm volatile("{{\n .reg .pred p;\n W_%=:\n"
               " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
               " @!p bra W_%=;\n}}" :: "r"(smem(bar)), "r"(parity) : "memory");
}}
// An arrival on the mbarrier at ``bar``'s offset in CTA ``peer`` of the cluster.
__device__ __forceinline__ void arrive_at(uint64_t* bar, uint32_t peer) {{
  uint32_t a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem(bar)), "r"(peer));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];"
               :: "r"(a) : "memory");
}}
__device__ __forceinline__ void copy_all(void* dst, const void* src, uint32_t n, uint64_t* bar) {{
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1], %2, [%3], %4;"
               :: "r"(smem(dst)), "l"(src), "r"(n), "r"(smem(bar)), "h"((uint16_t)0x3f) : "memory");
}}
__device__ __forceinline__ void copy_own(void* dst, const void* src, uint32_t n, uint64_t* bar) {{
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1], %2, [%3];"
               :: "r"(smem(dst)), "l"(src), "r"(n), "r"(smem(bar)) : "memory");
}}
__device__ __forceinline__ uint4 ld_peer(uint32_t addr, uint32_t peer) {{
  uint32_t a; uint4 v;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(addr), "r"(peer));
  asm("ld.shared::cluster.v4.u32 {{%0,%1,%2,%3}}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}}
__device__ __forceinline__ uint32_t fold(uint4 v) {{ return v.x ^ v.y ^ v.z ^ v.w; }}

// The xor of n 16-byte words, the consumer threads taking every THREADS-th, 4 loads in flight.
__device__ __forceinline__ uint32_t read_words(const uint4* p, int n) {{
  uint32_t a = 0, b = 0, c = 0, d = 0;
  int w = threadIdx.x;
  for (; w + 3 * THREADS < n; w += 4 * THREADS) {{
    uint4 x0 = p[w], x1 = p[w + THREADS], x2 = p[w + 2 * THREADS], x3 = p[w + 3 * THREADS];
    a ^= fold(x0); b ^= fold(x1); c ^= fold(x2); d ^= fold(x3);
  }}
  for (; w < n; w += THREADS) a ^= fold(p[w]);
  return a ^ b ^ c ^ d;
}}

// The producer warp's lane 0: chunk ``chunk`` into ring slot ``b``: this CTA's sixth of the
// region's bytes to all 6 CTAs, its own 6 bins of U ([kb][column][C][6 rows][KB]).
__device__ void issue(int chunk, int b, uint32_t me, int tb, int kb, const char* xr,
                      const char* u, char* ring, uint64_t* full) {{
  char* slot = ring + (size_t)b * STAGE;
  expect(&full[b], (PARTS & 1 ? CHUNK * REGION : 0) + (PARTS & 2 ? CL * UB : 0));
  const int from = me * PART, left = CHUNK * REGION - from;
  if (PARTS & 1 && left > 0)
    copy_all(slot + from, xr + ((size_t)tb * C + (size_t)chunk * CHUNK) * REGION + from,
             left < PART ? left : PART, &full[b]);
  if (PARTS & 2)
    copy_own(slot + CHUNK * REGION,
             u + (((size_t)kb * CL + me) * C + (size_t)chunk * CHUNK) * CL * KB * 2, CL * UB,
             &full[b]);
}}

extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS + 32, 1)
cluster_floor(const char* __restrict__ xr, const char* __restrict__ u, char* __restrict__ y,
              uint32_t* __restrict__ seen, uint32_t* __restrict__ kept) {{
  extern __shared__ __align__(128) char sm[];
  char* ring = sm;                                     // [STAGES][STAGE]
  char* vbuf = ring + STAGES * STAGE;                  // [VB]
  size_t top = (size_t)STAGES * STAGE + VB;
  if (top < FB) top = FB;
  uint64_t* full = (uint64_t*)(sm + top);              // [STAGES]: the slot's bytes landed
  uint64_t* empty = full + STAGES;                     // [STAGES]: all 6 CTAs done with it
  __shared__ uint32_t red[THREADS / 32];

  const uint32_t me = rank();
  const int cluster = blockIdx.x / CL;
  const int kb = cluster % KBLOCKS, tb = cluster / KBLOCKS;
  if (threadIdx.x == 0) {{
    for (int s = 0; s < STAGES; ++s) {{ init(&full[s], 1); init(&empty[s], CL); }}
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }}
  cluster_sync();  // every CTA's barriers exist before any copy or arrival lands on them
  uint32_t in = 0, other = 0;
  if (threadIdx.x >= THREADS) {{  // the producer warp
    if (threadIdx.x == THREADS)
      for (int c = 0; c < CHUNKS; ++c) {{
        const int b = c % STAGES;
        if (c >= STAGES) wait_phase(&empty[b], (c / STAGES - 1) & 1);
        issue(c, b, me, tb, kb, xr, u, ring, full);
      }}
  }} else {{
    for (int c = 0; c < CHUNKS; ++c) {{
      const int b = c % STAGES;
      const char* slot = ring + (size_t)b * STAGE;
      wait_phase(&full[b], (c / STAGES) & 1);
      if (PARTS & 1) in ^= read_words((const uint4*)slot, CHUNK * REGION / 16);
      if (PARTS & 2) in ^= read_words((const uint4*)(slot + CHUNK * REGION), CL * UB / 16);
      if (PARTS & 4) {{
        uint4* v = (uint4*)vbuf;
        for (int w = threadIdx.x; w < VB / 16; w += THREADS)
          v[w] = make_uint4(in ^ w, other, c, w);
        consumers_sync();
        other ^= read_words(v, VB / 16);
      }}
      consumers_sync();  // this CTA is done with slot b (and V)
      if (threadIdx.x < CL) arrive_at(&empty[b], threadIdx.x);
    }}
  }}
  __syncwarp();  // the producer warp converges before the aligned cluster barrier
  cluster_sync();  // every copy landed and every CTA left its ring: the fold may overwrite it
  uint4* f = (uint4*)sm;
  const int share = FB / 16 / CL;  // 16-byte words a CTA sums from each peer
  if (threadIdx.x < THREADS && PARTS & 8)
    for (int w = threadIdx.x; w < FB / 16; w += THREADS) f[w] = make_uint4(other ^ w, in, w, me);
  cluster_sync();  // every CTA's fold is written
  if (threadIdx.x < THREADS && PARTS & 8) {{
    for (int w = threadIdx.x; w < share; w += THREADS) {{
      uint4 v[CL];
#pragma unroll
      for (int p = 0; p < CL; ++p) v[p] = ld_peer(smem(&f[me * share + w]), p);
#pragma unroll
      for (int p = 0; p < CL; ++p) other ^= fold(v[p]);
    }}
    uint4* out = (uint4*)(y + (size_t)blockIdx.x * YB);
    for (int w = threadIdx.x; w < YB / 16; w += THREADS) out[w] = make_uint4(other, w, in, me);
  }}
  cluster_sync();  // no CTA leaves while a peer may still read its fold
  if (threadIdx.x >= THREADS) return;
  for (int o = 16; o; o >>= 1) in ^= __shfl_xor_sync(0xffffffffu, in, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = in;
  consumers_sync();
  if (threadIdx.x == 0) {{
    uint32_t all = 0;
    for (int i = 0; i < THREADS / 32; ++i) all ^= red[i];
    seen[blockIdx.x] = all;
    kept[blockIdx.x] = other;
  }}
}}
"""


#: What a skeleton build moves (PARTS bits), and the ablations that each leave one part out.
REGION, U, V, FOLD_Y = 1, 2, 4, 8
ALL = REGION | U | V | FOLD_Y
ABLATIONS = {
    "no region": ALL & ~REGION,
    "no U": ALL & ~U,
    "no V": ALL & ~V,
    "no fold, y": ALL & ~FOLD_Y,
}


def source(g: Geometry, parts: int = ALL) -> str:
    return SOURCE.format(
        parts=parts,
        threads=THREADS,
        stages=g.stages,
        part=g.part,
        chunk=g.chunk,
        chunks=g.chunks,
        c=g.problem.C,
        kb=g.kb,
        kblocks=g.channel_blocks,
        region=g.region,
        ub=g.u_bytes,
        vb=g.v_bytes,
        fb=g.fold_bytes,
        yb=g.y_bytes,
    )


def expected_seen(g: Geometry, xr, u, parts: int = ALL):
    """Per CTA, the xor of every 32-bit word of its tile block's regions and its 6 bins of U
    (those of the two that ``parts`` copies): what its reads of the copied bytes must give
    (numpy arrays of uint32)."""
    import numpy as np

    xr = xr if parts & REGION else np.zeros_like(xr)
    u = u if parts & U else np.zeros_like(u)

    region = np.bitwise_xor.reduce(xr.reshape(g.tile_blocks, -1), axis=1)
    column = np.bitwise_xor.reduce(u.reshape(g.channel_blocks, CLUSTER, -1), axis=2)  # [kb][j]
    block = np.arange(g.ctas)
    cluster, me = block // CLUSTER, block % CLUSTER
    return region[cluster // g.channel_blocks] ^ column[cluster % g.channel_blocks, me]


def _build(g: Geometry, workdir: Path, parts: int):
    import cupy

    cu = (
        workdir / f"floor_{g.tiles}_{g.kb}_{g.chunk}_{g.stages}_{g.problem.C}_{g.region}_{parts}.cu"
    )
    cu.write_text(source(g, parts))
    cubin = cu.with_suffix(".cubin")
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-o", str(cubin), str(cu)], check=True)
    module = cupy.cuda.function.Module()
    module.load(cubin.read_bytes())
    kernel = module.get_function("cluster_floor")
    cupy.cuda.driver.funcSetAttribute(kernel.ptr, MAX_DYNAMIC_SHARED, g.shared)
    return module, kernel


def _operands(g: Geometry, sets: int):
    import cupy

    xr_words = g.tile_blocks * g.problem.C * g.region // 4
    u_words = g.channel_blocks * 36 * g.problem.C * g.kb * 2 // 4
    rng = cupy.random.default_rng(7)

    def words(n: int):
        return (rng.random(n) * 2**32).astype(cupy.uint32)

    xrs = [words(xr_words) for _ in range(sets)]
    u = words(u_words)
    return xrs, u


def _sets(nbytes: int) -> int:
    """Operand sets a timing rotates through so that they fill twice the L2 (50 MB)."""
    return max(1, math.ceil(2 * 50e6 / nbytes))


def time_floor(g: Geometry, workdir: Path, parts: int = ALL) -> tuple[float, bool]:
    """(us per launch, every CTA's reads saw exactly the bytes copied to it)."""
    import cupy

    from wino.bench.timing import CupyGraphTimer, Settings

    _module, kernel = _build(g, workdir, parts)
    sets = _sets(g.tile_blocks * g.problem.C * g.region)
    xrs, u = _operands(g, sets)
    y = cupy.empty(g.ctas * g.y_bytes // 4, dtype=cupy.uint32)
    seen = cupy.zeros(g.ctas, dtype=cupy.uint32)
    kept = cupy.zeros(g.ctas, dtype=cupy.uint32)

    def launch(s: int) -> None:
        kernel((g.ctas,), (THREADS + 32,), (xrs[s % sets], u, y, seen, kept), shared_mem=g.shared)

    launch(0)
    cupy.cuda.Device().synchronize()
    ok = bool((seen.get() == expected_seen(g, xrs[0].get(), u.get(), parts)).all())
    return CupyGraphTimer(Settings(3, 20)).time_us(launch, sets), ok


def cudnn_us(problem: Problem) -> float:
    """cuDNN's fp16 time per call on channels_last tensors of ``problem``, timed as the other
    GPU scripts time it (``gpu_chain_time.graph_us``: one graph of a call per operand set)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_chain_time import graph_us

    p = problem
    x_bytes = p.N * p.C * p.H * p.W * 2
    xs = [
        torch.randn(p.N, p.C, p.H, p.W, device="cuda", dtype=torch.float16).to(
            memory_format=torch.channels_last
        )
        for _ in range(_sets(x_bytes))
    ]
    w = torch.randn(p.K, p.C, 3, 3, device="cuda", dtype=torch.float16).to(
        memory_format=torch.channels_last
    )
    torch.backends.cudnn.benchmark = True
    conv = torch.nn.functional.conv2d
    return graph_us([lambda x=x: conv(x, w, padding=1) for x in xs])


def wide_layers() -> list[Problem]:
    problems, _ = problems_from(files=[CASES])
    return [
        p for p in problems if p.C >= 256 and p.K >= 256 and p.R == p.S == 3 and p.stride_h == 1
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--geometry", default="56:128,64:64", help="T:KB pairs (tiles, channels)")
    parser.add_argument(
        "--mma-tflops", type=float, default=0.0, help="tensor rate for the MMA floor"
    )
    parser.add_argument(
        "--ablate", action="store_true", help="each layer's first geometry again without each part"
    )
    parser.add_argument("lines", nargs="*", help="MIOpenDriver lines (default: the wide layers)")
    args = parser.parse_args(argv)
    problems = problems_from(commands=args.lines)[0] if args.lines else wide_layers()
    problems = [replace(p, dtype=DType.FP16) for p in problems]
    shapes = [tuple(int(v) for v in pair.split(":")) for pair in args.geometry.split(",")]
    print(
        "| layer | T | Kb | chunk x slots | CTAs | acc/thread | shared MB | L2 MB | skeleton us "
        "| shared TB/s | MMA floor us | cuDNN fp16 us | cuDNN / skeleton | reads checked |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for p in problems:
            cudnn = cudnn_us(p)
            for tiles, kb in shapes:
                try:
                    g = geometry(p, tiles, kb)
                except ValueError as err:
                    print(f"| {p.label()} | {tiles} | {kb} | refused: {err} |")
                    continue
                us, ok = time_floor(g, Path(tmp))
                mma = f"{mma_floor_us(g, args.mma_tflops):.1f}" if args.mma_tflops else "-"
                smem = shared_traffic(g)
                print(
                    f"| {p.label()} | {g.tiles} | {g.kb} | {g.chunk} x {g.stages} | {g.ctas} "
                    f"| {g.accumulators} "
                    f"| {smem / 1e6:.0f} | {l2_traffic(g) / 1e6:.0f} | {us:.1f} "
                    f"| {smem / us / 1e6:.1f} | {mma} | {cudnn:.1f} | {cudnn / us:.2f} "
                    f"| {'yes' if ok else 'NO'} |",
                    flush=True,
                )
                if args.ablate and (tiles, kb) == shapes[0]:
                    for name, parts in ABLATIONS.items():
                        less, ok = time_floor(g, Path(tmp), parts)
                        print(
                            f"| {p.label()} {name} | {g.tiles} | {g.kb} | | | | | | {less:.1f} "
                            f"(-{us - less:.1f}) | | | | | {'yes' if ok else 'NO'} |",
                            flush=True,
                        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
