"""The tuning DB: the winning binaries per problem, a versioned JSON file beside the cache
(build/cache/v<FORMAT>/<target>/tuning.json). ``dispatch`` uses it when the problem is in it."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

from .. import cache, config
from ..problem import Problem, canonical_line
from ..specs import StageSpec, spec_from_fields
from ..vocab import Stage, Target, Tile

TUNING = "tuning.json"


def db_path(target: Target, root: Path | None = None) -> Path:
    return cache.cache_root(root) / target.value / TUNING


def problem_key(problem: Problem) -> str:
    """The DB key: the canonical MIOpenDriver line (every field that changes the choice,
    dtype, batch and dilation included, each flag once)."""
    return problem.to_miopen()


#: Parsed DBs by path: (file key when parsed, data). Read again only when the file changes.
_LOADED: dict[Path, tuple[tuple[int, int, int] | None, dict]] = {}


@lru_cache(maxsize=64)
def beside(manifest_path: Path) -> Path:
    """The tuning DB of the target folder holding ``manifest_path`` (<target>/<flavor>/): the
    DB ``dispatch`` follows is the one beside the cache it found on the search path (kept per
    path: a dispatch asks for it each call)."""
    return Path(manifest_path).parent.parent / TUNING


def followed(target: Target, root: Path | None = None) -> Path:
    """The DB ``dispatch`` follows for ``target``: the one beside the cache it finds on the
    search path (a wheel's or ./build's cache brings its own), else the build folder's (where
    a build would put the cache)."""
    try:
        found, _, _ = cache.manifest_location(target, root)
    except FileNotFoundError:
        return db_path(target, root)
    return beside(found)


def state(
    target: Target, root: Path | None = None, path: Path | None = None
) -> tuple[Path, tuple[int, int, int] | None]:
    """(path, file key) of the target's DB (``path`` when given, else the build folder's):
    what decides whether a cached plan is still valid."""
    path = db_path(target, root) if path is None else path
    return path, cache._file_key(path)


def load(target: Target, root: Path | None = None) -> dict:
    """The DB, parsed and validated once per version of the file (a copy: callers may edit)."""
    return copy.deepcopy(_loaded(target, root))


def _loaded(target: Target, root: Path | None = None, path: Path | None = None) -> dict:
    path, key = state(target, root, path)
    return _parsed(target, path, key)


def _parsed(target: Target, path: Path, key: tuple[int, int, int] | None) -> dict:
    """The DB at ``path`` whose file key is ``key`` (None: absent), parsed and validated once
    per version of the file."""
    if key is None:
        return {"format": 1, "target": target.value, "entries": {}}
    hit = _LOADED.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    data = config.validate(json.loads(path.read_text(encoding="utf-8")), "tuning", str(path))
    # DBs written before the keys were canonical spelled -l/-j twice: read them canonically
    data["entries"] = {canonical_line(k): v for k, v in data["entries"].items()}
    _LOADED[path] = (key, data)
    return data


def entry(
    problem: Problem, target: Target, root: Path | None = None, path: Path | None = None
) -> dict | None:
    """The problem's entry in the target's DB (``path`` when given, else the build folder's),
    or None."""
    return _loaded(target, root, path)["entries"].get(problem_key(problem))


def entry_at(
    problem: Problem, target: Target, path: Path, key: tuple[int, int, int] | None
) -> dict | None:
    """The problem's entry in the DB at ``path`` whose file key the caller read (``key``,
    cache._file_key: dispatch reads the DB once a call, and keys its plan by that key)."""
    return _parsed(target, path, key)["entries"].get(problem_key(problem))


def lookup(
    problem: Problem, target: Target, tile: Tile, root: Path | None = None, path: Path | None = None
) -> dict[Stage, StageSpec] | None:
    return specs_of(entry(problem, target, root, path), tile)


def specs_of(found: dict | None, tile: Tile) -> dict[Stage, StageSpec] | None:
    """The specs of a DB entry (``found``) when it is of ``tile``, else None."""
    if found is None or found["tile"] != tile.name:
        return None
    return {
        Stage(stage): spec_from_fields(stage, fields) for stage, fields in found["specs"].items()
    }


def recorded_kind(
    problem: Problem, target: Target, root: Path | None = None, path: Path | None = None
) -> tuple[str, str] | None:
    """(plan kind, why) of the problem's recorded winner (a kf spec makes it fused2d_rt), or
    None when the DB has no entry for the problem."""
    where = db_path(target, root) if path is None else path
    return kind_of(entry(problem, target, root, path), where)


def kind_of(found: dict | None, where: Path) -> tuple[str, str] | None:
    """(plan kind, why) of a DB entry (``found``, of the DB at ``where``), or None."""
    if found is None:
        return None
    return plan_kind(found), (
        f"the tuning DB's recorded winner for this problem ({found['tile']}, "
        f"{found['time_us']:g} us; {where})"
    )


def plan_kind(found: dict) -> str:
    """The plan kind of a DB entry's winner: a kf spec makes it fused2d_rt."""
    return "fused2d_rt" if Stage.FUSED.short in found["specs"] else "unfused2d_rt"


def best_tile(
    problem: Problem, target: Target, root: Path | None = None, path: Path | None = None
) -> Tile | None:
    return tile_of(entry(problem, target, root, path))


def tile_of(found: dict | None) -> Tile | None:
    """The tile of a DB entry (``found``), or None."""
    return Tile.parse(found["tile"]) if found else None


def record(
    problem: Problem,
    target: Target,
    tile: Tile,
    specs: dict[Stage, StageSpec],
    time_us: float,
    root: Path | None = None,
) -> Path:
    """Write (or replace) the problem's entry; the file is replaced atomically."""
    data = load(target, root)
    data["entries"][problem_key(problem)] = {
        "tile": tile.name,
        "time_us": round(float(time_us), 3),
        "specs": {stage.short: spec.fields_dict() for stage, spec in specs.items()},
    }
    config.validate(data, "tuning", str(db_path(target, root)))
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    return cache.atomic_write(db_path(target, root), text)
