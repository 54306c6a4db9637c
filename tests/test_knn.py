"""The router's kNN (encoder/knn.py) at routing time: a few query vectors take a partial selection instead
of a sort; both must choose the same neighbourhoods, ties included (duplicate texts have equal vectors)."""
from __future__ import annotations

import numpy as np
import pytest

from encoder.data import EvalData
from encoder.knn import KNNRouter, _nearest


def _data(seed: int = 0, models: int = 6, queries: int = 400, dim: int = 16) -> EvalData:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(queries, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[50:80] = vectors[3]  # thirty-one equal vectors: ties at every k below 31
    m, q = (a.ravel() for a in np.meshgrid(np.arange(models), np.arange(queries), indexing="ij"))
    keep = rng.random(m.size) < 0.6  # each model evaluated on its own subset
    return EvalData(models=[f"m{i}" for i in range(models)], query_ids=[f"q{i}" for i in range(queries)],
                    tasks=["t"] * queries, query_vectors=vectors, model_index=m[keep], query_index=q[keep],
                    scores=(rng.random(int(keep.sum())) < 0.55).astype(np.float32))


@pytest.mark.parametrize("mode", ["pooled", "per_model"])
@pytest.mark.parametrize("k", [1, 5, 20, 40, None])
def test_a_few_vectors_get_the_neighbourhoods_a_sort_gives(mode, k):
    data = _data()
    knn = KNNRouter(k=k, pseudo_count=3.0, mode=mode, tune=False).fit(data, np.arange(len(data.scores)), [])
    knn.pool_neighbourhoods([0, 1, 2])  # pooled: from the first three models' queries only
    phi = np.concatenate([data.query_vectors[[3, 60, 7]], data.query_vectors[[9]] + 0.05])
    few = knn.predict_vectors(phi)  # the selection path (<= KNNRouter.FEW vectors)
    sorted_ = knn._shrink(*(a[0] for a in knn._stats(phi, mode, (k,))), 3.0)
    assert np.array_equal(few, sorted_.astype(np.float32))
    assert np.array_equal(knn.predict(np.arange(40)), knn._shrink(
        *(a[0] for a in knn._stats(data.query_vectors[:40], mode, (k,))), 3.0).astype(np.float32))


@pytest.mark.parametrize("k", [1, 5, 20])
def test_per_model_neighbourhoods_of_sparsely_evaluated_models_are_their_own(k):
    """Per-model neighbourhoods at routing time come from one sorted prefix of all the queries for the
    models that have k of their own in it, and from a selection over their own queries for the rest (a
    model evaluated on a few queries): both as the sort gives them."""
    data = _data(seed=1)
    sparse = (data.model_index != 0) | (np.random.default_rng(2).random(len(data.scores)) < 0.05)
    data = EvalData(models=data.models, query_ids=data.query_ids, tasks=data.tasks, query_vectors=data.query_vectors,
                    model_index=data.model_index[sparse], query_index=data.query_index[sparse],
                    scores=np.where(np.arange(sparse.sum()) % 3 == 0, 0.5, data.scores[sparse]))  # soft scores too
    knn = KNNRouter(k=k, pseudo_count=2.0, mode="per_model", tune=False).fit(data, np.arange(len(data.scores)), [])
    assert 0 < len(knn._own[0]) < 4 * k or k == 1  # model 0 falls outside the prefix's reach
    phi = np.concatenate([data.query_vectors[[3, 60, 7, 200]], data.query_vectors[[9]] + 0.05])
    assert np.array_equal(knn.predict_vectors(phi),
                          knn._shrink(*(a[0] for a in knn._stats(phi, "per_model", (k,))), 2.0).astype(np.float32))


def test_nearest_breaks_ties_to_the_lower_position():
    similarity = np.array([0.1, 0.9, 0.5, 0.9, 0.5, 0.5, 0.2])
    assert sorted(_nearest(similarity, 3).tolist()) == [1, 2, 3]
    assert sorted(_nearest(similarity, 4).tolist()) == [1, 2, 3, 4]
    assert sorted(_nearest(similarity, None).tolist()) == list(range(7))
    order = np.argsort(-similarity, kind="stable")
    for k in range(1, 8):
        assert sorted(_nearest(similarity, k).tolist()) == sorted(order[:k].tolist())


def test_the_service_remembers_predictions_per_vector_exactly():
    from registry.service.state import RememberedPredictions

    data = _data(1)
    knn = KNNRouter(k=10, pseudo_count=2.0, tune=False).fit(data, np.arange(len(data.scores)), [])
    calls = []

    class Counting:
        def predict_vectors(self, vectors):
            calls.append(len(vectors))
            return knn.predict_vectors(vectors)

    remembered = RememberedPredictions(Counting(), size=2)
    phi = data.query_vectors[[4, 5, 6]]
    assert np.array_equal(remembered.predict_vectors(phi), knn.predict_vectors(phi)) and calls == [3]
    assert np.array_equal(remembered.predict_vectors(phi[[2, 1]]), knn.predict_vectors(phi[[2, 1]]))
    assert calls == [3]  # both remembered (the two most recent of three)
    remembered.predict_vectors(phi[[0]])
    assert calls == [3, 1]  # the first had been let go


@pytest.mark.parametrize("mode", ["pooled", "per_model"])
@pytest.mark.parametrize("k", [7, None])
def test_neighbour_sums_of_soft_scores_accumulate_in_float64(mode, k):
    """The fitted scores are held as float32 (the store's scores, exactly) and their flags as bytes, but a
    neighbourhood's sum is a float64 sum of them: scores such as 0.1 summed over hundreds of neighbours in
    float32 drift by ~1e-6, which is enough to reorder two models' P(correct)."""
    data = _data(seed=3)
    soft = np.float32(0.1) * (1 + np.arange(len(data.scores)) % 9).astype(np.float32)  # 0.1 ... 0.9, inexact
    data = EvalData(models=data.models, query_ids=data.query_ids, tasks=data.tasks, query_vectors=data.query_vectors,
                    model_index=data.model_index, query_index=data.query_index, scores=soft)
    knn = KNNRouter(k=k, pseudo_count=0.0, mode=mode, tune=False).fit(data, np.arange(len(data.scores)), [])
    phi = data.query_vectors[[11, 60, 250]]
    score = np.full((data.n_models, data.n_queries), np.nan)
    score[data.model_index, data.query_index] = soft.astype(np.float64)
    trained = np.unique(data.query_index)  # the queries some model was evaluated on
    for few in (True, False):
        sums, counts = knn._stats_few(phi) if few else (a[0] for a in knn._stats(phi, mode, (k,)))
        for j, vector in enumerate(phi):
            order = trained[np.argsort(-(data.query_vectors[trained] @ vector), kind="stable")]
            for m in range(data.n_models):
                evaluated = order[~np.isnan(score[m, order])]
                if mode == "pooled":
                    near = order[: k or len(order)]
                    own = near[~np.isnan(score[m, near])]
                else:
                    own = evaluated[: k or len(evaluated)]
                assert counts[m, j] == len(own)
                assert sums[m, j] == pytest.approx(score[m, own].sum(), rel=1e-12, abs=0)


def test_the_knn_benchmark_prints_its_table(capsys):
    from helpers import load_script

    module = load_script("bench_knn")
    module.main(["--queries", "1100", "--models", "3", "--repeat", "1"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[:2] for row in rows] == [["3", "per_model"], ["3", "pooled"]]
    # resident: 1,100 x 768 float32 vectors, 3 x 1,100 scores (4 B) and flags (1 B), the own columns (8 B each)
    data = module.pool(3, 1100)
    expected = (1100 * 768 * 4 + 3 * 1100 * 5 + len(data.scores) * 8) / 1e6
    assert all(float(row[3]) == pytest.approx(expected, abs=0.5) for row in rows)


def _take(data: EvalData, names: list[str], rows: np.ndarray) -> EvalData:
    """`data`'s evaluations `rows` (in that order), its models renamed to positions in `names`."""
    renumber = np.array([names.index(n) if n in names else -1 for n in data.models])
    return EvalData(models=names, query_ids=data.query_ids, tasks=data.tasks, query_vectors=data.query_vectors,
                    model_index=renumber[data.model_index[rows]], query_index=data.query_index[rows],
                    scores=data.scores[rows])


@pytest.mark.parametrize("mode", ["pooled", "per_model"])
def test_a_router_with_evaluations_appended_is_the_router_fitted_on_them_all(mode):
    """The service's kNN goes on from the last one when a landing only appended evaluations (models added,
    models refined with new queries): `with_models` then `pool_neighbourhoods` must give what a fit on every
    evaluation gives (new models between old ones, a refined model of the pool, soft scores, a duplicate
    evaluation), and refuse what it cannot do exactly."""
    base = _data(seed=4)
    soft = np.where(np.arange(len(base.scores)) % 4 == 0, np.float32(0.3), base.scores)
    base = EvalData(models=base.models, query_ids=base.query_ids, tasks=base.tasks, query_vectors=base.query_vectors,
                    model_index=base.model_index, query_index=base.query_index, scores=soft)
    old_names, names = ["m0", "m3", "m5", "m1"], ["m0", "m1", "m2", "m3", "m4", "m5"]
    pool = {"m0", "m3"}
    is_old = np.isin(np.asarray(base.models)[base.model_index], old_names)
    refined = np.concatenate([np.flatnonzero(base.model_index == 0)[-15:], np.flatnonzero(base.model_index == 3)[-10:]])
    first = np.setdiff1d(np.flatnonzero(is_old), refined)  # stored before the landing
    later = np.concatenate([refined, np.flatnonzero(~is_old)])
    later = later[np.isin(base.query_index[later], base.query_index[first])]  # on queries stored before
    duplicate = later[base.model_index[later] == 2][:1]  # m2 evaluated twice on one query: the later wins
    order = np.concatenate([first, later, duplicate])
    data = EvalData(models=base.models, query_ids=base.query_ids, tasks=base.tasks, query_vectors=base.query_vectors,
                    model_index=base.model_index[order], query_index=base.query_index[order],
                    scores=np.concatenate([base.scores[first], base.scores[later], np.float32([0.9])]))

    def fitted(names, rows):
        sub = _take(data, names, rows)
        knn = KNNRouter(k=7, pseudo_count=2.0, mode=mode, tune=False).fit(sub, np.arange(len(sub.scores)), [])
        return knn.pool_neighbourhoods([i for i, n in enumerate(names) if n in pool]), sub

    old, old_data = fitted(old_names, np.arange(len(first)))
    full, _ = fitted(names, np.arange(len(order)))
    assert np.array_equal(old._train_q, full._train_q)  # the same columns
    appended = _take(data, names, np.arange(len(first), len(order)))
    rows = (appended.model_index, appended.query_index, appended.scores)
    assert {names[m] for m in rows[0]} == {"m0", "m3", "m2", "m4"}  # two refined, two added
    grown = old.with_models(names, *rows).pool_neighbourhoods([i for i, n in enumerate(names) if n in pool])
    phi = np.concatenate([data.query_vectors[[3, 60, 7, 200]], data.query_vectors[[9]] + 0.05])
    assert np.array_equal(grown.predict_vectors(phi), full.predict_vectors(phi))
    assert np.array_equal(grown.predict(np.arange(50)), full.predict(np.arange(50)))
    assert np.array_equal(grown._prior, full._prior) and np.array_equal(grown._Y, full._Y)
    assert np.array_equal(grown._pooled, full._pooled) and grown._data.models == names
    assert np.array_equal(old.predict_vectors(phi), fitted(old_names, np.arange(len(first)))[0].predict_vectors(phi))
    # what it refuses: a new model with no evaluation, a new column, a part-fitted router
    assert old.with_models(names + ["m9"], *rows) is None
    outside = np.setdiff1d(np.arange(400), old._train_q)[:1]  # a query no old model was evaluated on
    assert len(outside) and old.with_models(names, [names.index("m2")], outside, [1.0]) is None
    part = KNNRouter(k=7, pseudo_count=2.0, mode=mode, tune=False)
    part.fit(old_data, np.arange(len(old_data.scores) - 5), [])
    assert part.with_models(names, *rows) is None  # fitted on a part of its data: not a fit on all of it


@pytest.mark.parametrize("mode", ["pooled", "per_model"])
def test_a_router_with_models_left_out_is_the_router_fitted_without_them(mode):
    """A model removed from the registry: `with_models` without it (and with rows appended for others at
    once) gives what a fit on the remaining models' evaluations gives; a query that only the models left out
    were evaluated on would be a column fewer, which it refuses."""
    base = _data(seed=7)
    own = base.query_index[base.model_index == 0]
    rest = np.flatnonzero((base.model_index != 0) & (base.query_index != 399))  # q399: m0's alone
    extra = np.setdiff1d(np.arange(400), own)  # m0 evaluated on every query: any other may leave
    data = EvalData(models=base.models, query_ids=base.query_ids, tasks=base.tasks, query_vectors=base.query_vectors,
                    model_index=np.concatenate([base.model_index[base.model_index == 0], base.model_index[rest],
                                                np.zeros(len(extra), np.int64)]),
                    query_index=np.concatenate([own, base.query_index[rest], extra]),
                    scores=np.concatenate([base.scores[base.model_index == 0], base.scores[rest],
                                           np.ones(len(extra), np.float32)]))
    pool = {"m0", "m2", "m4"}

    def fitted(names):
        sub = _take(data, names, np.flatnonzero(np.isin(np.asarray(data.models)[data.model_index], names)))
        knn = KNNRouter(k=7, pseudo_count=2.0, mode=mode, tune=False).fit(sub, np.arange(len(sub.scores)), [])
        return knn.pool_neighbourhoods([i for i, n in enumerate(names) if n in pool])

    full = fitted(data.models)
    phi = np.concatenate([data.query_vectors[[3, 60, 7, 200]], data.query_vectors[[9]] + 0.05])
    for left_out in (["m3"], ["m2", "m5"]):  # m2: of the pool
        names = [n for n in data.models if n not in left_out]
        want = fitted(names)
        got = full.with_models(names, [], [], []).pool_neighbourhoods([i for i, n in enumerate(names) if n in pool])
        assert got._data.models == names and len(got._data.scores) == len(want._data.scores)
        assert np.array_equal(got.predict_vectors(phi), want.predict_vectors(phi))
        assert np.array_equal(got.predict(np.arange(50)), want.predict(np.arange(50)))
        assert np.array_equal(got._Y, want._Y) and np.array_equal(got._prior, want._prior)
        assert np.array_equal(got._pooled, want._pooled)
    # one left out, rows appended for another at once (a removal and a refine landed between two loads)
    names = [n for n in data.models if n != "m3"]
    m1_new = np.setdiff1d(np.arange(400), data.query_index[data.model_index == 1])[:5]
    got = full.with_models(names, [names.index("m1")] * 5, m1_new, np.ones(5, np.float32))
    plus = EvalData(models=data.models, query_ids=data.query_ids, tasks=data.tasks, query_vectors=data.query_vectors,
                    model_index=np.concatenate([data.model_index, np.ones(5, np.int64)]),
                    query_index=np.concatenate([data.query_index, m1_new]),
                    scores=np.concatenate([data.scores, np.ones(5, np.float32)]))
    sub = _take(plus, names, np.flatnonzero(np.asarray(plus.models)[plus.model_index] != "m3"))
    want = KNNRouter(k=7, pseudo_count=2.0, mode=mode, tune=False).fit(sub, np.arange(len(sub.scores)), [])
    assert np.array_equal(got.predict_vectors(phi), want.predict_vectors(phi)) and np.array_equal(got._Y, want._Y)
    # m0 alone was evaluated on q399: without it a fit has a column fewer
    assert full.with_models([n for n in data.models if n != "m0"], [], [], []) is None


@pytest.mark.parametrize("mode", ["pooled", "per_model"])
def test_a_router_with_a_models_rows_given_anew_is_the_router_fitted_on_them(mode):
    """A refine that replaced scores deletes a model's rows: `with_models(..., refreshed=[name])` takes every
    row of that model anew (in the table's order, the replaced ones last) in place of the ones it had."""
    data = _data(seed=9)
    knn = KNNRouter(k=7, pseudo_count=2.0, mode=mode, tune=False).fit(data, np.arange(len(data.scores)), [])
    mine = np.flatnonzero(data.model_index == 2)
    moved = mine[:6]  # their scores replaced: deleted where they were, written again at the end
    rows = np.concatenate([np.setdiff1d(mine, moved), moved])
    scores = data.scores.copy()
    scores[moved] = 1.0 - scores[moved]
    got = knn.with_models(data.models, data.model_index[rows], data.query_index[rows], scores[rows],
                          refreshed=["m2"])
    order = np.concatenate([np.flatnonzero(data.model_index != 2), rows])
    now = EvalData(models=data.models, query_ids=data.query_ids, tasks=data.tasks, query_vectors=data.query_vectors,
                   model_index=data.model_index[order], query_index=data.query_index[order], scores=scores[order])
    want = KNNRouter(k=7, pseudo_count=2.0, mode=mode, tune=False).fit(now, np.arange(len(now.scores)), [])
    phi = np.concatenate([data.query_vectors[[3, 60, 7, 200]], data.query_vectors[[9]] + 0.05])
    assert np.array_equal(got.predict_vectors(phi), want.predict_vectors(phi))
    assert np.array_equal(got._Y, want._Y) and np.array_equal(got._prior, want._prior)
    assert not np.array_equal(got._Y, knn._Y)  # the replaced scores are in
    assert np.array_equal(got._counts, want._counts)  # m2's rows once, not its old ones beside the new


def test_a_model_known_from_a_few_right_answers_is_not_predicted_certain():
    """A reviewer's finding: kNN read a model without answers near the query at its own training mean, so
    a model with one right answer (or 64 right answers on one task) read P = 1.0 on any text, and `route`
    ranked it first at 0.99998. Its prior is now shrunk toward the pool (encoder.knn.shrunk_means)."""
    from encoder.knn import shrunk_means

    data = _data(seed=3)
    # model 5 keeps one evaluation, right, on query 0 only; model 4 keeps its 60 lowest queries, all right
    keep = (data.model_index < 4) | ((data.model_index == 5) & (data.query_index == 0)) \
        | ((data.model_index == 4) & (data.query_index < 100))
    rate = np.array([0.2, 0.4, 0.6, 0.8, 1.0, 1.0])[data.model_index]  # models that differ: a prior to learn
    right = np.random.default_rng(4).random(len(data.scores)) < rate
    scores = np.where(data.model_index >= 4, 1.0, right)[keep].astype(np.float32)
    data = EvalData(models=data.models, query_ids=data.query_ids, tasks=data.tasks, query_vectors=data.query_vectors,
                    model_index=data.model_index[keep], query_index=data.query_index[keep], scores=scores)
    knn = KNNRouter(k=20, pseudo_count=5.0, mode="pooled", tune=False).fit(data, np.arange(len(data.scores)), [])
    knn.pool_neighbourhoods([0, 1, 2, 3])
    far = knn.predict(np.arange(300, 400))  # queries neither model 4 nor model 5 answered
    pool = np.nanmean(knn.predict(np.arange(300, 400))[:4])
    assert far[5].max() < 0.9 and abs(float(far[5].mean()) - pool) < 0.15  # one answer: near the pool
    assert 0.9 < far[4].min() < 0.999  # sixty right answers: high, and not certain
    # the pool's prior: a model with hundreds of answers keeps its own mean; one with none reads the pool's
    sums, counts = np.array([30.0, 300.0, 0.0, 1.0]), np.array([100, 400, 0, 1])
    prior = shrunk_means(sums, counts, rows=[0, 1])
    assert abs(prior[1] - 0.75) < 0.01 and abs(prior[2] - 0.525) < 1e-9 and 0.0 < prior[3] < 1.0
    # a few pool models that happen to agree do not pin a well-evidenced newcomer to their mean (a reviewer
    # measured 0.611 for 950 right of 1,000 beside three models at 0.60-0.62 before the prior was bounded by
    # the pool's median count), and a pool none of whose models is scored falls back to every scored model
    agreeing = shrunk_means(np.array([600.0, 620.0, 610.0, 950.0]), np.full(4, 1000), rows=[0, 1, 2])
    assert agreeing[3] > 0.75 and abs(agreeing[0] - 0.605) < 1e-9
    assert shrunk_means(sums, counts, rows=[2])[0] != 0.5
