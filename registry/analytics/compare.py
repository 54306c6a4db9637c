"""How two models differ (`registry compare`).

Two models side by side: their cosine distance and neighbour ranks; per task their measured
accuracies over all their stored evaluations, and a test of the difference. Where the two share
queries in a task (the usual case) the test is paired on those shared queries: z = sum(d) /
sqrt(sum(d^2)) with d = score_a - score_b per query, which for 0/1 scores is McNemar's test and
for partial-credit scores its sign-flip analogue; with fewer than 10 shared queries it is the
unpaired two-proportion z-test; a task one of the two has no evaluation in is untested. p-values are
two-sided, with Holm's adjustment over the tasks tested. The overall row's test is the paired one on every
shared query, and there is none with fewer than 10 of them: unpaired over all evaluations it would weigh
one model's tasks against another's (the tasks' rows test task by task).
Predicted accuracies come from the embeddings: the mean predicted P(correct) over the task's
stored queries.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from registry.analytics.clusters import cosine_distances
from registry.errors import InputError, NotFoundError, RegistryError

if TYPE_CHECKING:
    from indexing.store import Store
    from registry.results import Comparison

__all__ = ["compare", "paired_test", "two_proportion_test", "holm", "MIN_PAIRED"]

MIN_PAIRED = 10


def _normal_p(z: float) -> float:
    return float(math.erfc(abs(z) / math.sqrt(2)))


def paired_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(z, two-sided p) for paired scores on shared queries: z = sum(d) / sqrt(sum(d^2)), McNemar's
    test for 0/1 scores, its sign-flip analogue for partial credit."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    total = float(np.sum(d * d))
    if total == 0.0:
        return 0.0, 1.0
    z = float(d.sum() / math.sqrt(total))
    return z, _normal_p(z)


def two_proportion_test(mean_a: float, n_a: int, mean_b: float, n_b: int) -> tuple[float, float]:
    """(z, two-sided p) of the pooled two-proportion z-test."""
    if n_a == 0 or n_b == 0:
        return 0.0, 1.0
    pooled = (mean_a * n_a + mean_b * n_b) / (n_a + n_b)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    if se == 0.0:
        return 0.0, 1.0
    z = (mean_a - mean_b) / se
    return float(z), _normal_p(z)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order."""
    order = np.argsort(pvalues)
    m = len(pvalues)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted.tolist()


