"""A write that changes nothing makes no version: `embed --all` run again, a refine that brings only
evaluations already stored, a restore of the version a model already is. History numbers name changes,
so `registry history` and drift read real events only."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import SMALL_TRAINED


@pytest.fixture
def reg(synthetic_home, monkeypatch):
    from registry import Registry

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return Registry.open(synthetic_home("no-op", **SMALL_TRAINED))


def _row(reg, name):
    return next(r for r in reg.store.read("models").to_pylist() if r["name"] == name)


def _history(reg, name):
    return [(v.version, v.event) for v in reg.history(name).versions]


def test_embed_all_again_writes_no_history_row(reg):
    from indexing.store import MODEL_SCHEMA, MODELS, VERSIONS

    first = reg.embed_all()
    rows = reg.store.count(VERSIONS)
    again = reg.embed_all()
    assert again.n_embedded == first.n_embedded == 6 and again.unchanged == 6
    assert reg.store.count(VERSIONS) == rows
    out = CliRunner().invoke(cli, ["--home", str(reg.home), "embed", "--all"])
    assert out.exit_code == 0 and "6 unchanged (no new history row)" in out.output
    # a model whose stored vector is not what its evaluations give now is written, and only it
    name = reg.models()[0].name
    stored = reg.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    reg.refine(name, [{"query_id": stored[-1], "score": 0.5}])  # a new version, embedded as it lands
    assert reg.embed_all().unchanged == 6  # so embed finds every model current
    with reg.store.transaction():
        reg.store.upsert(MODELS, [{**_row(reg, name), "n_evals": 1}], MODEL_SCHEMA, "name", insert=False)  # spoilt
    rows = reg.store.count(VERSIONS)
    again = reg.embed_all()
    assert again.unchanged == 5 and reg.store.count(VERSIONS) == rows + 1
    assert _history(reg, name)[-1][1] == "embed"


def test_a_refine_with_nothing_new_keeps_the_version(reg):
    name = reg.models()[0].name
    table = reg.store.read_in("evaluations", ["query_id", "score"], "model", [name])
    same = [{"query_id": q, "score": s} for q, s in zip(table.column("query_id").to_pylist()[:5],
                                                        table.column("score").to_pylist()[:5])]
    before = _history(reg, name)
    result = reg.refine(name, same)
    assert (result.event, result.version, result.new_evaluations) == ("unchanged", before[-1][0], 0)
    assert any("no new version" in w for w in result.warnings)
    assert _history(reg, name) == before
    changed = [{**same[0], "score": 1 - same[0]["score"]}]
    moved = reg.refine(name, changed)  # a score that differs is a change: a new version
    assert (moved.event, moved.version, moved.new_evaluations) == ("refine", before[-1][0] + 1, 1)


def test_restore_names_a_version_of_a_live_model_and_restoring_the_current_one_is_a_no_op(reg):
    from registry.errors import InputError

    name = reg.models()[0].name
    live = reg.show(name).version
    with pytest.raises(InputError) as err:
        reg.restore(name)
    assert err.value.field == "version" and "--version" in str(err.value) and f"version {live}" in str(err.value)
    before = _history(reg, name)
    same = reg.restore(name, live)
    assert (same.restored_version, same.version) == (live, live) and _history(reg, name) == before
    reg.remove(name)
    back = reg.restore(name)  # a removed model: the latest version comes back, as a new version
    assert back.restored_version == live and back.version == live + 1


def test_restoring_the_version_the_live_one_is_a_restore_of_makes_no_copy(reg):
    name = reg.models()[0].name
    first = reg.show(name).version
    stored = reg.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    reg.refine(name, [{"query_id": stored[-1], "score": 0.5}])
    back = reg.restore(name, first)  # a new version holding the first's content
    assert back.restored and back.version == first + 2
    before = _history(reg, name)
    again = reg.restore(name, first)
    assert (again.restored, again.restored_version, again.version) == (False, first, back.version)
    assert _history(reg, name) == before
    out = CliRunner().invoke(cli, ["--home", str(reg.home), "restore", name, "--version", str(first)])
    assert out.exit_code == 0, out.output
    assert f"is version {back.version}, a restore of version {first}, already: nothing to restore" in out.output
    assert _history(reg, name) == before
    moved = reg.restore(name, first + 1)  # another version's content is a change
    assert moved.restored and moved.version == back.version + 1


def test_remove_names_the_aliases_left_pointing_at_the_model_and_no_alias_is_set_to_a_removed_one(reg):
    from registry.errors import NotFoundError

    name, other = (m.name for m in reg.models()[:2])
    reg.set_alias("prod", name)
    reg.set_alias("canary", name)
    reg.set_alias("other", other)
    out = CliRunner().invoke(cli, ["--home", str(reg.home), "remove", name])
    assert out.exit_code == 0, out.output
    assert "aliases pointing at it" in out.output and "canary, prod" in out.output and "other" not in out.output
    assert reg.remove(other).aliases == ["other"]
    with pytest.raises(NotFoundError) as err:
        reg.set_alias("fresh", name)
    assert err.value.field == "target" and "is removed" in str(err.value) and "registry restore" in str(err.value)
    assert "fresh" not in {a.alias for a in reg.aliases()}
    reg.restore(name)
    assert reg.set_alias("fresh", name).name == name and reg.resolve("prod") == name


def test_embed_all_after_add_model_finds_it_current(reg):
    """A reviewer's finding: `embed --all` right after `add-model` wrote an "embed" version of the new
    model: its batched forward pass differs from add-model's in the last float32 bits (2.4e-6 on a vector
    of norm 10 on the demo home), above the 1e-6 the comparison allowed."""
    import numpy as np

    from registry.catalog.embedding import _same_embedding

    stored = reg.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    for i, name in enumerate(("new-a", "new-b")):
        reg.add_model(name, [{"query_id": q, "score": float((j + i) % 2)} for j, q in enumerate(stored[i:i + 1 + 6 * i])])
    again = reg.embed_all()
    assert again.unchanged == again.n_embedded == 8
    assert [_history(reg, name) for name in ("new-a", "new-b")] == [[(1, "add")]] * 2
    row = _row(reg, "new-a")
    vector = (np.asarray(row["vector"]) * 8 / np.abs(row["vector"]).max()).astype(np.float32)  # the demo's scale
    ulps = vector
    for _ in range(3):  # three float32 steps apart (2.9e-6 at 8): the same vector
        ulps = np.nextafter(ulps, np.float32(np.inf))
    assert _same_embedding({**row, "vector": vector.tolist()}, {**row, "vector": ulps.tolist()})
    moved = vector.copy()
    moved[0] += 1e-3  # a change no rounding makes
    assert not _same_embedding({**row, "vector": vector.tolist()}, {**row, "vector": moved.tolist()})
