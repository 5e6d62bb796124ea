"""doit task dicts for dodo.py. Actions are module-level functions with picklable arguments, so
``doit -n N`` (multiprocessing) works.

Task names (`doit list --all` shows them):
  compile                 group: every target whose compiler is present (the default task)
  compile:<target>        one target: its kernels, then its manifest(s)
  compile_<target>        one target's kernels, no manifest
  compile_<target>:<name> one kernel of one target (all the target's archs)
  manifest:<target>       publish the target's manifest per flavor (after its kernels)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from doit.exceptions import TaskFailed
from doit.tools import config_changed

from ..cache import INDEX, MANIFEST, flavor_dir, index_current
from ..specs import spec_from_fields
from ..vocab import Target
from .cache_writer import KernelBinary, build_kernel, write_target_manifest
from .errors import one_line
from .plan import TargetPlan
from .reporter import NOTICE
from .toolchains import CompileError, Toolchain

# Actions -----------------------------------------------------------------------------------------


@one_line
def kernel_action(
    toolchains: tuple[Toolchain, ...], stage: str, fields: dict[str, Any], root: str | None
) -> dict | TaskFailed:
    """doit action of compile_<target>:<name>."""
    try:
        return build_kernel(toolchains, stage, fields, root)
    except CompileError as err:
        return TaskFailed(f"compile failed:\n{err}")


@one_line
def manifest_action(
    toolchains: tuple[Toolchain, ...],
    kernels: list[tuple[str, dict[str, Any], str]],
    root: str | None,
) -> dict | TaskFailed:
    """doit action of manifest:<target>: one manifest per toolchain (flavor)."""
    written = {}
    try:
        for tc in toolchains:
            entries = []
            for stage, fields, source_sha in kernels:
                spec = spec_from_fields(stage, fields)
                entries.append((spec, KernelBinary(spec.name, tc, source_sha, root)))
            written[tc.flavor] = str(write_target_manifest(tc, entries, root))
    except FileNotFoundError as err:
        return TaskFailed(str(err))
    return written


def binaries_intact(binaries: tuple[KernelBinary, ...]) -> bool:
    """doit uptodate check of a kernel task: every binary matches its report's sha256."""
    return all(kb.done() for kb in binaries)


def manifests_current(manifests: tuple[tuple[str, tuple[KernelBinary, ...]], ...]) -> bool:
    """doit uptodate check of a manifest task: each manifest reads and records its binaries'
    current sha256 (a rebuilt binary republishes the manifest), and the index beside it is
    current (``wino.cache.index_current``: a changed declared file rewrites it)."""
    for path, binaries in manifests:
        try:
            kernels = json.loads(Path(path).read_text(encoding="utf-8"))["kernels"]
            if any(kernels[kb.name]["sha256"] != kb.recorded_sha256() for kb in binaries):
                return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not index_current(Path(path)):  # the declared files it stamps changed, or its format
            return False
    return True


def clean_binaries(binaries: tuple[KernelBinary, ...]) -> None:
    """doit clean of a kernel task: its binaries, reports and artefacts."""
    for kb in binaries:
        for path in kb.remove():
            print(f"removed {path}")


# Task dicts --------------------------------------------------------------------------------------
def _digests(binaries: Iterable[KernelBinary]) -> str:
    """The addresses (flavor, kernel, hash16) as one config_changed string."""
    return json.dumps(sorted([kb.toolchain.flavor, kb.name, kb.digest] for kb in binaries))


def kernel_tasks(plan: TargetPlan, root: str | None = None) -> Iterator[dict]:
    """compile_<target> (group) and compile_<target>:<kernel name> per spec."""
    target = plan.target.value
    archs = ", ".join(tc.arch for tc in plan.toolchains) or "none"
    yield {
        "basename": f"compile_{target}",
        "name": None,
        "doc": f"compile the {target} kernels ({len(plan.jobs)} specs; archs: {archs}); "
        "no manifest",
    }
    for job in plan.jobs:
        targets = []
        for kb in job.binaries:
            targets += [str(kb.binary), str(kb.report)]
        yield {
            "basename": f"compile_{target}",
            "name": job.name,
            "doc": f"{job.name} for {target}",
            "actions": [
                (
                    kernel_action,
                    (plan.toolchains, job.spec.stage.short, job.spec.fields_dict(), root),
                )
            ],
            "targets": targets,
            # the binary addresses hash the rendered source, compiler identity, flags and arch:
            # a grid edit reruns exactly the specs whose source changed (no file_dep on YAML)
            # and the content is checked: a corrupted or missing binary is rebuilt
            "uptodate": [
                config_changed(_digests(job.binaries)),
                (binaries_intact, (tuple(job.binaries),)),
            ],
            "clean": [(clean_binaries, (tuple(job.binaries),))],
            "verbosity": 1,
        }


