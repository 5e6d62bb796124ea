"""Refusal rules as data (grids/refusals.yaml): spec rules, problem rules and fit rules.

A condition is a small Python expression checked against a whitelist of syntax (comparisons,
boolean and arithmetic operators, names, constants and a few helper calls) and evaluated by
simpleeval with bounded operators: numbers only, |values| < 2**256, exponents 0..64, conditions
of at most 400 characters, so no rule can hang or exhaust memory. Messages are format strings
whose fields are plain names with widths of at most 99. The names a condition may use are the
spec's fields, the problem's extents and the derived sizes below, and the file's params. Every
rule is evaluated and formatted against probe namespaces when the file is loaded
(``rule_book``), so a bad rule fails `doit validate`, `wino grid` and the build with its id and
file:line, not at dispatch.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import operator
import re
import string
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from itertools import repeat
from pathlib import Path
from typing import Any

import simpleeval

from . import axes, config
from .fused import fused_namespace
from .geometry import ceil_div, elems_one_image, lds_bytes
from .problem import Problem
from .specs import RtFusedSpec, RtInputSpec, RtOutputSpec, StageSpec
from .vocab import TILES, Target, Tile, coerce
from .winograd import m_growth


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

# Bounds of the expression language: every value an operator takes or makes, every exponent,
# every condition's length and every message field's width is bounded, so evaluating a rule
# costs microseconds whatever the file says (checked at load against probe namespaces).
VALUE_LIMIT = 2**256  # |operand| and |result| of arithmetic: far past any product of extents
EXPONENT_LIMIT = 64
CONDITION_LIMIT = 400  # characters
STRING_LIMIT = 64  # characters of a string constant
WIDTH_LIMIT = 99  # a message field's format width or precision
_FORMAT_SPEC = re.compile(r"[<>^=]?[-+ ]?#?0?(?P<width>\d*),?(\.(?P<prec>\d+))?[bdoxXeEfFgGn%s]?")


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _RuleValueError(f"arithmetic takes numbers, got {value!r}")
    if abs(value) >= VALUE_LIMIT:
        raise _RuleValueError(f"a value past 2**256 ({type(value).__name__})")
    return value


class _RuleValueError(ValueError):
    """A bound of the expression language was crossed while evaluating a condition."""


def _arithmetic(fn):
    def bounded(a, b):
        return _number(fn(_number(a), _number(b)))

    return bounded


def _power(a, b):
    if not isinstance(b, int) or isinstance(b, bool) or not 0 <= b <= EXPONENT_LIMIT:
        raise _RuleValueError(f"exponent {b!r} is outside 0..{EXPONENT_LIMIT}")
    return _number(_number(a) ** b)


_OPERATORS = {
    ast.Add: _arithmetic(operator.add),
    ast.Sub: _arithmetic(operator.sub),
    ast.Mult: _arithmetic(operator.mul),
    ast.FloorDiv: _arithmetic(operator.floordiv),
    ast.Mod: _arithmetic(operator.mod),
    ast.Pow: _power,
    ast.USub: lambda a: -_number(a),
    ast.Not: operator.not_,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda x, y: x in y,
    ast.NotIn: lambda x, y: x not in y,
}


_EVALUATORS = threading.local()  # one simpleeval evaluator per thread (building one is slow)


def evaluate(tree: ast.Expression, namespace: dict[str, Any]) -> Any:
    """Evaluate a checked condition (``_compile``) with simpleeval and the bounded operators."""
    evaluator = getattr(_EVALUATORS, "evaluator", None)
    if evaluator is None:
        evaluator = simpleeval.EvalWithCompoundTypes(operators=_OPERATORS, functions=HELPERS)
        _EVALUATORS.evaluator = evaluator
    evaluator.names = namespace
    try:
        return evaluator.eval("", previously_parsed=tree.body)
    finally:
        evaluator.names = {}


class Scope(enum.Enum):
    """What a rule reads: a spec's knobs, a problem, or both with the launch's derived sizes."""

    SPEC = "spec"
    PROBLEM = "problem"
    FIT = "fit"


@dataclass(frozen=True)
class Rule:
    id: str
    scope: Scope  # its YAML string ("spec", "problem" or "fit") parses to its member
    stages: tuple[str, ...]
    when: str
    message: str
    where: str | RuleSite = "refusals.yaml"  # file:line of the rule, for messages
    #: Its condition passed ``_compile``'s checks and the probes when the build stamped this
    #: exact rule book (wino.config.stamped): it is parsed, not checked again, at run time.
    checked: bool = False
    #: The targets whose builds the rule refuses for (spec rules; YAML ``targets``); empty: every
    #: target. A register budget of the GPUs' compilers is no limit of the host's C compiler.
    targets: tuple[Target, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.scope, Scope):  # its YAML string (a book's rules have members)
            object.__setattr__(self, "scope", coerce(Scope, self.scope, f"rule {self.id}: scope"))
        if self.targets:
            where = f"rule {self.id}: targets"
            targets = tuple(coerce(Target, t, where) for t in self.targets)
            object.__setattr__(self, "targets", targets)

    def applies_to(self, target: Target | None) -> bool:
        """Whether the rule refuses on ``target``; every rule does for None (a spec no rule
        refuses is sound on every target)."""
        return target is None or not self.targets or target in self.targets

    def _error(self, what: str) -> config.ConfigError:
        return config.ConfigError(f"{self.where}: rule {self.id}: {what}")

    @property
    def code(self) -> ast.Expression:
        if self.checked:
            return _parse(self.when)
        return _compile(self.when, self.id, self.where)

    def names(self) -> frozenset[str]:
        return _names(self.when, self.id, self.where)

    def check_names(self, namespace: dict[str, Any]) -> None:
        """ConfigError when the condition uses a name ``namespace`` lacks (any branch)."""
        missing = [name for name in self.names() if name not in namespace]
        if missing:
            raise self._error(f"condition uses unknown name(s) {sorted(missing)}")

    def fires(self, namespace: dict[str, Any]) -> bool:
        """Whether the condition holds in ``namespace``. The verdict is kept per condition
        text and the values, and their types, of the names it reads (``_inputs``; what else it
        depends on is fixed: the evaluator, its operators and helpers): a condition that meets
        the same inputs again (a spec's launch for another problem, the problem rules of
        another batch, the same text in another stage's rule) is looked up, not evaluated; one
        that raises keeps nothing."""
        code = self.code  # a syntax error or a forbidden construct is a ConfigError first
        key = _inputs(self.when, namespace)
        try:
            verdict = None if key is None else _CONDITION_VERDICTS.get(key)
        except TypeError:  # an unhashable value: evaluated, not kept
            key = verdict = None
        if verdict is None:
            verdict = self._evaluate(code, namespace)
            if key is not None:
                if len(_CONDITION_VERDICTS) >= KEPT_LIMIT:
                    _CONDITION_VERDICTS.clear()
                _CONDITION_VERDICTS[key] = verdict
        return verdict

    def _evaluate(self, code: ast.Expression, namespace: dict[str, Any]) -> bool:
        try:
            return bool(evaluate(code, namespace))
        except simpleeval.NameNotDefined as err:
            self.check_names(namespace)  # names every missing one
            raise self._error(f"condition `{self.when}`: {err}") from None
        except (_RuleValueError, ArithmeticError, TypeError) as err:
            raise self._error(f"condition `{self.when}` cannot be evaluated: {err}") from None
        except simpleeval.InvalidExpression as err:
            raise self._error(f"condition `{self.when}`: {err}") from None

    def fields(self) -> list[str]:
        """The message's field names, checked: plain names, bounded widths, no nesting."""
        try:
            parts = list(string.Formatter().parse(self.message))
        except ValueError as err:
            raise self._error(f"message is not a format string: {err}") from None
        names = []
        for _, name, spec, conversion in parts:
            if name is None:
                continue
            if not name.isidentifier():
                raise self._error(f"message field {{{name}}} must be a plain name")
            match = _FORMAT_SPEC.fullmatch(spec or "")
            if conversion not in (None, "s", "r") or match is None or "{" in spec:
                raise self._error(f"message field {{{name}}} has format {spec!r}; keep it simple")
            for part in ("width", "prec"):
                if match[part] and int(match[part]) > WIDTH_LIMIT:
                    raise self._error(
                        f"message field {{{name}}}: {part} {match[part]} is over {WIDTH_LIMIT}"
                    )
            names.append(name)
        return names

    def refusal(self, namespace: dict[str, Any]) -> Refused:
        missing = [n for n in self.fields() if n not in namespace]
        if missing:
            raise self._error(f"message names {missing[0]!r} which is not defined")
        try:
            text = self.message.format(**namespace)
        except (ValueError, TypeError) as err:
            raise self._error(f"message cannot be formatted: {err}") from None
        return Refused(self.id, text)


#: What ``_inputs`` puts for a name the namespace lacks (evaluation either short-circuits past
#: it, the same way for the same inputs, or raises and keeps nothing).
_ABSENT = object()
#: An ASCII identifier, as Python's tokenizer reads one.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


#: Condition verdicts by ``_inputs`` key (``Rule.fires``), emptied past KEPT_LIMIT entries.
_CONDITION_VERDICTS: dict[tuple, bool] = {}


def _inputs(expression: str, namespace: dict[str, Any]) -> tuple | None:
    """A condition's text, the values in ``namespace`` of the names it may read, and their
    types (1, 1.0 and True are equal keys but not equal inputs: arithmetic refuses a bool,
    ``is_pow2`` a float); None for a condition with non-ASCII text (not kept)."""
    names = _words(expression)
    if names is None:
        return None
    values = tuple(map(namespace.get, names, repeat(_ABSENT)))
    return (expression, *values, *map(type, values))


@cache
def _words(expression: str) -> tuple[str, ...] | None:
    """The identifiers of a condition's text, in order: every name it reads (a helper's too: a
    namespace may shadow one) and some it cannot (keywords, the words of string constants), a
    superset found without walking its tree. None beyond ASCII, where the parser normalizes
    identifiers (NFKC) and this could miss one."""
    return tuple(_IDENTIFIER.findall(expression)) if expression.isascii() else None


@cache
def _parse(expression: str) -> ast.Expression:
    """A condition ``_compile`` accepted before (a stamped rule book's), parsed."""
    return ast.parse(expression, mode="eval")


@cache
def _compile(expression: str, rule_id: str, where: str = "refusals.yaml") -> ast.Expression:
    """Parse a condition and check it against the whitelist of syntax and the bounds."""
    prefix = f"{where}: rule {rule_id}"
    if len(expression) > CONDITION_LIMIT:
        raise config.ConfigError(
            f"{prefix}: condition of {len(expression)} characters, over {CONDITION_LIMIT}"
        )
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as err:
        raise config.ConfigError(f"{prefix}: bad condition: {err}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise config.ConfigError(
                f"{prefix}: {type(node).__name__} is not allowed in a "
                "condition (use names, constants, comparisons, and/or/not, arithmetic, "
                f"{', '.join(sorted(HELPERS))})"
            )
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in HELPERS
        ):
            raise config.ConfigError(
                f"{prefix}: only {sorted(HELPERS)} may be called in a condition"
            )
        if isinstance(node, ast.Constant) and not _small_constant(node.value):
            raise config.ConfigError(f"{prefix}: constant {node.value!r:.40} is out of bounds")
    return tree


