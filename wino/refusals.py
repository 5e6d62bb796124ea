"""Refusal rules as data (grids/refusals.yaml): spec rules, problem rules and fit rules.

A condition is a small Python expression checked against a whitelist of syntax (comparisons,
boolean and arithmetic operators, names, constants and a few helper calls) and evaluated with no
builtins. The names a condition may use are the spec's fields, the problem's extents and the
derived sizes below, and the file's params.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from . import config
from .geometry import ceil_div, elems_one_image, lds_bytes
from .problem import Problem
from .specs import RtInputSpec, StageSpec
from .vocab import TILES, Tile


class Refused(Exception):
    """A spec or problem that wino will not serve: ``rule`` is the rule id, ``message`` says
    what is wrong and what to do."""

    def __init__(self, rule: str, message: str):
        super().__init__(f"[{rule}] {message}")
        self.rule = rule
        self.message = message


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


HELPERS = {"is_pow2": _is_pow2, "ceil_div": ceil_div, "max": max, "min": min, "abs": abs}
_ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Call,
    ast.Tuple,
    ast.List,
)


@dataclass(frozen=True)
class Rule:
    id: str
    scope: str  # "spec", "problem" or "fit"
    stages: tuple[str, ...]
    when: str
    message: str

    @property
    def code(self):
        return _compile(self.when, self.id)

    def names(self) -> frozenset[str]:
        return _condition_names(self.when)

    def fires(self, namespace: dict[str, Any]) -> bool:
        code = self.code  # a syntax error or a forbidden construct is a ConfigError first
        missing = self.names() - set(namespace)
        if missing:
            raise config.ConfigError(
                f"refusals.yaml rule {self.id}: condition uses unknown name(s) {sorted(missing)}"
            )
        return bool(eval(code, {"__builtins__": {}}, {**HELPERS, **namespace}))  # noqa: S307

    def refusal(self, namespace: dict[str, Any]) -> Refused:
        try:
            text = self.message.format(**namespace)
        except (KeyError, IndexError) as err:
            raise config.ConfigError(
                f"refusals.yaml rule {self.id}: message names {err} which is not defined"
            ) from None
        return Refused(self.id, text)


@cache
@cache
def _condition_names(expression: str) -> frozenset[str]:
    """The names a condition reads (parsed once per expression)."""
    tree = ast.parse(expression, mode="eval")
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)) - set(HELPERS)


def _compile(expression: str, rule_id: str):
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as err:
        raise config.ConfigError(f"refusals.yaml rule {rule_id}: bad condition: {err}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise config.ConfigError(
                f"refusals.yaml rule {rule_id}: {type(node).__name__} is not allowed in a "
                "condition (use names, constants, comparisons, and/or/not, arithmetic, "
                f"{', '.join(sorted(HELPERS))})"
            )
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in HELPERS
        ):
            raise config.ConfigError(
                f"refusals.yaml rule {rule_id}: only {sorted(HELPERS)} may be called in a condition"
            )
    return compile(tree, f"<rule {rule_id}>", "eval")


@lru_cache(maxsize=1)
def rule_book() -> tuple[dict[str, int], tuple[Rule, ...]]:
    data = config.declared("refusals")
    rules = []
    for scope in ("spec", "problem", "fit"):
        for entry in data[f"{scope}_rules"]:
            stages = tuple(entry.get("stages", ()))
            rules.append(Rule(entry["id"], scope, stages, entry["when"], entry["message"]))
    ids = [r.id for r in rules]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise config.ConfigError(f"refusals.yaml: rule ids must be unique; repeated: {dupes}")
    return dict(data["params"]), tuple(rules)


def rules(scope: str, stage: str | None = None) -> list[Rule]:
    _, book = rule_book()
    return [r for r in book if r.scope == scope and (stage is None or stage in r.stages)]


# Namespaces ------------------------------------------------------------------------------------
def spec_namespace(spec: StageSpec) -> dict[str, Any]:
    params, _ = rule_book()
    ns = dict(params)
    ns.update(spec.fields_dict())
    tile = spec.tile
    ns.update(
        stage=spec.stage.short, bins=tile.bins, mh=tile.mh, mw=tile.mw, ah=tile.ah, aw=tile.aw
    )
    if isinstance(spec, RtInputSpec):
        ns["lds_bytes"] = lds_bytes(spec)
    return ns


def problem_namespace(problem: Problem, tile: Tile | None = None) -> dict[str, Any]:
    params, _ = rule_book()
    ns = dict(params)
    for field in dataclasses.fields(problem):
        if field.type == "int":  # every extent, pad, stride, dilation, groups, direction
            ns[field.name] = getattr(problem, field.name)
    ns.update(dtype=problem.dtype.short, Cg=problem.Cg, Kg=problem.Kg)
    if problem.R == 3 and problem.S == 3 and problem.stride_h == 1 and problem.stride_w == 1:
        ns["Ho"], ns["Wo"] = problem.Ho, problem.Wo
        tiles = (tile,) if tile is not None else TILES
        ns["max_elems_one_image"] = max(elems_one_image(problem.with_batch(1), t) for t in tiles)
    else:
        ns["max_elems_one_image"] = 0  # the shape rules fire first
    return ns


# Checks ----------------------------------------------------------------------------------------
def spec_refusal(spec: StageSpec) -> Refused | None:
    """The first spec rule the spec breaks, or None."""
    ns = spec_namespace(spec)
    for rule in rules("spec", spec.stage.short):
        if rule.fires(ns):
            return rule.refusal(ns)
    return None


def check_spec(spec: StageSpec) -> None:
    refusal = spec_refusal(spec)
    if refusal is not None:
        raise refusal


def check_problem(problem: Problem, tile: Tile | None = None) -> None:
    """Raise Refused for the first problem rule the problem breaks."""
    ns = problem_namespace(problem, tile)
    for rule in rules("problem"):
        if rule.fires(ns):
            raise rule.refusal(ns)


def check_fit(spec: StageSpec, problem: Problem, derived: dict[str, Any]) -> None:
    """Raise Refused for the first fit rule (spec x problem, with the launch's derived sizes)."""
    ns = {**problem_namespace(problem, spec.tile), **spec_namespace(spec), **derived}
    for rule in rules("fit", spec.stage.short):
        if rule.fires(ns):
            raise rule.refusal(ns)
