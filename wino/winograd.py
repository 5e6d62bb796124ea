"""Winograd F(m, 3) matrices from interpolation points, in exact rationals.

Construction (Toom-Cook, transposed for correlation; andravin/wincnn, Lavin & Gray 2015,
https://github.com/andravin/wincnn): with n = m + 2 and finite points a_0..a_{n-2} plus the point
at infinity,
  - At (m x n): At[i][j] = a_j^i; the infinity column is 1 in the last row only;
  - G  (n x 3): G[j][k] = a_j^k / f_j with f_j = prod_{l != j} (a_j - a_l); infinity row (0, 0, 1);
  - Bt (n x n): row j holds the coefficients of prod_{l != j} (x - a_l) by increasing power;
    the infinity row those of prod_l (x - a_l).
Then y = At [ (G g) * (Bt d) ] is the correlation y_i = sum_k g_k d_{i+k}, and in 2-D
Y = At_h [ (G_h g G_w^T) * (Bt_h d B_w) ] A_w.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

from .vocab import DType

R = 3  # filter taps

#: Interpolation points per output size m (DESIGN.md: F(2,3), F(4,3), F(6,3)).
POINTS: dict[int, tuple[Fraction, ...]] = {
    2: tuple(Fraction(p) for p in (0, 1, -1)),
    4: tuple(Fraction(p) for p in (0, 1, -1, 2, -2)),
    6: tuple(Fraction(p) for p in ("0", "1", "-1", "2", "-2", "1/2", "-1/2")),
}

Matrix = tuple[tuple[Fraction, ...], ...]


def _coefficients(roots: list) -> list:
    """Coefficients (increasing power) of prod (x - r), in the roots' own arithmetic (ints
    stay ints)."""
    coeffs = [1]
    for root in roots:  # x * p - root * p
        coeffs = [a - root * b for a, b in zip([0, *coeffs], [*coeffs, 0], strict=True)]
    return coeffs


def _poly_from_roots(roots: list, n: int) -> tuple[Fraction, ...]:
    """Coefficients (increasing power, padded to n) of prod (x - r)."""
    coeffs = _coefficients(roots)
    return tuple(Fraction(c) for c in coeffs) + (Fraction(0),) * (n - len(coeffs))


def _points(m: int) -> list:
    """F(m, 3)'s finite points, as ints where they all are (exact, and much faster)."""
    if m not in POINTS:
        raise ValueError(f"F({m},3): no interpolation points; supported m are {sorted(POINTS)}")
    points = list(POINTS[m])
    return [int(p) for p in points] if all(p.denominator == 1 for p in points) else points


def _point_rows(points: list):
    """(a_j, the other points, f_j = prod_{l != j} (a_j - a_l)) per finite point: what row j
    of G and of Bt are made of."""
    for j, aj in enumerate(points):
        others = points[:j] + points[j + 1 :]
        f_j = 1
        for al in others:
            f_j *= aj - al
        yield aj, others, f_j


@cache
def matrices(m: int) -> tuple[Matrix, Matrix, Matrix]:
    """(At, G, Bt) for F(m, 3) as tuples of Fractions: At is m x n, G is n x 3, Bt is n x n.
    Integer points are multiplied out as ints (exact, and much faster than Fractions)."""
    points = _points(m)
    n = m + R - 1
    at = tuple(
        tuple(Fraction(points[j] ** i) for j in range(n - 1)) + (Fraction(int(i == m - 1)),)
        for i in range(m)
    )
    g_rows = []
    bt_rows = []
    for aj, others, f_j in _point_rows(points):
        g_rows.append(tuple(Fraction(aj**k) / f_j for k in range(R)))
        bt_rows.append(_poly_from_roots(others, n))
    g_rows.append((Fraction(0), Fraction(0), Fraction(1)))
    bt_rows.append(_poly_from_roots(points, n))
    return at, tuple(g_rows), tuple(bt_rows)


def transpose(mat: Matrix) -> Matrix:
    return tuple(zip(*mat, strict=True))


