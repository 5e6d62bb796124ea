"""Straight-line transform code from the exact Winograd matrices.

Zero terms are dropped, +-1 coefficients become adds and subtracts, other coefficients float
literals, and a +-1 term leads each sum so every other term folds into a fused multiply-add.
``apply_2d`` emits ``dst = L . src . R^T`` as two passes of 1-D transforms through named
temporaries, so every statement is a short sum.

Each 1-D pass uses the symmetry of the Winograd points +-a (``Shared``): rows of Bt and G for
+a and -a differ only in the sign of their odd-power columns, so both rows are E + O and E - O
of the same two partial sums; columns of At for +a and -a differ only in the sign of their
odd rows, so every output row reads x_k + x_l or x_k - x_l. The shared partial sums are written
as the same parenthesized text in every statement that uses them, so the compiler computes each
once (common subexpressions need no reassociation: the results are those of the text), and the
held, row-at-a-time and piecewise forms below stay bit-identical. F4x4's input transform takes 13
operations per 1-D pass (16 as one sum per row, 22 with a coefficient term first), its output
transform 10 (14).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from ..winograd import Matrix, matrices

Access = Callable[[int, int], str]


def literal(value: Fraction) -> str:
    """A C float literal for a rational (exact for dyadic rationals, else nearest float)."""
    if value.denominator == 1:
        return f"{value.numerator}.0f"
    return f"{float(value)!r}f"


def linear_combination(coeffs, terms: list[str]) -> str:
    """sum(c * t) with zero terms dropped and +-1 as add/sub, a +-1 term first (so each other
    term is one fused multiply-add onto the running sum; the order is otherwise kept); '0.0f'
    when every c is 0."""
    pairs = [(c, t) for c, t in zip(coeffs, terms, strict=True) if c != 0]
    unit = [p for p in pairs if abs(p[0]) == 1]
    if unit and abs(pairs[0][0]) != 1:
        pairs.remove(unit[0])
        pairs.insert(0, unit[0])
    out = ""
    for coeff, term in pairs:
        negative = coeff < 0
        magnitude = -coeff if negative else coeff
        piece = term if magnitude == 1 else f"{literal(Fraction(magnitude))} * {term}"
        if not out:
            out = f"-{piece}" if negative else piece
        else:
            out += f" - {piece}" if negative else f" + {piece}"
    return out or "0.0f"


def _group(text: str) -> str:
    """A sum as one term of another: parenthesized unless it is a single (unsigned) product."""
    return f"({text})" if " + " in text or " - " in text or text.startswith("-") else text


class Shared:
    """The +-a symmetry of one transform matrix (rows x inputs), found once: ``row_pairs``
    maps row j to (i, sign) where mat[j][k] = sign * (-1)^k * mat[i][k] for every k and i < j
    (Bt, G); ``col_pairs`` lists (k, l, sign) where mat[r][l] = sign * (-1)^r * mat[r][k] for
    every row r (At), looked for only where no rows pair. A pair counts only where it saves
    work (both parities present)."""

    def __init__(self, mat: Matrix):
        self.mat = mat
        self.row_pairs = {j: (i, s) for i, j, s in _mirrored_pairs(mat)}
        self._firsts = {i for i, _ in self.row_pairs.values()}
        columns = tuple(zip(*mat, strict=True))
        self.col_pairs = [] if self.row_pairs else _mirrored_pairs(columns)

    def row(self, i: int, terms: list[str]) -> str:
        """Row i of mat applied to ``terms`` (one per input)."""
        if self.col_pairs:
            return self._row_of_column_pairs(i, terms)
        first, sign = self.row_pairs.get(i, (i, 0))
        if not sign and i not in self._firsts:
            return linear_combination(self.mat[i], terms)
        base = self.mat[first]
        even = _group(linear_combination([c * (1 - k % 2) for k, c in enumerate(base)], terms))
        odd = _group(linear_combination([c * (k % 2) for k, c in enumerate(base)], terms))
        if not sign:
            return f"{even} + {odd}"
        return f"{even} - {odd}" if sign > 0 else f"{odd} - {even}"

    def _row_of_column_pairs(self, r: int, terms: list[str]) -> str:
        row, terms = list(self.mat[r]), list(terms)
        for k, l_, sign in self.col_pairs:
            op = "+" if sign * (-1) ** r > 0 else "-"
            terms[k] = f"({terms[k]} {op} {terms[l_]})"
            row[l_] = Fraction(0)
        return linear_combination(row, terms)


def _mirrored_pairs(vectors) -> list[tuple[int, int, int]]:
    """(i, j, sign) for disjoint pairs i < j with vectors[j] = sign * (-1)^k * vectors[i] at
    every k, where vectors[i] has nonzeros at both parities."""
    out, taken = [], set()
    for i, j in itertools.combinations(range(len(vectors)), 2):
        if i in taken or j in taken or not _both_parities(vectors[i]):
            continue
        sign = _mirror(vectors[i], vectors[j])
        if sign:
            out.append((i, j, sign))
            taken |= {i, j}
    return out


def _mirror(a, b) -> int:
    """s where b[k] = s * (-1)^k * a[k] for every k (s in {1, -1}), else 0."""
    for s in (1, -1):
        if all(bk == s * (-1) ** k * ak for k, (ak, bk) in enumerate(zip(a, b, strict=True))):
            return s
    return 0


def _both_parities(v) -> bool:
    return any(c != 0 for c in v[0::2]) and any(c != 0 for c in v[1::2])


@cache
def shared(mat: Matrix) -> Shared:
    return Shared(mat)


def apply_2d(
    left: Matrix, right: Matrix, src: Access, dst: Access, tmp: str, indent: str = ""
) -> list[str]:
    """Statements computing dst[i][j] = sum_ab left[i][a] * src(a, b) * right[j][b].

    ``tmp`` names a scratch prefix: the first pass writes ``float {tmp}{i}_{b}``."""
    rows_in, cols_in = len(left[0]), len(right[0])
    lines = []
    for i in range(len(left)):
        for b in range(cols_in):
            expr = shared(left).row(i, [src(a, b) for a in range(rows_in)])
            lines.append(f"{indent}const float {tmp}{i}_{b} = {expr};")
    for i in range(len(left)):
        for j in range(len(right)):
            expr = shared(right).row(j, [f"{tmp}{i}_{b}" for b in range(cols_in)])
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
            + shared(left).row(i, [src(a, b) for a in range(rows_in)])
            + ";"
            for b in range(cols_in)
        ]
        lines += [
            f"{indent}{dst(i, j)} = "
            + shared(right).row(j, [f"{tmp}{i}_{b}" for b in range(cols_in)])
            + ";"
            for j in range(len(right))
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
            f"{tmp(i, b)} = " + shared(left).row(i, [src(a, b) for a in range(rows_in)]) + ";"
            for b in range(cols_in)
        ]
        seconds = [
            f"{dst(i, j)} = " + shared(right).row(j, [tmp(i, b) for b in range(cols_in)]) + ";"
            for j in range(len(right))
        ]
        out.append((tuple(a for a in range(rows_in) if row[a] != 0), firsts, seconds))
    return out


@dataclass(frozen=True)
class PairOps:
    """A target's arithmetic on pairs of 16-bit floats (two channels at once, one rounding per
    operation: CUDA's __hfma2 and kin). Each field formats one operation's call; ``const``
    takes the coefficient's 16-bit pattern (both halves alike)."""

    fma: str  # {k} * {a} + {c}, one rounding
    add: str  # {a} + {b}
    sub: str  # {a} - {b}
    neg: str  # -{a} (exact)
    mul: str  # {k} * {a}
    const: str  # {bits}: the 16-bit pattern (hex), both halves
    ctype: str  # the pair's type


