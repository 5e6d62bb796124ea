"""A cuda-target cache (sm_90 cubins) for the GPU tests, through the real build."""

from __future__ import annotations

from pathlib import Path

from wino import cache
from wino.vocab import Target

from . import host_cache


def build(specs, root: Path, jobs: int = 16) -> cache.Manifest:
    return host_cache.build(specs, root, jobs=jobs, target=Target.CUDA)