def matmul(a: Matrix, b: Matrix) -> Matrix:
    cols = transpose(b)
    return tuple(
        tuple(sum((x * y for x, y in zip(row, col, strict=True)), Fraction(0)) for col in cols)
        for row in a
    )


def growth(mat: Matrix) -> Fraction:
    """Largest absolute row sum: how much a transform can grow max|input|, per dimension."""
    return max(sum(abs(x) for x in row) for row in mat)


#: max over rows j of rowsum|Bt[j]| * rowsum|G[j]| for F(m, 3), per m of POINTS (the rows of
#: ``matrices``: row j of Bt holds prod_{l != j} (x - a_l), row j of G is a_j^k / f_j; the
#: infinity row prod_l (x - a_l) and (0, 0, 1)). Tabulated: a first dispatch reads them (the
#: ``fp16_m_range`` rule's namespace), and exact arithmetic over the points cost it 60-90 us;
#: tests/test_fp16_m.py derives each from the matrices.
ROW_GROWTH: dict[int, Fraction] = {2: Fraction(3), 4: Fraction(10), 6: Fraction(56, 3)}


@cache
def m_growth(mh: int, mw: int) -> Fraction:
    """How much one input channel can add to |M| per bin in F(mh x mw, 3x3), per unit of max|x|
    and max|w|: max over bins (i, j) of
    rowsum|Bt_h[i]| rowsum|G_h[i]| rowsum|Bt_w[j]| rowsum|G_w[j]|
    (|V| <= rowsum|Bt| x rowsum|Bt| max|d|, |U| <= rowsum|G| x rowsum|G| max|g|). F2x2 9,
    F4x4 100, F6x6 348 4/9: the sum over C/G channels stays below C/G times this."""
    for m in (mh, mw):
        if m not in ROW_GROWTH:
            raise ValueError(f"F({m},3): no interpolation points; supported m are {sorted(POINTS)}")
    return ROW_GROWTH[mh] * ROW_GROWTH[mw]


def exact_bits(value: Fraction | float, dtype: DType) -> int:
    """The 16-bit pattern of ``value`` in ``dtype`` (fp16 or bf16); ValueError when the value
    is not exact there (a coefficient the MMA or pair arithmetic would round)."""
    import ml_dtypes
    import numpy as np

    np_dtype = {DType.FP16: np.float16, DType.BF16: ml_dtypes.bfloat16}[dtype]
    stored = np.array(float(value), dtype=np_dtype)
    if Fraction(float(stored)) != Fraction(value):
        raise ValueError(f"{value} is not exact in {dtype}")
    return int(stored.view(np.uint16))


@cache
def kron_bits(kind: str, mh: int, mw: int, dtype: DType) -> tuple[tuple[int, ...], ...]:
    """A tile's 2-D transform ``kind`` ("input": Bt_h d B_w, "output": At_h M A_w) as one
    matrix, for a GEMM over the flattened tile: entry (r, q), r = ri nw + rj and q = qi cw + qj
    (row-major, the bin order of V and M and the window order of d), holds L[ri][qi] x
    R[rj][qj], as ``dtype``'s 16-bit patterns (fp16 or bf16), zero-padded to multiples of 16
    rows and columns (m16n8k16 tiles). Raises ValueError when a coefficient is not exact in
    dtype (F6x6's input transform in bf16: 441/16)."""
    index = {"input": 2, "output": 0}[kind]
    left, right = matrices(mh)[index], matrices(mw)[index]
    nw, cw = len(right), len(right[0])
    rows, cols = len(left) * nw, len(left[0]) * cw
    out = [[0] * (-(-cols // 16) * 16) for _ in range(-(-rows // 16) * 16)]
    for r in range(rows):
        for q in range(cols):
            value = left[r // nw][q // cw] * right[r % nw][q % cw]
            try:
                out[r][q] = exact_bits(value, dtype)
            except ValueError as err:
                raise ValueError(f"{kind} transform F{mh}x{mw}: {err}") from None
    return tuple(tuple(row) for row in out)