_LITERAL = re.compile(r"(\d)f\b")
_WIN = re.compile(r"\bwin\[(\d+) \+ v\]")


def pair_lines(lines: list[str], ops: PairOps, bits: Callable[[float], int]) -> list[str]:
    """``apply_2d``'s statements (one channel, fp32) as the same sums on pairs: every term
    ``c * t`` that follows another becomes one fused multiply-add onto the running sum (as
    the compiler contracts the fp32 text), so the operations and their order are the fp32
    text's. ``win[k + v]`` becomes ``win[k]`` (a pair per window position); ``bits(c)`` is
    a coefficient's 16-bit pattern (the caller checks it is exact)."""
    out = []
    for line in lines:
        lhs, rhs = line.strip().rstrip(";").split(" = ", 1)
        tree = ast.parse(_LITERAL.sub(r"\1", _WIN.sub(r"win[\1]", rhs)), mode="eval").body
        target = _WIN.sub(r"win[\1]", lhs).replace("const float ", f"const {ops.ctype} ")
        out.append(f"{target} = {_pair_expr(tree, ops, bits)};")
    return out


def _coefficient(node: ast.expr) -> float | None:
    """The value of a (possibly negated) numeric literal, else None."""
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _coefficient(node.operand)
        return None if inner is None else -inner
    return None


def _product(node: ast.expr) -> tuple[float, ast.expr] | None:
    """(c, t) for a term ``c * t`` or ``-(c * t)``, else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        c = _coefficient(node.left)
        return None if c is None else (c, node.right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _product(node.operand)
        return None if inner is None else (-inner[0], inner[1])
    return None


def _pair_expr(node: ast.expr, ops: PairOps, bits: Callable[[float], int]) -> str:
    def k(c: float) -> str:
        return ops.const.format(bits=f"0x{bits(c):04x}")

    def expr(n: ast.expr) -> str:
        return _pair_expr(n, ops, bits)

    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript):
        return ast.unparse(node)
    term = _product(node)
    if term is not None:
        return ops.mul.format(k=k(term[0]), a=expr(term[1]))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return ops.neg.format(a=expr(node.operand))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        sign = 1.0 if isinstance(node.op, ast.Add) else -1.0
        right = _product(node.right)
        if right is not None:  # running sum + c * t: one fused multiply-add
            return ops.fma.format(k=k(sign * right[0]), a=expr(right[1]), c=expr(node.left))
        form = ops.add if sign > 0 else ops.sub
        return form.format(a=expr(node.left), b=expr(node.right))
    raise ValueError(f"pair_lines: unexpected transform term {ast.unparse(node)!r}")
