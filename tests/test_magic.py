"""Magic-number division: exact for every n < 2^31, as the kernels compute it."""

from __future__ import annotations

import numpy as np
import pytest

from wino.magic import INDEX_LIMIT, magic_apply, magic_div

SAMPLES_PER_DIVISOR = 512
RANDOM_DIVISORS = 20000


def _numerators(d: int, rng: np.random.Generator, count: int) -> np.ndarray:
    """Random n < 2^31 plus the edges where a bad magic shows first: 0, d-1, d, d+1, the last
    multiple of d below 2^31 and its predecessor, and 2^31-1."""
    top = (INDEX_LIMIT - 1) // d * d
    edges = [0, d - 1, d, d + 1, top - 1, top, INDEX_LIMIT - 1]
    n = np.concatenate(
        [
            rng.integers(0, INDEX_LIMIT, count, dtype=np.uint64),
            np.array([e for e in edges if 0 <= e < INDEX_LIMIT], dtype=np.uint64),
        ]
    )
    return n


def _mismatches(d: int, n: np.ndarray, pair: tuple[int, int]) -> np.ndarray:
    got = magic_apply(n, *pair)  # numpy uint64: n * magic < 2^63, so nothing wraps
    return n[got != n // np.uint64(d)]


def _check_divisors(divisors, rng, count):
    bad = []
    for d in divisors:
        d = int(d)
        wrong = _mismatches(d, _numerators(d, rng, count), magic_div(d))
        if wrong.size:
            bad.append((d, int(wrong[0])))
    assert not bad, f"magic division inexact for (d, n): {bad[:10]}"


def test_exact_for_every_divisor_up_to_2_16():
    rng = np.random.default_rng(20261129)
    _check_divisors(range(1, (1 << 16) + 1), rng, SAMPLES_PER_DIVISOR)


def test_exact_for_random_large_divisors():
    rng = np.random.default_rng(7)
    divisors = set(rng.integers(1 << 16, INDEX_LIMIT, RANDOM_DIVISORS).tolist())
    for k in range(16, 31):  # powers of two and their neighbours: the l boundaries
        divisors |= {(1 << k) - 1, 1 << k, (1 << k) + 1}
    divisors.add(INDEX_LIMIT - 1)
    _check_divisors(sorted(divisors), rng, 512)


def test_numpy_path_matches_python_ints():
    rng = np.random.default_rng(3)
    for d in [1, 2, 3, 7, 641, 65537, 123456789, INDEX_LIMIT - 1]:
        n = _numerators(d, rng, 50)
        pair = magic_div(d)
        expected = [magic_apply(int(v), *pair) for v in n]
        assert magic_apply(n, *pair).tolist() == expected
        assert expected == [int(v) // d for v in n]


def _exactness_holds(d: int) -> bool:
    magic, shift = magic_div(d)
    if d == 1:
        return (magic, shift) == (0, 0)
    l = (d - 1).bit_length()
    assert (d - 1).bit_length() == l and (1 << (l - 1)) < d <= (1 << l)  # l = ceil(log2 d)
    return (
        shift == l - 1
        and (1 << 31) <= magic < (1 << 32)
        and 0 <= magic * d - (1 << (31 + l)) < (1 << l)
    )


def test_exactness_condition_for_every_tested_divisor():
    rng = np.random.default_rng(7)
    divisors = list(range(1, (1 << 16) + 1))
    divisors += rng.integers(1 << 16, INDEX_LIMIT, RANDOM_DIVISORS).tolist()
    divisors += [INDEX_LIMIT - 1, 1 << 30, (1 << 30) + 1]
    failing = [d for d in divisors if not _exactness_holds(int(d))]
    assert not failing, f"magic*d - 2^(31+l) < 2^l fails for {failing[:10]}"


def test_d1_is_encoded_as_zero_and_returns_n():
    assert magic_div(1) == (0, 0)
    assert magic_apply(INDEX_LIMIT - 1, 0, 0) == INDEX_LIMIT - 1


def test_a_wrong_magic_is_caught():
    """The checks above can fail: a magic one below the ceiling is wrong for some n."""
    rng = np.random.default_rng(11)
    d = 7
    magic, shift = magic_div(d)
    n = _numerators(d, rng, 1000)
    assert _mismatches(d, n, (magic - 1, shift)).size > 0
    assert _mismatches(d, n, (magic, shift)).size == 0


@pytest.mark.parametrize(
    "d", [0, -1, -(1 << 31), INDEX_LIMIT, 1 << 32, True, False, 3.0, "3", None]
)
def test_invalid_divisors_raise(d):
    with pytest.raises(ValueError, match="divisor"):
        magic_div(d)
