"""The baked-extent route (the reference design's JIT): a problem's kernels rendered from the
same templates and specs as the AOT cache, with one launch's kernargs compiled in as constants
(every extent a literal, every magic division a division by a literal), compiled with the
target's toolchain into a cache folder of their own, keyed by (target, toolchain, specs,
kernargs).

That folder has the AOT cache's format (manifest, content-addressed binaries, header) and the
same kernel names, symbols and ABI: the kernarg struct is still passed and simply not read. So
``dispatch(problem, specs=..., cache_root=<the folder>)`` returns a plan that binds and runs
exactly as the AOT plan, on binaries that know the problem. The bench's ``baked`` engine
(wino.bench.baked) is the only caller: it measures what shape-generic costs. The runtime never
compiles (AOT); this module is on the build side.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..codegen.render import render
from ..specs import StageSpec
from ..vocab import Target
from .cache_writer import KernelBinary, compile_kernel, sha256_text, write_target_manifest
from .paths import source_path, write_if_changed
from .toolchains import Toolchain, resolve


class BakeUnavailable(RuntimeError):
    """The target's compiler is not here (the message says how to get it)."""


@dataclass(frozen=True)
class BakedKernel:
    """One kernel to bake: its spec and the kernargs of the launch it will run (ABI order)."""

    spec: StageSpec
    kernargs: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, spec: StageSpec, kernargs: dict[str, int]) -> BakedKernel:
        return cls(spec, tuple((k, int(v)) for k, v in kernargs.items()))


def default_base() -> Path:
    """Where baked caches go unless told: <tmp>/wino-baked-<user>/ (the uid where the user has
    no name, as in some containers)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return Path(tempfile.gettempdir()) / f"wino-baked-{user}"


def toolchain(target: Target) -> Toolchain:
    """The target's first toolchain (grids/targets.yaml), or BakeUnavailable saying why none."""
    resolved = resolve(target)
    if not resolved.toolchains:
        raise BakeUnavailable("; ".join(resolved.messages) or f"no toolchain for {target.value}")
    return resolved.toolchains[0]


def bake_key(tc: Toolchain, kernels: Iterable[BakedKernel]) -> str:
    """16 hex digits over the toolchain's fingerprint and each (kernel name, kernargs)."""
    items = sorted((k.spec.name, list(k.kernargs)) for k in kernels)
    text = json.dumps({"toolchain": tc.fingerprint(), "kernels": items}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def bake(kernels: Iterable[BakedKernel], target: Target, base: Path | None = None) -> Path:
    """Render, compile (what is not there yet) and publish the baked kernels; returns the
    build folder to pass as ``cache_root``. One kernel name per folder: a name baked with two
    sets of kernargs (two batch-chunk sizes) is a ValueError."""
    kernels = list(kernels)
    names = [k.spec.name for k in kernels]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(
            f"bake: {', '.join(twice)} given twice (one binary per kernel name in a cache); "
            "bake each launch's kernargs into its own folder"
        )
    tc = toolchain(target)
    root = (base or default_base()) / bake_key(tc, kernels)
    with ThreadPoolExecutor(max_workers=max(1, min(len(kernels), os.cpu_count() or 1))) as pool:
        binaries = list(pool.map(lambda k: _compile(k, tc, root), kernels))  # compilers in parallel
    write_target_manifest(
        tc, [(k.spec, kb) for k, kb in zip(kernels, binaries, strict=True)], str(root)
    )
    return root


def _compile(kernel: BakedKernel, tc: Toolchain, root: Path) -> KernelBinary:
    text = render(kernel.spec, tc.target, constants=dict(kernel.kernargs))
    kb = KernelBinary(kernel.spec.name, tc, sha256_text(text), str(root))
    if not kb.done():
        src = source_path(tc.target, kernel.spec.name, root)
        write_if_changed(src, text)
        compile_kernel(kb, src)
    return kb
