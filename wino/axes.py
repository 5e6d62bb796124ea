"""Axes declared in YAML (grids/stages.yaml ``axes``): a knob a template reads that needs no
Python edit. Each has a name, the stages it applies to, a type, a C type (the template sees it
as ``static const <ctype> wino_<name>``, and as ``spec.<name>``), a name-suffix format and a
default. A spec holds only its non-default axis values, so declaring an axis renames no
existing kernel; their sources do change (every kernel of the stage declares the constant),
so doit rebuilds that stage's kernels once."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from . import config

_TYPES = {"int": int}


@dataclass(frozen=True)
class Axis:
    name: str
    stages: tuple[str, ...]
    type: type
    ctype: str
    suffix: str  # str.format pattern of the value, appended to the kernel name ("_" first)
    default: int

    def check(self, owner: str, value) -> int:
        if not isinstance(value, self.type) or isinstance(value, bool):
            raise ValueError(
                f"{owner}.{self.name}: expected {self.type.__name__} (grids/stages.yaml axes), "
                f"got {value!r}"
            )
        return value


@lru_cache(maxsize=1)
def declared() -> tuple[Axis, ...]:
    return tuple(
        Axis(
            a["name"], tuple(a["stages"]), _TYPES[a["type"]], a["ctype"], a["suffix"], a["default"]
        )
        for a in config.declared_part("stages", "axes") or []
    )


def of_stage(stage: str) -> dict[str, Axis]:
    """The declared axes of one stage, by name, in declaration order."""
    return {a.name: a for a in declared() if stage in a.stages}
