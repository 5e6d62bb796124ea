"""The tuning DB: the winning binaries per problem, a versioned JSON file beside the cache
(build/cache/v<FORMAT>/<target>/tuning.json). ``dispatch`` uses it when the problem is in it."""

from __future__ import annotations

import json
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


def load(target: Target, root: Path | None = None) -> dict:
    path = db_path(target, root)
    if not path.is_file():
        return {"format": 1, "target": target.value, "entries": {}}
    data = config.validate(json.loads(path.read_text(encoding="utf-8")), "tuning", str(path))
    # DBs written before the keys were canonical spelled -l/-j twice: read them canonically
    data["entries"] = {canonical_line(k): v for k, v in data["entries"].items()}
    return data


def lookup(
    problem: Problem, target: Target, tile: Tile, root: Path | None = None
) -> dict[Stage, StageSpec] | None:
    entry = load(target, root)["entries"].get(problem_key(problem))
    if entry is None or entry["tile"] != tile.name:
        return None
    return {
        Stage(stage): spec_from_fields(stage, fields) for stage, fields in entry["specs"].items()
    }


def best_tile(problem: Problem, target: Target, root: Path | None = None) -> Tile | None:
    entry = load(target, root)["entries"].get(problem_key(problem))
    return Tile.parse(entry["tile"]) if entry else None


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
    path = db_path(target, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
