"""The runtime index beside each manifest (wino.cache.INDEX): what a dispatch reads instead of
validating the manifest and the declared YAML, trusted only for the exact content the build
validated (manifest sha256, schema sha256, each declared file's sha256)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time

import pytest

from tests import runtime_fixtures as rf
from wino import cache, config, pick, refusals
from wino.runtime import dispatch
from wino.vocab import DType, Epilogue, Target


@pytest.fixture
def root(tmp_path_factory, tmp_path):
    """A copy of the session's host cache (these tests edit its manifest and index)."""
    dst = tmp_path / "build"
    shutil.copytree(rf.host_cache(tmp_path_factory), dst)
    return dst


def _fresh() -> None:
    """Forget what this process read: manifests, the declared files, their stamps."""
    cache._MANIFESTS.clear()
    config._STAMPED.clear()
    config._FROM_STAMP.clear()
    config.declared.cache_clear()
    refusals.rule_book.cache_clear()
    refusals._PROBLEM_NS.clear()


@pytest.fixture
def validations(monkeypatch):
    """The kinds config.validate is asked to check, from a fresh process state."""
    kinds = []
    real = config.validate

    def counting(data, kind, name):
        kinds.append(kind)
        return real(data, kind, name)

    monkeypatch.setattr(config, "validate", counting)
    _fresh()
    yield kinds
    _fresh()


def _manifest(root):
    path, _ = cache.manifest_state(Target.C, root)
    return path


def _index(path) -> cache.Index:
    index, _ = cache._read_index(path)
    assert index is not None
    return index


def test_the_build_writes_an_index_of_its_manifest(root):
    path = _manifest(root)
    lines = (path.parent / cache.INDEX).read_text().splitlines()
    header = json.loads(lines[0])  # JSON lines: the header, then one line per section
    assert header["manifest_sha256"] == cache._sha256(path.read_bytes())
    assert len(lines) == 1 + len(header["sections"])
    index = _index(path)
    kernels = json.loads(path.read_text())["kernels"]
    grouped = {n: g for g in index.groups() for n in index.section(g)}
    assert set(grouped) == set(kernels) and header["kernels"] == len(kernels)
    for name, group in grouped.items():  # each kernel in the group of its stage, tile, io
        assert group == cache.group_key(kernels[name]["stage"], kernels[name]["spec"])
    for kind in cache.STAMPED:
        assert index.section(f"declared {kind}")["sha256"]


def test_the_index_is_trusted_by_the_manifests_file_state_or_its_hash(root, tmp_path):
    """Published in place: the manifest's file state is recorded and a reader does not read
    it; a copy (new inode and ctime) is hashed, and trusted when its bytes are the same."""
    path = _manifest(root)
    data = json.loads(path.read_text())
    cache.write_manifest(path.parent, data)  # published here: the state is recorded
    index, raw = cache._read_index(path)
    assert index is not None and raw is None and index.header["manifest_state"]
    copy = tmp_path / "copy" / path.parent.parent.name / path.parent.name
    shutil.copytree(path.parent, copy)
    index, raw = cache._read_index(copy / cache.MANIFEST)
    assert index is not None and raw == path.read_bytes()  # hashed, same bytes
    (copy / cache.MANIFEST).write_bytes(raw.replace(b'"format"', b' "format"', 1))
    assert cache._read_index(copy / cache.MANIFEST)[0] is None


def test_a_manifest_edited_in_place_with_its_mtime_put_back_is_validated(root, validations):
    """Same size, same mtime, same inode: the write still moved its ctime, so the index is
    not trusted by the file state; the hash then differs and the manifest is validated."""
    path = _manifest(root)
    cache.write_manifest(path.parent, json.loads(path.read_text()))
    assert cache._read_index(path)[1] is None  # trusted by its file state
    validations.clear()  # the build's own validations
    before = os.stat(path)
    raw = path.read_bytes()
    at = raw.index(b'"sha256": "') + len(b'"sha256": "')
    flipped = b"1" if raw[at : at + 1] == b"0" else b"0"  # one hex digit: still a digest
    time.sleep(0.05)  # past the file system's timestamp granularity
    with open(path, "r+b") as handle:
        handle.seek(at)
        handle.write(flipped)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    index, read = cache._read_index(path)
    assert index is None and read is not None  # hashed, and the hash differs
    assert isinstance(cache.parse_manifest(path).kernels, dict)
    assert validations == ["manifest"]


