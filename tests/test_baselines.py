"""Baselines on a small synthetic pool with holes: shapes, ranges, routing above random, the kNN
all-neighbours property, no reading of held-out evaluations, determinism."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from encoder.baselines import (
    BestSingle,
    EmbedLLMMF,
    IRTNet,
    KNNRouter,
    best_single,
    evaluate,
    oracle,
    truth_matrix,
)
from encoder.data import EvalData, sample_per_model, split_queries
from encoder.metrics import oracle_accuracy

N_MODELS, N_QUERIES, N_CLUSTERS, DIM = 10, 500, 4, 16
FAST = {"max_epochs": 60, "patience": 10, "batch_size": 128}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _synthetic(seed: int = 0) -> EvalData:
    """Queries in 4 clusters; model m is strong on cluster m % 4 and weak elsewhere, plus a general
    ability; 25% of the cells are holes."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(N_CLUSTERS, DIM))
    cluster = rng.integers(N_CLUSTERS, size=N_QUERIES)
    vecs = centres[cluster] + 0.35 * rng.normal(size=(N_QUERIES, DIM))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    general = np.linspace(-0.5, 0.5, N_MODELS)
    logit = np.full((N_MODELS, N_CLUSTERS), -1.2) + general[:, None]
    logit[np.arange(N_MODELS), np.arange(N_MODELS) % N_CLUSTERS] = 2.0
    p = 1 / (1 + np.exp(-logit[:, cluster]))
    scores = (rng.random(p.shape) < p).astype(np.float32)
    observed = rng.random(p.shape) >= 0.25
    m_idx, q_idx = np.nonzero(observed)
    return EvalData(
        models=[f"m{i}" for i in range(N_MODELS)],
        query_ids=[str(i) for i in range(N_QUERIES)],
        tasks=[f"c{c}" for c in cluster],
        query_vectors=vecs,
        model_index=m_idx.astype(np.int64),
        query_index=q_idx.astype(np.int64),
        scores=scores[m_idx, q_idx],
    )


@pytest.fixture(scope="module")
def setup():
    data = _synthetic()
    split = split_queries(data.n_queries, seed=0, fractions=(0.6, 0.2, 0.2))
    train_evals = sample_per_model(data, split.train, n_per_model=120, seed=0)
    return data, split, train_evals


def _make(name: str):
    return {
        "knn": lambda: KNNRouter(),
        "mf": lambda: EmbedLLMMF(tune=False, dim=16, **FAST),
        "mf-tuned": lambda: EmbedLLMMF(**FAST),
        "irt": lambda: IRTNet(tune=False, dim=8, hidden=32, **FAST),
        "best": lambda: BestSingle(),
    }[name]()


def _random_router(data, queries) -> float:
    """Expected routing accuracy of a uniform pick among the models scored on each query."""
    truth = truth_matrix(data, queries)
    return float(np.nanmean(truth, axis=0).mean())


@pytest.mark.parametrize("name", ["knn", "mf", "irt"])
def test_fits_predicts_and_beats_random(setup, name):
    data, split, train_evals = setup
    baseline = _make(name).fit(data, train_evals, split.val, seed=0)
    pred = baseline.predict(split.test)
    assert pred.shape == (data.n_models, len(split.test))
    assert np.isfinite(pred).all() and (pred >= 0).all() and (pred <= 1).all()
    scores = evaluate(pred, data, split.test)
    assert scores["routing"] > _random_router(data, split.test) + 0.15
    assert scores["routing"] > best_single(data, train_evals, split.test)
    assert scores["correctness"] > 0.7
    assert baseline.config_


def test_tuning_records_grid(setup):
    data, split, train_evals = setup
    mf = _make("mf-tuned").fit(data, train_evals, split.val, seed=0)
    assert len(mf.tuning_) == len(EmbedLLMMF.GRID)
    assert all(0 <= row["val_routing"] <= 1 for row in mf.tuning_)
    best = max(mf.tuning_, key=lambda r: (r["val_routing"], r["val_correctness"]))
    assert mf.config_["dim"] == best["dim"] and mf.config_["weight_decay"] == best["weight_decay"]
    knn = KNNRouter().fit(data, train_evals, split.val, seed=0)
    assert len(knn.tuning_) == len(KNNRouter.GRID_K) * len(KNNRouter.GRID_C) * len(KNNRouter.GRID_MODE)


