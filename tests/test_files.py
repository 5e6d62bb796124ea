"""Files published through a temp file and a rename (results CSV, manifest) get the mode
``open()`` would give them under the process umask, not mkstemp's 0600."""

from __future__ import annotations

import os
import stat

import pytest

from tests.test_cache_search import _publish
from wino import files
from wino.bench import results
from wino.vocab import Target


@pytest.fixture(params=[0o022, 0o027, 0o002])
def mask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_open_mode_follows_the_umask(mask):
    assert files.umask() == mask and files.open_mode() == 0o666 & ~mask


def test_results_csv_honours_the_umask(mask, tmp_path):
    path = results.write(tmp_path / "r.csv", [{"target": "c", "case": "conv -n 1"}])
    assert _mode(path) == 0o666 & ~mask


def test_manifest_honours_the_umask(mask, tmp_path):
    assert _mode(_publish(tmp_path, Target.C, "f")) == 0o666 & ~mask
