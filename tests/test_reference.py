"""The float64 reference convolution against a naive loop, and the error measure."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from wino.runtime import conv2d_reference, relative_error


def naive(x, w, pad, dil, groups):
    """y[n][oh][ow][k] = sum over r, s, c of x[n][oh + r*dh - ph][ow + s*dw - pw][g*Cg + c] *
    w[k][r][s][c], g = k // (K/G), zero outside the image."""
    n_, h, wd, c = x.shape
    k_, r_, s_, cg = w.shape
    (ph, pw), (dh, dw) = pad, dil
    ho, wo = h + 2 * ph - dh * (r_ - 1), wd + 2 * pw - dw * (s_ - 1)
    kg = k_ // groups
    y = np.zeros((n_, ho, wo, k_))
    for n, oh, ow, k in itertools.product(range(n_), range(ho), range(wo), range(k_)):
        g, total = k // kg, 0.0
        for r, s, ci in itertools.product(range(r_), range(s_), range(cg)):
            ih, iw = oh + r * dh - ph, ow + s * dw - pw
            if 0 <= ih < h and 0 <= iw < wd:
                total += float(x[n, ih, iw, g * cg + ci]) * float(w[k, r, s, ci])
        y[n, oh, ow, k] = total
    return y


CASES = [
    # N, H, W, C, K, R, S, pad, dilation, groups
    (1, 5, 5, 2, 3, 3, 3, (1, 1), (1, 1), 1),
    (2, 6, 4, 3, 2, 3, 3, (0, 0), (1, 1), 1),
    (1, 7, 8, 4, 6, 3, 3, (2, 1), (1, 1), 2),
    (1, 9, 7, 2, 2, 3, 3, (2, 3), (2, 3), 1),
    (2, 8, 9, 6, 6, 3, 3, (1, 2), (3, 1), 3),
    (1, 4, 4, 4, 4, 3, 3, (1, 1), (1, 1), 4),  # depthwise
    (1, 6, 5, 3, 2, 1, 1, (0, 0), (1, 1), 1),  # 1x1
    (1, 7, 7, 2, 3, 5, 5, (2, 2), (1, 1), 1),  # 5x5
    (1, 6, 8, 2, 2, 2, 3, (0, 1), (2, 1), 1),  # 2x3, dilated
    (1, 1, 1, 3, 2, 3, 3, (1, 1), (1, 1), 1),  # one pixel
]


@pytest.mark.parametrize("n, h, w, c, k, r, s, pad, dil, groups", CASES)
def test_reference_matches_the_naive_loop(n, h, w, c, k, r, s, pad, dil, groups):
    rng = np.random.default_rng(n * 1000 + h * 100 + w * 10 + c)
    x = rng.standard_normal((n, h, w, c))
    weights = rng.standard_normal((k, r, s, c // groups))
    got = conv2d_reference(x, weights, pad, dil, groups)
    want = naive(x, weights, pad, dil, groups)
    assert got.dtype == np.float64 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, ml_dtypes.bfloat16])
def test_reference_widens_16_bit_inputs_exactly(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 5, 6, 4)).astype(dtype)
    w = rng.standard_normal((3, 3, 3, 4)).astype(dtype)
    got = conv2d_reference(x, w, (1, 1))
    want = conv2d_reference(x.astype(np.float64), w.astype(np.float64), (1, 1))
    assert np.array_equal(got, want)


def test_reference_rejects_groups_that_do_not_fit():
    x = np.zeros((1, 4, 4, 6))
    with pytest.raises(ValueError, match="groups=4"):
        conv2d_reference(x, np.zeros((4, 3, 3, 2)), (1, 1), groups=4)  # 2 * 4 != 6
    with pytest.raises(ValueError, match="groups=2"):
        conv2d_reference(x, np.zeros((3, 3, 3, 3)), (1, 1), groups=2)  # K = 3


def test_relative_error_measure():
    ref = np.array([[1.0, -4.0], [2.0, 0.5]])
    assert relative_error(ref, ref) == 0.0
    assert relative_error(ref + np.array([[0.0, 0.1], [0.0, 0.0]]), ref) == pytest.approx(0.025)
    assert relative_error(ref.astype(np.float16), ref) == 0.0
    assert relative_error(np.full_like(ref, np.nan), ref) == float("inf")
    out = ref.copy()
    out[0, 0] = np.inf
    assert relative_error(out, ref) == float("inf")
    assert relative_error(np.zeros(3), np.zeros(3)) == 0.0
    assert relative_error(np.ones(3), np.zeros(3)) == float("inf")
    assert relative_error(np.zeros(0), np.zeros(0)) == 0.0
