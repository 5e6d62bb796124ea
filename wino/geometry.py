"""Geometry in one place: ceil-div, tile counts, the 31-bit index bound, 256-byte alignment and
the LDS region's shared memory. Pure functions of a problem, a tile and a spec."""

from __future__ import annotations

from dataclasses import dataclass

from .magic import INDEX_LIMIT
from .problem import Problem
from .vocab import K2Path, Prescale, Tile

ALIGN = 256  # every workspace buffer starts on a 256-byte boundary

__all__ = ["INDEX_LIMIT"]  # re-exported: the bound lives in wino.magic


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to the workspace alignment."""
    return ceil_div(nbytes, ALIGN) * ALIGN


@dataclass(frozen=True)
class TileGrid:
    """Tile counts of one (batch chunk of a) problem for one tile."""

    thp: int
    twp: int
    TH: int
    TW: int
    P: int

    @classmethod
    def of(cls, problem: Problem, tile: Tile) -> TileGrid:
        thp, twp = _phase_tiles(problem, tile)
        th, tw = problem.dil_h * thp, problem.dil_w * twp
        return cls(thp, twp, th, tw, problem.N * th * tw)

    def counts(self) -> dict[str, int]:
        """The counts by field name: ``dataclasses.asdict``'s, without its deep copies (a
        launch's kernargs read them)."""
        return {"thp": self.thp, "twp": self.twp, "TH": self.TH, "TW": self.TW, "P": self.P}


def _phase_tiles(problem: Problem, tile: Tile) -> tuple[int, int]:
    """Tile rows and columns per dilation phase: ceil(ceil(Ho/dil_h)/mh), likewise columns."""
    thp = ceil_div(ceil_div(problem.Ho, problem.dil_h), tile.mh)
    return thp, ceil_div(ceil_div(problem.Wo, problem.dil_w), tile.mw)


def tiles_per_image(problem: Problem, tile: Tile) -> int:
    """Tiles of one image: dil_h phases x ceil(ceil(Ho/dil_h)/mh) rows, likewise columns."""
    return TileGrid.of(problem.with_batch(1), tile).P


def elems(problem: Problem, tile: Tile) -> int:
    """The largest buffer of a (chunk of a) problem in elements: x, y, V, M or U."""
    thp, twp = _phase_tiles(problem, tile)  # TileGrid.of's P, no TileGrid made
    n, a = problem.N, tile.bins
    p = n * problem.dil_h * thp * problem.dil_w * twp
    x, y = n * problem.H * problem.W * problem.C, n * problem.Ho * problem.Wo * problem.K
    return max(x, y, a * p * problem.C, a * p * problem.K, a * problem.K * problem.Cg)


def elems_one_image(problem: Problem, tile: Tile) -> int:
    """The largest buffer one image needs (U, which no batch split shrinks, included)."""
    return elems(problem.with_batch(1), tile)


def lds_bytes(spec) -> int:
    """Shared memory of K2's shared-memory paths. LDS region: ah rows x (width*mw + 2) cols x
    lanes*vec fp32. LDS rows: ah rows x (width*mw + 2) cols x lanes*vec channels in the io dtype,
    plus, for the fused prescale, a max per (column, 16-byte unit) and per column in fp32."""
    path = getattr(spec, "path", None)
    cols = spec.tile.mw * getattr(spec, "lds_width", 0) + 2
    if path is K2Path.LDS:
        return spec.tile.ah * cols * spec.lds_lanes * spec.vec * 4
    if path is K2Path.LDS_ROWS:
        channels = spec.lds_lanes * spec.vec
        region = ceil_div(spec.tile.ah * cols * channels * spec.io.itemsize, 16) * 16
        units = ceil_div(channels * spec.io.itemsize, 16)
        fused = spec.prescale is Prescale.FUSED
        return region + (cols * units + cols) * 4 * fused
    return 0
