"""Building without doit: the same plan, compile and publish steps, from Python (tests, tools).

``build(specs, targets)`` compiles every planned binary that is not there yet (content-addressed,
so a second call compiles nothing), in a process pool, then publishes each flavor's manifest.
doit adds only its database on top; the cache is the same either way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..specs import StageSpec
from ..vocab import Target
from .cache_writer import build_kernel, write_target_manifest
from .plan import TargetPlan, plan


@dataclass
class BuildResult:
    plans: tuple[TargetPlan, ...]
    compiled: list[tuple[str, str]] = field(default_factory=list)  # (flavor, kernel name)
    manifests: dict[str, Path] = field(default_factory=dict)  # flavor -> manifest.json

    @property
    def messages(self) -> list[str]:
        return [m for p in self.plans for m in p.messages]


def build(
    specs: Iterable[StageSpec] | None = None,
    targets: Iterable[Target] = (Target.C,),
    root: str | Path | None = None,
    jobs: int | None = None,
    publish: bool = True,
) -> BuildResult:
    """Build ``specs`` (default: the grid) for ``targets`` into ``root`` (default: WINO_BUILD or
    build/); skipped targets (no compiler) are in result.messages."""
    root = str(root) if root is not None else None
    result = BuildResult(plan(tuple(targets), specs, root, quiet=True))
    todo = [
        (p, job)
        for p in result.plans
        for job in p.jobs
        if not all(kb.done() for kb in job.binaries)
    ]
    with ProcessPoolExecutor(
        max_workers=max(1, min(len(todo), jobs or os.cpu_count() or 1))
    ) as pool:
        futures = [
            pool.submit(
                build_kernel, p.toolchains, job.spec.stage.short, job.spec.fields_dict(), root
            )
            for p, job in todo
        ]
        for (_, job), future in zip(todo, futures, strict=True):
            result.compiled += [(flavor, job.name) for flavor in future.result()["compiled"]]
    if publish:
        result.manifests = publish_manifests(result.plans, root)
    return result


def publish_manifests(plans: Iterable[TargetPlan], root: str | None = None) -> dict[str, Path]:
    """Publish each flavor's manifest of the planned kernels (all must be built): flavor -> path.
    The last step of this build and of wino.scale.build (doit's manifest task does the same)."""
    manifests = {}
    for p in plans:
        for index, tc in enumerate(p.toolchains):
            kernels = [(job.spec, job.binaries[index]) for job in p.jobs]
            manifests[tc.flavor] = write_target_manifest(tc, kernels, root)
    return manifests
