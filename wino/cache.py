"""The cache format: the only contract between the build (writer) and the runtime (reader).

Layout: ``build/cache/v<FORMAT>/<target>/<flavor>/``
  manifest.json          the single point of publication (written to a temp file, then renamed)
  bin/<name>-<hash>.<ext> binaries addressed by a content hash of everything that changes them
A flavor names one toolchain configuration (compiler identity and arch), e.g. ``gcc-12.2.0``
or ``nvcc-13.0-sm_90``. The runtime trusts the manifest and each binary's sha256, never doit's
database. It finds a target's cache on ``search_path``: the cache root given, else $WINO_BUILD,
else ./build, the checkout's build/ and the cache packaged in an installed wheel.

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
import re
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache, partial
from pathlib import Path
from typing import Any

from . import config
from .files import chmod_as_open
from .launch import FORMAT
from .specs import StageSpec, spec_from_fields
from .vocab import Target

MANIFEST = "manifest.json"


class CacheSource(Enum):
    """Where the runtime found a cache, in the order it looks (``search_path``)."""

    ROOT = "the cache root given"
    ENV = "$WINO_BUILD"
    CWD = "./build"
    CHECKOUT = "the checkout's build folder"
    PACKAGED = "the installed package"


@dataclass(frozen=True)
class BuildFolder:
    """A build folder the runtime may read, and why it is on the search path."""

    path: Path
    source: CacheSource


def _env_build() -> str | None:
    """$WINO_BUILD, where an empty value means unset."""
    return os.environ.get("WINO_BUILD") or None


def build_folder(root: Path | str | None = None) -> Path:
    """The build folder the build writes (and the tuning DB lives in): the ``root`` given, else
    $WINO_BUILD, else the checkout's build/ (./build when running from an installed wheel)."""
    if root is not None:
        return Path(root)
    if _env_build():
        return Path(_env_build())
    return config.ROOT / "build" if config.IS_CHECKOUT else Path.cwd() / "build"


def search_path(root: Path | str | None = None) -> list[BuildFolder]:
    """The build folders the runtime reads, in order. An explicit ``root``, else $WINO_BUILD, is
    the only place looked at (a choice is never second-guessed); otherwise ./build, the
    checkout's build/ and the cache packaged in the wheel, the first holding the target wins."""
    return _unique(_places(root))


def _places(root: Path | str | None) -> list[BuildFolder]:
    """``search_path`` before a folder reached twice (./build is the checkout's) is dropped."""
    if root is not None:
        return [BuildFolder(Path(root), CacheSource.ROOT)]
    if _env_build():
        return [BuildFolder(Path(_env_build()), CacheSource.ENV)]
    found = [BuildFolder(Path.cwd() / "build", CacheSource.CWD)]
    if config.IS_CHECKOUT:
        found.append(BuildFolder(config.ROOT / "build", CacheSource.CHECKOUT))
    found.append(BuildFolder(config.PACKAGED / "build", CacheSource.PACKAGED))
    return found


def _unique(folders: list[BuildFolder]) -> list[BuildFolder]:
    """The folders but those whose real path an earlier one has."""
    if len(folders) < 2:
        return folders
    seen: set[str] = set()
    unique = []
    for folder in folders:
        real = os.path.realpath(folder.path)
        if real not in seen:
            seen.add(real)
            unique.append(folder)
    return unique


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


#: Files this process has published with ``atomic_write`` (manifests, tuning DBs): a change
#: tells the runtime's seen-dispatch cache to look at the files again at once.
publications = 0