def manifest_task(plan: TargetPlan, root: str | None = None) -> dict:
    """manifest:<target>: after the target's kernels, publish each flavor's manifest."""
    kernels = [
        (job.spec.stage.short, job.spec.fields_dict(), job.source_sha256) for job in plan.jobs
    ]
    flavors = [tc.flavor for tc in plan.toolchains]
    manifests = [
        str(flavor_dir(tc.target, tc.flavor, Path(root) if root else None) / MANIFEST)
        for tc in plan.toolchains
    ]
    return {
        "name": plan.target.value,
        "doc": f"publish the {plan.target.value} manifest(s) ({', '.join(flavors)})",
        "actions": [(manifest_action, (plan.toolchains, kernels, root))],
        "task_dep": [f"compile_{plan.target.value}"],
        # the runtime index beside each manifest too: a cache from before it gets one
        "targets": manifests + [str(Path(m).with_name(INDEX)) for m in manifests],
        "uptodate": [
            config_changed(_digests(kb for job in plan.jobs for kb in job.binaries)),
            (manifests_current, (_published(plan, manifests),)),
        ],
        "clean": True,
    }


def _published(plan: TargetPlan, manifests: list[str]) -> tuple:
    """(manifest path, the binaries it lists) per flavor, for manifests_current."""
    return tuple(
        (path, tuple(kb for job in plan.jobs for kb in job.binaries if kb.toolchain == tc))
        for path, tc in zip(manifests, plan.toolchains, strict=True)
    )


def compile_task(plan: TargetPlan) -> dict:
    """compile:<target>: the target's kernels and manifest; when the target (or one of its
    archs) is skipped, it says why on stderr: only when the target is asked for."""
    target = plan.target.value
    notice = {"actions": [(notice_action, (plan.messages,))], "meta": NOTICE}
    if not plan.toolchains:
        why = "; ".join(plan.messages) or "no toolchain"
        return {"name": target, **notice, "doc": f"skipped: {why}"}
    return {
        "name": target,
        **(notice if plan.messages else {"actions": None}),
        "task_dep": [f"manifest:{target}"],
        "doc": f"build the {target} cache ({len(plan.jobs)} kernels, then the manifest)",
    }


def notice_action(messages: tuple[str, ...]) -> None:
    for message in messages:
        print(message, file=sys.stderr)


# Checks ------------------------------------------------------------------------------------------
@one_line
def validate_action(paths: list[str]) -> None:
    """Validate each grids/<kind>.yaml against schema/<kind>.schema.json, then expand the grid
    (which runs the refusal rules); raises ConfigError naming the bad field."""
    from .. import algorithms, config, grid

    for path in paths:
        config.load_file(path, Path(path).stem)
        print(f"{path}: valid")
    print(f"algorithms: {len(algorithms.crossovers())} crossover rules")  # each rule probed
    accepted, refused = grid.expand()
    print(f"grid: {sum(len(v) for v in accepted.values())} accepted specs, {len(refused)} refused")
    for target in Target:
        accepted, refused = grid.expand(target)
        count = sum(len(v) for v in accepted.values())
        print(f"  {target.value}: {count} accepted specs, {len(refused)} refused")


def golden_action() -> TaskFailed | None:
    """Check the golden shard; fail listing each changed hash."""
    from . import golden

    mismatches, notes = golden.check()
    for note in notes:
        print(note)
    if mismatches:
        return TaskFailed(
            "golden hashes changed (re-record with `doit golden_record` if that "
            "is intended, and say so in the commit):\n" + "\n".join(mismatches)
        )
    print(f"golden: {len(golden.SHARD)} kernels match")
    return None


def golden_record_action() -> None:
    from . import golden

    for path in golden.record():
        print(f"recorded {path}")