@cache
def _names(expression: str, rule_id: str, where: str) -> frozenset[str]:
    tree = _compile(expression, rule_id, where)
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)) - set(HELPERS)


def _small_constant(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= STRING_LIMIT
    if isinstance(value, (bool, type(None))):
        return True
    return isinstance(value, (int, float)) and abs(value) < VALUE_LIMIT


_RULE_ID = re.compile(r"^[ \t]*-[ \t]*id:[ \t]*['\"]?([A-Za-z0-9_]+)", re.MULTILINE)


@dataclass(frozen=True)
class RuleSite:
    """Where a rule is declared, as ``file:line`` of its ``- id:`` line; the file is read for
    the line only when a message first shows it (a dispatch never does)."""

    path: Path
    rule_id: str

    def __str__(self) -> str:
        return f"{self.path}:{_rule_lines(self.path).get(self.rule_id, '?')}"


def _rule_lines(path: Path) -> dict[str, int]:
    """Line of each rule's ``- id:`` in the file (for file:line in messages)."""
    text = path.read_text(encoding="utf-8")
    lines: dict[str, int] = {}
    line, counted = 1, 0
    for match in _RULE_ID.finditer(text):
        line, counted = line + text.count("\n", counted, match.start()), match.start()
        lines.setdefault(match[1], line)
    return lines


@lru_cache(maxsize=1)
def rule_book() -> tuple[dict[str, int], Rules]:
    """The params and rules of grids/refusals.yaml, every rule checked against probe
    namespaces (so a bad rule fails here, with its id and file:line, not at dispatch). Content
    a build stamped as validated (wino.config.stamped: the build probed it, and found its ids
    unique) is not probed again, and its rules of a scope are made when first read (a dispatch
    reads the problem and fit rules, not the spec rules)."""
    params = config.declared_part("refusals", "params")  # decides how the file is read
    if not config.stamped("refusals"):
        return book(config.declared("refusals"))
    return dict(params), Rules(partial(_stamped_entries, config.GRIDS / "refusals.yaml"))


def _stamped_entries(path: Path, scope: Scope) -> tuple[Path, list[dict], bool]:
    """(file, entries, checked) of a stamped rule book's rules of ``scope`` (``Rules``'s)."""
    return path, config.declared_part("refusals", f"{scope.value}_rules"), True


def book(data: dict) -> tuple[dict[str, int], Rules]:
    """The params and rules of the validated refusals data, every rule probed."""
    path = config.GRIDS / "refusals.yaml"
    rules = Rules(lambda scope: (path, data[f"{scope.value}_rules"], False))
    dupes = repeated([r.id for r in rules])
    if dupes:
        raise config.ConfigError(f"{path}: rule ids must be unique; repeated: {dupes}")
    params = dict(data["params"])
    for rule in rules:
        probe(rule, params)
    return params, rules


class Rules(Sequence):
    """A rule book's rules in the file's order (its spec, problem and fit rules). ``entries(
    scope)`` gives (the file, the entries of a scope's rules, whether they were checked: a
    stamped book's, compiled and probed at build time); a scope's rules are made from them
    when first read."""

    def __init__(self, entries: Callable[[Scope], tuple[Path, list[dict], bool]]):
        self._entries = entries
        self._made: dict[Scope, tuple[Rule, ...]] = {}

    def of(self, scope: Scope) -> tuple[Rule, ...]:
        """The rules of one scope, in the file's order."""
        made = self._made.get(scope)
        if made is None:
            path, entries, checked = self._entries(scope)
            made = self._made[scope] = tuple(_rule(e, scope, path, checked) for e in entries)
        return made

    def _every(self) -> tuple[Rule, ...]:
        return tuple(rule for scope in Scope for rule in self.of(scope))

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())

    def __getitem__(self, index):
        return self._every()[index]