def atomic_write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: a temp file in the same folder, fsync, rename
    (a reader sees the old file or the new one, never a part)."""
    global publications
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}-{os.getpid()}-", suffix=".tmp", dir=path.parent
    )
    try:
        chmod_as_open(fd)  # readable by whoever may read the cache (and in a wheel), not 0600
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        publications += 1
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    """Validate, then publish atomically; then the runtime index beside it (``runtime_index``:
    a reader that finds it stale, or absent, reads the manifest itself)."""
    config.validate(manifest, "manifest", str(directory / MANIFEST))
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    path = atomic_write(directory / MANIFEST, text)
    index = runtime_index(path, manifest, text, _published_state(path, text))
    if index is None:
        (directory / INDEX).unlink(missing_ok=True)
    else:
        atomic_write(directory / INDEX, index)
    return path


# The runtime index ------------------------------------------------------------------------------
#: Beside each manifest: what a dispatch needs of it, in a form that loads in a millisecond, with
#: the build's validation stamp. It is derived data: trusted only for the manifest it was made
#: from (its file state as published, else the sha256 of its bytes) and while the schemas hold
#: the content they did (their settled file states, else their sha256: wino.config.read_settled;
#: else the manifest is read and validated as always), so a changed or hand-edited manifest is
#: still validated in full.
#:
#: JSON lines: a header line (format, the manifest's sha256 and file state, the schema's
#: sha256 and file state, the manifest's header fields, the sections' keys and where each one
#: ends), then one line per section: ``abi <n>`` (the distinct abi records, one per line),
#: ``declared <kind>`` (a stamped YAML file's hashes, file states and top-level keys) with
#: ``declared <kind> <key>`` (its validated data of one key), and ``kernels <stage> <tile>
#: <io>`` (the records of one group, by name). A reader keeps the file open and reads
#: (``os.pread``) and parses the header and only the sections it uses: a dispatch reads a few
#: kernel groups of the hundred, the abis of the kernels it runs and the declared data it uses.
INDEX = "manifest.index.jsonl"
INDEX_FORMAT = 4
#: A kernel's record in the index: these manifest fields in this order, the abi by its number.
INDEX_FIELDS = ("stage", "spec", "binary", "sha256", "registers", "spills", "abi")
#: The declared files the runtime reads (spec axes and the default pick order; the rule book; the
#: algorithm crossover rules; the targets' storage table), stamped in the index by their
#: content's sha256 (and settled file state) with their validated data.
STAMPED = ("stages", "refusals", "algorithms", "targets")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _published_state(path: Path, text: str) -> list[int] | None:
    """The file state of the manifest just published at ``path``, when the file there still
    holds exactly ``text`` (another publisher may have renamed over it); else None."""
    before = config.file_state(path)
    try:
        same = path.read_bytes() == text.encode("utf-8")
    except OSError:
        return None
    return before if same and config.file_state(path) == before else None


def group_key(stage: str, spec: dict[str, Any]) -> str:
    """The index section of a kernel's record: its stage, tile and io dtype."""
    return f"kernels {stage} {spec.get('tile')} {spec.get('io')}"


def runtime_index(
    path: Path, manifest: dict[str, Any], text: str, state: list[int] | None = None
) -> str | None:
    """The index of a manifest the schema accepted (``text`` as published at ``path``, its
    file ``state`` then), or None when an entry would be refused on reading (the reader then
    refuses the manifest itself)."""
    try:
        for name, fields in manifest["kernels"].items():
            _entry(path, manifest["target"], name, fields)
    except CacheError:
        return None
    abis: list[dict[str, Any]] = []
    groups: dict[str, Any] = {}
    for name, fields in sorted(manifest["kernels"].items()):  # the same bytes from any build
        if fields["abi"] not in abis:
            abis.append(fields["abi"])
        record = {**fields, "abi": abis.index(fields["abi"])}
        group = groups.setdefault(group_key(fields["stage"], fields["spec"]), {})
        group[name] = [record.get(key) for key in INDEX_FIELDS]
    sections: dict[str, Any] = {f"abi {number}": abi for number, abi in enumerate(abis)}
    for kind in STAMPED:
        stamp, data = _declared_stamp(kind)
        sections[f"declared {kind}"] = stamp
        sections.update({f"declared {kind} {key}": value for key, value in data.items()})
    sections.update(groups)
    lines, ends, at = [], [], 0
    for value in sections.values():
        line = json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n"
        at += len(line.encode("utf-8"))
        lines.append(line)
        ends.append(at)
    header = {
        "index_format": INDEX_FORMAT,
        "manifest_sha256": _sha256(text.encode("utf-8")),
        "manifest_state": state,
        **_schema_stamp("manifest"),
        "manifest": {k: manifest[k] for k in ("format", "target", "flavor", "toolchain")},
        "kernels": len(manifest["kernels"]),
        "sections": list(sections),  # keys and ends: a table that parses in microseconds
        "ends": ends,
    }
    return json.dumps(header, sort_keys=True, separators=(",", ":")) + "\n" + "".join(lines)


