"""The straight-line transforms (wino.codegen.transforms): the +-a symmetric forms compute the
exact Winograd matrices' linear maps, share their partial sums as identical text, and take
fewer operations than one sum per row."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from wino.codegen.render import _output_pairs16, fp16_bits
from wino.codegen.transforms import (
    PairOps,
    apply_2d,
    linear_combination,
    pair_lines,
    shared,
    tile_matrices,
)
from wino.runtime.arrays import numpy_dtype
from wino.vocab import TILES, DType, Tile
from wino.winograd import kron_bits

MATRICES = [
    pytest.param(tile.mh, kind, side, id=f"F{tile.mh}-{kind}-{side}")
    for tile in TILES
    if tile.mh == tile.mw
    for kind in ("input", "filter", "output")
    for side in (0, 1)
]


def _evaluate(expr: str, values: dict[str, float]) -> float:
    """The C expression in float64 (its float literals' 'f' suffix dropped)."""
    return eval(re.sub(r"(\d)f\b", r"\1", expr), {}, dict(values))  # noqa: S307 - generated text


def _terms(expr: str) -> list[str]:
    """The top-level terms of a sum (signs dropped)."""
    depth, start, out = 0, 0, []
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and expr[i : i + 3] in (" + ", " - "):
            out.append(expr[start:i])
            start = i + 3
    return [*out, expr[start:]]


def _cost(exprs: list[str]) -> int:
    """Floating-point operations of a 1-D pass: each distinct sum (a statement or a shared
    parenthesized group) costs its terms - 1 adds or fused multiply-adds, plus a multiply where
    its first term carries a coefficient; a group used twice is computed once."""
    seen: set[str] = set()

    def cost(expr: str) -> int:
        expr = expr.lstrip("-")
        if expr in seen:
            return 0
        seen.add(expr)
        terms = _terms(expr)
        total = len(terms) - 1 + bool(re.match(r"[\d.]+f \* ", terms[0]))
        for term in terms:
            for group in re.findall(r"\(([^()]*)\)", term):
                total += cost(group)
        return total

    return sum(cost(e) for e in exprs)


@pytest.mark.parametrize("m, kind, side", MATRICES)
def test_symmetric_rows_are_the_matrix(m, kind, side):
    """Every row, in its shared form, is the exact matrix row applied to random inputs."""
    mat = tile_matrices(m, m)[kind][side]
    rng = np.random.default_rng(m * 10 + side)
    values = {f"x{k}": float(v) for k, v in enumerate(rng.standard_normal(len(mat[0])))}
    terms = [f"x{k}" for k in range(len(mat[0]))]
    for i, row in enumerate(mat):
        want = sum(float(c) * values[t] for c, t in zip(row, terms, strict=True))
        got = _evaluate(shared(mat).row(i, terms), values)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (i, shared(mat).row(i, terms))


@pytest.mark.parametrize("m, kind", [(4, "input"), (6, "input"), (4, "filter"), (6, "filter")])
def test_row_pairs_share_their_partial_sums_as_text(m, kind):
    """Rows for +a and -a (Bt, G) are E + O and E - O of the same two texts, so the compiler
    computes E and O once (no reassociation needed)."""
    mat = tile_matrices(m, m)[kind][0]
    pairs = shared(mat).row_pairs
    assert len(pairs) == (m + 2 - 2) // 2  # every finite +-a pair: 2 at F4, 3 at F6
    terms = [f"x{k}" for k in range(len(mat[0]))]
    for j, (i, _) in pairs.items():
        assert set(_terms(shared(mat).row(i, terms))) == set(_terms(shared(mat).row(j, terms)))


def test_output_columns_share_their_sums_and_differences():
    """At's columns for +a and -a: every row reads x_k + x_l or x_k - x_l."""
    at = tile_matrices(4, 4)["output"][0]
    assert shared(at).col_pairs == [(1, 2, 1), (3, 4, 1)]
    terms = [f"x{k}" for k in range(6)]
    assert [shared(at).row(r, terms) for r in range(4)] == [
        "x0 + (x1 + x2) + (x3 + x4)",
        "(x1 - x2) + 2.0f * (x3 - x4)",
        "(x1 + x2) + 4.0f * (x3 + x4)",
        "(x1 - x2) + 8.0f * (x3 - x4) + x5",
    ]


@pytest.mark.parametrize("m, kind, plain, symmetric", [(4, "input", 16, 13), (4, "output", 14, 10)])
def test_symmetric_forms_take_fewer_operations(m, kind, plain, symmetric):
    """F4x4 per 1-D pass: one sum per row (a unit term first) against the shared forms."""
    mat = tile_matrices(m, m)[kind][0]
    terms = [f"x{k}" for k in range(len(mat[0]))]
    assert _cost([linear_combination(row, terms) for row in mat]) == plain
    assert _cost([shared(mat).row(i, terms) for i in range(len(mat))]) == symmetric


def test_a_unit_term_leads_each_sum():
    """A +-1 term first: every coefficient term folds into a multiply-add onto it."""
    assert linear_combination([4, 0, -5, 0, 1, 0], [f"x{k}" for k in range(6)]) == (
        "x4 + 4.0f * x0 - 5.0f * x2"
    )
    assert linear_combination([-2, 3], ["a", "b"]) == "-2.0f * a + 3.0f * b"


def test_two_dimensional_transform_is_the_matrix_product():
    """apply_2d's statements, run in float64, are Bt d B for F4x4 and F6x6."""
    for m in (4, 6):
        left, right = tile_matrices(m, m)["input"]
        n = len(left)
        rng = np.random.default_rng(m)
        d = rng.standard_normal((n, n))
        env = {f"d{a}_{b}": float(d[a, b]) for a in range(n) for b in range(n)}
        for line in apply_2d(left, right, lambda a, b: f"d{a}_{b}", lambda i, j: f"v{i}_{j}", "t"):
            name, expr = line.removeprefix("const float ").rstrip(";").split(" = ", 1)
            env[name] = _evaluate(expr, env)
        bt = np.array([[float(c) for c in row] for row in left])
        want = bt @ d @ bt.T
        got = np.array([[env[f"v{i}_{j}"] for j in range(n)] for i in range(n)])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16])