def _rule(entry: dict, scope: Scope, path: Path, checked: bool) -> Rule:
    """The rule of one entry of the file (the schema allows ``targets`` on spec rules only)."""
    rule_id, targets = entry["id"], tuple(entry.get("targets", ()))
    where = RuleSite(path, rule_id)
    stages = tuple(entry.get("stages", ()))
    return Rule(rule_id, scope, stages, entry["when"], entry["message"], where, checked, targets)


def repeated(ids: list[str]) -> list[str]:
    """The ids that occur more than once, sorted (none: one pass, no count per id)."""
    if len(set(ids)) == len(ids):
        return []
    return sorted(i for i, n in Counter(ids).items() if n > 1)


#: Names the launch geometry adds for every stage's fit rules (wino.launch.stage_launch).
FIT_DERIVED = ("lanes", "grid_y", "max_elems_chunk", "max_threads_chunk", "tile_scale")
_PROBE_PROBLEMS = (
    Problem(N=2, C=16, H=8, W=8, K=16, pad_h=1, pad_w=1),
    Problem(N=1, C=6, H=9, W=9, K=4, R=5, S=5, stride_h=2, stride_w=2, groups=2),
)


def probe(rule: Rule, params: dict[str, Any]) -> None:
    """Evaluate a rule's condition and format its message against probe namespaces of its
    scope; a ConfigError (id, file:line, what) if either fails."""
    from .specs import SPEC_CLASSES
    from .vocab import Stage

    specs = [SPEC_CLASSES[Stage(stage)]() for stage in rule.stages]
    if rule.scope is Scope.SPEC:
        namespaces = [_spec_ns(spec, params) for spec in specs]
    elif rule.scope is Scope.PROBLEM:
        namespaces = [_problem_ns(p, params) for p in _PROBE_PROBLEMS]
    else:
        derived = dict.fromkeys(FIT_DERIVED, 1)
        namespaces = [
            {**_problem_ns(p, params, spec.tile), **_spec_ns(spec, params), **derived}
            for spec in specs
            for p in _PROBE_PROBLEMS[:1]
        ]
    for namespace in namespaces:
        rule.check_names(namespace)  # every branch's names, not only the evaluated ones
        rule.fires(namespace)
        rule.refusal(namespace)


