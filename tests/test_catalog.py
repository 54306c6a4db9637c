"""The registry over the vector index: add-model, search, versions, remove/restore, consistency (the audit: test_audit.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import POOL_TRAINED, own_evaluations, write_triple
from registry import InputError, NotFoundError, Registry, RegistryError


@pytest.fixture(scope="module")
def trained_home(synthetic_home) -> Path:
    """A synthetic registry with a (briefly) trained encoder and every model embedded."""
    return synthetic_home("catalog", **POOL_TRAINED)  # the recipe test_portfolio builds too


@pytest.fixture
def reg(trained_home, tmp_path) -> Registry:
    copy = tmp_path / "home"
    shutil.copytree(trained_home, copy)
    return Registry.open(copy)


def test_a_copy_of_a_model_under_a_new_name_finds_the_original_first(reg):
    evals = own_evaluations(reg, "syn-synfam1-7b")
    np.random.default_rng(0).shuffle(evals)
    result = reg.add_model("copy-of-7b", evals, {"provider": "someone", "params_b": "7"})
    assert result.version == 1 and result.encoded_texts == 0  # every text was cached
    hits = reg.similar("copy-of-7b", k=3).neighbours
    assert hits[0].name == "syn-synfam1-7b" and hits[0].distance < 1e-5
    assert "copy-of-7b" not in [h.name for h in hits]
    assert reg.get("copy-of-7b").params_b == 7.0
    assert reg.check().ok and reg.check().problems == []


def test_new_query_texts_are_encoded_and_stored(reg):
    evals = own_evaluations(reg, "syn-synfam0-1b")[:40] + [("A brand new question about tax law?", 1, "law")]
    result = reg.add_model("newcomer", evals)
    assert result.encoded_texts == 1 and result.new_evaluations == 41
    assert reg.stats().n_queries == 101


def test_search_filters_metrics_and_errors(reg):
    assert all(h.metadata["family"] == "synfam2"
               for h in reg.similar("syn-synfam0-1b", k=5, where="family == synfam2").neighbours)
    euclid = reg.similar("syn-synfam0-1b", k=3, metric="euclidean", by="locus").neighbours
    assert [h.distance for h in euclid] == sorted(h.distance for h in euclid)
    assert {h.metric for h in euclid} == {"euclidean"}
    # from a model, the fingerprint index's candidates come ranked by behaviour distance, after any whose
    # fingerprint could have produced the model's answers
    refined = reg.similar("syn-synfam0-1b", k=5).neighbours
    rest = [h.behaviour_distance for h in refined if not h.same_model]
    assert rest == sorted(rest) and [h.same_model for h in refined] == sorted(h.same_model for h in refined)[::-1]
    assert reg.distance("syn-synfam0-1b", "syn-synfam0-1b") == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(NotFoundError, match="closest: syn-synfam0-1b"):
        reg.similar("syn-synfam0-1bb")
    with pytest.raises(InputError, match="unknown field"):
        reg.similar("syn-synfam0-1b", where="colour == red")


def test_names_are_unique_unless_replaced(reg):
    evals = own_evaluations(reg, "syn-synfam2-1b")
    with pytest.raises(RegistryError, match="exists"):
        reg.add_model("syn-synfam2-1b", evals)
    assert reg.add_model("syn-synfam2-1b", evals[:50], replace=True).version == 2
    stored = [r for r in reg.store.read("evaluations").to_pylist() if r["model"] == "syn-synfam2-1b"]
    assert len(stored) == 50


def test_a_new_name_that_reads_as_name_at_version_is_refused(reg, tmp_path):
    """'syn-synfam2-1b@1' as a new model would take over NAME@VERSION: an alias set to it pointed at it."""
    evals = own_evaluations(reg, "syn-synfam2-1b")[:40]
    before = reg.stats().model_dump()
    with pytest.raises(InputError) as refused:
        reg.add_model("syn-synfam2-1b@1", evals)
    assert refused.value.field == "name" and "reads as version 1 of 'syn-synfam2-1b'" in str(refused.value)
    assert reg.add_model("syn-synfam2-1b@r1", evals).version == 1  # '@' with more than digits is a name
    (tmp_path / "e.jsonl").write_text("".join(json.dumps({"model": "other@7", "query": e["query"],
                                                          "score": e["score"]}) + "\n" for e in evals))
    with pytest.raises(InputError, match="a new model of this import: the model name 'other@7' ends in '@' and digits"):
        reg.import_path(tmp_path / "e.jsonl")
    assert "other@7" not in [m.name for m in reg.models()]
    assert reg.stats().model_dump()["n_models"] == before["n_models"] + 1


def test_refine_makes_a_new_version_and_keeps_the_old(reg):
    evals = own_evaluations(reg, "syn-synfam0-7b")
    reg.add_model("growing", evals[:30])
    reg.refine("growing", evals[30:])
    versions = reg.history("growing").versions
    assert [(v.version, v.event) for v in versions] == [(1, "add"), (2, "refine")]
    assert versions[0].n_evals == 30 and versions[1].n_evals == 100
    from registry.catalog.models import history_rows

    rows = history_rows(reg.store, "growing")
    assert rows[0]["vector"] != rows[1]["vector"]


def test_embedded_models_have_a_history(reg):
    assert [v.event for v in reg.history("syn-synfam0-1b").versions] == ["embed"]


def test_remove_then_restore(reg):
    before = reg.similar("syn-synfam1-1b", k=3)
    reg.remove("syn-synfam1-13b")
    assert "syn-synfam1-13b" not in [r.name for r in reg.models()]
    with pytest.raises(NotFoundError):
        reg.remove("syn-synfam1-13b")
    reg.restore("syn-synfam1-13b")
    assert reg.similar("syn-synfam1-1b", k=3) == before


def test_adding_a_removed_name_starts_from_the_evaluations_given(reg):
    evals = own_evaluations(reg, "syn-synfam1-1b")
    reg.remove("syn-synfam1-1b")
    reg.add_model("syn-synfam1-1b", evals[:40])
    stored = [r for r in reg.store.read("evaluations").to_pylist() if r["model"] == "syn-synfam1-1b"]
    assert len(stored) == 40


def test_bad_evaluation_files_get_import_errors(reg, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("query,score\nWhat is 1+1?,1\nWhat is 2+2?,2\n")
    before = reg.stats()
    with pytest.raises(InputError, match=r"bad.csv, line 3, field 'score'.*outside"):
        reg.add_model("bad", bad)
    assert reg.stats() == before and "bad" not in [r.name for r in reg.models()]


def test_vectors_from_another_encoder_never_meet(reg):
    reg.store.update_config(active_encoder="0000000000000000")
    rows = reg.store.read("models").to_pylist()
    rows[0]["encoder_id"] = "0000000000000000"
    import pyarrow as pa

    from indexing.store import MODEL_SCHEMA

    with reg.store.transaction():
        reg.store.table("models").merge_insert("name").when_matched_update_all().execute(
            pa.Table.from_pylist(rows[:1], schema=MODEL_SCHEMA))
    with pytest.raises(RegistryError, match="embed --all"):
        reg.similar(rows[1]["name"], by="locus")


def test_cli_add_search_show_history_remove_audit(trained_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(trained_home, home)
    run = lambda *a, code=0: _run(home, *a, code=code)  # noqa: E731
    evals = own_evaluations(Registry.open(home), "syn-synfam0-13b")
    path = tmp_path / "e.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in evals))
    out = json.loads(run("add-model", "dup-endpoint", "--evals", str(path), "--meta", "provider=reseller", "--json"))
    assert out["version"] == 1
    found = json.loads(run("search", "dup-endpoint", "-k", "2", "--json"))
    assert found["query"] == "dup-endpoint" and found["neighbours"][0]["name"] == "syn-synfam0-13b"
    assert set(found["neighbours"][0]) == {"name", "distance", "metric", "vector", "metadata", "agreement_kappa",
                                           "behaviour_distance", "same_model", "shared_queries", "n_evals",
                                           "low_evidence"}
    assert found["neighbours"][0]["same_model"] is True  # an exact copy: its answers are the original's
    # likeness by default from the fingerprint index, re-ranked by agreement: the copy agrees on every query
    assert found["by"] == "fingerprint" and found["neighbours"][0]["agreement_kappa"] > 0.9
    by_locus = json.loads(run("search", "dup-endpoint", "-k", "2", "--by", "embedding", "--json"))
    assert by_locus["by"] == "locus" and by_locus["neighbours"][0]["agreement_kappa"] is None
    assert json.loads(run("show", "dup-endpoint", "--json"))["record"]["provider"] == "reseller"
    assert json.loads(run("history", "dup-endpoint", "--json"))["versions"][0]["event"] == "add"
    assert json.loads(run("check", "--json")) == {"ok": True, "problems": [], "notes": []}
    audit = json.loads(run("audit", "--json"))
    assert {"dup-endpoint", "syn-synfam0-13b"} in [{f["a"], f["b"]} for f in audit["flags"]]
    run("audit", "--fail-on-flag", code=1)
    run("remove", "dup-endpoint")
    assert "model 'dup-endpoint' was removed" in run("show", "dup-endpoint", code=2)
    assert "closest: syn-synfam0-13b" in run("show", "syn-synfam0-13", code=2)


def _run(home, *args, code=0):
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result.output


def test_add_model_refuses_metadata_that_is_not_key_value(trained_home, tmp_path):
    shutil.copytree(trained_home, tmp_path / "home")
    path = tmp_path / "e.csv"
    path.write_text("query,score\nWhat is 1+1?,1\n")
    out = _run(tmp_path / "home", "add-model", "x", "--evals", str(path), "--meta", "providerreseller", code=2)
    assert "--meta" in out and "'providerreseller' is not key=value" in out
    out = _run(tmp_path / "home", "add-model", "x", "--evals", str(path), "--meta", "params_b=big", code=2)
    assert "params_b 'big' is not a number" in out
    assert "x" not in [r.name for r in Registry.open(tmp_path / "home").models()]


def test_check_command_exits_1_and_names_the_problem(reg):
    some_query = reg.store.read("evaluations").to_pylist()[0]["query_id"]
    with reg.store.transaction():
        reg.store.table("queries").delete(f"query_id = '{some_query}'")
    out = _run(reg.home, "check", code=1)
    assert "PROBLEM 1 evaluated query ids are not in the queries table" in out


def test_check_notes_evaluated_queries_without_a_vector_and_still_exits_0(reg, tmp_path):
    assert _run(reg.home, "check").strip() == "consistent: index, tables and evaluations agree"
    path = tmp_path / "unencoded.jsonl"
    path.write_text("".join(json.dumps({"model": "importer", "query": f"Never encoded question {i}?", "score": 1}) + "\n"
                            for i in range(3)))
    reg.import_path(path, encode=False)
    out = _run(reg.home, "check")  # not a problem: --no-encode is a documented choice
    assert out.startswith("consistent") and "NOTE 3 of " in out and "have no vector of the query encoder" in out
    result = json.loads(_run(reg.home, "check", "--json"))
    assert result["ok"] is True and result["problems"] == [] and len(result["notes"]) == 2
    assert "have no embedding and no evaluation on a query with a vector" in result["notes"][1]  # importer's
    # as the note says: a model added with an evaluation on one (by its id) gives it its vector
    unencoded = sorted(q["query_id"] for q in reg.store.read("queries").to_pylist() if q["text"].startswith("Never"))
    reg.add_model("healer", [{"query_id": unencoded[0], "score": 1}])
    assert "NOTE 2 of " in _run(reg.home, "check")


def test_search_before_any_embedding_says_what_to_run(home, tmp_path):
    Registry.open(home).import_path(write_triple(tmp_path / "data"))
    out = _run(home, "search", "alpha-7b", code=2)
    assert "no embedding yet" in out and "embed --all" in out


def test_a_removed_model_leaves_the_pool_that_analytics_read(reg):
    from registry.analytics.heldout import held_out

    reg.remove("syn-synfam1-13b")
    assert "syn-synfam1-13b" not in held_out(reg.store).data.models
    reg.restore("syn-synfam1-13b")
    assert "syn-synfam1-13b" in held_out(reg.store).data.models


def test_a_current_saved_index_answers_search_without_opening_the_store(reg):
    """ModelIndex's currency check: after one search saved the index, a fresh process searches from it
    without importing LanceDB (nor scipy: the same-model threshold of the default item table is known); after
    a write (new generation) it rebuilds from the table (read by Lance directly: LanceDB is still not
    imported)."""
    import subprocess
    import sys

    first = reg.similar("syn-synfam0-1b", k=3)
    code = ("import sys; from registry import Registry; "
            f"hits = Registry.open({str(reg.home)!r}, create=False).similar('syn-synfam0-1b', k=3); "
            "print('lancedb' in sys.modules, 'scipy' in sys.modules, [h.name for h in hits.neighbours])")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True).stdout
    assert out.strip() == f"False False {[h.name for h in first.neighbours]}"
    reg.remove("syn-synfam0-7b")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True).stdout
    assert out.startswith("False") and "syn-synfam0-7b" not in out  # read from the table, by Lance directly


def test_reads_need_neither_lancedb_nor_torch(reg):
    """A route reads the models table and every evaluation (its kNN), and after a write the index is made
    again from the table; compare predicts with G; drift reads the evaluation log: all through Lance
    directly and numpy. LanceDB's import (~1 s, its namespace clients) was most of a cold `registry route`
    while a version check and the kNN's read went through it, and torch's a cold `registry compare`'s."""
    import subprocess
    import sys

    text = reg.store.read("queries", ["text"]).column("text")[0].as_py()
    code = ("import sys; from registry import Registry; "
            f"reg = Registry.open({str(reg.home)!r}, create=False); r = reg.route({text!r}, k=2); "
            "c = reg.compare('syn-synfam0-1b', 'syn-synfam1-1b'); d = reg.drift('syn-synfam1-1b'); "
            "print('lancedb' in sys.modules, 'torch' in sys.modules, r.predictor, len(r.ranking), "
            "c.predicted_note is None and len(c.tasks) > 0)")
    root = Path(__file__).resolve().parents[1]
    reg.remove("syn-synfam0-7b")  # the saved index is stale: the route opens the models table
    for _ in range(2):  # and once more with the index it saved
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                             env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
        assert out.stdout.split() == ["False", "False", "locus+item+knn", "2", "True"], out.stdout + out.stderr