@pytest.mark.parametrize("mode", ["pooled", "per_model"])
def test_knn_all_neighbours_unshrunk_is_training_mean(setup, mode):
    data, split, train_evals = setup
    knn = KNNRouter(k=None, pseudo_count=0, mode=mode, tune=False).fit(data, train_evals, split.val, seed=0)
    pred = knn.predict(np.concatenate([split.test, split.train[:50]]))
    expected = np.array([data.scores[train_evals][data.model_index[train_evals] == m].mean()
                         for m in range(data.n_models)])
    np.testing.assert_allclose(pred, np.repeat(expected[:, None], pred.shape[1], axis=1), atol=1e-6)


def test_knn_small_k_follows_neighbours(setup):
    """k = 1 per model, no shrinkage: each prediction is the score of that model's nearest own
    training query."""
    data, split, train_evals = setup
    knn = KNNRouter(k=1, pseudo_count=0, mode="per_model", tune=False).fit(data, train_evals, split.val, seed=0)
    pred = knn.predict(split.test[:20])
    for m in range(data.n_models):
        own = train_evals[data.model_index[train_evals] == m]
        sims = data.query_vectors[split.test[:20]] @ data.query_vectors[data.query_index[own]].T
        np.testing.assert_array_equal(pred[m], data.scores[own][sims.argmax(axis=1)])


def _flip_outside(data: EvalData, keep: np.ndarray) -> EvalData:
    """The same data with every score outside `keep` (a boolean mask over evaluations) flipped."""
    scores = np.where(keep, data.scores, 1.0 - data.scores).astype(np.float32)
    return EvalData(data.models, data.query_ids, data.tasks, data.query_vectors,
                    data.model_index, data.query_index, scores)


@pytest.mark.parametrize("name", ["knn", "mf", "irt", "best"])
def test_reads_only_train_and_validation_evaluations(setup, name):
    data, split, train_evals = setup
    keep = np.zeros(len(data.scores), dtype=bool)
    keep[train_evals] = True
    keep |= np.isin(data.query_index, split.val)
    flipped = _flip_outside(data, keep)
    assert (flipped.scores != data.scores).sum() > 1000  # test evals and unsampled train evals
    a = _make(name).fit(data, train_evals, split.val, seed=0).predict(split.test)
    b = _make(name).fit(flipped, train_evals, split.val, seed=0).predict(split.test)
    np.testing.assert_array_equal(a, b)


def test_deterministic_given_seed(setup):
    data, split, train_evals = setup
    a = _make("mf").fit(data, train_evals, split.val, seed=3).predict(split.test)
    b = _make("mf").fit(data, train_evals, split.val, seed=3).predict(split.test)
    np.testing.assert_array_equal(a, b)


def test_best_single_and_oracle(setup):
    data, split, train_evals = setup
    pred = BestSingle().fit(data, train_evals, split.val, seed=0).predict(split.test)
    assert evaluate(pred, data, split.test)["routing"] == pytest.approx(best_single(data, train_evals, split.test))
    assert oracle(data, split.test) == pytest.approx(oracle_accuracy(data.dense()[:, split.test]))
    assert oracle(data, split.test) >= evaluate(pred, data, split.test)["routing"]


def test_rejects_validation_queries_in_training(setup):
    data, split, train_evals = setup
    leaky = np.concatenate([train_evals, np.flatnonzero(np.isin(data.query_index, split.val))[:5]])
    with pytest.raises(ValueError):
        KNNRouter().fit(data, leaky, split.val, seed=0)


