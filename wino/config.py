"""Loading the declared files (grids/*.yaml) strictly: safe_load, duplicate keys are errors,
and every file is validated against its JSON Schema (schema/*.json) with the path of the bad
field in the message."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

#: The package folder (wino/).
PACKAGE = Path(__file__).resolve().parent
#: What an installed wheel carries beside the code: grids/, schema/, templates/ and the built
#: caches under build/cache/ (staged by ``doit wheel``, see wino.builder.wheel).
PACKAGED = PACKAGE / "packaged"


def _root() -> Path:
    """$WINO_ROOT when set, else the source checkout around the package, else the packaged data."""
    if os.environ.get("WINO_ROOT"):
        return Path(os.environ["WINO_ROOT"])
    checkout = PACKAGE.parent
    return checkout if (checkout / "grids" / "stages.yaml").is_file() else PACKAGED


#: The project root: grids/, schema/, templates/ and build/ live here (override: WINO_ROOT).
ROOT = _root()
#: True in a source checkout (or under WINO_ROOT); False when running from an installed wheel.
IS_CHECKOUT = ROOT != PACKAGED
GRIDS = ROOT / "grids"
SCHEMAS = ROOT / "schema"


class ConfigError(ValueError):
    """A declared file is malformed: the message names the file, the field path and what was
    expected."""


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader (libyaml's parser where PyYAML has it: the declared files load about 5x
    faster, which the first dispatch of a process pays) that refuses duplicate mapping keys."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise ConfigError(
                f"{loader.name}:{line}: duplicate key {key!r} (first at line "
                f"{seen[key].start_mark.line + 1}); each key may appear once"
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_text(text: str, name: str = "<string>") -> Any:
    loader = _StrictLoader(text)
    loader.name = name
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise ConfigError(f"{name}: not valid YAML: {err}") from None
    finally:
        loader.dispose()


@cache
def schema(kind: str) -> dict:
    with open(SCHEMAS / f"{kind}.schema.json", encoding="utf-8") as handle:
        return json.load(handle)


def field_path(parts) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate(data: Any, kind: str, name: str) -> Any:
    """Validate against schema/<kind>.schema.json; raise ConfigError naming the bad field."""
    import jsonschema  # imported here: a dispatch from a stamped cache never validates

    validator = jsonschema.Draft202012Validator(schema(kind))
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        raise ConfigError(
            f"{name}: at {field_path(error.absolute_path)}: {error.message} "
            f"(schema {kind}.schema.json, rule {error.validator!r})"
        )
    return data


def load_file(path: Path | str, kind: str) -> Any:
    path = Path(path)
    return validate(load_yaml_text(path.read_text(encoding="utf-8"), str(path)), kind, str(path))


@cache
def schema_sha256(kind: str) -> str:
    """sha256 of schema/<kind>.schema.json: part of what a validation stamp is keyed by."""
    return hashlib.sha256((SCHEMAS / f"{kind}.schema.json").read_bytes()).hexdigest()


def file_state(path: Path) -> list[int] | None:
    """[size, mtime, ctime, inode] of a file: any write to it, or a file renamed over it,
    changes it (ctime cannot be put back); None when it is absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


#: A file's state is recorded with its content's hash only when its last change (ctime) is at
#: least this long before the recording (ns): a same-size write within the file system's
#: timestamp tick of the recording could leave the state as it was ("racily clean", as git says).
SETTLED_NS = 2 * 10**9


def read_settled(path: Path) -> tuple[bytes, list[int] | None]:
    """A file's bytes, and its state when that is settled (unchanged while it was read, and
    last changed SETTLED_NS or more ago), else None: a stamp records it with the bytes' hash,
    and a reader that finds the file in that state has that content without reading it."""
    before = file_state(path)
    data = path.read_bytes()
    after = file_state(path)
    settled = after is not None and after == before and time.time_ns() - after[2] >= SETTLED_NS
    return data, after if settled else None


def unchanged(path: Path | str, state: list[int] | None) -> bool:
    """Whether the file at ``path`` is in the settled ``state`` recorded with its content."""
    return state is not None and file_state(path) == state