def _declared_stamp(kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """grids/<kind>.yaml's stamp (its content hash and settled file state, its schema's, the
    data's top-level keys) and its data, validated now (the rule book probed)."""
    from .refusals import book

    path = config.GRIDS / f"{kind}.yaml"
    raw, state = config.read_settled(path)
    data = config.validate(config.load_yaml_text(raw.decode("utf-8"), str(path)), kind, str(path))
    if kind == "refusals":
        book(data)  # every rule probed: a stamped rule book is not probed at run time
    if kind == "algorithms":
        from .algorithms import from_data

        from_data(data, path)  # likewise the crossover rules
    stamp = {"sha256": _sha256(raw), "state": state, **_schema_stamp(kind), "keys": list(data)}
    return stamp, data


def _schema_stamp(kind: str) -> dict[str, Any]:
    """schema/<kind>.schema.json's sha256 and settled file state, as a stamp records them."""
    raw, state = config.read_settled(config.SCHEMAS / f"{kind}.schema.json")
    return {"schema_sha256": _sha256(raw), "schema_state": state}


class Index:
    """A runtime index as read: its header, and its sections read and parsed on first use
    from the file opened when the header was read (a publication renames a new file into
    place, so the open one keeps the content the header describes)."""

    def __init__(
        self,
        header: dict[str, Any],
        where: dict[str, tuple[int, int]],
        fd: int,
        start: int,
        path: Path,
    ):
        self.header, self._where, self._fd, self._start, self._path = header, where, fd, start, path
        self._parsed: dict[str, Any] = {}

    def __del__(self, close=os.close) -> None:
        """Close the file (``close`` is bound here: at interpreter exit ``os`` may be gone).
        Not weakref.finalize: its first use in a process costs a first dispatch 50 us."""
        close(self._fd)

    def section(self, key: str) -> Any:
        """A section's data (None when the index has no such section)."""
        if key not in self._parsed:
            where = self._where.get(key)
            if where is None:
                return None
            begin, end = where
            data = os.pread(self._fd, end - begin, self._start + begin)
            try:  # decoded here: json.loads would detect the encoding of bytes first
                self._parsed[key] = json.loads(data.decode("utf-8"))
            except ValueError:  # not JSON (or not UTF-8)
                raise CacheError(
                    f"{self._path}: section {key!r} is not what its header says (the file "
                    "was written in place after it was opened); rebuild it: `doit manifest`"
                ) from None
        return self._parsed[key]

    def groups(self) -> list[str]:
        """The kernel group sections' keys."""
        return [key for key in self._where if key.startswith("kernels ")]


#: The first read of an index: its header line (about 5 KB) and usually nothing more.
_HEADER_READ = 1 << 14


def _open_index(path: Path) -> Index | None:
    """The index at ``path`` with its header read (the file kept open for its sections);
    None when it is absent or its first line is not the header of an index of this format."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        head, size = b"", _HEADER_READ
        while b"\n" not in head:
            more = os.pread(fd, size, len(head))
            if not more:
                raise ValueError("no header line")
            head, size = head + more, size * 2
        start = head.index(b"\n") + 1
        header = json.loads(head[:start])
        if not isinstance(header, dict) or header.get("index_format") != INDEX_FORMAT:
            raise ValueError("not the header of an index of this format")
        where = _section_table(header)
    except (OSError, ValueError, KeyError, TypeError):
        os.close(fd)
        return None
    return Index(header, where, fd, start, path)  # closes the file when dropped


def _section_table(header: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Each section's (start, end) after the header line, from its keys and ends."""
    ends = header["ends"]
    return dict(zip(header["sections"], zip([0, *ends[:-1]], ends, strict=True), strict=True))


def _read_index(path: Path) -> tuple[Index | None, bytes | None]:
    """(the index beside the manifest at ``path`` when it is of this manifest and of these
    schemas, else None; the manifest's bytes when they were read to tell). The manifest is
    hashed only when its file state is not the one the build published (a copied or
    installed cache): the state of a file changes with any write to it or rename over it."""
    index = _open_index(path.parent / INDEX)
    if index is None:
        return None, None
    header = index.header
    if not config.schema_holds("manifest", header.get("schema_sha256"), header.get("schema_state")):
        return None, None
    if config.unchanged(path, header.get("manifest_state")):
        return index, None
    raw = path.read_bytes()
    return (index if header.get("manifest_sha256") == _sha256(raw) else None), raw


def index_current(path: Path) -> bool:
    """Whether the index beside the manifest at ``path`` is the one a build would write now:
    of this format and schemas, of this manifest, and stamping the declared files as they are
    (a rule or comment edited in grids/*.yaml changes no kernel, but a stale stamp makes every
    first dispatch parse and validate the YAML again: the build then rewrites the index)."""
    index, _ = _read_index(path)
    if index is None:
        return False
    for kind in STAMPED:
        stamp = index.section(f"declared {kind}") or {}
        content = (config.GRIDS / f"{kind}.yaml").read_bytes()
        if stamp.get("sha256") != _sha256(content):
            return False
        if stamp.get("schema_sha256") != config.schema_sha256(kind):
            return False
    return True


class IndexedKernels(Mapping):
    """A manifest's kernels read from its index: a group of records (one stage, tile and io
    dtype) is parsed on first use, and an entry is checked and made a CachedKernel on first
    access (a dispatch touches the few its plan runs; the ranking reads the specs of one
    stage, tile and dtype)."""

    def __init__(self, path: Path, target: str, index: Index):
        self._path, self._target, self._index = path, target, index
        self._where: dict[str, str] = {}  # kernel name -> its group, for the groups parsed
        self._read: set[str] = set()  # the groups parsed
        self._made: dict[str, CachedKernel] = {}
        self._specs: dict[str, StageSpec] = {}

    def _group(self, key: str) -> dict[str, list]:
        records = self._index.section(key) or {}
        if key not in self._read:
            self._read.add(key)
            self._where.update(dict.fromkeys(records, key))
        return records

    def _record(self, name: str) -> list | None:
        key = self._where.get(name)
        if key is None:  # not in a group read so far: read them all (a name alone has none)
            for group in self._index.groups():
                self._group(group)
            key = self._where.get(name)
        return None if key is None else self._group(key)[name]

    def __getitem__(self, name: str) -> CachedKernel:
        made = self._made.get(name)
        if made is None:
            record = self._record(name)
            if record is None:
                raise KeyError(name)
            fields = dict(zip(INDEX_FIELDS, record, strict=True))
            fields["symbol"], fields["abi"] = name, self._index.section(f"abi {fields['abi']}")
            spec = self._specs.get(name)  # the ranking made it: checked again below
            made = self._made[name] = _entry(self._path, self._target, name, fields, spec)
        return made

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._record(name) is not None

    def __iter__(self):
        for group in self._index.groups():
            yield from self._group(group)

    def __len__(self) -> int:
        return self._index.header["kernels"]

    def names_of(self, stage: str, tile: str, io: str) -> list[str]:
        """The kernels of one stage, tile and io dtype, by their recorded spec fields."""
        return list(self._group(group_key(stage, {"tile": tile, "io": io})))

    def records_of(self, stage, tile, io, xdtype=None, epilogue=None) -> list[tuple[str, dict]]:
        """``Manifest.records_of`` on the index: the group's records, no spec made."""
        group = self._group(group_key(stage.short, {"tile": tile.name, "io": io.value}))
        x = None if xdtype is None else xdtype.value
        e = None if epilogue is None else epilogue.value
        specs = ((name, record[1]) for name, record in group.items())  # (stage, spec, ...)
        return [
            (name, fields)
            for name, fields in specs
            if (x is None or fields.get("xdtype", x) == x)
            and (e is None or fields.get("epilogue", e) == e)
        ]

    def spec(self, name: str) -> StageSpec:
        """A kernel's spec alone (the ranking's view; no entry made): the build checked that
        every entry of this exact content names its spec (``runtime_index``), so the index's
        name is the spec's name."""
        spec = self._specs.get(name)
        if spec is None:
            stage, fields = self._record(name)[:2]
            spec = self._specs[name] = spec_from_fields(stage, fields)
            spec.__dict__["name"] = name  # the cached kernel_name (wino.specs)
        return spec


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


class CacheError(RuntimeError):
    """A cache wino will not trust: the message names the file, what is wrong and the command
    that repairs it."""


class CacheWarning(UserWarning):
    """A broken manifest was passed over for a valid one of another flavor."""


#: A manifest's binary path: ``bin/<kernel name>-<hash16>.<ext>``, relative, no ``..``.
_BINARY = re.compile(r"bin/(?P<name>[A-Za-z0-9_]+)-[0-9a-f]{16}\.[a-z]+")


def _repair(target: str) -> str:
    return f"rebuild with `doit compile:{target}` (`wino cache verify --target {target}` checks it)"


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
    kernels: Mapping[str, CachedKernel]  # a dict, or IndexedKernels (made on first access)
    source: CacheSource | None = None  # where the search path found it (None: read directly)

    def records_of(self, stage, tile, io, xdtype=None, epilogue=None) -> list[tuple[str, dict]]:
        """(name, recorded spec fields) of the kernels of one stage, tile and io dtype (a
        ``pick.Ranking`` source: only these entries are read, and no spec is made).
        ``xdtype`` and ``epilogue``, when given, leave out the kernels whose recorded spec has
        another value of that field (the ranking would pass them over: it filters on the
        same fields)."""
        kernels = self.kernels
        if isinstance(kernels, IndexedKernels):
            return kernels.records_of(stage, tile, io, xdtype, epilogue)
        specs = ((name, k.spec) for name, k in kernels.items())
        return [
            (name, s.fields_dict())
            for name, s in specs
            if s.stage is stage and s.tile == tile and s.io is io
        ]

    def spec(self, name: str) -> StageSpec:
        """The named kernel's spec (from the index without making its entry)."""
        kernels = self.kernels
        if isinstance(kernels, IndexedKernels):
            return kernels.spec(name)
        return kernels[name].spec

    def origin(self) -> str:
        """The cache folder and, when it was searched for, why it was picked."""
        why = f" ({self.source.value})" if self.source is not None else ""
        return f"{self.directory}{why}"

    @property
    def path(self) -> Path:
        return self.directory / MANIFEST

    def kernel(self, name: str, verify: bool = True) -> CachedKernel:
        """The named kernel; KeyError naming the missing kernel and the build command; with
        ``verify``, CacheError unless the binary lies inside the cache folder and its sha256
        matches the manifest (check this before loading it)."""
        if name not in self.kernels:
            raise KeyError(
                f"kernel {name} is not in the {self.target.value} cache "
                f"({self.path}); build it with `doit compile:{self.target.value}`"
                " (or add its spec to grids/stages.yaml first)"
            )
        entry = self.kernels[name]
        if verify:
            problem = binary_problem(self.directory, entry)
            if problem:
                raise CacheError(
                    f"{self.path}: kernel {name}: {problem}; {_repair(self.target.value)}"
                )
        return entry

    def image(self, name: str) -> bytes:
        """The named kernel's binary, read once and checked: it lies inside the cache folder
        and the sha256 of exactly these bytes matches the manifest. Load these bytes, never the
        path again (a file swapped after the check would load unchecked); KeyError or
        CacheError as ``kernel``."""
        entry = self.kernel(name, verify=False)
        resolved, problem = _inside(self.directory, entry)
        if problem is None:
            try:
                data = resolved.read_bytes()
            except OSError as err:
                problem = f"binary {entry.path} cannot be read ({err.strerror})"
            else:
                if hashlib.sha256(data).hexdigest() == entry.sha256:
                    return data
                problem = (
                    f"binary {entry.path}: its sha256 does not match the manifest "
                    "(corrupt or replaced)"
                )
        raise CacheError(f"{self.path}: kernel {name}: {problem}; {_repair(self.target.value)}")


def _inside(directory: Path, entry: CachedKernel) -> tuple[Path, str | None]:
    """The binary's resolved path, and what is wrong with where it lies (missing, outside)."""
    try:
        resolved = entry.path.resolve(strict=True)
    except OSError:
        return entry.path, f"binary {entry.path} is missing"
    if not resolved.is_relative_to(directory.resolve()):
        return resolved, (
            f"binary {entry.path} resolves to {resolved}, outside the cache folder {directory}"
        )
    return resolved, None


def binary_problem(directory: Path, entry: CachedKernel) -> str | None:
    """What is wrong with a kernel's binary (outside the cache, missing, checksum), or None."""
    resolved, problem = _inside(directory, entry)
    if problem is not None:
        return problem
    stat = resolved.stat()
    state = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
    if not _checked(resolved, entry.sha256, state):
        return f"binary {entry.path}: its sha256 does not match the manifest (corrupt or replaced)"
    return None


@cache
def _checked(path: Path, sha256: str, state: tuple[int, ...]) -> bool:
    """sha256 check, remembered per file state (size, mtime, ctime, inode): a file written
    since, even with its mtime put back, is hashed again."""
    return sha256_file(path) == sha256


def _load_json(path: Path, target: str, raw: bytes | None = None) -> Any:
    try:
        return json.loads((path.read_bytes() if raw is None else raw).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CacheError(
            f"{path}: not a wino manifest (not JSON: {err}); {_repair(target)}"
        ) from None


def _entry(
    path: Path, target: str, name: str, fields: dict[str, Any], spec: StageSpec | None = None
) -> CachedKernel:
    """One manifest entry, refused unless its symbol, spec and binary path all name it
    (``spec``: the entry's spec when it was made already, from these fields)."""

    def bad(what: str) -> CacheError:
        return CacheError(f"{path}: kernel {name}: {what}; {_repair(target)}")

    if fields["symbol"] != name:
        raise bad(f"symbol {fields['symbol']!r} is not the kernel's name")
    try:
        spec = spec_from_fields(fields["stage"], fields["spec"]) if spec is None else spec
    except (TypeError, ValueError) as err:
        raise bad(f"spec is not valid ({err})") from None
    if spec.name != name:
        raise bad(f"spec names kernel {spec.name}, not {name}")
    match = _BINARY.fullmatch(fields["binary"])
    if match is None or match["name"] != name:
        raise bad(
            f"binary {fields['binary']!r} is not bin/{name}-<hash16>.<ext> inside the cache folder"
        )
    return CachedKernel(
        name,
        spec,
        name,
        path.parent / fields["binary"],
        fields["sha256"],
        fields.get("registers"),
        fields.get("spills"),
        KernelAbi.from_record(fields["abi"]),
    )


def _file_key(path: Path) -> tuple[int, int, int] | None:
    """(mtime_ns, size, inode) of a file: what says it changed; None when it is absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


#: Parsed manifests by (path, where found): (file key when parsed, Manifest). One parse per
#: published file.
_MANIFESTS: dict[tuple[Path, Any], tuple[tuple[int, int, int] | None, Manifest]] = {}
#: Candidate manifests by (target folder, flavor pattern): (folder key when globbed, paths).
_CANDIDATES: dict[tuple[Path, str], tuple[tuple[int, int, int] | None, list[Path]]] = {}


def parse_manifest(path: Path, source: CacheSource | None = None) -> Manifest:
    """Read and check a manifest (every call; ``read_manifest`` caches it): JSON, schema,
    format, its folder's target and flavor, and each entry (symbol = name = the spec's name,
    binary inside bin/). Loads no binary. ``source``: where the search path found it."""
    path = Path(path)
    directory = path.parent
    folder_target = directory.parent.name
    index, raw = _read_index(path)
    if index is not None:  # this exact content was validated by the build
        return _indexed(path, index, source)
    data = _load_json(path, folder_target, raw)
    try:
        config.validate(data, "manifest", str(path))
    except config.ConfigError as err:
        raise CacheError(f"{err}; {_repair(folder_target)}") from None
    _check_folder(path, data)
    kernels = {
        name: _entry(path, folder_target, name, fields) for name, fields in data["kernels"].items()
    }
    return Manifest(
        Target(data["target"]), data["flavor"], directory, data["toolchain"], kernels, source
    )


def _indexed(path: Path, index: Index, source: CacheSource | None) -> Manifest:
    """The Manifest of a matching index: the stamped declared files offered to wino.config,
    the kernels made on first access."""
    header = index.header["manifest"]
    _check_folder(path, header)
    for kind in STAMPED:
        stamp = index.section(f"declared {kind}")
        config.stamp(
            kind,
            config.Stamp(
                stamp["sha256"],
                stamp["schema_sha256"],
                tuple(stamp["keys"]),
                partial(_declared_part, index, kind),
                stamp["state"],
                stamp["schema_state"],
            ),
        )
    kernels = IndexedKernels(path, header["target"], index)
    return Manifest(
        Target(header["target"]),
        header["flavor"],
        path.parent,
        header["toolchain"],
        kernels,
        source,
    )


def _declared_part(index: Index, kind: str, key: str) -> Any:
    """The stamped data of one top-level key of grids/<kind>.yaml (a config.Stamp's part)."""
    return index.section(f"declared {kind} {key}")


def _check_folder(path: Path, data: dict[str, Any]) -> None:
    """A manifest lives in the folder of its own target and flavor."""
    folder_target, folder_flavor = path.parent.parent.name, path.parent.name
    if (data["target"], data["flavor"]) != (folder_target, folder_flavor):
        raise CacheError(
            f"{path}: manifest of {data['target']}/{data['flavor']} found in the "
            f"{folder_target}/{folder_flavor} folder; {_repair(folder_target)}"
        )


def read_manifest(
    path: Path, key: tuple[int, int, int] | None = None, source: CacheSource | None = None
) -> Manifest:
    """The manifest at ``path``, parsed once per process and again only when the file's
    (mtime, size, inode) changes (a publication renames a new file into place)."""
    key = _file_key(path) if key is None else key
    hit = _MANIFESTS.get((path, source))
    if hit is not None and hit[0] == key:
        return hit[1]
    manifest = parse_manifest(path, source)
    _MANIFESTS[(path, source)] = (key, manifest)
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
    try:  # os.scandir, not Path.glob: its first use compiles a pattern (a first dispatch's)
        with os.scandir(base) as entries:
            paths = sorted(Path(entry.path) / MANIFEST for entry in entries if entry.is_dir())
    except OSError:  # absent, or no folder: no flavor
        paths = []
    _CANDIDATES[(base, "*")] = (key, paths)
    return paths


def manifest_state(
    target: Target, root: Path | None = None, flavor: str | None = None
) -> tuple[Path, tuple[int, int, int]]:
    """(path, file key) of the manifest ``find_manifest`` would read: the given flavor, or the
    most recently published one that is valid (a broken newer one of another flavor is passed
    over with a CacheWarning). A few stat calls once parsed; raises FileNotFoundError."""
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
    found.sort(reverse=True)
    for _, path, key in found[:-1]:  # newest first; the last one is returned as it is
        error = _broken(path, key)
        if error is None:
            return path, key
        if (path, key) not in _WARNED:  # once per published file
            _WARNED.add((path, key))
            warnings.warn(f"passed over a broken manifest: {error}", CacheWarning, stacklevel=3)
    _, path, key = found[-1]
    return path, key


#: Broken manifests already warned about, by (path, file key).
_WARNED: set[tuple[Path, tuple[int, int, int]]] = set()


def _broken(path: Path, key: tuple[int, int, int]) -> str | None:
    """Why the manifest is not usable (its CacheError), or None (it is parsed and cached)."""
    try:
        read_manifest(path, key)
    except CacheError as err:
        return str(err)
    return None


# Verification of a whole cache -----------------------------------------------------------------
def manifests(root: Path | None = None, targets=None) -> list[Path]:
    """Every published manifest under the cache root (of the given targets)."""
    names = [t.value for t in targets] if targets else ["*"]
    return sorted(p for n in names for p in cache_root(root).glob(f"{n}/*/{MANIFEST}"))


def verify(root: Path | None = None, targets=None) -> tuple[int, list[str]]:
    """Check every manifest and every binary it lists (without loading any):
    (kernels checked, one line per problem)."""
    checked, problems = 0, []
    for path in manifests(root, targets):
        try:
            manifest = read_manifest(path)
        except CacheError as err:
            problems.append(str(err))
            continue
        for entry in manifest.kernels.values():
            checked += 1
            problem = binary_problem(manifest.directory, entry)
            if problem:
                problems.append(f"{path}: kernel {entry.name}: {problem}")
    return checked, problems


def manifest_location(
    target: Target, root: Path | str | None = None, flavor: str | None = None
) -> tuple[Path, tuple[int, int, int], CacheSource]:
    """(path, file key, where found) of the manifest ``find_manifest`` reads: in the first
    build folder of ``search_path(root)`` that holds one, the given flavor or the only / most
    recently published one. A few stat calls; raises FileNotFoundError naming every place."""
    looked = []
    for folder in _places(root):  # a folder reached twice holds the target neither time
        base = folder.path.joinpath("cache", f"v{FORMAT}", target.value)
        try:
            path, key = manifest_state_in(base, flavor)
        except FileNotFoundError:
            looked.append(folder)
            continue
        return path, key, folder.source  # found: no real path resolved (``search_path``'s)
    places = "; ".join(
        f"{folder.path / 'cache' / f'v{FORMAT}' / target.value} ({folder.source.value})"
        for folder in _unique(looked)
    )
    raise FileNotFoundError(
        f"no {target.value} cache{f' of flavor {flavor}' if flavor else ''} in "
        f"{places}: build it with `doit compile:{target.value}`, or install a "
        "wino wheel that carries it"
    )


def find_manifest(
    target: Target, root: Path | str | None = None, flavor: str | None = None
) -> Manifest:
    """The target's manifest (see ``manifest_location``), parsed once per published file."""
    return read_manifest(*manifest_location(target, root, flavor))