def rules(scope: Scope | str, stage: str | None = None) -> list[Rule]:
    return list(_rules(coerce(Scope, scope, "scope"), stage))


#: The rules of each (scope, stage), ``kept``: a check reads them, not the whole book.
_BY_SCOPE: dict[tuple, tuple[Any, tuple[Rule, ...]]] = {}


def _rules(scope: Scope, stage: str | None) -> tuple[Rule, ...]:
    def make() -> tuple[Rule, ...]:
        of_scope = rule_book()[1].of(scope)
        return tuple(r for r in of_scope if stage is None or stage in r.stages)

    return kept(_BY_SCOPE, (scope, stage), make)


def may_read(scope: Scope, stage: str | None, name: str) -> bool:
    """Whether a rule of ``scope`` (and ``stage``) may read ``name``: its condition's text
    names it (or is not ASCII: ``_words`` cannot tell)."""
    for rule in _rules(scope, stage):
        words = _words(rule.when)
        if words is None or name in words:
            return True
    return False


# Namespaces ------------------------------------------------------------------------------------
def spec_namespace(spec: StageSpec) -> dict[str, Any]:
    return dict(_kept_spec_ns(spec))


#: Spec namespaces by (spec, the declared axes), ``kept``: they depend on no problem, and a
#: dispatch launches each spec it picks once per batch chunk and problem.
_SPEC_NS: dict[tuple, tuple[Any, dict]] = {}


