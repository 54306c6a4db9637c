"""The synthetic pool's ground truth is what it says it is."""
from __future__ import annotations

import numpy as np

from registry.lab.synthetic import synthetic_pool


def _scores(pool):
    by_model = {}
    for e in pool.evaluations:
        by_model.setdefault(e.model, {})[e.query] = e.score
    return by_model


def test_planted_duplicates_agree_far_more_than_distinct_models():
    pool = synthetic_pool(seed=1, n_duplicates=2, duplicate_noise=0.05)
    scores = _scores(pool)
    ids = [q.id for q in pool.queries]

    def agreement(a, b):
        return np.mean([scores[a][q] == scores[b][q] for q in ids])

    dup_agreement = [agreement(a, b) for a, b in pool.duplicates]
    assert all(0.9 <= x < 1.0 for x in dup_agreement)  # noise flips ~5%
    names = [m.name for m in pool.models]
    dup_pairs = {frozenset(p) for p in pool.duplicates}
    others = [agreement(a, b) for i, a in enumerate(names) for b in names[i + 1:] if frozenset((a, b)) not in dup_pairs]
    assert max(others) < min(dup_agreement)


def test_pool_is_labelled_synthetic_and_reproducible():
    a, b = synthetic_pool(seed=3), synthetic_pool(seed=3)
    assert [e.score for e in a.evaluations] == [e.score for e in b.evaluations]
    assert all(m.name.startswith("syn-") and "synthetic" in m.tags for m in a.models)
    assert len({q.text for q in a.queries}) == len(a.queries)


def test_abilities_drive_accuracy():
    pool = synthetic_pool(seed=0, queries_per_task=80, n_duplicates=0)
    scores = _scores(pool)
    task_of = {q.id: q.task for q in pool.queries}
    # Per (model, task), higher ability means higher observed accuracy: strong rank correlation.
    pairs = []
    for model, row in scores.items():
        for task in pool.ability[model]:
            acc = np.mean([s for q, s in row.items() if task_of[q] == task])
            pairs.append((pool.ability[model][task], acc))
    ability, accuracy = np.array(pairs).T
    assert np.corrcoef(np.argsort(np.argsort(ability)), np.argsort(np.argsort(accuracy)))[0, 1] > 0.8


def test_coverage_leaves_holes():
    pool = synthetic_pool(seed=0, coverage=0.5, n_duplicates=0)
    n = len(pool.models) * len(pool.queries)
    assert 0.4 * n < len(pool.evaluations) < 0.6 * n
