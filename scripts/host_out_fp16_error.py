"""What an F4x4 output transform in fp16 arithmetic would cost in accuracy (host, numpy).

The held kernel's output transform (y = A^T M A of each tile and output channel, M read as fp16
from shared memory) runs in fp32: 38% of the kernel's instructions on VGG-16 conv1_2 (H100, stop
35, docs/FUSED.md "Where the time goes"). On fp16 pairs (HADD2 / HFMA2, two channels an
operation, as the input transform's xbits 16) it would take about half. This emulates the held
kernel's numerics on random tiles (x and w in fp16, scaled per tile / filter into (0.5, 1] by a
power of two, V and U rounded to fp16, M accumulated in fp32 and stored in fp16) and compares
the error of y against a float64 direct correlation with the transform in fp32 and in fp16
arithmetic (M pre-scaled by 2^-9 so that no partial sum can leave fp16's range, every sum and
product rounded in the kernel's order). The error is max|y - ref| / max|ref| after y's fp16
rounding, the measure the bounds use (fp16 io 3e-2, bf16 2e-2; wino.runtime.verify).

    python3 scripts/host_out_fp16_error.py [--tiles 4096] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wino.winograd import matrices  # noqa: E402

AT, G, BT = (np.array([[float(v) for v in row] for row in m]) for m in matrices(4))
SHIFT = 9  # M * 2^-9: |A^T M A| <= 19^2 |M| stays under 65504 for |M| up to 2^9 * 181


def _pow2_scale(maxabs: np.ndarray) -> np.ndarray:
    """The power of two s with maxabs * s in (0.5, 1]."""
    return 2.0 ** -np.ceil(np.log2(maxabs))


def _fp16(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float16)


def _stage_fp16(z: np.ndarray) -> np.ndarray:
    """A^T z over axis -2 (6 -> 4) in fp16, the kernel's shared partial sums and order."""
    z0, z1, z2, z3, z4, z5 = (z[..., i, :] for i in range(6))
    s12, d12, s34, d34 = _fp16(z1 + z2), _fp16(z1 - z2), _fp16(z3 + z4), _fp16(z3 - z4)
    rows = (
        _fp16(_fp16(z0 + s12) + s34),
        _fp16(d12 + _fp16(np.float16(2) * d34)),
        _fp16(s12 + _fp16(np.float16(4) * s34)),
        _fp16(_fp16(d12 + _fp16(np.float16(8) * d34)) + z5),
    )
    return np.stack(rows, axis=-2)


def errors(rng, channels: int, outputs: int, tiles: int, dist: str) -> tuple[float, float]:
    """(error with the output transform in fp32, error with it in fp16 arithmetic)."""
    shape = (tiles, channels, 6, 6)
    d = rng.standard_normal(shape) if dist == "normal" else rng.uniform(-1, 1, shape)
    g = rng.standard_normal((outputs, channels, 3, 3))
    d, g = _fp16(d).astype(np.float64), _fp16(g).astype(np.float64)
    ts = _pow2_scale(np.abs(d).reshape(tiles, -1).max(1))[:, None, None, None]
    fs = _pow2_scale(np.abs(g).reshape(outputs, -1).max(1))[:, None, None, None]
    V = _fp16(np.einsum("ai,tcij,bj->tcab", BT, d * ts, BT)).astype(np.float32)
    U = _fp16(np.einsum("ai,kcij,bj->kcab", G, g * fs, G)).astype(np.float32)
    M = _fp16(np.einsum("tcab,kcab->tkab", V, U))
    ref = np.stack(
        [
            np.einsum("tcij,kcij->tk", d[:, :, r : r + 3, s : s + 3], g)
            for r in range(4)
            for s in range(4)
        ],
        axis=-1,
    ).reshape(tiles, outputs, 4, 4)
    unscale = 1.0 / (ts.reshape(tiles, 1, 1, 1) * fs.reshape(1, outputs, 1, 1))
    y32 = np.einsum("ia,tkab,jb->tkij", AT, M.astype(np.float32), AT).astype(np.float32)
    m = _fp16(M * np.float16(2.0**-SHIFT))
    t = _stage_fp16(m)
    y16 = np.swapaxes(_stage_fp16(np.swapaxes(t, -1, -2)), -1, -2).astype(np.float64)
    scale = np.abs(ref).max()

    def error(y) -> float:
        return float(np.abs(_fp16(y).astype(np.float64) - ref).max() / scale)

    return error(y32 * unscale), error(y16 * 2.0**SHIFT * unscale)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for dist in ("normal", "uniform"):
        for channels in (16, 64):
            e32, e16 = errors(rng, channels, 64, args.tiles, dist)
            print(
                f"{dist:8} C={channels:3d} K=64: output transform in fp32 {e32:.2e}, "
                f"in fp16 arithmetic {e16:.2e} ({e16 / e32:.2f}x)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