def _scores_by_task(store: "Store", a: str, b: str):
    """{model: {query_id: score}} for a and b, and {query_id: task}, straight from the tables."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from indexing.store import EVALUATIONS, QUERIES

    evals = store.read(EVALUATIONS, ["model", "query_id", "score"])
    evals = evals.filter(pc.is_in(evals.column("model"), value_set=pa.array([a, b])))
    scores: dict[str, dict[str, float]] = {a: {}, b: {}}
    for m, q, s in zip(evals.column("model").to_pylist(), evals.column("query_id").to_pylist(),
                       evals.column("score").to_pylist()):
        scores[m][q] = float(s)
    queries = store.read(QUERIES, ["query_id", "task", "text_hash"])
    task_of = dict(zip(queries.column("query_id").to_pylist(), queries.column("task").to_pylist()))
    return scores, task_of, queries


def _predicted(store: "Store", models, za: np.ndarray, zb: np.ndarray, queries) -> tuple[dict, str | None]:
    """Mean predicted P(correct) per task over the task's stored queries with vectors (G in numpy, as a
    route reads it: importing torch cost a cold `registry compare` a second and more)."""
    from registry.catalog.embedding import active_predictor

    try:
        active = active_predictor(store)
    except RegistryError as err:
        return {}, str(err)
    if active.encoder_id != models.index.encoder_id:
        return {}, (f"models were embedded by {models.index.encoder_id}, the active encoder is "
                    f"{active.encoder_id} (registry embed --all)")
    from encoder.predictor import predict

    hashes = queries.column("text_hash").to_pylist()
    vectors = store.cached_vectors(active.query_encoder, hashes)
    rows = [i for i, h in enumerate(hashes) if h in vectors]
    if not rows:
        return {}, f"no query vectors from {active.query_encoder}"
    phi = np.stack([vectors[hashes[i]] for i in rows]).astype(np.float32)
    p = predict(active.locus, np.stack([za, zb]), phi)
    tasks = np.array([queries.column("task")[i].as_py() or "" for i in rows], dtype=object)
    out = {}
    for task in sorted(set(tasks.tolist())):
        mask = tasks == task
        out[task] = (float(p[0, mask].mean()), float(p[1, mask].mean()), int(mask.sum()))
    out[None] = (float(p[0].mean()), float(p[1].mean()), len(rows))
    return out, None


def _task_row(task, sa: dict[str, float], sb: dict[str, float], *, unpaired: bool = True) -> dict[str, Any]:
    va, vb = np.array(list(sa.values())), np.array(list(sb.values()))
    shared = sorted(set(sa) & set(sb))
    acc_a = float(va.mean()) if len(va) else None
    acc_b = float(vb.mean()) if len(vb) else None
    row: dict[str, Any] = {"task": task, "a_accuracy": acc_a, "b_accuracy": acc_b, "a_n": len(va), "b_n": len(vb),
                           "shared_n": len(shared),
                           "difference": (acc_a - acc_b) if acc_a is not None and acc_b is not None else None}
    if len(shared) >= MIN_PAIRED:
        pa_, pb_ = np.array([sa[q] for q in shared]), np.array([sb[q] for q in shared])
        z, p = paired_test(pa_, pb_)
        row.update(test="paired", shared_difference=float(pa_.mean() - pb_.mean()),
                   disagreement_rate=float(np.abs(pa_ - pb_).mean()))
    elif unpaired and len(va) and len(vb):
        z, p = two_proportion_test(acc_a, len(va), acc_b, len(vb))
        row.update(test="two-proportion", shared_difference=None, disagreement_rate=None)
    else:
        z, p = None, None
        row.update(test="none", shared_difference=None, disagreement_rate=None)
    row.update(z=z, p_value=p)
    return row


def _rank(distances: dict[str, float], other: str, own: str | None = None) -> int:
    """1 + how many models (not `own`) are strictly nearer than `other`."""
    d = distances[other]
    return sum(1 for n, x in distances.items() if n not in (own, other) and x < d - 1e-12) + 1


def _behaviour_rows(store: "Store", a: str, b: str) -> tuple[dict, dict] | None:
    """(every other model's behaviour distance from a, and from b), each from its stored vector as route's
    fallbacks read it (`behaviour_neighbours`), or None when the behaviour index is not the active item
    table's or lacks one of them."""
    from registry.analytics.search import behaviour_index, behaviour_neighbours
    from registry.catalog.fingerprint_store import load_item_table

    table = load_item_table(store)
    if table is None:
        return None
    index = behaviour_index(store)
    everyone = len(index.names)
    from_a = behaviour_neighbours(store, table, a, everyone, index=index)
    from_b = behaviour_neighbours(store, table, b, everyone, index=index)
    if from_a is None or from_b is None:
        return None
    from_a, from_b = dict(from_a), dict(from_b)
    return (from_a, from_b) if b in from_a and a in from_b else None


def _vector_of(models, name: str, field: str):
    """The model's vector; a not-found error (naming the closest models) says which argument it was."""
    try:
        return models.vector(name)
    except NotFoundError as err:
        raise NotFoundError(err.problem, field=field) from None


def compare(store: "Store", a: str, b: str, *, by: str | None = None) -> "Comparison":
    """How two models differ: embedding distance and neighbour ranks, and per task their measured
    accuracies with the test behind each difference (largest difference first), plus predicted ones."""
    from registry.results import Comparison
    from registry.analytics.search import likeness_kind, open_embedded, open_index, pairwise_distances

    models = open_embedded(store)
    za, zb = (_vector_of(models, name, field) for name, field in ((a, "a"), (b, "b")))
    if a == b:
        raise InputError(f"compare needs two different models (both are {a!r})", field="b")
    # the distance and the neighbour ranks in the likeness vector (the fingerprint when both have one)
    by = likeness_kind(store, by, (a, b))
    likeness = models if by == "locus" else open_index(store, by=by)
    likeness.vector(a), likeness.vector(b)  # a model without that vector: an error saying so
    names = likeness.index.names
    from_a, from_b = (_behaviour_rows(store, a, b) if by == "fingerprint" else None) or (None, None)
    if from_a is not None:
        metric = "behaviour"  # as search and route's fallbacks rank: each one's own nearest in the behaviour index
        distance, rank_b, rank_a, n_neighbours = from_a[b], _rank(from_a, b), _rank(from_b, a), len(from_a)
    else:
        metric = "cosine" if by == "locus" else "euclidean"
        d = cosine_distances(likeness.index.vectors) if by == "locus" else pairwise_distances(likeness.index.vectors, by)
        ia, ib = names.index(a), names.index(b)
        distance, n_neighbours = float(d[ia, ib]), len(names) - 1
        rank_b, rank_a = _rank(dict(zip(names, d[ia])), b, a), _rank(dict(zip(names, d[ib])), a, b)

    scores, task_of, queries = _scores_by_task(store, a, b)
    for name in (a, b):
        if not scores[name]:
            raise RegistryError(f"model {name!r} has no stored evaluations")
    tasks = sorted({task_of.get(q) or "" for name in (a, b) for q in scores[name]})
    rows = []
    for task in tasks:
        sa = {q: s for q, s in scores[a].items() if (task_of.get(q) or "") == task}
        sb = {q: s for q, s in scores[b].items() if (task_of.get(q) or "") == task}
        rows.append(_task_row(task, sa, sb))
    tested = [row for row in rows if row["p_value"] is not None]
    for row, adj in zip(tested, holm([r["p_value"] for r in tested])):
        row["p_adjusted"] = adj
    overall = _task_row("(all)", scores[a], scores[b], unpaired=False)
    predicted, note = _predicted(store, models, za, zb, queries)
    for row in rows:
        got = predicted.get(row["task"])
        row["a_predicted"], row["b_predicted"] = (got[0], got[1]) if got else (None, None)
    if predicted:
        overall["a_predicted"], overall["b_predicted"] = predicted[None][0], predicted[None][1]
    rows.sort(key=lambda r: -abs(r["difference"]) if r["difference"] is not None else 0.0)
    shared = sorted(set(scores[a]) & set(scores[b]))
    sa_, sb_ = np.array([scores[a][q] for q in shared]), np.array([scores[b][q] for q in shared])
    ca, cb = sa_ >= 0.5, sb_ >= 0.5
    agreement = {"shared_queries": len(shared),
                 "disagreement_rate": float(np.abs(sa_ - sb_).mean()) if len(shared) else None,
                 "both_correct": int((ca & cb).sum()), "only_a": int((ca & ~cb).sum()),
                 "only_b": int((~ca & cb).sum()), "both_wrong": int((~ca & ~cb).sum())}
    cosine = float(1.0 - za @ zb / (np.linalg.norm(za) * np.linalg.norm(zb)))  # as `registry search` has it
    return Comparison.model_validate({
            "a": a, "b": b, "by": by, "distance": distance, "distance_metric": metric, "distance_cosine": cosine,
            "rank_of_b_among_a_neighbours": rank_b, "rank_of_a_among_b_neighbours": rank_a,
            "n_neighbours": n_neighbours, "overall": overall, "tasks": rows, "agreement": agreement,
            "test": ("paired on shared queries (McNemar for 0/1 scores) where a task has 10+ of them, else the "
                     "two-proportion z-test, none where one model has no evaluation in the task; two-sided p, "
                     "p_adjusted by Holm over the tasks tested; overall: paired on the shared queries (10+), else none"),
            "predicted_from": "mean predicted P(correct) over each task's stored queries" if predicted else None,
            "predicted_note": note})
