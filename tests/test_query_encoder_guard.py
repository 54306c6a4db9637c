"""A home keeps the query encoder its queries and its LOCUS encoder were made with: switching it would give
new texts vectors nothing reads, and their evaluations would drop out of every embedding unseen. What an
embedding does leave out (queries stored without a vector) it says, per model."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from helpers import SMALL_TRAINED

pytestmark = pytest.mark.usefixtures("offline")


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def reg(synthetic_home):
    from registry import Registry

    return Registry.open(synthetic_home("guard", **SMALL_TRAINED))


def _cli(*args):
    from cli.main import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_init_does_not_switch_the_query_encoder_of_a_home_with_queries(reg):
    from registry.errors import InputError

    before = reg.info()
    with pytest.raises(InputError) as err:
        reg.set_query_encoder("all-mpnet-base-v2")
    assert err.value.field == "encoder" and "all-MiniLM-L6-v2" in str(err.value) and "new home" in str(err.value)
    reg.set_query_encoder("sentence-transformers/all-MiniLM-L6-v2")  # the same encoder, spelled otherwise: fine
    out = _cli("--home", str(reg.home), "init", "--encoder", "all-mpnet-base-v2")
    assert out.exit_code != 0 and "query encoder is all-MiniLM-L6-v2" in out.output
    assert reg.info() == before


def test_import_with_another_encoder_is_refused_and_stores_nothing(reg, tmp_path):
    from registry.errors import InputError

    stats = reg.stats().model_dump()
    path = tmp_path / "more.jsonl"
    path.write_text(json.dumps({"model": "other", "query": "A brand new question about owls?", "score": 1}) + "\n")
    with pytest.raises(InputError) as err:
        reg.import_path(path, encoder="all-mpnet-base-v2")
    assert err.value.field == "encoder"
    assert reg.stats().model_dump() == stats
    reg.import_path(path, encoder="all-MiniLM-L6-v2")  # the home's own encoder, named: imported as usual
    assert "other" in [m.name for m in reg.models()]


def test_embed_names_the_evaluations_it_left_out_for_want_of_a_query_vector(reg, tmp_path):
    stored = reg.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    path = tmp_path / "unencoded.jsonl"
    rows = [{"model": "half", "query_id": stored[0], "score": 1},
            {"model": "half", "query": "An unencoded question about bats?", "score": 0},
            {"model": "none", "query": "Another unencoded question, on owls?", "score": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reg.import_path(path, encode=False)
    report = reg.embed_all()
    assert report.n_evals["half"] == 1 and "none" not in report.n_evals
    [warning] = [w for w in report.warnings if "no all-MiniLM-L6-v2 vector" in w]
    assert "half (1 of 2)" in warning and "none (1 of 1, not embedded)" in warning
    assert "2 model(s)" in warning and "imported again without --no-encode" in warning
    # once encoded (the same file imported with encoding on), nothing is left out
    reg.import_path(path)
    again = reg.embed_all()
    assert again.n_evals["half"] == 2 and again.n_evals["none"] == 1
    assert not [w for w in again.warnings if "vector" in w]


def test_adding_a_model_moves_no_other_model_s_p_correct(reg):
    """The router blend's query term is the mean over the models it was trained on, not over the index as
    it is now, and its kNN draws pooled neighbourhoods from those models' queries: a model added (or
    removed) later, even one evaluated on a new text next to the routed one, changes nobody else's
    P(correct)."""
    text = reg.store.read("queries", ["text"]).column("text")[0].as_py()
    stored = reg.store.read("queries", ["query_id"]).column("query_id").to_pylist()

    def p_of(decision):
        return {m.name: m.p_correct for m in decision.ranking}

    before = reg.route(text, k=50)
    assert before.predictor == "locus+item+knn"  # the blend (with its query term) answered
    reg.add_model("thin-newcomer", [{"query_id": stored[0], "score": 1}, {"query_id": stored[1], "score": 0},
                                     {"query": text + " Answer in one word.", "score": 1}])
    after = reg.route(text, k=50)
    assert "thin-newcomer" in p_of(after)
    assert {n: p for n, p in p_of(after).items() if n != "thin-newcomer"} == pytest.approx(p_of(before), abs=1e-6)
    reg.remove("thin-newcomer")
    assert p_of(reg.route(text, k=50)) == pytest.approx(p_of(before), abs=1e-6)


def test_clusters_and_map_name_the_models_they_cannot_place(reg, tmp_path):
    """A model with no behaviour fingerprint (too few evaluations for one) is not clustered or drawn by
    fingerprint: the result names it and says how to include it, rather than dropping it unsaid."""
    from registry.catalog.fingerprint_store import MIN_FINGERPRINT_EVALS

    assert MIN_FINGERPRINT_EVALS > 1  # one evaluation gives no fingerprint
    reg.add_model("no-print", [{"query": "A question nobody else was asked, about moths?", "score": 1}])
    grouped = reg.clusters()
    assert grouped.by == "fingerprint" and grouped.without_vector == ["no-print"]
    assert "no-print" in grouped.evidence_note and "--by locus" in grouped.evidence_note
    assert "no-print" not in [m for c in grouped.clusters for m in c.members]
    drawn = reg.map(tmp_path / "m.png")
    assert drawn.without_vector == ["no-print"] and "no-print" in drawn.note
    assert "no-print" not in [c.name for c in drawn.coordinates]
    by_locus = reg.clusters(by="locus", min_evals=0)  # it has a LOCUS vector: clustered by that
    assert by_locus.without_vector == [] and "no-print" in [m for c in by_locus.clusters for m in c.members]


def test_a_search_from_a_model_without_a_fingerprint_says_why_it_read_locus(reg):
    stored = reg.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    reg.add_model("few-answers", [{"query_id": q, "score": i % 2} for i, q in enumerate(stored[:3])])
    found = reg.similar("few-answers", k=3)
    assert found.by == "locus" and "few-answers has no behaviour fingerprint" in found.evidence_note
    well = next(m.name for m in reg.models() if m.name != "few-answers")
    assert reg.similar(well, k=3).by == "fingerprint"
    assert not (reg.similar("few-answers", k=3, by="locus").evidence_note or "").count("fingerprint")  # asked for
    # every fingerprinted model asked for: the one without a fingerprint is named, not dropped unsaid
    everyone = reg.similar(well, k=1000, by="fingerprint")
    assert "few-answers" not in [n.name for n in everyone.neighbours]
    assert "1 embedded model(s) have no behaviour fingerprint" in everyone.evidence_note
    assert "few-answers" in everyone.evidence_note and "--by locus" in everyone.evidence_note
    assert "no behaviour fingerprint" not in (reg.similar(well, k=2, by="fingerprint").evidence_note or "")


def test_init_loads_an_encoder_it_does_not_know_by_name(tmp_path):
    """A name that is neither a packaged encoder nor a model directory is loaded by `init`, so a typo is
    refused there, not at the first import."""
    from registry import Registry

    home = tmp_path / "fresh"
    out = _cli("--home", str(home), "init", "--encoder", "nosuch-encoder")
    assert out.exit_code != 0 and "cannot load query encoder 'nosuch-encoder'" in out.output
    assert Registry.open(home).query_encoder == "all-mpnet-base-v2"  # the default, unchanged
    model_dir = tmp_path / "not-a-model"
    model_dir.mkdir()
    out = _cli("--home", str(home), "init", "--encoder", str(model_dir))
    assert out.exit_code != 0 and "not a sentence-transformers model directory" in out.output
    assert _cli("--home", str(home), "init", "--encoder", "all-MiniLM-L6-v2").exit_code == 0
    assert Registry.open(home).query_encoder == "all-MiniLM-L6-v2"


def test_routes_read_the_stored_evaluations_once_per_state_of_the_store(reg, monkeypatch):
    """The router's kNN reads every stored evaluation: a Registry routing text after text builds it once,
    and again after a write (here a refine, which changes no name), whose answers then count."""
    from registry.operations import StoreView

    built = []
    real = StoreView.build_router_knn
    monkeypatch.setattr(StoreView, "build_router_knn", lambda self, *a, **kw: built.append(1) or real(self, *a, **kw))
    rows = reg.store.read("queries", ["query_id", "text"]).to_pylist()
    text = rows[0]["text"]
    before = reg.route(text, k=50)
    reg.route(rows[1]["text"], k=50)
    assert before.predictor == "locus+item+knn" and len(built) == 1
    top = before.ranking[0]
    reg.refine(top.name, [{"query_id": row["query_id"], "score": 0} for row in rows[:8]])
    after = {m.name: m.p_correct for m in reg.route(text, k=50).ranking}
    assert len(built) == 2 and after[top.name] < top.p_correct - 0.01
