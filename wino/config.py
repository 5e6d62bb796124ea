"""Loading the declared files (grids/*.yaml) strictly: safe_load, duplicate keys are errors,
and every file is validated against its JSON Schema (schema/*.json) with the path of the bad
field in the message."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
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
def declared(kind: str) -> Any:
    """grids/<kind>.yaml, loaded and validated (cached: the declared files are read once)."""
    return load_file(GRIDS / f"{kind}.yaml", kind)
