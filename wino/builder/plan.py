"""The build plan: per target, its toolchains and every grid spec with its binaries' paths.

Planning renders each spec once per target (the source hash is part of the binary's address), so
the plan knows, before anything compiles, exactly which files a build must produce; doit's
``config_changed`` on those addresses rebuilds exactly the specs whose source, compiler, flags or
arch changed. Rendered-source hashes are memoised in build/render-cache.json, keyed by the
rendering code's own hash, so a no-op ``doit`` renders nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..codegen.render import render, template_files
from ..grid import aot_stage_specs
from ..specs import StageSpec
from ..vocab import Target
from .cache_writer import KernelBinary, sha256_text, sweep_scratch
from .paths import build_dir
from .toolchains import Resolved, Toolchain, resolve


@dataclass(frozen=True)
class Job:
    """One kernel of one target: its spec and its binary per toolchain (arch)."""

    spec: StageSpec
    source_sha256: str
    binaries: tuple[KernelBinary, ...]

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class TargetPlan:
    target: Target
    toolchains: tuple[Toolchain, ...]
    messages: tuple[str, ...]
    jobs: tuple[Job, ...]


def rendering_inputs() -> list[Path]:
    """Every file a rendered source may depend on: the templates and the package's Python
    (the codegen, and the core it reads: specs, vocabulary, matrices, kernarg tables). Broader
    than wino.codegen.render.template_files() on purpose: a stale memo would be a wrong build."""
    package = Path(__file__).resolve().parents[1]
    return sorted(set(template_files()) | set(package.rglob("*.py")))


def codegen_hash() -> str:
    """sha256 over the names and contents of rendering_inputs()."""
    digest = hashlib.sha256()
    for path in rendering_inputs():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class RenderHashes:
    """Memo of rendered-source hashes: {codegen hash: {target: {spec name: sha256}}}.
    A spec's name is its identity, so (codegen hash, target, name) determines the source."""

    def __init__(self, root: str | None = None):
        self.path = build_dir(root) / "render-cache.json"
        self.key = codegen_hash()
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            stored = {}
        self.table: dict[str, dict[str, str]] = stored.get(self.key, {})
        self.dirty = False

    def source_sha256(self, spec: StageSpec, target: Target) -> str:
        per_target = self.table.setdefault(target.value, {})
        if spec.name not in per_target:
            per_target[spec.name] = sha256_text(render(spec, target))
            self.dirty = True
        return per_target[spec.name]

    def save(self) -> None:
        if not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".render-cache.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({self.key: self.table}, sort_keys=True) + "\n", "utf-8")
        os.replace(tmp, self.path)
        self.dirty = False


def plan_target(
    resolved: Resolved, specs: Iterable[StageSpec], hashes: RenderHashes, root: str | None = None
) -> TargetPlan:
    jobs = []
    if resolved.toolchains:
        for spec in specs:
            sha = hashes.source_sha256(spec, resolved.target)
            binaries = tuple(KernelBinary(spec.name, tc, sha, root) for tc in resolved.toolchains)
            jobs.append(Job(spec, sha, binaries))
    return TargetPlan(resolved.target, resolved.toolchains, resolved.messages, tuple(jobs))


def plan(
    targets: Iterable[Target] | None = None,
    specs: Iterable[StageSpec] | Callable[[Target], Iterable[StageSpec]] | None = None,
    root: str | None = None,
    quiet: bool = False,
) -> tuple[TargetPlan, ...]:
    """The build of ``specs`` (default: each target's accepted grid; a callable: the specs of
    the target it is given) for ``targets`` (default: all). Skip messages (missing compiler,
    unknown arch) go to stderr unless ``quiet``."""
    given = specs if specs is None or callable(specs) else tuple(specs)
    sweep_scratch(root)  # what a killed build left
    hashes = RenderHashes(root)
    plans = []
    for target in targets or tuple(Target):
        resolved = resolve(target, root)
        if not quiet:
            for message in resolved.messages:
                print(message, file=sys.stderr)
        if given is None:
            specs = aot_stage_specs(target=target)
        else:
            specs = given(target) if callable(given) else given
        plans.append(plan_target(resolved, specs, hashes, root))
    hashes.save()
    return tuple(plans)