def test_an_indexed_manifest_parses_only_the_groups_it_reads(root, validations):
    path = _manifest(root)
    kernels = cache.parse_manifest(path).kernels
    name, entry = next(iter(json.loads(path.read_text())["kernels"].items()))
    spec = entry["spec"]
    assert name in kernels.names_of(entry["stage"], spec["tile"], spec["io"])
    assert name in kernels and kernels[name].name == name
    assert kernels._read == {cache.group_key(entry["stage"], spec)}  # that group alone
    assert "no_such_kernel" not in kernels  # a name of no group read: every group is read
    assert kernels._read == set(kernels._index.groups()) and validations == []


def test_an_indexed_manifest_equals_the_validated_one(root, validations):
    path = _manifest(root)
    indexed = cache.parse_manifest(path)
    assert isinstance(indexed.kernels, cache.IndexedKernels) and validations == []
    (path.parent / cache.INDEX).unlink()
    read = cache.parse_manifest(path)
    assert validations == ["manifest"] and isinstance(read.kernels, dict)
    assert (indexed.target, indexed.flavor, indexed.toolchain) == (
        read.target,
        read.flavor,
        read.toolchain,
    )
    assert dict(indexed.kernels) == read.kernels


def test_a_first_dispatch_from_an_index_validates_nothing(root, validations):
    case = rf.EXTRA[2]
    plan = dispatch(case.problem, target="c", tile=case.tile, cache_root=root)
    assert validations == []
    assert config.stamped("stages") and config.stamped("refusals")
    made = plan.manifest.kernels._made  # only the kernels the pick ranked were read
    assert set(plan.specs[s].name for s in plan.specs) <= set(made)
    assert len(made) < len(plan.manifest.kernels)


def test_a_changed_manifest_is_validated_and_refused(root, validations):
    path = _manifest(root)
    data = json.loads(path.read_text())
    next(iter(data["kernels"].values()))["sha256"] = "not a digest"
    path.write_text(json.dumps(data))  # the index beside it is now stale
    with pytest.raises(cache.CacheError, match="sha256"):
        cache.parse_manifest(path)
    assert validations == ["manifest"]


def test_a_manifest_republished_by_hand_is_validated(root, validations):
    path = _manifest(root)
    path.write_text(json.dumps(json.loads(path.read_text()), indent=2))  # same data, new bytes
    assert isinstance(cache.parse_manifest(path).kernels, dict)
    assert validations == ["manifest"]


def test_an_index_of_another_schema_is_not_used(root, validations, monkeypatch, tmp_path):
    """An edited schema (a copy of the folder: other file states, so it is hashed) does not
    hash as the index's did: the manifest is validated."""
    schemas = tmp_path / "schema"
    shutil.copytree(config.SCHEMAS, schemas)
    with open(schemas / "manifest.schema.json", "a", encoding="utf-8") as handle:
        handle.write("\n")
    monkeypatch.setattr(config, "SCHEMAS", schemas)
    config.schema_sha256.cache_clear()
    try:
        assert isinstance(cache.parse_manifest(_manifest(root)).kernels, dict)
    finally:
        config.schema_sha256.cache_clear()
    assert validations == ["manifest"]


