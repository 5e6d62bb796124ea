"""Straight-line transform code from the exact Winograd matrices.

Zero terms are dropped, +-1 coefficients become adds and subtracts, other coefficients float
literals. ``apply_2d`` emits ``dst = L . src . R^T`` as two passes of 1-D transforms through
named temporaries, so every statement is a short sum.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from ..winograd import Matrix, matrices

Access = Callable[[int, int], str]


def literal(value: Fraction) -> str:
    """A C float literal for a rational (exact for dyadic rationals, else nearest float)."""
    if value.denominator == 1:
        return f"{value.numerator}.0f"
    return f"{float(value)!r}f"


def linear_combination(coeffs, terms: list[str]) -> str:
    """sum(c * t) with zero terms dropped and +-1 as add/sub; '0.0f' when every c is 0."""
    out = ""
    for coeff, term in zip(coeffs, terms, strict=True):
        if coeff == 0:
            continue
        negative = coeff < 0
        magnitude = -coeff if negative else coeff
        piece = term if magnitude == 1 else f"{literal(Fraction(magnitude))} * {term}"
        if not out:
            out = f"-{piece}" if negative else piece
        else:
            out += f" - {piece}" if negative else f" + {piece}"
    return out or "0.0f"


def apply_2d(
    left: Matrix, right: Matrix, src: Access, dst: Access, tmp: str, indent: str = ""
) -> list[str]:
    """Statements computing dst[i][j] = sum_ab left[i][a] * src(a, b) * right[j][b].

    ``tmp`` names a scratch prefix: the first pass writes ``float {tmp}{i}_{b}``."""
    rows_in, cols_in = len(left[0]), len(right[0])
    lines = []
    for i, row in enumerate(left):
        for b in range(cols_in):
            expr = linear_combination(row, [src(a, b) for a in range(rows_in)])
            lines.append(f"{indent}const float {tmp}{i}_{b} = {expr};")
    for i in range(len(left)):
        for j, row in enumerate(right):
            expr = linear_combination(row, [f"{tmp}{i}_{b}" for b in range(cols_in)])
            lines.append(f"{indent}{dst(i, j)} = {expr};")
    return lines


def tile_matrices(mh: int, mw: int) -> dict[str, tuple[Matrix, Matrix]]:
    """(left, right) pairs per transform: input Bt_h . d . B_w, filter G_h . g . G_w^T,
    output At_h . M . A_w."""
    at_h, g_h, bt_h = matrices(mh)
    at_w, g_w, bt_w = matrices(mw)
    return {"input": (bt_h, bt_w), "filter": (g_h, g_w), "output": (at_h, at_w)}


def apply_2d_rows(
    left: Matrix, right: Matrix, src: Access, dst: Access, tmp: str, indent: str = ""
) -> list[tuple[tuple[int, ...], list[str]]]:
    """``apply_2d`` one output row at a time: per row i of ``left``, the source rows it reads
    (left[i]'s nonzero columns) and the statements computing dst(i, j) for every j, the same
    sums in the same order as apply_2d's (so the results are bit-identical)."""
    rows_in, cols_in = len(left[0]), len(right[0])
    out = []
    for i, row in enumerate(left):
        lines = [
            f"{indent}const float {tmp}{i}_{b} = "
            + linear_combination(row, [src(a, b) for a in range(rows_in)])
            + ";"
            for b in range(cols_in)
        ]
        lines += [
            f"{indent}{dst(i, j)} = "
            + linear_combination(r, [f"{tmp}{i}_{b}" for b in range(cols_in)])
            + ";"
            for j, r in enumerate(right)
        ]
        out.append((tuple(a for a in range(rows_in) if row[a] != 0), lines))
    return out


def apply_2d_row_pieces(
    left: Matrix, right: Matrix, src: Access, tmp: Access, dst: Access
) -> list[tuple[tuple[int, ...], list[str], list[str]]]:
    """``apply_2d_rows`` cut finer, for code that loads one source column at a time and stores
    each result as it is made: per row i of ``left``, the source rows it reads, the statement
    ``tmp(i, b) = ...`` of each source column b (it reads column b only) and the statement
    ``dst(i, j) = ...`` of each j (it reads tmp(i, *)); the same sums in the same order as
    apply_2d's, so the results are bit-identical."""
    rows_in, cols_in = len(left[0]), len(right[0])
    out = []
    for i, row in enumerate(left):
        firsts = [
            f"{tmp(i, b)} = " + linear_combination(row, [src(a, b) for a in range(rows_in)]) + ";"
            for b in range(cols_in)
        ]
        seconds = [
            f"{dst(i, j)} = " + linear_combination(r, [tmp(i, b) for b in range(cols_in)]) + ";"
            for j, r in enumerate(right)
        ]
        out.append((tuple(a for a in range(rows_in) if row[a] != 0), firsts, seconds))
    return out