def schema_holds(kind: str, sha256: str | None, state: list[int] | None = None) -> bool:
    """Whether schema/<kind>.schema.json has the content hashing to ``sha256``: by its file
    state when that is the ``state`` recorded with the hash, else by its hash."""
    path = os.path.join(SCHEMAS, f"{kind}.schema.json")  # a str: stat'ed only
    return unchanged(path, state) or sha256 == schema_sha256(kind)


@dataclass(frozen=True)
class Stamp:
    """A build's validation stamp of grids/<kind>.yaml, as a cache's runtime index carries it:
    the sha256 of the file's content and of its schema's, the settled file states they were
    read in (``read_settled``; None: the file is hashed to tell), the validated data's
    top-level keys, and ``part``, which reads the data of one of them (on first use: a
    dispatch reads the default pick order and the problem and fit rules, not the sub-grids or
    the spec rules; wino.cache's keeps the index it came from open, so a part is read from
    the file the stamp describes even after a new index is published)."""

    sha256: str
    schema_sha256: str
    keys: tuple[str, ...]
    part: Callable[[str], Any]
    state: list[int] | None = None
    schema_state: list[int] | None = None


#: Declared files whose exact content the build validated, as a cache's runtime index carries
#: them (wino.cache), by kind.
_STAMPED: dict[str, Stamp] = {}
#: Kinds ``declared`` took from a stamp (their content was validated by the build).
_FROM_STAMP: set[str] = set()


def stamp(kind: str, offered: Stamp) -> None:
    """Offer the validated data of grids/<kind>.yaml of the content the stamp names (under
    the schema it names): ``declared`` takes it instead of parsing and validating the file
    when the file on disk has exactly that content."""
    _STAMPED.setdefault(kind, offered)


def stamped(kind: str) -> bool:
    """Whether ``declared(kind)`` came from a build's validation stamp (so its content has
    passed the schema and, for the rule book, the rule probes)."""
    return kind in _FROM_STAMP


def declared(kind: str) -> Any:
    """grids/<kind>.yaml, loaded and validated (cached: the declared files are read once). When
    a cache's index stamped this exact content (file and schema sha256) as validated by the
    build, its data is taken without parsing or validating the YAML again; any other content
    is validated here. The file and its schema are read and hashed only when they are not in
    the states the stamp recorded (a checkout built here: a few stat calls)."""
    return _reading(kind).data()


def declared_part(kind: str, key: str) -> Any:
    """``declared(kind).get(key)``; from a stamp, that part alone is read (a dispatch reads
    the default pick order, not the sub-grids beside it)."""
    return _reading(kind).part(key)


class _Reading:
    """How this process reads grids/<kind>.yaml, decided once: a stamp that holds (each part
    read on first use), else the file, parsed and validated."""

    def __init__(self, kind: str):
        self._kind, self._stamp = kind, _holding_stamp(kind)
        self._data: Any = None
        if self._stamp is None:
            _FROM_STAMP.discard(kind)  # this content was not stamped: its rules are probed again
        else:
            _FROM_STAMP.add(kind)

    def data(self) -> Any:
        if self._data is None:
            if self._stamp is None:
                path = GRIDS / f"{self._kind}.yaml"
                text = path.read_bytes().decode("utf-8")
                self._data = validate(load_yaml_text(text, str(path)), self._kind, str(path))
            else:
                self._data = {key: self._stamp.part(key) for key in self._stamp.keys}
        return self._data

    def part(self, key: str) -> Any:
        if self._stamp is None:
            return self.data().get(key)
        return self._stamp.part(key) if key in self._stamp.keys else None


@cache
def _reading(kind: str) -> _Reading:
    return _Reading(kind)


#: ``declared.cache_clear()`` forgets how each declared file was read: the next use decides
#: again, from the stamps offered by then (as a ``functools.cache`` would).
declared.cache_clear = _reading.cache_clear  # type: ignore[attr-defined]


def _holding_stamp(kind: str) -> Stamp | None:
    """The stamp offered for grids/<kind>.yaml when the file and its schema have the content
    it names (by their recorded states, else their hashes), else None."""
    hit = _STAMPED.get(kind)
    if hit is None or not schema_holds(kind, hit.schema_sha256, hit.schema_state):
        return None
    path = os.path.join(GRIDS, f"{kind}.yaml")  # a str: stat'ed, and read only when changed
    if unchanged(path, hit.state):
        return hit
    return hit if hashlib.sha256(Path(path).read_bytes()).hexdigest() == hit.sha256 else None