def test_writes_load_the_active_encoder_once_while_the_config_names_it(reg, monkeypatch):
    """Loading and verifying the checkpoint cost each add-model ~20 ms: a Registry keeps the one the
    home's config names, and reads the config afresh, so another encoder made active is picked up."""
    import registry.catalog.embedding as embedding

    loads = []
    real = embedding.active_encoder
    monkeypatch.setattr(embedding, "active_encoder", lambda store, *a: (loads.append(1), real(store, *a))[1])
    evals = own_evaluations(reg, "syn-synfam0-7b")
    reg.add_model("first", evals)
    reg.add_model("second", evals)
    assert len(loads) == 1
    reg.store.update_config(active_encoder="0" * 16)  # what another process activating an encoder writes
    with pytest.raises(RegistryError, match="0000000000000000"):
        reg.add_model("third", evals)
    assert len(loads) == 2 and "third" not in [m.name for m in reg.models()]


def test_check_names_models_imported_but_never_embedded(reg, tmp_path):
    """A reviewer's finding: `check` said nothing of an imported model without an embedding (search, audit
    and route leave it out). A note, not a problem (exit 0): an import before its `embed --all` is a state
    the tables agree on; the note says what would embed it."""
    stored = own_evaluations(reg, "syn-synfam0-1b")[:3]
    path = tmp_path / "more.jsonl"
    path.write_text("".join(json.dumps({"model": "imported-only", **e}) + "\n" for e in stored))
    reg.import_path(path)
    checked = reg.check()
    assert checked.ok and checked.notes == [
        "1 model(s) have evaluations but no embedding (imported-only): search, audit and route leave them out "
        "until `registry embed --all`"]
    out = CliRunner().invoke(cli, ["--home", str(reg.home), "check"])
    assert out.exit_code == 0 and "NOTE 1 model(s) have evaluations but no embedding (imported-only)" in out.output
    reg.embed_all()
    assert reg.check().notes == []
    # a model whose every evaluated query lacks a vector: embed --all cannot embed it, and check says why
    fresh = tmp_path / "unvectored.jsonl"
    fresh.write_text(json.dumps({"model": "no-vector", "query": "A text never encoded?", "score": 1, "task": "law"}) + "\n")
    reg.import_path(fresh, encode=False)
    reg.embed_all()
    notes = reg.check().notes
    assert [n for n in notes if "no-vector" in n] == [
        "1 model(s) have no embedding and no evaluation on a query with a vector of the query encoder (no-vector): "
        "`embed --all` cannot embed them; a query gets its vector when its text is imported again without "
        "--no-encode, or when a model is added or refined with an evaluation on it"]
    # a model a triple import's models.csv names without a row in evals.csv: nothing to embed it from
    triple = write_triple(tmp_path / "triple", models=[("0", "scored", "f", "7", "open"), ("1", "listed-only", "f", "7", "open")],
                          evals=[("0", "q1", 1)])
    reg.import_path(triple, encode=False)
    assert any(n.startswith("1 model(s) have no evaluations (listed-only)") for n in reg.check().notes)


def test_a_removed_model_is_named_as_removed_not_as_unknown(reg):
    """A reviewer's finding: show and refine of a removed model said "no model named ..." with other names,
    as if it had never been there; they say it was removed and how to bring it back, as the audit did."""
    name = "syn-synfam1-7b"
    some = own_evaluations(reg, name)[:3]
    reg.remove(name)
    said = f"model {name!r} was removed (`registry restore {name}` brings it back)"
    for attempt in (lambda: reg.show(name), lambda: reg.refine(name, some), lambda: reg.remove(name)):
        with pytest.raises(NotFoundError) as err:
            attempt()
        assert str(err.value) == said
    out = CliRunner().invoke(cli, ["--home", str(reg.home), "show", name])  # the snapshot's path
    assert out.exit_code == 2 and said in out.output
    with pytest.raises(NotFoundError, match="no model named 'never-there'"):
        reg.show("never-there")
    reg.restore(name)
    assert reg.show(name).record.name == name
