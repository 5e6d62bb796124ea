"""Writing the cache (format: wino.cache): content-addressed binaries and atomic manifests.

A binary lives at ``bin/<name>-<hash16>.<ext>`` where the hash is sha256 over the rendered source,
the compiler identity, the flags and the arch (never paths or timestamps), so a path names its
content: a binary that exists is never rebuilt, and two grids that share a spec share its binary.
Beside each binary a report ``bin/<name>-<hash16>.json`` keeps what the compiler said (registers,
spills, the log); it is written last, so its presence means the kernel is complete. The manifest,
written last of all through wino.cache.write_manifest, is the single point of publication; the
C header of the same ABI (wino.builder.header) is written just before it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import cache, config
from ..codegen.render import render
from ..kinds import kind_of
from ..launch import FORMAT
from ..specs import StageSpec, spec_from_fields
from .header import HEADER, header_text
from .paths import source_path, write_if_changed
from .toolchains import Compiled, Toolchain, compile_source


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def binary_digest(source_sha256: str, tc: Toolchain) -> str:
    """16 hex digits of sha256 over (source, compiler identity, flags, arch)."""
    key = json.dumps({"source_sha256": source_sha256, **tc.fingerprint()}, sort_keys=True)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class KernelBinary:
    """Where one kernel's binary for one toolchain goes, known before it is compiled."""

    name: str
    toolchain: Toolchain
    source_sha256: str
    root: str | None = None  # the build folder (None: WINO_BUILD or <ROOT>/build)

    @property
    def digest(self) -> str:
        return binary_digest(self.source_sha256, self.toolchain)

    @property
    def directory(self) -> Path:
        """The flavor folder: build/cache/v<FORMAT>/<target>/<flavor>/."""
        return cache.flavor_dir(
            self.toolchain.target, self.toolchain.flavor, Path(self.root) if self.root else None
        )

    @property
    def stem(self) -> str:
        return f"bin/{self.name}-{self.digest}"

    @property
    def binary(self) -> Path:
        return self.directory / f"{self.stem}.{self.toolchain.binary_ext}"

    @property
    def report(self) -> Path:
        return self.directory / f"{self.stem}.json"

    def done(self) -> bool:
        """Built and intact: the report is there and the binary's content matches it (a
        corrupted or truncated binary is rebuilt, whatever doit's database says)."""
        try:
            report = json.loads(self.report.read_text(encoding="utf-8"))
            return cache.sha256_file(self.binary) == report["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def recorded_sha256(self) -> str | None:
        """The binary's sha256 as its report records it (None: no readable report)."""
        try:
            return json.loads(self.report.read_text(encoding="utf-8"))["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def remove(self) -> list[Path]:
        """Delete the binary, its report and the artefacts beside it (bin/<name>-<hash16>.*)."""
        removed = sorted(self.directory.glob(f"{self.stem}.*"))
        for path in removed:
            path.unlink(missing_ok=True)
        return removed


def _publish(scratch_file: Path, final: Path) -> str:
    """Move a compiler output into bin/ (atomic rename); its sha256."""
    digest = cache.sha256_file(scratch_file)
    os.replace(scratch_file, final)
    return digest


def compile_kernel(kb: KernelBinary, src: Path) -> dict[str, Any]:
    """Compile ``src`` into kb's content-addressed place; the report dict (also written beside)."""
    bin_dir = kb.binary.parent
    bin_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{kb.name}-{os.getpid()}-", dir=bin_dir))
    try:
        return publish_compiled(kb, compile_source(kb.toolchain, src, kb.name, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def publish_compiled(kb: KernelBinary, out: Compiled) -> dict[str, Any]:
    """Move a compile's outputs (files on the same filesystem as bin/: a local compile's scratch
    folder, or what a remote worker sent, wino.scale.build) to kb's addresses; the report is
    written last (present = complete). Returns the report dict."""
    report: dict[str, Any] = {
        "name": kb.name,
        "binary": kb.binary.relative_to(kb.directory).as_posix(),
        "source_sha256": kb.source_sha256,
        "registers": out.report["registers"],
        "spills": out.report["spills"],
        "extra": dict(out.report["extra"]),
        "log": out.log,
    }
    for kind, path in sorted(out.artefacts.items()):
        final = kb.directory / f"{kb.stem}.{kind}"
        report["extra"][f"{kind}_sha256"] = _publish(path, final)
        report["extra"][kind] = final.relative_to(kb.directory).as_posix()
    report["sha256"] = _publish(out.binary, kb.binary)
    cache.atomic_write(kb.report, json.dumps(report, indent=1, sort_keys=True) + "\n")
    return report


def build_kernel(
    toolchains: tuple[Toolchain, ...], stage: str, fields: dict[str, Any], root: str | None = None
) -> dict[str, list[str]]:
    """Render one spec for its target, write the source if it changed, and compile it for each
    toolchain (arch) whose binary is not there yet. Returns the flavors compiled and skipped."""
    spec = spec_from_fields(stage, fields)
    target = toolchains[0].target
    text = render(spec, target)
    src = source_path(target, spec.name, root)
    write_if_changed(src, text)
    done: dict[str, list[str]] = {"compiled": [], "present": []}
    for tc in toolchains:
        kb = KernelBinary(spec.name, tc, sha256_text(text), root)
        if kb.done():
            done["present"].append(tc.flavor)
            continue
        compile_kernel(kb, src)
        done["compiled"].append(tc.flavor)
    return done


def manifest_entry(spec: StageSpec, kb: KernelBinary) -> dict[str, Any]:
    """One manifest kernel entry, from the binary's report."""
    try:
        report = json.loads(kb.report.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{kb.report}: {spec.name} is not built for "
            f"{kb.toolchain.flavor}; run `doit compile_"
            f"{kb.toolchain.target.value}:{spec.name}`"
        ) from None
    return {
        "stage": spec.stage.short,
        "spec": spec.fields_dict(),
        "symbol": spec.name,
        "binary": report["binary"],
        "sha256": report["sha256"],
        "source_sha256": report["source_sha256"],
        "registers": report["registers"],
        "spills": report["spills"],
        "extra": report["extra"],
        "abi": kind_of(spec).abi_record(spec),
    }


def write_target_manifest(
    tc: Toolchain, kernels: list[tuple[StageSpec, KernelBinary]], root: str | None = None
) -> Path:
    """Publish the flavor's manifest: exactly the given kernels (atomic, validated)."""
    manifest = {
        "format": FORMAT,
        "target": tc.target.value,
        "flavor": tc.flavor,
        "toolchain": tc.manifest_toolchain(),
        "kernels": {spec.name: manifest_entry(spec, kb) for spec, kb in kernels},
    }
    directory = cache.flavor_dir(tc.target, tc.flavor, Path(root) if root else None)
    config.validate(manifest, "manifest", str(directory / cache.MANIFEST))
    cache.atomic_write(directory / HEADER, header_text(manifest))  # before the publication
    return cache.write_manifest(directory, manifest)


#: Scratch a build process leaves while it runs: compiler folders ``.<name>-<pid>-<rand>`` in
#: bin/, ``.<file>.<pid>.tmp`` files (reports, sources) and ``.<file>-<pid>-<rand>.tmp``
#: (wino.cache.atomic_write: manifests, headers).
_SCRATCH = re.compile(
    r"\.(?:.+-(?P<dir>\d+)-[^.]+|.+\.(?P<tmp>\d+)\.tmp|.+-(?P<atomic>\d+)-[^.]+\.tmp)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def sweep_scratch(root: str | Path | None = None) -> list[Path]:
    """Remove the scratch a killed build left (its process is gone) under the build folder's
    cache and sources; a live build's scratch is left alone. Returns what was removed."""
    from .paths import build_dir

    folder = build_dir(root)
    removed = []
    for parent in [
        *folder.glob("cache/v*/*/*/bin"),
        *folder.glob("cache/v*/*/*"),
        *folder.glob("src/*"),
    ]:
        for path in parent.glob(".*"):
            match = _SCRATCH.fullmatch(path.name)
            pid = match and next(int(g) for g in match.groups() if g)
            if pid and pid != os.getpid() and not _alive(pid):
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
                removed.append(path)
    return removed
