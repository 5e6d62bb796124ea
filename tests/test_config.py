"""Strict loading of the declared files: a typo, a wrong type or a repeated key is an error
that names the file and the bad field."""

from __future__ import annotations

import copy
import re

import pytest

from wino import config
from wino.config import ConfigError, load_yaml_text, validate
from wino.vocab import Target

KINDS = ("stages", "refusals", "targets", "algorithms")


def _text(kind: str) -> str:
    return (config.GRIDS / f"{kind}.yaml").read_text(encoding="utf-8")


def _name(kind: str) -> str:
    return f"grids/{kind}.yaml"


def _edited(kind: str, old: str, new: str) -> str:
    text = _text(kind)
    assert old in text, f"the test's anchor {old!r} is gone from {_name(kind)}"
    return text.replace(old, new, 1)


def _check_text(kind: str, text: str) -> str:
    """Load and validate a copy of a declared file; return the ConfigError message."""
    with pytest.raises(ConfigError) as info:
        validate(load_yaml_text(text, _name(kind)), kind, _name(kind))
    message = str(info.value)
    assert message.startswith(_name(kind) + ":"), message
    return message


def _check_data(kind: str, edit) -> str:
    data = copy.deepcopy(load_yaml_text(_text(kind), _name(kind)))
    edit(data)
    with pytest.raises(ConfigError) as info:
        validate(data, kind, _name(kind))
    message = str(info.value)
    assert message.startswith(_name(kind) + ":"), message
    return message


@pytest.mark.parametrize("kind", KINDS)
def test_declared_files_are_valid(kind):
    data = config.declared(kind)
    assert data["format"] == 1
    assert config.declared(kind) is data  # read once
    assert validate(load_yaml_text(_text(kind), _name(kind)), kind, _name(kind)) == data


def test_misspelled_axis_in_a_subgrid():
    text = _edited(
        "stages",
        "      vec: [1, 2, 4, 8]\n      block: [256]\n      path: [reg]",
        "      vecc: [1, 2, 4, 8]\n      block: [256]\n      path: [reg]",
    )
    message = _check_text("stages", text)
    assert "$.stages.k2[0]" in message and "'vecc'" in message


def test_misspelled_combo_key():
    message = _check_data(
        "stages", lambda d: d["stages"]["k1"][0]["combos"][1].update(xdtyp="fp16")
    )
    assert "$.stages.k1[0].combos[1]" in message and "'xdtyp'" in message


def test_misspelled_stage_and_exclude_keys():
    message = _check_data("stages", lambda d: d["stages"].update(k5=[]))
    assert "$.stages" in message and "'k5'" in message
    message = _check_data(
        "stages", lambda d: d.update(exclude=[{"stage": "k2", "reason": "x", "tlie": "F2x2"}])
    )
    assert "$.exclude[0]" in message and "'tlie'" in message


def test_misspelled_rule_key():
    text = _edited("refusals", "    when: block > max_block\n", "    wehn: block > max_block\n")
    message = _check_text("refusals", text)
    assert "$.spec_rules[0]" in message


def test_misspelled_top_level_key():
    text = _edited("refusals", "spec_rules:", "spec_rule:")
    assert "$" in _check_text("refusals", text)


@pytest.mark.parametrize(
    "kind, old, new, path",
    [
        (
            "stages",
            "      block: [256]\n      rows: [1]",
            "      block: 256\n      rows: [1]",
            "$.stages.k1[0].block",
        ),
        (
            "stages",
            "      vec: [1, 8]\n      block: [256]\n      rows",
            "      vec: ['8']\n      block: [256]\n      rows",
            "$.stages.k1[0].vec[0]",
        ),
        (
            "stages",
            "      vec: [1, 8]\n      block: [256]\n      rows",
            "      vec: [1, 3]\n      block: [256]\n      rows",
            "$.stages.k1[0].vec[1]",
        ),
        ("stages", "format: 1", "format: 2", "$.format"),
        ("refusals", "  max_block: 1024", "  max_block: '1024'", "$.params.max_block"),
        ("refusals", "    stages: [k1]\n", "    stages: [k3]\n", "$.spec_rules[2].stages[0]"),
        ("refusals", "  - id: block_too_large", "  - id: Block-Too-Large", "$.spec_rules[0].id"),
        ("targets", "    archs: [sm_90a]", "    archs: [sm90]", "$.targets.cuda.archs[0]"),
        ("targets", "    compiler: nvcc", "    compiler: [nvcc]", "$.targets.cuda.compiler"),
    ],
)
def test_wrong_types_name_the_field(kind, old, new, path):
    message = _check_text(kind, _edited(kind, old, new))
    assert f"at {path}:" in message, message


def test_wrong_type_in_a_rule_message():
    message = _check_data("refusals", lambda d: d["problem_rules"][1].update(message=7))
    assert "$.problem_rules[1].message" in message


def test_unknown_target_is_an_error():
    message = _check_data("targets", lambda d: d["targets"].update(rocm={}))
    assert "$.targets" in message and "'rocm'" in message
    assert set(config.declared("targets")["targets"]) <= {t.short for t in Target}


@pytest.mark.parametrize(
    "kind, old, new, key",
    [
        (
            "stages",
            "      block: [256]\n      rows: [1]",
            "      block: [256]\n      rows: [1]\n      block: [512]",
            "block",
        ),
        ("refusals", "  warp: 32\n", "  warp: 32\n  warp: 64\n", "warp"),
        ("targets", "format: 1\n", "format: 1\nformat: 1\n", "format"),
    ],
)
def test_duplicate_keys_are_errors(kind, old, new, key):
    text = _edited(kind, old, new)
    with pytest.raises(ConfigError) as info:
        load_yaml_text(text, _name(kind))
    message = str(info.value)
    first = (
        text.splitlines().index(
            next(line for line in text.splitlines() if re.match(rf"\s*{key}:", line))
        )
        + 1
    )
    assert message.startswith(f"{_name(kind)}:"), message
    assert f"duplicate key {key!r} (first at line {first})" in message


def test_invalid_yaml_names_the_file():
    with pytest.raises(ConfigError, match=r"^grids/x\.yaml: not valid YAML"):
        load_yaml_text("a: [1, 2\n", "grids/x.yaml")


def test_load_file_names_the_path(tmp_path):
    path = tmp_path / "targets.yaml"
    path.write_text(_text("targets").replace("archs: [host]", "archs: []"), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        config.load_file(path, "targets")
    assert str(path) in str(info.value) and "$.targets.c.archs" in str(info.value)


def test_field_path():
    assert config.field_path(["stages", "k2", 0, "vec", 1]) == "$.stages.k2[0].vec[1]"
    assert config.field_path([]) == "$"


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)