def test_a_declared_file_in_its_stamped_state_is_not_read(root, validations, monkeypatch, tmp_path):
    """The build records each declared file's settled state with its hash: a reader that
    finds the file in that state takes the stamp without reading it. A same-size edit in
    place with the mtime put back still moved its ctime: the file is read and hashed, and
    its new content validated."""
    grids = tmp_path / "grids"
    shutil.copytree(config.GRIDS, grids)
    monkeypatch.setattr(config, "GRIDS", grids)
    monkeypatch.setattr(config, "SETTLED_NS", 0)  # the copy was just made
    path = _manifest(root)
    cache.write_manifest(path.parent, json.loads(path.read_text()))  # stamps these grids
    stages = grids / "stages.yaml"
    read = []
    real = config.Path.read_bytes
    monkeypatch.setattr(config.Path, "read_bytes", lambda p: read.append(p) or real(p))
    _fresh()
    validations.clear()
    cache.parse_manifest(path)
    assert config.stamped("stages") is False  # not asked yet
    config.declared("stages")
    assert config.stamped("stages") and stages not in read and validations == []
    before = os.stat(stages)
    raw = stages.read_bytes()
    at = raw.index(b"#") + 1
    time.sleep(0.05)  # past the file system's timestamp granularity
    with open(stages, "r+b") as handle:
        handle.seek(at)
        handle.write(b"?" if raw[at : at + 1] != b"?" else b"!")
    os.utime(stages, ns=(before.st_atime_ns, before.st_mtime_ns))
    _fresh()
    cache.parse_manifest(path)
    config.declared("stages")
    assert not config.stamped("stages") and stages in read and validations == ["stages"]


def test_a_file_changed_lately_has_no_settled_state(tmp_path, monkeypatch):
    """A state is recorded with a file's content only when its last change is SETTLED_NS or
    more before (a write within the same timestamp tick could leave the state as it was)."""
    path = tmp_path / "f.yaml"
    path.write_text("a: 1\n")
    assert config.read_settled(path) == (b"a: 1\n", None)
    monkeypatch.setattr(config, "SETTLED_NS", 0)
    data, state = config.read_settled(path)
    assert state == config.file_state(path) and config.unchanged(path, state)
    path.write_text("a: 2\n")
    assert not config.unchanged(path, state) and not config.unchanged(path, None)


@pytest.mark.parametrize("edit, stamped", [("", True), ("\n# an edit\n", False)])
def test_a_declared_file_is_stamped_only_with_its_exact_content(
    root, validations, monkeypatch, tmp_path, edit, stamped
):
    grids = tmp_path / "grids"
    shutil.copytree(config.GRIDS, grids)
    with open(grids / "stages.yaml", "a", encoding="utf-8") as handle:
        handle.write(edit)
    monkeypatch.setattr(config, "GRIDS", grids)
    cache.parse_manifest(_manifest(root))
    config.declared("stages")
    assert config.stamped("stages") is stamped
    assert validations == ([] if stamped else ["stages"])


def test_a_manifest_the_reader_refuses_gets_no_index(root):
    path = _manifest(root)
    data = json.loads(path.read_text())
    next(iter(data["kernels"].values()))["symbol"] = "another_name"
    cache.write_manifest(path.parent, data)
    assert not (path.parent / cache.INDEX).exists()
    with pytest.raises(cache.CacheError, match="is not the kernel's name"):
        cache.parse_manifest(path)


def test_an_indexed_manifest_ranks_as_its_specs_do_and_makes_only_the_specs_it_reads(root):
    """The ranking on the index's records (plain values, no spec made) orders every group as
    the ranking of the same kernels' specs does, for every storage dtype, epilogue and
    target; a spec is made only when the pick reads it."""
    indexed = cache.parse_manifest(_manifest(root))
    kernels = indexed.kernels
    assert isinstance(kernels, cache.IndexedKernels)
    by_specs = pick.Ranking(entry.spec for entry in dict(kernels).values())
    fresh = cache.parse_manifest(_manifest(root))  # its own IndexedKernels: nothing made yet
    on_records = pick.Ranking(records=fresh.records_of, make=fresh.spec)
    compared = 0
    for stage, tile, io in {(s.stage, s.tile, s.io) for s in by_specs._specs}:
        for xdtype, epilogue, target in itertools.product(
            (DType.FP16, DType.FP32, DType.BF16), Epilogue, (None, *Target)
        ):
            key = (stage, tile, io, xdtype, epilogue, target)
            want = [s.name for s in by_specs.candidates(*key)]
            assert [s.name for s in on_records.candidates(*key)] == want, key
            compared += bool(want)
    assert compared > 20


