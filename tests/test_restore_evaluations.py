"""A restored version keeps its own evaluations: the evaluations table becomes the set that version held
(rebuilt from the evaluation log), so a later `embed --all` or refine starts from it, not from the union of
every version's evaluations (which re-embedded the model as the version the restore had rolled back)."""
from __future__ import annotations

import pytest

from helpers import SMALL_TRAINED


@pytest.fixture
def reg(synthetic_home, monkeypatch):
    from registry import Registry

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return Registry.open(synthetic_home("restore-evals", **SMALL_TRAINED))


def _evals(reg, name) -> dict[str, float]:
    table = reg.store.read_in("evaluations", ["query_id", "score"], "model", [name])
    return dict(zip(table.column("query_id").to_pylist(), table.column("score").to_pylist()))


def test_a_restored_version_keeps_its_evaluations_through_embed_and_refine(reg):
    ids = reg.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    assert len(ids) >= 40
    first = [{"query_id": q, "score": i % 2} for i, q in enumerate(ids[:30])]
    more = [{"query_id": q, "score": 1} for q in ids[30:40]] + [{"query_id": ids[0], "score": 1}]  # 10 new, 1 moved
    assert reg.add_model("ep", first).version == 1
    assert reg.refine("ep", more).version == 2 and reg.show("ep").n_evals == 40
    v2 = _evals(reg, "ep")
    assert len(v2) == 40 and v2[ids[0]] == 1

    back = reg.restore("ep", 1)
    assert (back.restored_version, back.version) == (1, 3)
    assert _evals(reg, "ep") == {e["query_id"]: float(e["score"]) for e in first}  # version 1's 30, its scores
    assert reg.show("ep").n_evals == 30
    embedded = reg.embed_all()
    assert embedded.n_evals["ep"] == 30  # re-embedded from what version 1 held, not from all 40
    assert [(v.version, v.event) for v in reg.history("ep").versions][-1] == (3, "restore")  # no embed row: same
    again = reg.refine("ep", more)  # what version 2 brought is new again to the restored version
    assert (again.event, again.version, again.new_evaluations, again.n_evals) == ("refine", 4, 11, 40)

    reg.restore("ep", 2)  # and version 2 comes back whole, from the log
    assert _evals(reg, "ep") == v2 and reg.show("ep").n_evals == 40
