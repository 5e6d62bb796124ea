"""Winograd matrices: exact in rationals, in 1-D and in 2-D (rows F(mh), columns F(mw))."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from wino.vocab import TILES
from wino.winograd import POINTS, growth, matmul, matrices, transpose

TRIALS = 6


def _rand(rng: random.Random) -> Fraction:
    """A random rational: integers and fractions with awkward denominators, signs mixed."""
    if rng.random() < 0.5:
        return Fraction(rng.randint(-99, 99))
    return Fraction(rng.randint(-999, 999), rng.choice([1, 2, 3, 7, 11, 64, 97]))


def _mat(rng: random.Random, rows: int, cols: int):
    return tuple(tuple(_rand(rng) for _ in range(cols)) for _ in range(rows))


def _col(vec):
    return tuple((v,) for v in vec)


def _winograd_1d(m: int, g, d):
    at, gm, bt = matrices(m)
    u = matmul(gm, _col(g))
    v = matmul(bt, _col(d))
    return [row[0] for row in matmul(at, tuple((a[0] * b[0],) for a, b in zip(u, v, strict=True)))]


def _direct_1d(m: int, g, d):
    return [sum(g[k] * d[i + k] for k in range(3)) for i in range(m)]


def _winograd_2d(mh: int, mw: int, g, d):
    at_h, g_h, bt_h = matrices(mh)
    at_w, g_w, bt_w = matrices(mw)
    u = matmul(matmul(g_h, g), transpose(g_w))
    v = matmul(matmul(bt_h, d), transpose(bt_w))
    hadamard = tuple(
        tuple(a * b for a, b in zip(ru, rv, strict=True)) for ru, rv in zip(u, v, strict=True)
    )
    return matmul(matmul(at_h, hadamard), transpose(at_w))


def _direct_2d(mh: int, mw: int, g, d):
    return tuple(
        tuple(sum(g[r][s] * d[i + r][j + s] for r in range(3) for s in range(3)) for j in range(mw))
        for i in range(mh)
    )


@pytest.mark.parametrize("m", sorted({t.mh for t in TILES} | {t.mw for t in TILES}))
def test_shapes_and_points(m):
    at, g, bt = matrices(m)
    n = m + 2
    assert len(at) == m and all(len(r) == n for r in at)
    assert len(g) == n and all(len(r) == 3 for r in g)
    assert len(bt) == n and all(len(r) == n for r in bt)
    assert len(POINTS[m]) == n - 1 and len(set(POINTS[m])) == n - 1
    assert all(isinstance(x, Fraction) for mat in (at, g, bt) for row in mat for x in row)


@pytest.mark.parametrize("tile", TILES, ids=str)
def test_1d_matches_direct_correlation(tile):
    rng = random.Random(f"1d-{tile}")
    for m in (tile.mh, tile.mw):
        for _ in range(TRIALS):
            g = [_rand(rng) for _ in range(3)]
            d = [_rand(rng) for _ in range(m + 2)]
            assert _winograd_1d(m, g, d) == _direct_1d(m, g, d)
        for k in range(3):  # unit filters pick out shifted inputs exactly
            e = [Fraction(int(i == k)) for i in range(3)]
            d = [Fraction(i + 1) for i in range(m + 2)]
            assert _winograd_1d(m, e, d) == d[k : k + m]


@pytest.mark.parametrize("tile", TILES, ids=str)
def test_2d_matches_direct_correlation(tile):
    rng = random.Random(f"2d-{tile}")
    for _ in range(TRIALS):
        g = _mat(rng, 3, 3)
        d = _mat(rng, tile.ah, tile.aw)
        assert _winograd_2d(tile.mh, tile.mw, g, d) == _direct_2d(tile.mh, tile.mw, g, d)


def test_a_wrong_matrix_is_caught():
    """The checks above can fail: one changed entry of Bt breaks the identity."""
    at, g, bt = matrices(4)
    broken = (bt[0][:2] + (bt[0][2] + 1,) + bt[0][3:],) + bt[1:]
    rng = random.Random(5)
    gv = [_rand(rng) for _ in range(3)]
    dv = [_rand(rng) for _ in range(6)]
    u = matmul(g, _col(gv))
    v = matmul(broken, _col(dv))
    y = [row[0] for row in matmul(at, tuple((a[0] * b[0],) for a, b in zip(u, v, strict=True)))]
    assert y != _direct_1d(4, gv, dv)


def test_unsupported_m_raises():
    with pytest.raises(ValueError, match=r"F\(3,3\)"):
        matrices(3)


def test_growth_is_the_largest_absolute_row_sum():
    assert growth(((Fraction(1), Fraction(-3)), (Fraction(2), Fraction(1, 2)))) == 4
    _, _, bt2 = matrices(2)
    assert growth(bt2) == 2  # F(2,3): every Bt row holds two entries of magnitude 1
    assert growth(matrices(6)[2]) > growth(matrices(4)[2]) > growth(bt2)


def test_matrices_are_cached_and_immutable():
    assert matrices(6) is matrices(6)
    assert isinstance(matrices(6)[0], tuple)