@pytest.mark.parametrize("kind", ["input", "output"])
@pytest.mark.parametrize("tile", list(TILES), ids=lambda t: t.name)
def test_kron_matrix_is_the_two_dimensional_transform(tile, kind, dtype):
    """The held fused kernel's transform matrices (one GEMM per tile): a row times the
    flattened tile, read in V's bin order (the window's for the input), gives L d R^T exactly
    for every tile and both transforms, in 16-row, 16-column blocks whose padding is zero."""
    if (tile.mh, tile.mw, kind, dtype) == (6, 6, "input", DType.BF16):  # 21/4 x 21/4: 9 bits
        with pytest.raises(ValueError, match="is not exact in"):
            kron_bits(kind, tile.mh, tile.mw, dtype)
        return
    bits = np.array(kron_bits(kind, tile.mh, tile.mw, dtype), dtype=np.uint16)
    kron = bits.view(numpy_dtype(dtype)).astype(np.float64)
    left, right = (np.array(m, dtype=float) for m in tile_matrices(tile.mh, tile.mw)[kind])
    rows, cols = left.shape[0] * right.shape[0], left.shape[1] * right.shape[1]
    assert kron.shape == (-(-rows // 16) * 16, -(-cols // 16) * 16)
    assert not kron[rows:].any() and not kron[:, cols:].any()
    d = np.random.default_rng(rows).integers(-64, 64, size=(left.shape[1], right.shape[1]))
    want = left @ d @ right.T
    got = (kron[:rows, :cols] @ d.reshape(-1).astype(float)).reshape(want.shape)
    np.testing.assert_array_equal(got, want)


#: Python's reading of the pair operations: one value per pair (the channels are alike), exact
#: (float64 on small integers), and each operation counted.
PYTHON_PAIRS = PairOps(
    fma="_op('fma', {k} * {a} + {c})",
    add="_op('add', {a} + {b})",
    sub="_op('sub', {a} - {b})",
    neg="_op('neg', -{a})",
    mul="_op('mul', {k} * {a})",
    const="_k({bits})",
    ctype="float",
)


@pytest.mark.parametrize("tile", list(TILES), ids=lambda t: t.name)
def test_pair_form_is_the_input_transform(tile):
    """KF's input transform on fp16 pairs (axis xbits 16): its statements, read exactly, give
    Bt d B for every tile, with every coefficient exact in fp16; F4x4 in the fp32 text's 13
    operations per 1-D pass (each coefficient term after a sum's first is one fma, the shared
    partial sums written once)."""
    left, right = tile_matrices(tile.mh, tile.mw)["input"]
    rows, cols = len(left), len(right)
    window = lambda a, b: f"win[{a * cols + b} + v]"  # noqa: E731 - render.py's KF access
    fp32 = apply_2d(left, right, window, window, "t")
    pairs = pair_lines(fp32, PYTHON_PAIRS, fp16_bits)
    d = np.random.default_rng(rows * cols).integers(-64, 64, size=(rows, cols))
    got, ops = _run_pairs(pairs, d)
    want = np.array(left, dtype=float) @ d @ np.array(right, dtype=float).T
    np.testing.assert_array_equal(got[: rows * cols].reshape(rows, cols), want)
    assert ops  # the statements ran through the pair operations
    if tile == Tile(4, 4):  # 12 1-D passes of 13 operations (the module's count); negations free
        calls = {c for line in pairs for c in _calls(line) if not c.startswith("_op('neg'")}
        assert len(calls) == 12 * 13


@pytest.mark.parametrize("tile", list(TILES), ids=lambda t: t.name)
def test_pair_form_is_the_output_transform(tile):
    """The held kernel's output transform on fp16 pairs (axis obits 16, render.py's
    _output_pairs16): its statements, read exactly, give At M A for every tile, with every
    coefficient exact in fp16, and the pre-scale 2^-shift keeps the largest growth times
    fp16's largest M inside fp16's range."""
    spec = SimpleNamespace(tile=tile, obits=16)
    rendered = _output_pairs16(spec, SimpleNamespace(pair_ops=PYTHON_PAIRS))
    left, right = tile_matrices(tile.mh, tile.mw)["output"]
    m = np.random.default_rng(tile.bins).integers(-64, 64, size=(tile.ah, tile.aw))
    got, ops = _run_pairs(rendered["output_pair_lines16"], m)
    want = np.array(left, dtype=float) @ m @ np.array(right, dtype=float).T
    np.testing.assert_array_equal(got[: tile.mh * tile.mw].reshape(tile.mh, tile.mw), want)
    assert ops
    growth = max(sum(map(abs, r)) for r in left) * max(sum(map(abs, r)) for r in right)
    assert (
        growth * 65504 * 2.0 ** -rendered["out16_shift"]
        <= 65504
        < growth * 65504 * 2.0 ** (1 - rendered["out16_shift"])
    )
    assert np.float16(2.0 ** -rendered["out16_shift"]).view(np.uint16) == rendered["out16_bits"]


def _run_pairs(pairs: list[str], window: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The pair statements read by Python (PYTHON_PAIRS, exact on small integers) over
    ``win`` = the window's values: (win afterwards, the pair operations run)."""
    ops: list[str] = []
    env = {
        "win": [float(v) for v in window.reshape(-1)],
        "_op": lambda name, value: ops.append(name) or value,
        "_k": lambda bits: float(np.array(bits, dtype=np.uint16).view(np.float16)),
    }
    for line in pairs:
        target, expr = line.removeprefix("const float ").rstrip(";").split(" = ", 1)
        value = eval(expr, {}, env)  # noqa: S307 - generated text
        if target.startswith("win["):
            env["win"][int(target[4:-1])] = value
        else:
            env[target] = value
    return np.array(env["win"]), ops


def _calls(text: str) -> list[str]:
    """Every ``_op(...)`` call in the text (nested ones too), as written: a shared partial sum
    is the same text wherever it is used, so the compiler computes it once."""
    out = []
    for start in (m.start() for m in re.finditer(r"_op\(", text)):
        depth = 0
        for end in range(start + 3, len(text)):
            depth += (text[end] == "(") - (text[end] == ")")
            if depth == 0:
                out.append(text[start : end + 1])
                break
    return out
