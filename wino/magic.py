"""Division by run-time extents through host-computed magic numbers.

A kernel divides an index n < 2^31 by an extent d as ``umulhi(n, magic) >> shift``, where
``l = ceil(log2 d)``, ``magic = ceil(2^(31+l) / d)`` and ``shift = l - 1``. That is exact for
every n < 2^31 because ``magic * d - 2^(31+l) < 2^l`` (the rounding error stays below one
quotient step). d = 1 has no 32-bit magic; it is encoded as (0, 0) and the kernels' division
helper returns n itself when magic is 0.
"""

from __future__ import annotations

INDEX_LIMIT = 1 << 31  # every index a kernel divides must stay below this


def magic_div(d: int) -> tuple[int, int]:
    """Return (magic, shift) so that n // d == (n * magic >> 32) >> shift for 0 <= n < 2^31."""
    if not isinstance(d, int) or isinstance(d, bool) or d < 1 or d >= INDEX_LIMIT:
        raise ValueError(f"magic_div: divisor must be an integer in [1, 2^31), got {d!r}")
    if d == 1:
        return 0, 0
    l = (d - 1).bit_length()  # ceil(log2 d) for d >= 2
    magic = -(-(1 << (31 + l)) // d)
    return magic, l - 1


def magic_apply(n: int, magic: int, shift: int) -> int:
    """What a kernel computes: the quotient through the magic pair (the d = 1 case included)."""
    if magic == 0:
        return n
    return ((n * magic) >> 32) >> shift
