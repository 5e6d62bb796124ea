"""The cache format: the only contract between the build (writer) and the runtime (reader).

Layout: ``build/cache/v<FORMAT>/<target>/<flavor>/``
  manifest.json          the single point of publication (written to a temp file, then renamed)
  bin/<name>-<hash>.<ext> binaries addressed by a content hash of everything that changes them
A flavor names one toolchain configuration (compiler identity and arch), e.g. ``gcc-12.2.0``
or ``nvcc-13.0-sm_90``. The runtime trusts the manifest and each binary's sha256, never doit's
database.

Manifest (schema/manifest.schema.json)::

  {"format": 2, "target": "c", "flavor": "...", "toolchain": {"compiler": ..., "version": ...,
   "flags": [...], "arch": ...},
   "kernels": {"<kernel name>": {"stage": "k2", "spec": {<spec fields>}, "symbol": "<name>",
               "binary": "bin/<name>-<hash>.so", "sha256": "<hex>", "source_sha256": "<hex>",
               "registers": null | int, "spills": null | int, "extra": {...},
               "abi": {"kind": "k2_fused", "kernargs": [{"ctype": "int", "name": "P"}, ...],
                       "buffers": [{"ctype": "const unsigned short*", "name": "x", ...}, ...]}}}}

The ``abi`` record (wino.kinds) is the kernel's calling convention: the kernarg struct's fields
in order (all 32-bit, passed by value on the GPU, by pointer on the host) and the buffer
parameters after it. The runtime binds by it; ``wino_kernels.h`` beside the manifest says the
same in C.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from . import config
from .launch import FORMAT
from .specs import StageSpec, spec_from_fields
from .vocab import Target

MANIFEST = "manifest.json"


def build_folder(root: Path | str | None = None) -> Path:
    """The build folder: the ``root`` given, else $WINO_BUILD, else <project>/build."""
    if root is not None:
        return Path(root)
    return Path(os.environ.get("WINO_BUILD", config.ROOT / "build"))


def cache_root(root: Path | str | None = None) -> Path:
    """<build folder>/cache/v<FORMAT>."""
    return build_folder(root) / "cache" / f"v{FORMAT}"


def flavor_dir(target: Target, flavor: str, root: Path | None = None) -> Path:
    return cache_root(root) / target.value / flavor


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def atomic_write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: a temp file in the same folder, fsync, rename
    (a reader sees the old file or the new one, never a part)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    """Validate, then publish atomically."""
    config.validate(manifest, "manifest", str(directory / MANIFEST))
    return atomic_write(directory / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


@dataclass(frozen=True)
class KernelAbi:
    """A kernel's calling convention as the manifest records it: (C type, name) per kernarg
    field and per buffer parameter, in order."""

    kind: str
    kernargs: tuple[tuple[str, str], ...]
    buffers: tuple[tuple[str, str], ...]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> KernelAbi:
        def pairs(key: str) -> tuple[tuple[str, str], ...]:
            return tuple((item["ctype"], item["name"]) for item in record[key])

        return cls(record["kind"], pairs("kernargs"), pairs("buffers"))

    @property
    def buffer_names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.buffers)

    def pack(self, kernargs: dict[str, int]) -> list[int]:
        """The kernarg values in ABI order (a KeyError names a field the plan lacks)."""
        try:
            return [kernargs[name] for _, name in self.kernargs]
        except KeyError as err:
            raise KeyError(
                f"kernarg {err} of the {self.kind} ABI is not in the launch: the cache was "
                "built by another wino version; rebuild it with `doit compile`"
            ) from None


@dataclass(frozen=True)
class CachedKernel:
    name: str
    spec: StageSpec
    symbol: str
    path: Path
    sha256: str
    registers: int | None
    spills: int | None
    abi: KernelAbi


@dataclass(frozen=True)
class Manifest:
    target: Target
    flavor: str
    directory: Path
    toolchain: dict[str, Any]
    kernels: dict[str, CachedKernel]

    def kernel(self, name: str, verify: bool = True) -> CachedKernel:
        """The named kernel; raises KeyError naming the missing kernel and the build command."""
        if name not in self.kernels:
            raise KeyError(
                f"kernel {name} is not in the {self.target.value} cache "
                f"({self.directory / MANIFEST}); build it with `doit compile:{self.target.value}`"
                " (or add its spec to grids/stages.yaml first)"
            )
        entry = self.kernels[name]
        if verify and _checked(entry.path, entry.sha256) is False:
            raise RuntimeError(
                f"{entry.path}: checksum does not match the manifest; the cache "
                f"is corrupt: rebuild with `doit compile:{self.target.value}`"
            )
        return entry


@cache
def _checked(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == sha256


def _file_key(path: Path) -> tuple[int, int, int] | None:
    """(mtime_ns, size, inode) of a file: what says it changed; None when it is absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


