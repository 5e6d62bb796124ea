"""Distributed compile: the build's compile actions as Dask tasks, published by the client.

The client plans the build exactly as ``doit compile`` does (wino.builder.plan: the same specs,
toolchains and content addresses), renders each source that is not built yet and writes it to
build/src/ as the serial build does, and submits one task per (kernel, toolchain): the worker
finds the same compiler on its PATH (the same identity line, or it refuses: the identity is part
of the address), compiles the source in a temporary folder and returns the bytes of the binary,
of its IR (PTX, LLVM IR) and the compiler's report. The client stores them at their addresses
through the cache writer (``publish_compiled``) as they arrive, then publishes each flavor's
manifest (``publish_manifests``). Workers need no shared filesystem and no build folder.

The binaries are the serial build's bytes: the compile command, the relative source name and the
source text are the same (tests/test_scale_build.py compares the two caches file by file).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..builder.builder import BuildResult, publish_manifests
from ..builder.cache_writer import KernelBinary, publish_compiled, sha256_text
from ..builder.paths import source_path, write_if_changed
from ..builder.plan import Job, plan
from ..builder.toolchains import (
    Compiled,
    CompileError,
    Toolchain,
    compile_source,
    identity_line,
)
from ..codegen.render import render
from ..specs import StageSpec
from ..vocab import Target
from . import require_distributed

#: Dask retries of a compile task that raised (a worker lost mid-compile is re-run by Dask
#: itself, up to distributed's allowed-failures).
RETRIES = 1


@dataclass(frozen=True)
class RemoteCompiled:
    """What a worker sends back for one (kernel, toolchain): the outputs' bytes and report."""

    binary: bytes
    artefacts: dict[str, bytes]  # by kind: ptx, ll
    log: str
    report: dict[str, Any]  # registers, spills, extra (the parsed compiler report)
    worker: str


# On the worker ---------------------------------------------------------------------------------
def worker_toolchain(tc: Toolchain) -> Toolchain:
    """The client's toolchain with this worker's path to the compiler; CompileError when the
    compiler is missing or another version (its binaries would have other addresses)."""
    host = socket.gethostname()
    path = shutil.which(tc.compiler)
    if path is None:
        raise CompileError(
            f"worker {host}: compiler `{tc.compiler}` not found on PATH; {tc.kit.how_to_get}"
        )
    line = identity_line(path, tc.target)
    if line != tc.identity:
        raise CompileError(
            f"worker {host}: `{tc.compiler}` is {line!r} but the client planned {tc.identity!r}; "
            "install the same compiler on every worker (its identity is part of each binary's "
            "address)"
        )
    return replace(tc, path=path)


def compile_remote(tc: Toolchain, name: str, text: str) -> RemoteCompiled:
    """Compile one rendered source for one toolchain in a temporary folder; its outputs' bytes."""
    tc = worker_toolchain(tc)
    with tempfile.TemporaryDirectory(prefix=f"wino-{name}-") as tmp:
        src = Path(tmp) / "src" / f"{name}.{tc.kit.source_ext}"  # as paths.source_path
        src.parent.mkdir()
        src.write_text(text, encoding="utf-8")
        scratch = Path(tmp) / "out"
        scratch.mkdir()
        out = compile_source(tc, src, name, scratch)
        return RemoteCompiled(
            binary=out.binary.read_bytes(),
            artefacts={kind: path.read_bytes() for kind, path in out.artefacts.items()},
            log=out.log,
            report=out.report,
            worker=socket.gethostname(),
        )


# On the client ---------------------------------------------------------------------------------
def store(kb: KernelBinary, sent: RemoteCompiled) -> dict[str, Any]:
    """Write a worker's outputs beside kb's address and publish them through the cache writer;
    the report dict."""
    bin_dir = kb.binary.parent
    bin_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{kb.name}-", dir=bin_dir))
    try:
        binary = scratch / f"{kb.name}.{kb.toolchain.binary_ext}"
        binary.write_bytes(sent.binary)
        artefacts = {}
        for kind, data in sent.artefacts.items():
            artefacts[kind] = scratch / f"{kb.name}.{kind}"
            artefacts[kind].write_bytes(data)
        return publish_compiled(kb, Compiled(binary, artefacts, sent.log, sent.report))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def source_text(target: Target, job: Job, root: str | None) -> str:
    """Render the job's source, write it to build/src/ when it changed (as the serial build
    does) and check it is the source the plan addressed."""
    text = render(job.spec, target)
    if sha256_text(text) != job.source_sha256:
        raise RuntimeError(
            f"{job.name}: the rendered {target.value} source does not match the plan's hash "
            "(build/render-cache.json is stale?); delete it and build again"
        )
    write_if_changed(source_path(target, job.name, root), text)
    return text


def task_key(kb: KernelBinary) -> str:
    """The Dask key of a compile: its content address (the same compile is one task)."""
    return f"wino-compile-{kb.toolchain.flavor}-{kb.name}-{kb.digest}"


def submit_compiles(client, plans, root: str | None) -> dict:
    """One task per binary that is not there yet: {future: its KernelBinary}."""
    pending = {}
    for p in plans:
        for job in p.jobs:
            todo = [kb for kb in job.binaries if not kb.done()]
            if not todo:
                continue
            text = source_text(p.target, job, root)
            for kb in todo:
                args = (kb.toolchain, job.name, text)
                future = client.submit(compile_remote, *args, key=task_key(kb), retries=RETRIES)
                pending[future] = kb
    return pending


def build(
    client,
    specs: Iterable[StageSpec] | None = None,
    targets: Iterable[Target] = (Target.C,),
    root: str | Path | None = None,
    publish: bool = True,
) -> BuildResult:
    """wino.builder.builder.build with the compiles on ``client``'s workers: ``specs`` (default:
    the grid) for ``targets`` into ``root`` (default: WINO_BUILD or build/). Raises CompileError
    naming every kernel that failed (after the others are stored; no manifest then)."""
    distributed = require_distributed()
    root = str(root) if root is not None else None
    result = BuildResult(plan(tuple(targets), specs, root, quiet=True))
    pending = submit_compiles(client, result.plans, root)
    failures = []
    for future in distributed.as_completed(list(pending)):
        kb = pending.pop(future)
        try:
            store(kb, future.result())
        except CompileError as err:
            failures.append(f"{kb.name} ({kb.toolchain.flavor}): {err}")
            continue
        finally:
            future.release()
        result.compiled.append((kb.toolchain.flavor, kb.name))
    if failures:
        raise CompileError(f"{len(failures)} compile(s) failed:\n" + "\n".join(failures))
    result.compiled.sort()
    if publish:
        result.manifests = publish_manifests(result.plans, root)
    return result
