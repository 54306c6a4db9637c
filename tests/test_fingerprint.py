"""Behaviour fingerprints (encoder/fingerprint.py): the item table, the per-model solve, the distances."""
from __future__ import annotations

import numpy as np
import pytest

from encoder.fingerprint import FingerprintConfig, ItemTable, fit_item_table
from helpers import FINGERPRINT_TRAINED
from registry.lab.geometry import disagreement_matrix, distance_correlations, self_retrieval_ranks

FAST = FingerprintConfig(rank=4, steps=300)


def _pool(seed=0, m=24, q=600, rank=3, tasks=("a", "b")):
    """Scores of m models on q queries from a rank-`rank` logistic factor model: models of similar
    ability (the intercept) that fail on different queries."""
    rng = np.random.default_rng(seed)
    item_f = rng.normal(size=(q, rank)) * 1.5
    model_a = rng.normal(size=(m, rank))
    logits = model_a @ item_f.T + rng.normal(0, 0.3, size=m)[:, None] + rng.normal(0, 1.0, size=q)[None, :]
    y = (rng.random((m, q)) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    vectors = rng.normal(size=(q, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    model_index, query_index = np.divmod(np.arange(m * q), q)
    return dict(query_ids=[f"q{i}" for i in range(q)], query_vectors=vectors, model_index=model_index,
                query_index=query_index, scores=y.ravel(), models=[f"m{i}" for i in range(m)],
                tasks=[tasks[i % len(tasks)] for i in range(q)]), y


def _per_model(pool, m):
    return [np.flatnonzero(pool["model_index"] == i) for i in range(m)]


def test_copies_find_their_own_fingerprint_where_ability_does_not():
    pool, y = _pool()
    table = fit_item_table(**pool, config=FAST)
    own = _per_model(pool, len(y))
    args = (pool["query_ids"], pool["query_vectors"])
    stored = table.identity_vectors(table.fingerprints(*args, own, pool["query_index"], pool["scores"]))
    rng = np.random.default_rng(1)
    copies = [np.sort(rng.choice(e, 200, replace=False)) for e in own]
    copy_vectors = table.identity_vectors(table.fingerprints(*args, copies, pool["query_index"], pool["scores"]))
    ranks = self_retrieval_ranks(copy_vectors, stored, metric="euclidean")
    assert np.mean(ranks == 1) >= 0.9
    # the ability coordinate alone (the intercept) cannot tell these models apart
    ability = self_retrieval_ranks(copy_vectors[:, -1:], stored[:, -1:], metric="euclidean")
    assert np.mean(ability == 1) < 0.5


def test_behaviour_distance_follows_raw_disagreement():
    pool, y = _pool(seed=2)
    table = fit_item_table(**pool, config=FAST)
    thetas = table.fingerprints(pool["query_ids"], pool["query_vectors"], _per_model(pool, len(y)),
                                pool["query_index"], pool["scores"])
    raw, _ = disagreement_matrix(y)
    assert distance_correlations(table.behaviour_distances(thetas), raw)["spearman"] > 0.8


def test_answer_distance_is_the_expected_disagreement_of_recorded_answers_with_predicted_ones():
    pool, y = _pool(seed=2)
    table = fit_item_table(**pool, config=FAST)
    thetas = table.fingerprints(pool["query_ids"], pool["query_vectors"], _per_model(pool, len(y)),
                                pool["query_index"], pool["scores"])
    qids = pool["query_ids"][:50] + ["never-seen"]  # a query the table does not know is skipped
    answers = np.append(y[0, :50], 1.0)
    d = table.answer_distances(thetas, qids, answers)
    p = table.probabilities(thetas, *table.item_params(pool["query_ids"][:50]))
    assert np.allclose(d, (answers[None, :50] * (1 - p) + (1 - answers[None, :50]) * p).mean(1))
    # only the queries of the tasks each other was evaluated on ("a": the even ones); none: +inf
    tasks = pool["tasks"][:50] + ["a"]
    d = table.answer_distances(thetas[:3], qids, answers, query_tasks=tasks, other_tasks=[{"a"}, {"b", "c"}, set()])
    even = (answers[None, :50:2] * (1 - p[:1, ::2]) + (1 - answers[None, :50:2]) * p[:1, ::2]).mean()
    assert d[0] == pytest.approx(even) and np.isfinite(d[1]) and np.isinf(d[2])
    # beyond max_answers a seeded sample: the same answer each time
    few = table.answer_distances(thetas, pool["query_ids"], y[0], max_answers=40)
    assert np.array_equal(few, table.answer_distances(thetas, pool["query_ids"], y[0], max_answers=40))
    assert not np.allclose(few, table.answer_distances(thetas, pool["query_ids"], y[0]))


def test_the_likelihood_ratio_recognises_a_models_own_fingerprint_where_the_distance_prefers_a_bolder_one():
    pool, y = _pool(seed=4)
    table = fit_item_table(**pool, config=FAST)
    own = table.fingerprints(pool["query_ids"], pool["query_vectors"], _per_model(pool, len(y)),
                             pool["query_index"], pool["scores"])[0]
    bolder = own * 3.0  # the same leanings, far more sure of them
    d, ratio = table.answer_evidence(np.stack([own, bolder]), pool["query_ids"], y[0])
    assert d[1] < d[0]  # the expected disagreement alone would rank the bolder one first
    assert ratio[0] < table.same_model_ratio < ratio[1]
    assert table.same_model_ratio == pytest.approx(15.086, abs=0.001)  # the chi-square (r + 1 = 5) 99% quantile
    none, never = table.answer_evidence(np.stack([own]), pool["query_ids"], y[0], query_tasks=pool["tasks"],
                                        other_tasks=[{"z"}])
    assert np.isinf(none[0]) and np.isinf(never[0])


def test_answer_distance_finds_the_behavioural_neighbours_of_a_model_the_table_never_saw():
    """A pool of pairs (two endpoints of one model, each with its own noise): a model left out of the
    table's fit finds its twin among the others' fingerprints from its recorded answers."""
    rng = np.random.default_rng(7)
    m, q, rank = 24, 800, 8  # more directions than the table (rank 4) has: a left-out pair is off its plane
    item_f, bias = rng.normal(size=(q, rank)) * 1.5, rng.normal(0, 1.0, size=q)
    model_a = np.repeat(rng.normal(size=(m // 2, rank)), 2, axis=0) + rng.normal(0, 0.15, size=(m, rank))
    y = (rng.random((m, q)) < 1 / (1 + np.exp(-(model_a @ item_f.T + bias)))).astype(np.float32)
    pool, _ = _pool(m=m, q=q)
    pool["scores"] = y.ravel()
    raw, _ = disagreement_matrix(y)
    np.fill_diagonal(raw, np.inf)
    found = 0
    for left in range(m):
        keep = np.flatnonzero(pool["model_index"] != left)
        others = np.delete(np.arange(m), left)
        fitted = fit_item_table(**{**pool, "query_index": pool["query_index"][keep], "scores": pool["scores"][keep],
                                   "model_index": np.searchsorted(others, pool["model_index"][keep]),
                                   "models": [pool["models"][i] for i in others]}, config=FAST)
        thetas = fitted.fingerprints(pool["query_ids"], pool["query_vectors"], _per_model(pool, m), pool["query_index"],
                                     pool["scores"])
        answers = fitted.answer_distances(thetas, pool["query_ids"], y[left])
        answers[left] = np.inf
        found += int(np.argmin(answers)) == int(np.argmin(raw[left]))
    assert found >= 0.8 * m


def test_behaviour_vectors_inner_product_is_the_expected_disagreement_over_the_querying_models_tasks():
    pool, y = _pool(m=8, q=300)
    table = fit_item_table(**pool, config=FAST)
    thetas = np.random.default_rng(2).normal(size=(8, table.rank + 1))
    p = table.probe_probabilities(thetas)
    full = np.ones_like(p, dtype=bool)
    stored = table.behaviour_vectors(thetas, full)
    assert stored.shape == (8, table.behaviour_dim)
    query, read = table.behaviour_queries(stored)
    by_index = table.behaviour_mean(read, query @ stored.T)
    assert np.allclose(by_index, table.behaviour_distances(thetas))  # every task covered: the same distance
    # model 0 evaluated on task "a" only, model 1 on both; recorded answers replace predictions where given
    tasks = np.asarray(table.probe_tasks)
    cover = full.copy()
    cover[0] = tasks == "a"
    answers = np.full_like(p, np.nan)
    answers[1, :5] = 1.0
    stored = table.behaviour_vectors(thetas, cover, answers)
    query, read = table.behaviour_queries(stored)
    d = table.behaviour_mean(read, query @ stored.T)
    y1 = p[1].copy()
    y1[:5] = 1.0
    a = tasks == "a"
    by_hand_01 = np.mean((p[0] + y1 - 2 * p[0] * y1)[a])  # model 0 asks over its own task only
    by_hand_10 = (np.sum((p[0] + y1 - 2 * p[0] * y1)[a]) + 0.5 * np.sum(~a)) / len(a)  # a coin flip where 0 is silent
    assert d[0, 1] == pytest.approx(by_hand_01) and d[1, 0] == pytest.approx(by_hand_10)
    assert np.isinf(table.behaviour_mean(table.behaviour_queries(stored[:1] * 0)[1], np.zeros((1, 8)))).all()
    # a search from a model with answers reads the probes it answered: model 1's five
    query, read = table.behaviour_queries(stored[1:2], ~np.isnan(answers[1:2]))
    assert read[0] == 5
    on_five = table.behaviour_mean(read, query @ stored.T)[0]
    assert on_five[0] == pytest.approx(np.mean(((1 - p[0]) * (tasks == "a") + 0.5 * (tasks != "a"))[:5]))


def test_probes_give_every_task_an_equal_share_up_to_its_size():
    from encoder.fingerprint import balanced_probe

    tasks = ["small"] * 10 + ["mid"] * 100 + ["large"] * 1000
    for size, want in ((90, {"small": 10, "mid": 40, "large": 40}), (200, {"small": 10, "mid": 95, "large": 95}),
                       (5000, {"small": 10, "mid": 100, "large": 1000})):
        rows = balanced_probe(tasks, size)
        assert list(rows) == sorted(set(rows.tolist()))
        picked = [tasks[i] for i in rows]
        assert {t: picked.count(t) for t in want} == want
    assert list(balanced_probe(tasks, 90, seed=3)) != list(balanced_probe(tasks, 90, seed=4))
    assert len(balanced_probe([], 10)) == 0


def test_fingerprint_is_deterministic_and_more_evaluations_refine_it():
    pool, y = _pool(seed=3)
    table = fit_item_table(**pool, config=FAST)
    f, b = table.item_params(pool["query_ids"])
    full = table.fingerprint(f, b, y[0])
    assert np.array_equal(full, table.fingerprint(f, b, y[0]))
    for constant in (0.0, 1.0):  # a model that gets everything right (or wrong) still has a finite print
        assert np.isfinite(table.fingerprint(f, b, np.full(len(b), constant))).all()
    small = table.fingerprint(f[:60], b[:60], y[0, :60])
    large = table.fingerprint(f[:400], b[:400], y[0, :400])
    assert np.linalg.norm(large - full) < np.linalg.norm(small - full)


def test_fingerprint_stays_at_the_optimum_on_very_discriminating_queries():
    """24 answers to steep queries (factors and difficulties of scale 10): a full Newton step from zero
    overshoots there, and undamped it ran off to intercepts of ~1e7 in 42 of 50 such draws; the fit halves
    a step until the penalised log-likelihood falls, so it stays finite and never worse than its start."""
    from encoder.fingerprint import FingerprintConfig, ItemTable

    rng = np.random.default_rng(0)
    r, n_queries = 4, 60
    for _ in range(20):
        f = rng.normal(0, 10, (n_queries, r)).astype(np.float32)
        b = rng.normal(0, 10, n_queries).astype(np.float32)
        table = ItemTable(query_ids=[f"q{i}" for i in range(n_queries)], factors=f, bias=b,
                          text_map=np.zeros((3, r + 1), np.float32), probe=np.arange(n_queries),
                          config=FingerprintConfig())
        idx = rng.choice(n_queries, 24, replace=False)
        true = rng.normal(0, 1, r + 1)
        y = (rng.random(24) < 1 / (1 + np.exp(-(f[idx] @ true[:-1] + true[-1] + b[idx])))).astype(float)
        theta = table.fingerprint(f[idx], b[idx], y)
        x = np.concatenate([f[idx].astype(np.float64), np.ones((24, 1))], 1)
        penalty = np.full(r + 1, 2.0 * table.config.ridge)
        penalty[-1] = 1e-6

        def objective(t):
            z = x @ t + b[idx]
            return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(penalty * t * t))

        assert np.isfinite(theta).all() and np.abs(theta).max() < 50
        assert objective(theta) <= objective(np.zeros(r + 1)) + 1e-9


def test_unknown_queries_map_through_their_vectors():
    pool, _ = _pool(seed=4)
    table = fit_item_table(**pool, config=FAST)
    with pytest.raises(ValueError, match="unknown to the item table"):
        table.item_params(["not-a-query"])
    f, b = table.item_params(["q0", "new"], np.stack([pool["query_vectors"][0], pool["query_vectors"][5]]))
    known_f, known_b = table.item_params(["q0", "q5"])
    assert np.allclose(f[0], known_f[0]) and b[0] == pytest.approx(known_b[0])
    expected = np.concatenate([pool["query_vectors"][5], [1.0]]) @ table.text_map
    assert np.allclose(np.concatenate([f[1], [b[1]]]), expected, atol=1e-5)


def test_pairs_without_a_common_task_have_no_behaviour_distance():
    pool, y = _pool(seed=5)
    table = fit_item_table(**pool, config=FAST)
    thetas = np.zeros((3, table.rank + 1))
    coverage = table.coverage([{"a"}, {"b"}, {"a", "b"}])
    d = table.behaviour_distances(thetas, coverage=coverage)
    assert np.isinf(d[0, 1]) and np.isfinite(d[0, 2]) and np.isfinite(d[1, 2])
    assert coverage[0].sum() + coverage[1].sum() == len(table.probe)


def test_item_table_files_round_trip_and_refuse_tampering():
    pool, y = _pool(seed=6, m=8, q=120)
    table = fit_item_table(**pool, config=FAST)
    again = ItemTable.from_files(table.weights_bytes(), table.config_json())
    assert again.table_id == table.table_id and again.probe_tasks == table.probe_tasks
    assert np.array_equal(again.factors, table.factors)
    other = fit_item_table(**_pool(seed=7, m=8, q=120)[0], config=FAST)
    with pytest.raises(ValueError, match="does not match"):
        ItemTable.from_files(other.weights_bytes(), table.config_json())
    with pytest.raises(ValueError, match="not an item table"):
        ItemTable.from_files(table.weights_bytes(), '{"format": "something-else"}')


# ----------------------------------------------------------------------------- in a registry
@pytest.fixture
def reg(synthetic_home):
    from registry import Registry

    return Registry.open(synthetic_home("fingerprint", **FINGERPRINT_TRAINED))


def test_train_writes_an_item_table_without_the_test_queries(reg):
    import json

    from encoder.fingerprint import ITEM_TABLE_CONFIG
    from registry.analytics.fingerprints import load_item_table

    active = reg.store.config["active_encoder"]
    table = load_item_table(reg.store)
    assert (reg.home / "encoders" / active / ITEM_TABLE_CONFIG).is_file() and table is not None
    test_ids = set(json.loads((reg.home / "encoders" / active / "training.json").read_text())["test_query_ids"])
    assert test_ids and not test_ids & set(table.query_ids)
    assert sorted(table.models) == sorted(r.name for r in reg.list())


def test_fingerprints_are_cached_per_model_version(reg, monkeypatch):
    from registry.analytics import fingerprints as fp
    from tests.helpers import own_evaluations

    table = fp.load_item_table(reg.store)
    first = fp.pool_fingerprints(reg.store, table)
    assert (reg.home / "fingerprints" / f"{table.table_id}.json").is_file()
    computed = []
    real = fp._compute
    monkeypatch.setattr(fp, "_compute", lambda store, t, names: computed.append(list(names)) or real(store, t, names))
    fp._pool_cache.clear()  # a fresh process: the on-disk cache answers
    again = fp.pool_fingerprints(reg.store, table)
    assert computed == [[]] and np.array_equal(again.thetas, first.thetas)
    name = first.names[0]
    reg.refine(name, own_evaluations(reg, first.names[1])[:40])
    after = fp.pool_fingerprints(reg.store, table)
    assert computed[-1] == [name] and after.versions[name] == first.versions[name] + 1
    i = after.row(name)
    assert not np.allclose(after.thetas[i], first.thetas[i])
    assert np.array_equal(np.delete(after.thetas, i, 0), np.delete(first.thetas, i, 0))


def test_search_by_behaviour_finds_a_copy_that_shares_no_query(reg):
    """Two endpoints serving one model, scored on disjoint halves of its queries: no shared query, so
    agreement cannot order them; their fingerprints put each among the other's nearest."""
    from tests.helpers import own_evaluations

    evals = own_evaluations(reg, "syn-synfam1-7b")
    reg.add_model("endpoint-a", evals[0::2])
    reg.add_model("endpoint-b", evals[1::2])
    hits = reg.similar("endpoint-b", k=3, by="behaviour").neighbours
    assert all(h.behaviour_distance is not None for h in hits)
    # the twin (by embedding alone 5th here, behind models of similar ability) and the original
    assert {h.name for h in hits[:2]} == {"endpoint-a", "syn-synfam1-7b"}
    twin = next(h for h in hits if h.name == "endpoint-a")
    assert twin.shared_queries == 0 and twin.agreement_kappa is None
    original = next(h for h in hits if h.name == "syn-synfam1-7b")
    assert original.shared_queries == len(evals[1::2]) and original.agreement_kappa > 0.9


def test_a_pool_larger_than_the_cap_fits_on_a_sample():
    from dataclasses import replace

    pool, y = _pool(seed=8, m=10, q=200)
    capped = fit_item_table(**pool, config=replace(FAST, max_fit_evals=1000))
    full = fit_item_table(**pool, config=FAST)
    assert capped.table_id != full.table_id and len(capped.query_ids) <= 200
    assert capped.table_id == fit_item_table(**pool, config=replace(FAST, max_fit_evals=1000)).table_id  # seeded
    few = fit_item_table(**pool, config=replace(FAST, max_fit_models=4))
    assert len(few.models) == 4 and set(few.models) < set(pool["models"])


def test_fit_fingerprints_without_an_encoder_says_so(tmp_path):
    from click.testing import CliRunner

    from cli.main import cli
    from tests.helpers import synthetic_registry

    synthetic_registry(tmp_path / "home", n_families=2, models_per_family=2, queries_per_task=5, n_duplicates=0)
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), "fit-fingerprints"])
    assert result.exit_code != 0 and "registry train" in result.output
    assert not (tmp_path / "home" / "fingerprints").exists()


def test_a_damaged_cache_is_rebuilt_and_a_damaged_table_is_named(reg):
    from encoder.fingerprint import ITEM_TABLE_WEIGHTS
    from registry import RegistryError
    from registry.analytics import fingerprints as fp

    table = fp.load_item_table(reg.store)
    first = fp.pool_fingerprints(reg.store, table)
    cache = reg.home / "fingerprints" / f"{table.table_id}.safetensors"
    cache.write_bytes(b"not a safetensors file")
    fp._pool_cache.clear()
    again = fp.pool_fingerprints(reg.store, table)  # recomputed, never trusted
    assert np.allclose(again.thetas, first.thetas) and cache.read_bytes() != b"not a safetensors file"
    weights = reg.home / "encoders" / reg.store.config["active_encoder"] / ITEM_TABLE_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])
    fp._cache.clear()
    with pytest.raises(RegistryError, match="item_table.json"):
        fp.load_item_table(reg.store)


def test_the_known_chi_square_quantiles_are_scipys_and_cover_the_default_table():
    from scipy.special import chdtri

    from encoder.fingerprint import _KNOWN_QUANTILES, SAME_MODEL_LEVEL, FingerprintConfig

    assert (SAME_MODEL_LEVEL, FingerprintConfig().rank + 1) in _KNOWN_QUANTILES  # a default search needs no scipy
    for (level, k), x in _KNOWN_QUANTILES.items():
        assert x == pytest.approx(float(chdtri(k, level)), rel=1e-12)