#: Parsed manifests by path: (file key when parsed, Manifest). One parse per published file.
_MANIFESTS: dict[Path, tuple[tuple[int, int, int] | None, Manifest]] = {}
#: Candidate manifests by (target folder, flavor pattern): (folder key when globbed, paths).
_CANDIDATES: dict[tuple[Path, str], tuple[tuple[int, int, int] | None, list[Path]]] = {}


def parse_manifest(path: Path) -> Manifest:
    """Read and schema-validate a manifest file (every call; ``read_manifest`` caches it)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    config.validate(data, "manifest", str(path))
    directory = path.parent
    kernels = {}
    for name, entry in data["kernels"].items():
        kernels[name] = CachedKernel(
            name,
            spec_from_fields(entry["stage"], entry["spec"]),
            entry["symbol"],
            directory / entry["binary"],
            entry["sha256"],
            entry.get("registers"),
            entry.get("spills"),
            KernelAbi.from_record(entry["abi"]),
        )
    return Manifest(Target(data["target"]), data["flavor"], directory, data["toolchain"], kernels)


def read_manifest(path: Path, key: tuple[int, int, int] | None = None) -> Manifest:
    """The manifest at ``path``, parsed once per process and again only when the file's
    (mtime, size, inode) changes (a publication renames a new file into place)."""
    key = _file_key(path) if key is None else key
    hit = _MANIFESTS.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    manifest = parse_manifest(path)
    _MANIFESTS[path] = (key, manifest)
    return manifest


def _candidates(base: Path, flavor: str | None) -> list[Path]:
    """Where the manifests under ``base`` would be, one per flavor folder (present or not);
    the folder is listed again only when it changes (a flavor folder added or removed)."""
    if flavor is not None:
        return [base / flavor / MANIFEST]
    key = _file_key(base)
    hit = _CANDIDATES.get((base, "*"))
    if hit is not None and hit[0] == key and key is not None:
        return hit[1]
    paths = sorted(d / MANIFEST for d in base.glob("*") if d.is_dir())
    _CANDIDATES[(base, "*")] = (key, paths)
    return paths


def manifest_state(
    target: Target, root: Path | None = None, flavor: str | None = None
) -> tuple[Path, tuple[int, int, int]]:
    """(path, file key) of the manifest ``find_manifest`` would read: the given flavor, or the
    only / most recently published one. A few stat calls; raises FileNotFoundError."""
    return manifest_state_in(cache_root(root) / target.value, flavor)


def manifest_state_in(base: Path, flavor: str | None = None) -> tuple[Path, tuple[int, int, int]]:
    """``manifest_state`` of the target folder ``base``."""
    found = []
    target = base.name
    for path in _candidates(base, flavor):
        key = _file_key(path)
        if key is not None:
            found.append((key[0], path, key))
    if not found:
        raise FileNotFoundError(
            f"no {target} cache under {base}: build it with `doit compile:{target}`"
        )
    _, path, key = max(found)
    return path, key


def find_manifest(target: Target, root: Path | None = None, flavor: str | None = None) -> Manifest:
    """The target's manifest: the given flavor, or the only / most recently published one."""
    path, key = manifest_state(target, root, flavor)
    return read_manifest(path, key)