def test_a_first_pick_makes_the_specs_it_tries_only(root):
    case = rf.EXTRA[2]
    manifest = cache.parse_manifest(_manifest(root))
    ranking = pick.Ranking(records=manifest.records_of, make=manifest.spec)
    specs = pick.default_stage_specs(case.problem, case.tile, ranking=ranking, target=Target.C)
    made = manifest.kernels._specs
    assert {s.name for s in specs.values()} <= set(made)
    ranked = sum(len(r) for r in ranking._memo.values())
    assert len(made) < ranked  # the ranked kernels past each stage's first fit were not made


def test_an_index_replaced_after_it_was_opened_is_read_as_it_was(root):
    """A publication renames a new index into place: a reader that opened the old one reads
    its sections, not the new file's bytes at the old offsets."""
    path = _manifest(root)
    index = _index(path)
    group = index.groups()[0]
    want = json.loads(json.dumps(_index(path).section(group)))
    replaced = path.parent / (cache.INDEX + ".new")
    replaced.write_bytes(b"x" * 4096 + (path.parent / cache.INDEX).read_bytes())
    os.replace(replaced, path.parent / cache.INDEX)
    assert index.section(group) == want


def test_an_index_written_in_place_after_it_was_opened_is_a_cache_error(root):
    path = _manifest(root)
    index = _index(path)
    (path.parent / cache.INDEX).write_bytes(b"{}\n")  # the same file, truncated
    with pytest.raises(cache.CacheError, match="written in place.*doit manifest"):
        index.section(index.groups()[0])


def test_an_index_stamping_a_declared_file_that_changed_since_is_not_current(
    root, monkeypatch, tmp_path
):
    """A comment edited in grids/*.yaml changes no kernel but stales the index's stamp (every
    first dispatch would parse and validate the YAML again): the build's uptodate check of
    the manifest task (``index_current``) then says so, and so it does for an index of an
    older format."""
    path = _manifest(root)
    assert cache.index_current(path)
    grids = tmp_path / "grids"
    shutil.copytree(config.GRIDS, grids)
    with open(grids / "refusals.yaml", "a", encoding="utf-8") as handle:
        handle.write("\n# an edit\n")
    monkeypatch.setattr(config, "GRIDS", grids)
    assert not cache.index_current(path)
    monkeypatch.setattr(config, "GRIDS", config.ROOT / "grids")
    assert cache.index_current(path)
    monkeypatch.setattr(cache, "INDEX_FORMAT", cache.INDEX_FORMAT + 1)
    assert not cache.index_current(path)


def test_a_first_dispatch_reads_the_declared_parts_it_uses(root, validations):
    """A stamped file's top-level keys are sections of their own: a dispatch reads the default
    pick order and the problem and fit rules, not the sub-grids or the spec rules, and the
    rule book makes only the scopes it reads; the whole file, asked for, is its parts."""
    case = rf.EXTRA[2]
    plan = dispatch(case.problem, target="c", tile=case.tile, cache_root=root)
    read = {key for key in plan.manifest.kernels._index._parsed if key.startswith("declared ")}
    assert {"declared stages default_pick", "declared refusals fit_rules"} <= read
    assert not read & {"declared stages stages", "declared refusals spec_rules"}
    _, rules = refusals.rule_book()
    assert set(rules._made) == {refusals.Scope.PROBLEM, refusals.Scope.FIT}
    assert validations == []
    for kind in ("stages", "refusals"):
        assert config.declared(kind) == config.load_file(config.GRIDS / f"{kind}.yaml", kind)
    eager = refusals.book(config.declared("refusals"))
    assert [(r.id, r.scope, r.when, r.message, r.targets) for r in rules] == [
        (r.id, r.scope, r.when, r.message, r.targets) for r in eager[1]
    ]
    assert all(r.checked for r in rules) and not any(r.checked for r in eager[1])
