"""A c-target cache for the runtime tests: exactly the kernels a test asks for, built by the
real build (wino.builder.builder, content-addressed) into a temp folder."""

from __future__ import annotations

from pathlib import Path

from wino import cache
from wino.builder import builder
from wino.vocab import Target


def build(specs, root: Path, jobs: int = 2, target: Target = Target.C) -> cache.Manifest:
    """Compile ``specs`` for ``target`` into the build folder ``root`` (binaries already there
    are kept) and return the published manifest."""
    result = builder.build(list(specs), [target], root=root, jobs=jobs)
    assert result.manifests, f"nothing was built for {target.value}: {result.messages}"
    return cache.find_manifest(target, Path(root))
