"""Verification bounds: max|out - ref| / max|ref| against a float64 direct convolution, from
the runtime's one table (``wino.runtime.verify.bound_for``).

Every pipeline of a tile is held to the bound of the target's default transformed storage (fp16
for bf16 inputs on the GPUs, fp32 for 16-bit inputs on the host), whatever its own storage: a
bf16-storage pipeline is chosen only where it is as accurate as the default pick is expected to
be. That is how the sweep picks the fastest pipeline that is accurate enough rather than the
fastest one.
"""

from __future__ import annotations

from ..pick import default_xdtype
from ..vocab import DType, Target, Tile

#: A direct convolution (cuDNN) is held to the loosest tile's bound: a sanity check that the
#: comparison ran the same convolution (a wrong layout gives an error near 1), not a ranking.
DIRECT_TILE = Tile(6, 6)


def tolerance(tile: Tile | None, dtype: DType, target: Target | None = None) -> float:
    """The bound for a Winograd tile (None: a direct convolution) with ``dtype`` inputs in
    ``target``'s default transformed storage."""
    from ..runtime.verify import bound_for

    return bound_for(tile or DIRECT_TILE, dtype, default_xdtype(dtype, target))


def passes(error: float | None, bound: float | None) -> bool:
    """Checked and within the bound (NaN and inf never pass)."""
    return error is not None and bound is not None and error == error and error <= bound
