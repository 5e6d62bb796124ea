"""Case inputs of `wino bench`: files, commands, shape flags, the dtype sweep, --limit and the
shards (which partition the cases)."""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import PUBLIC_CASES
from wino.bench import cases
from wino.problem import Problem
from wino.vocab import DType

LINE = "convfp16 -n 4 -c 16 -H 9 -W 9 -k 8 -y 3 -x 3 -p 1 -q 1"


def test_files_then_commands_then_shape(public_problems):
    got, bad = cases.problems_from([PUBLIC_CASES], [LINE], {"-n": 2, "-c": 8, "-k": 4, "-p": 1})
    assert bad == []
    assert got[:-2] == public_problems
    assert got[-2] == Problem.from_miopen(LINE)
    shape = got[-1]
    assert (shape.N, shape.C, shape.K, shape.pad_h, shape.H, shape.W) == (2, 8, 4, 1, 32, 32)
    assert shape.dtype is DType.FP32  # MIOpenDriver's `conv`


def test_shape_flags_are_miopen_flags():
    assert set(cases.SHAPE_FLAGS) >= {"-n", "-c", "-H", "-W", "-k", "-p", "-q", "-l", "-j", "-g"}
    with pytest.raises(ValueError, match="not MIOpenDriver conv flags"):
        cases.shape_problem({"-z": 1})


def test_dtypes_repeatable_and_comma_lists():
    assert cases.parse_dtypes(["fp16,bf16", "fp32", "fp16"]) == [DType.FP16, DType.BF16, DType.FP32]
    assert cases.parse_dtypes(None) == []
    with pytest.raises(ValueError):
        cases.parse_dtypes(["fp8"])


def test_dtype_override_is_line_major():
    a, b = Problem.from_miopen(LINE), Problem.from_miopen("conv -n 1 -c 4 -k 4 -p 1")
    swept = cases.with_dtypes([a, b], [DType.FP32, DType.BF16])
    assert [(p.C, p.dtype) for p in swept] == [
        (16, DType.FP32),
        (16, DType.BF16),
        (4, DType.FP32),
        (4, DType.BF16),
    ]
    assert cases.with_dtypes([a, b, a], []) == [a, b]  # the line's own dtype, deduplicated


def test_limit_takes_the_first_cases(public_problems):
    assert cases.select_cases(public_problems, limit=2) == public_problems[:2]
    assert cases.select_cases(public_problems, limit=0) == []
    with pytest.raises(ValueError):
        cases.select_cases(public_problems, limit=-1)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 50])
def test_shards_partition_the_cases(public_problems, n):
    swept = cases.with_dtypes(public_problems, list(DType))
    shards = [cases.select_cases(swept, shard=(i, n)) for i in range(1, n + 1)]
    keys = [{cases.case_key(p) for p in shard} for shard in shards]
    assert sorted(itertools.chain.from_iterable(shards), key=swept.index) == swept  # union
    for a, b in itertools.combinations(keys, 2):
        assert not a & b  # pairwise disjoint
    assert max(map(len, shards)) - min(map(len, shards)) <= 1  # balanced


def test_limit_applies_before_the_shard(public_problems):
    assert cases.select_cases(public_problems, limit=4, shard=(2, 2)) == [
        public_problems[1],
        public_problems[3],
    ]


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_bad_shards_are_refused(text):
    with pytest.raises(ValueError, match="--shard"):
        cases.parse_shard(text)


def test_case_keys_are_unique_per_case(public_problems):
    swept = cases.with_dtypes(public_problems, list(DType))
    assert len({cases.case_key(p) for p in swept}) == len(swept)
