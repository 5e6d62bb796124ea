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
from .toolchains import Toolchain, compile_source


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
        return self.report.is_file() and self.binary.is_file()


def _publish(scratch_file: Path, final: Path) -> str:
    """Move a compiler output into bin/ (atomic rename); its sha256."""
    digest = cache.sha256_file(scratch_file)
    os.replace(scratch_file, final)
    return digest


def compile_kernel(kb: KernelBinary, src: Path) -> dict[str, Any]:
    """Compile ``src`` into kb's content-addressed place; the report dict (also written beside)."""
    bin_dir = kb.binary.parent
    bin_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{kb.name}-", dir=bin_dir))
    try:
        out = compile_source(kb.toolchain, src, kb.name, scratch)
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
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
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
