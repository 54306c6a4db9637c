"""Routing query texts by predicted P(correct), with nearest-neighbour fallback (appendix E.2)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import POOL_TRAINED_NO_COPY

from cli.main import cli
from registry import InputError, NotFoundError, Registry, RegistryError

TASKS = ("math", "law", "biology", "code")
NEW_TEXT = "Write a Python function that counts the vowels in a string in linear time."


@pytest.fixture(scope="module")
def reg(synthetic_home) -> Registry:
    """A synthetic registry with a briefly trained encoder, all embedded. Routing only reads."""
    return Registry.open(synthetic_home("routing", **POOL_TRAINED_NO_COPY))


@pytest.fixture(scope="module")
def stored(reg) -> dict[str, str]:
    """One stored query text per task."""
    texts = {}
    for row in reg.store.read("queries").to_pylist():
        texts.setdefault(row["task"], row["text"])
    return texts


@pytest.fixture
def no_encoder(monkeypatch):
    """Loading the query encoder fails: only stored texts can be routed."""
    import encoder.query_encoder

    def refuse(name, **kwargs):
        raise RuntimeError(f"the query encoder {name} was loaded")

    monkeypatch.setattr(encoder.query_encoder, "load_query_encoder", refuse)


def names(entries) -> list[str]:
    return [e["name"] if isinstance(e, dict) else e.name for e in entries]


def test_ranking_is_by_predicted_p_and_fallback_by_distance(reg, stored, no_encoder):
    result = reg.route(stored["math"], k=4, fallback=3)
    assert result.query == stored["math"] and set(result.model_dump()) == {"query", "ranking", "fallbacks",
                                                                                 "min_evals", "evidence_note",
                                                                                 "predictor", "predictor_description"}
    assert result.predictor == "locus+item+knn"  # training fitted a router blend beside the encoder
    assert result.predictor_description == "LOCUS blended with the item table and kNN over the stored queries"
    # the description follows the predictor on a round trip (the HTTP client re-reads the server's JSON)
    again = type(result).model_validate({**result.model_dump(), "predictor": "locus", "predictor_description": "x"})
    assert again.predictor_description == "LOCUS"
    p = [r.p_correct for r in result.ranking]
    assert len(p) == 4 and p == sorted(p, reverse=True) and all(0 < x < 1 for x in p)
    top = result.ranking[0].name
    assert top not in names(result.fallbacks) and len(result.fallbacks) == 3
    # fallbacks by default the models that answer as the top one does: its nearest in the behaviour index ...
    from registry.analytics.search import behaviour_neighbours
    from registry.catalog.fingerprint_store import load_item_table

    near = behaviour_neighbours(reg.store, load_item_table(reg.store), top, 3)
    assert [(f.by, f.name, f.distance, f.metric) for f in result.fallbacks] == [
        ("fingerprint", n, pytest.approx(d), "behaviour") for n, d in near]
    # ... or from LOCUS when asked, as `search --by locus` ranks them
    by_locus = reg.route(stored["math"], k=4, fallback=3, by="locus").fallbacks
    assert all(f.metric == "cosine" for f in by_locus)
    assert [(f.name, f.distance_cosine) for f in by_locus] == [
        (h.name, h.distance) for h in reg.similar(top, k=3, by="locus").neighbours]


def test_predicted_p_follows_the_models_real_accuracy_on_the_task(reg, stored, no_encoder):
    task_of = {r["query_id"]: r["task"] for r in reg.store.read("queries").to_pylist()}
    correct: dict[tuple[str, str], list[float]] = {}
    for r in reg.store.read("evaluations").to_pylist():
        correct.setdefault((r["model"], task_of[r["query_id"]]), []).append(r["score"])
    for task in TASKS:
        ranking = reg.route(stored[task], k=9).ranking
        real = [np.mean(correct[(r.name, task)]) for r in ranking]
        assert np.mean(real[:3]) > np.mean(real[-3:]), (task, real)


def test_an_excluded_model_never_appears(reg, stored, no_encoder):
    free = reg.route(stored["law"], k=9, fallback=8)
    top, second = free.ranking[0].name, free.ranking[1].name
    nearest = free.fallbacks[0].name
    excluded = [top, nearest]
    result = reg.route(stored["law"], k=9, fallback=9, exclude=excluded)
    assert not set(excluded) & set(names(result.ranking) + names(result.fallbacks))
    assert len(result.ranking) == 7 and len(result.fallbacks) == 6  # everyone else, top excluded
    assert names(result.ranking) == [n for n in names(free.ranking) if n not in excluded]
    assert result.ranking[0].name == (second if second != nearest else free.ranking[2].name)
    assert all(not set(excluded) & set(names(r.ranking) + names(r.fallbacks))
               for r in reg.route(list(stored.values()), k=9, fallback=9, exclude=excluded))


def test_where_limits_ranking_and_fallback(reg, stored, no_encoder):
    result = reg.route(stored["code"], k=5, where="family == synfam1", fallback=5)
    family = {"syn-synfam1-1b", "syn-synfam1-7b", "syn-synfam1-13b"}
    assert set(names(result.ranking)) == family  # k larger than the pool: all of it
    assert set(names(result.fallbacks)) == family - {result.ranking[0].name}


def test_a_batch_is_the_same_as_single_routes(reg, stored, no_encoder):
    texts = [stored[t] for t in TASKS]
    batch = reg.route(texts, k=3, exclude=["syn-synfam0-7b"])
    assert isinstance(batch, list) and len(batch) == 4
    for text, one in zip(texts, batch):
        single = reg.route(text, k=3, exclude=["syn-synfam0-7b"])
        assert names(one.ranking) == names(single.ranking) and one.fallbacks == single.fallbacks
        assert [r.p_correct for r in one.ranking] == pytest.approx([r.p_correct for r in single.ranking],
                                                                         abs=1e-5)
    assert reg.route(tuple(texts[:1]), k=3, exclude=["syn-synfam0-7b"]) == [batch[0]]


def test_a_stored_text_is_not_re_encoded_a_new_one_is(reg, stored, no_encoder):
    assert reg.route(stored["biology"]).ranking  # the loader would fail: the stored vector was used
    with pytest.raises(RuntimeError, match="query encoder all-MiniLM-L6-v2 was loaded"):
        reg.route(NEW_TEXT)
    with pytest.raises(RuntimeError, match="was loaded"):
        reg.route([stored["biology"], NEW_TEXT])


def test_a_new_text_is_encoded_and_routed_without_being_stored(reg):
    before = reg.stats().query_vectors
    result = reg.route(NEW_TEXT, k=2, fallback=1)
    assert len(result.ranking) == 2 and len(result.fallbacks) == 1
    assert reg.stats().query_vectors == before


@pytest.mark.parametrize("call, error, message", [
    (lambda r: r.route(""), InputError, "the query text is empty"),
    (lambda r: r.route("   \n"), InputError, "the query text is empty"),
    (lambda r: r.route(["fine text", " "]), InputError, "query 2 is empty"),
    (lambda r: r.route([]), InputError, "no query"),
    (lambda r: r.route("x", k=0), InputError, "k must be an integer of at least 1, not 0"),
    (lambda r: r.route("x", fallback=-1), InputError, "fallback must be an integer of at least 0"),
    (lambda r: r.route("x", exclude=["syn-synfam0-7bb"]), NotFoundError,
     "no model named 'syn-synfam0-7bb' in the registry; closest: syn-synfam0-7b"),
    (lambda r: r.route("x", where="family == nobody"), RegistryError, "matches none of the 9 embedded models"),
    (lambda r: r.route("x", where="family == synfam2",
                       exclude=["syn-synfam2-1b", "syn-synfam2-7b", "syn-synfam2-13b"]),
     RegistryError, "no model left to route to: all 3 embedded models matching the filter are excluded"),
    (lambda r: r.route("x", where="colour == red"), InputError, "unknown field 'colour'"),
])
def test_bad_input_is_refused_with_a_clear_message(reg, no_encoder, call, error, message):
    with pytest.raises(error) as err:
        call(reg)
    assert message in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------- CLI
def run(home: Path, *args: str):
    return CliRunner().invoke(cli, ["--home", str(home), "route", *args])


def test_cli_route_json_and_text(reg, stored, no_encoder):
    result = run(reg.home, stored["math"], "-k", "2", "--exclude", "syn-synfam1-13b", "--exclude",
                 "syn-synfam0-13b", "--fallback", "4", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload == reg.route(stored["math"], k=2, fallback=4,
                                exclude=["syn-synfam1-13b", "syn-synfam0-13b"]).model_dump(mode="json")
    assert set(payload) == {"query", "ranking", "fallbacks", "min_evals", "evidence_note", "predictor",
                            "predictor_description"}
    assert len(payload["ranking"]) == 2
    assert not {"syn-synfam1-13b", "syn-synfam0-13b"} & set(names(payload["ranking"]) + names(payload["fallbacks"]))
    text = run(reg.home, stored["law"], "--where", "family == synfam2")
    assert text.exit_code == 0, text.output
    assert "P(correct)" in text.output and "if syn-synfam2-" in text.output and "unavailable" in text.output
    assert text.output.splitlines()[-1] == ("(P(correct): LOCUS blended with the item table and kNN over the stored "
                                            "queries by the encoder's router blend)")


@pytest.mark.parametrize("args, message", [
    (["  "], "the query text is empty"),
    (["x", "--exclude", "syn-synfam0-7bb"], "no model named 'syn-synfam0-7bb'"),
    (["x", "-k", "0"], "option -k: must be an integer of at least 1"),
    (["x", "-k", "many"], "'many' is not a valid integer"),
    (["x", "--where", "family == nobody"], "matches none of the 9 embedded models"),
    (["x", "--where", "family == synfam0", "--exclude", "syn-synfam0-1b", "--exclude", "syn-synfam0-7b",
      "--exclude", "syn-synfam0-13b"], "no model left to route to"),
    ([], "Missing argument 'QUERY'"),
])
def test_cli_bad_input_exits_non_zero_and_names_the_problem(reg, no_encoder, args, message):
    result = run(reg.home, *args)
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_route_blends_locus_with_the_item_table_and_without_a_blend_uses_locus(reg, stored, no_encoder, tmp_path):
    """P(correct) is the encoder's router blend of LOCUS, the item table's prediction (the table's text
    map for every text) and kNN over every stored evaluation (with the k, pseudo-count and mode chosen at
    training), for every candidate; an encoder whose blend is of LOCUS and the item table alone (trained
    before the router read kNN) routes by those two; one without a blend by LOCUS alone."""
    import dataclasses
    import shutil

    from encoder.knn import KNNRouter
    from encoder.predictor import predict
    from registry.analytics.search import open_index
    from registry.catalog.dataset import load_eval_data
    from registry.catalog.embedding import ROUTER_BLEND, active_encoder, load_router_blend
    from registry.catalog.fingerprint_store import load_item_table

    active = active_encoder(reg.store)
    blend = load_router_blend(active.directory)
    assert blend is not None and blend.components == ("locus", "item", "knn") and blend.fit == "routing"
    assert set(blend.settings["knn"]) == {"mode", "k", "pseudo_count"}
    texts = [stored["math"], stored["law"]]
    decisions = reg.route(texts, k=5, fallback=0, min_evals=0)
    models = open_index(reg.store)
    prints = open_index(reg.store, by="fingerprint").index
    table = load_item_table(reg.store)
    phi, _ = reg._view.query_vectors(active.query_encoder, texts)
    p_locus = predict(active.locus, models.index.vectors, phi)
    thetas = np.linalg.solve(table._whiten.T, np.stack([prints.vector(n) for n in models.index.names]).astype(float).T).T
    f, b = table.item_params([None] * len(texts), phi)
    p_item = table.probabilities(thetas, f, b)
    data = load_eval_data(reg.store, active.query_encoder, models=list(models.index.names))
    knn = KNNRouter(tune=False, **blend.settings["knn"]).fit(data, np.arange(len(data.scores)), [])
    p_knn = knn.pool_neighbourhoods([i for i, n in enumerate(data.models) if n in active.pool]).predict_vectors(phi)
    expected = blend.predict({"locus": p_locus, "item": p_item, "knn": p_knn})
    row = {n: i for i, n in enumerate(models.index.names)}
    for j, decision in enumerate(decisions):
        assert decision.predictor == "locus+item+knn"
        for ranked in decision.ranking:
            assert ranked.p_correct == pytest.approx(float(expected[row[ranked.name], j]), abs=2e-6)
        # the blend changed the numbers: LOCUS alone would have given others
        assert any(abs(r.p_correct - float(p_locus[row[r.name], j])) > 1e-3 for r in decision.ranking)
    home = tmp_path / "home"
    shutil.copytree(reg.home, home)
    path = home / "encoders" / active.encoder_id / ROUTER_BLEND
    older = dataclasses.replace(blend, components=("locus", "item"), weights=blend.weights[:2],
                                query_weights=blend.query_weights[:2], settings={})
    path.write_text(older.to_json(), encoding="utf-8")
    two = Registry.open(home).route(texts[0], k=5, fallback=0, min_evals=0)
    assert two.predictor == "locus+item"
    expected = older.predict({"locus": p_locus, "item": p_item})
    assert [r.p_correct for r in two.ranking] == pytest.approx(sorted((float(x) for x in expected[:, 0]), reverse=True)[:5],
                                                             abs=2e-6)
    path.unlink()
    plain = Registry.open(home).route(texts[0], k=5, fallback=0, min_evals=0)
    assert plain.predictor == "locus"
    assert [r.p_correct for r in plain.ranking] == pytest.approx(
        sorted((float(x) for x in p_locus[:, 0]), reverse=True)[:5], abs=2e-6)


def test_a_damaged_router_blend_is_refused_naming_its_file(tmp_path):
    """router_blend.json is read as JSON (never unpickled); a file that is not a blend of LOCUS and the
    item table is an error naming the file, and none is no blend (LOCUS alone)."""
    from registry.catalog.embedding import ROUTER_BLEND, load_router_blend

    assert load_router_blend(tmp_path) is None
    (tmp_path / ROUTER_BLEND).write_text("{not json", encoding="utf-8")
    with pytest.raises(RegistryError, match=ROUTER_BLEND):
        load_router_blend(tmp_path)
    from encoder.blend import Blend

    (tmp_path / ROUTER_BLEND).write_text(Blend(components=("locus", "knn"), weights=(1.0, 0.5), intercept=0.0).to_json(),
                                         encoding="utf-8")
    with pytest.raises(RegistryError, match="a router blend of locus and item"):
        load_router_blend(tmp_path)
    for settings in ({}, {"knn": {"mode": "pooled", "k": -3, "pseudo_count": 1.0}}, {"knn": {"mode": "nearest"}}):
        (tmp_path / ROUTER_BLEND).write_text(Blend(components=("locus", "item", "knn"), weights=(1.0, 0.5, 0.5),
                                                   intercept=0.0, settings=settings).to_json(), encoding="utf-8")
        with pytest.raises(RegistryError, match=f"{ROUTER_BLEND}: its knn settings"):
            load_router_blend(tmp_path)