def _kept_spec_ns(spec: StageSpec) -> dict[str, Any]:
    """The spec's namespace as kept: read it, never change it."""
    key = (spec, axes.declared())  # a spec's axis defaults are the declared axes'
    return kept(_SPEC_NS, key, lambda: _spec_ns(spec, rule_book()[0]))


def _spec_ns(spec: StageSpec, params: dict[str, Any]) -> dict[str, Any]:
    ns = dict(params)
    ns.update((name, value) for _, name, value in spec.axis_values())  # defaults included
    ns.update(spec.fields_dict())
    tile = spec.tile
    ns.update(
        stage=spec.stage.short, bins=tile.bins, mh=tile.mh, mw=tile.mw, ah=tile.ah, aw=tile.aw
    )
    if isinstance(spec, RtInputSpec):
        ns["lds_bytes"] = lds_bytes(spec)
        ns["io_bytes"] = spec.io.itemsize
    if isinstance(spec, RtFusedSpec):
        ns.update(fused_namespace(spec))
    if isinstance(spec, RtOutputSpec | RtFusedSpec):
        ns["m_per_channel"] = m_per_channel(tile)
    return ns


#: How many entries a ``kept`` table holds before it is emptied.
KEPT_LIMIT = 4096


def kept(table: dict, key: Any, make) -> Any:
    """``make()``, kept in ``table`` per ``key`` and rule book: made again once the rule book
    is reloaded (``rule_book.cache_clear``), and the table emptied past KEPT_LIMIT entries. A
    ``make`` that raises keeps nothing."""
    book = rule_book()
    hit = table.get(key)
    if hit is None or hit[0] is not book:
        if len(table) >= KEPT_LIMIT:
            table.clear()
        hit = table[key] = (book, make())
    return hit[1]


#: Problem namespaces by (problem, tile), ``kept``: a dispatch checks the same problem once
#: per stage it launches.
_PROBLEM_NS: dict[tuple, tuple[Any, dict]] = {}


def problem_namespace(problem: Problem, tile: Tile | None = None) -> dict[str, Any]:
    return dict(_kept_problem_ns(problem, tile))


def _kept_problem_ns(problem: Problem, tile: Tile | None) -> dict[str, Any]:
    """The problem's namespace as kept: read it, never change it."""
    return kept(_PROBLEM_NS, (problem, tile), lambda: _problem_ns(problem, rule_book()[0], tile))


