"""The float64 reference convolution (NHWC input, KRSC filter, NHWK output) and the error
measure the tests and `wino run` use."""

from __future__ import annotations

import numpy as np


def conv2d_reference(
    x: np.ndarray,
    w: np.ndarray,
    pad: tuple[int, int] = (0, 0),
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
) -> np.ndarray:
    """Direct stride-1 convolution in float64:
    x [N][H][W][C], w [K][R][S][C/G] -> [N][Ho][Wo][K]."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    n, h, wd, c = x.shape
    k, r, s, cg = w.shape
    (ph, pw), (dh, dw) = pad, dilation
    ho, wo = h + 2 * ph - dh * (r - 1), wd + 2 * pw - dw * (s - 1)
    if c != cg * groups or k % groups:
        raise ValueError(f"reference: C={c}, K={k} do not fit groups={groups} with C/G={cg}")
    xp = np.zeros((n, h + 2 * ph, wd + 2 * pw, c))
    xp[:, ph : ph + h, pw : pw + wd, :] = x
    kg = k // groups
    y = np.zeros((n, ho, wo, k))
    for g in range(groups):
        xs = xp[..., g * cg : (g + 1) * cg]
        ws = w[g * kg : (g + 1) * kg]
        for i in range(r):
            for j in range(s):
                patch = xs[:, i * dh : i * dh + ho, j * dw : j * dw + wo, :]
                y[..., g * kg : (g + 1) * kg] += patch @ ws[:, i, j, :].T
    return y


def epilogue_reference(y: np.ndarray, bias=None, relu: bool = False) -> np.ndarray:
    """The epilogue in float64 on a reference output [N][Ho][Wo][K]: y + bias[k], then
    max(., 0) with NaN kept (as the kernels and torch.relu do)."""
    y = np.asarray(y, dtype=np.float64)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return np.where(y < 0, 0.0, y) if relu else y


def relative_error(out, ref: np.ndarray) -> float:
    """max|out - ref| / max|ref| (inf when out has a NaN or ref is all zeros with out not)."""
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(np.abs(out - ref))) if ref.size else 0.0
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