def test_the_paired_test_counts_discordant_queries_and_is_symmetric():
    from encoder.metrics import paired_test

    a = [1, 1, 1, 1, 1, 1, 0, 0, 1, 0]
    b = [0, 0, 0, 0, 0, 0, 1, 0, 1, 0]  # a wins 6, loses 1
    out = paired_test(a, b)
    assert (out["wins"], out["losses"], out["n"]) == (6, 1, 10) and abs(out["diff"] - 0.5) < 1e-12
    assert 0.1 < out["p"] < 0.2  # two-sided binomial, 7 discordant, 6 one way: p = 0.125
    back = paired_test(b, a)
    assert (back["wins"], back["losses"]) == (1, 6) and back["p"] == out["p"]
    assert paired_test(a, a)["p"] == 1.0  # no discordant query


def test_the_pooled_paired_test_counts_a_query_tested_by_several_seeds_once():
    from encoder.metrics import paired_test, pooled_paired_test

    a1, b1 = np.array([1, 1, 1, 0]), np.array([0, 0, 1, 0])
    a2, b2 = np.array([1, 0, 0, 1, 1, 0]), np.array([1, 1, 0, 0, 0, 0])
    disjoint = pooled_paired_test([([0, 1, 2, 3], a1 - b1), ([4, 5, 6, 7, 8, 9], a2 - b2)])
    together = paired_test(np.r_[a1, a2], np.r_[b1, b2])
    assert disjoint["p"] == together["p"] and (disjoint["wins"], disjoint["losses"], disjoint["n"]) == (4, 1, 10)
    assert abs(disjoint["diff"] - together["diff"]) < 1e-12 and disjoint["cells"] == 10
    # one seed's 20 won / 10 lost is p 0.099; the same queries tested by three seeds are still 30 queries
    a, b = np.r_[np.ones(20), np.zeros(10)], np.r_[np.zeros(20), np.ones(10)]
    once = pooled_paired_test([(np.arange(30), a - b)])
    thrice = pooled_paired_test([(np.arange(30), a - b)] * 3)
    assert (thrice["wins"], thrice["losses"], thrice["n"], thrice["cells"]) == (20, 10, 30, 90)
    assert thrice["p"] == once["p"] and 0.09 < once["p"] < 0.11
    # a query won in one seed and lost in another nets to nothing
    assert pooled_paired_test([([7], [1.0]), ([7], [-1.0])])["wins"] == 0
    with pytest.raises(ValueError, match="one difference per query"):
        pooled_paired_test([([1, 2], [0.5])])


def test_models_tied_at_the_top_share_the_query_whatever_their_order():
    """Routing accuracy must not depend on the order of the pool's models: ties score the tied models' mean
    (a router breaking them at random), best single's tie on training accuracy included."""
    from encoder.metrics import best_single_accuracy, paired_test, routed_scores, routing_accuracy

    pred = np.array([[0.9, 0.2, 0.5], [0.9, 0.7, 0.5], [0.1, 0.7, 0.5]])
    truth = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, np.nan], [1.0, 0.0, 0.0]])
    # query 0: models 0 and 1 tie (1, 0); query 1: 1 and 2 tie (1, 0); query 2: 0 and 2 tie, 1 unscored (1, 0)
    assert np.allclose(routed_scores(pred, truth), [0.5, 0.5, 0.5])
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        assert routing_accuracy(pred[order], truth[order]) == 0.5
    train = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # models 0 and 1 tie at 0.5
    test = np.array([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    assert best_single_accuracy(train, test) == best_single_accuracy(train[[1, 0, 2]], test[[1, 0, 2]]) == 0.5
    # a model with no training evaluations (its train mean -inf) alone scored on a query still routes it
    lone = np.array([[1.0, np.nan], [np.nan, 1.0]])
    assert np.allclose(routed_scores(np.array([[0.5, 0.5], [0.9, -np.inf]]), lone), [1.0, 1.0])
    assert np.allclose(routed_scores(np.array([[np.nan, 0.2], [0.1, 0.3]]), truth[:2, :2]), [0.0, 1.0])  # NaN: lowest
    # a shared tie counts by its sign in the paired test
    out = paired_test([0.5, 1.0, 0.0], [1.0, 1.0, 0.5])
    assert (out["wins"], out["losses"]) == (0, 2)
