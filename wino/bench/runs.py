"""A measured plan of the sweep (one tile of one engine): its pick, times and check."""

from __future__ import annotations

from dataclasses import dataclass

from ..vocab import Stage
from . import accuracy
from .select import Pick


@dataclass
class TileRun:
    """The pipeline of one tile: its pick, stage and total times, and its check."""

    pick: Pick
    stage_us: dict[Stage, float]
    total_us: float
    error: float | None = None
    tolerance: float | None = None
    check_us: float | None = None  # a second, independent timing (Options.recheck)
    cached_us: float | None = None  # the chain with U cached (K1 once per weights)

    @property
    def verified(self) -> bool:
        return self.error is not None and accuracy.passes(self.error, self.tolerance)