def _problem_ns(problem: Problem, params: dict[str, Any], tile: Tile | None = None) -> dict:
    ns = dict(params)
    for field in dataclasses.fields(problem):
        if field.type == "int":  # every extent, pad, stride, dilation, groups, direction
            ns[field.name] = getattr(problem, field.name)
    ns.update(dtype=problem.dtype.short, Cg=problem.Cg, Kg=problem.Kg)
    ns["Ho"], ns["Wo"] = problem.Ho, problem.Wo
    if problem.R == 3 and problem.S == 3 and problem.stride_h == 1 and problem.stride_w == 1:
        tiles, one = ((tile,) if tile is not None else TILES), problem.with_batch(1)
        ns["max_elems_one_image"] = max(elems_one_image(one, t) for t in tiles)
    else:
        ns["max_elems_one_image"] = 0  # the shape rules fire first
    return ns


#: V and U are rounded to 16 bits before the GEMM: each may round up by a factor 1 + 2^-11.
_STORAGE_MARGIN = 1 + 2**-9


def m_per_channel(tile: Tile) -> float:
    """The largest |V[a][p][c] * U[a][k][c]| one input channel adds to M (over every bin a) once
    the tile and filter scales are applied: the transforms' growth (wino.winograd.m_growth) times
    the largest scaled |x| and |w|, which common.j2's wino_pow2_scale keeps below 1 for every
    finite value of every io dtype (subnormal and near-largest maxima included), with the 16-bit
    storage's rounding margin. |M| stays below C/G times this (the ``fp16_m_range`` rule)."""
    return float(m_growth(tile.mh, tile.mw)) * _STORAGE_MARGIN


# Checks ----------------------------------------------------------------------------------------
def spec_refusal(spec: StageSpec, target: Target | None = None) -> Refused | None:
    """The first spec rule the spec breaks on ``target`` (None: the first of every rule, the
    target-specific ones included), or None."""
    return spec_refusals(spec, (target,))[target]


def spec_refusals(
    spec: StageSpec, targets: tuple[Target | None, ...]
) -> dict[Target | None, Refused | None]:
    """``spec_refusal`` for each of ``targets``, every condition evaluated at most once (the
    grid's expansion asks for every target)."""
    ns = _kept_spec_ns(spec)
    out: dict[Target | None, Refused | None] = dict.fromkeys(targets)
    pending = list(targets)
    for rule in _rules(Scope.SPEC, spec.stage.short):
        hit = [t for t in pending if rule.applies_to(t)]
        if hit and rule.fires(ns):
            refusal = rule.refusal(ns)
            for t in hit:
                out[t] = refusal
            pending = [t for t in pending if t not in hit]
            if not pending:
                break
    return out


def check_spec(spec: StageSpec, target: Target | None = None) -> None:
    refusal = spec_refusal(spec, target)
    if refusal is not None:
        raise refusal


def check_problem(problem: Problem, tile: Tile | None = None) -> None:
    """Raise Refused for the first problem rule the problem breaks (the verdict is kept per
    problem, tile and rule book: a dispatch checks its problem once per stage it launches)."""
    refusal = kept(_VERDICTS, (problem, tile), lambda: _problem_refusal(problem, tile))
    if refusal is not None:
        raise Refused(refusal.rule, refusal.message)  # a new exception: no traceback kept


#: Problem-rule verdicts by (problem, tile), ``kept``: the first rule's refusal or None.
_VERDICTS: dict[tuple, tuple[Any, Refused | None]] = {}


def _problem_refusal(problem: Problem, tile: Tile | None) -> Refused | None:
    ns = _kept_problem_ns(problem, tile)
    for rule in _rules(Scope.PROBLEM, None):
        if rule.fires(ns):
            return rule.refusal(ns)
    return None


def check_fit(spec: StageSpec, problem: Problem, derived: dict[str, Any]) -> None:
    """Raise Refused for the first fit rule (spec x problem, with the launch's derived sizes)."""
    ns = {**_kept_problem_ns(problem, spec.tile), **_kept_spec_ns(spec), **derived}
    for rule in _rules(Scope.FIT, spec.stage.short):
        if rule.fires(ns):
            raise rule.refusal(ns)
