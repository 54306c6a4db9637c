"""The kNN router: nearest training queries by cosine, each model's neighbour scores shrunk toward its
training mean (itself shrunk toward the pool's). A baseline of the evaluation (encoder/baselines.py) and one of the registry's router
components (`predict_vectors` for a new text); numpy only."""
from __future__ import annotations

import itertools
import time
from typing import Sequence

import numpy as np

from .baseline_base import Baseline, _Split
from .data import EvalData

__all__ = ["KNNRouter"]


class KNNRouter(Baseline):
    """kNN over query vectors, shrunk toward each model's training mean.

    For a test query q and model m: take q's k nearest training queries by cosine similarity,
    keep those m was evaluated on (n of them, s correct), and predict
    P = (s + c * prior_m) / (n + c), prior_m = m's mean training score shrunk toward the pool's
    (`shrunk_means`; P = prior_m where n + c = 0): where a model has no answers near the query, it reads
    its mean shrunk toward the pool's, not 1 because its few answers were right (with c = 0 and answers
    near the query, their mean alone).
    Two neighbourhoods: "pooled" takes the k nearest among all training queries that any model was
    evaluated on (a model with N of U training queries then sees about k * N / U of them);
    "per_model" takes the k nearest among m's own evaluated queries (n = min(k, N_m)).
    k = None means all training queries; c = 0 is the plain, unshrunk kNN.

    Tuning (when `tune`, the default): exhaustive grid on the validation queries, chosen by
    validation routing accuracy (ties: validation correctness accuracy, then grid order):
    mode in {pooled, per_model} x k in {10, 20, 50, 100, 200, 500, 1000, 2000, 5000, all} x
    c in {0, 1, 2, 5, 10, 20, 50, 100, 200}: 180 configurations, all read off one sort of the
    validation x training similarities (a few seconds on MMLU-Pro's open pool). With tune=False the
    given k, pseudo_count and mode are used as they are.
    """

    name = "knn"
    FEW = 32  # up to this many query vectors (a route's), each neighbourhood is selected, not sorted
    GRID_K: tuple[int | None, ...] = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, None)
    GRID_C: tuple[float, ...] = (0, 1, 2, 5, 10, 20, 50, 100, 200)
    GRID_MODE: tuple[str, ...] = ("pooled", "per_model")

    def __init__(
        self,
        k: int | None = 1000,
        pseudo_count: float = 20.0,
        mode: str = "pooled",
        *,
        tune: bool = True,
        chunk: int = 512,
    ):
        super().__init__()
        if mode not in ("pooled", "per_model"):
            raise ValueError(f"unknown mode {mode!r}")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"k must be a positive whole number or None, not {k!r}")
        if isinstance(pseudo_count, bool) or not isinstance(pseudo_count, (int, float)) or not pseudo_count >= 0:
            raise ValueError(f"pseudo_count must be a number >= 0, not {pseudo_count!r}")
        self.k, self.pseudo_count, self.mode, self.tune, self.chunk = k, pseudo_count, mode, tune, chunk

    def fit(self, data, train_evals, val_queries, *, seed=0):
        start = time.perf_counter()
        split = _Split(data, train_evals, val_queries)
        self._data = data
        self._counts, self._sums = split.counts, split.sums
        self._prior = shrunk_means(self._sums, self._counts)
        # training queries that carry at least one evaluation, as columns
        self._train_q = np.unique(split.query)
        column = np.searchsorted(self._train_q, split.query)
        M, U = data.n_models, len(self._train_q)
        # (M, U) scores and which of them exist: float32 holds the stored scores exactly and a flag is a
        # byte, 5 B a cell instead of 16 (60 MB at 1,000 models x 12k queries); sums accumulate in float64.
        self._Y = np.zeros((M, U), dtype=np.float32)
        self._O = np.zeros((M, U), dtype=bool)
        self._Y[split.model, column] = split.score
        self._O[split.model, column] = True
        self._own = [np.flatnonzero(self._O[m]) for m in range(M)]
        every = len(self._train_q) == data.n_queries  # every query evaluated (the router's): no copy
        vectors = data.query_vectors if every else data.query_vectors[self._train_q]
        self._train_vecs = np.asarray(vectors, dtype=np.float32)
        self._pooled: np.ndarray | None = None  # the columns pooled neighbourhoods come from (None: all)

        candidates = [(self.mode, self.k, self.pseudo_count)]
        if self.tune and split.val_truth is not None:
            candidates = list(itertools.product(self.GRID_MODE, self.GRID_K, self.GRID_C))
        self.tuning_ = []
        if len(candidates) > 1:
            best_key = None
            for mode in self.GRID_MODE:
                sums, counts = self._stats(data.query_vectors[split.val_queries], mode, self.GRID_K)
                for ki, k in enumerate(self.GRID_K):
                    for c in self.GRID_C:
                        pred = self._shrink(sums[ki], counts[ki], c)
                        routing, corr = split.val_score(pred)
                        self.tuning_.append(
                            {"mode": mode, "k": k, "pseudo_count": c, "val_routing": routing, "val_correctness": corr}
                        )
                        key = (routing, corr)
                        if best_key is None or key > best_key:
                            best_key = key
                            self.mode, self.k, self.pseudo_count = mode, k, c
        self.config_ = {"mode": self.mode, "k": self.k, "pseudo_count": self.pseudo_count}
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def predict(self, query_indices):
        self._check_fitted()
        return self.predict_vectors(self._data.query_vectors[np.asarray(query_indices, dtype=np.int64)])

    def predict_vectors(self, vectors: np.ndarray) -> np.ndarray:
        """(M, T) P(correct) for query vectors `vectors` (T, D) from the same query encoder, whether or not
        they are queries of the fitted data: a new text's, at routing time."""
        self._check_fitted()
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self._train_vecs.shape[1])
        if len(vectors) <= self.FEW:
            sums, counts = self._stats_few(vectors)
        else:
            sums, counts = (a[0] for a in self._stats(vectors, self.mode, (self.k,)))
        return self._shrink(sums, counts, self.pseudo_count).astype(np.float32)

    def _stats_few(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`_stats` for one k, for a few query vectors: the same neighbourhoods (the k most similar, ties to
        the lower column) found by a partial selection, O(U) per vector where `_stats` sorts every row."""
        M, U = self._data.n_models, len(self._train_q)
        sums, counts = np.zeros((M, len(vectors))), np.zeros((M, len(vectors)))
        pooled = np.arange(U) if self._pooled is None else self._pooled
        sim = vectors @ self._train_vecs.T  # (T, U)
        for j, row in enumerate(sim):
            if self.mode == "pooled":
                cols = pooled[_nearest(row[pooled], self.k)]
                sums[:, j] = self._Y[:, cols].sum(axis=1, dtype=np.float64)
                counts[:, j] = self._O[:, cols].sum(axis=1)
                continue
            done = np.zeros(M, dtype=bool)
            if self.k is not None and self.k < U:
                # A model's k nearest own queries are its first k in the order of all of them by similarity,
                # and a short prefix of that order holds them for most models: one selection for every
                # model instead of one per model (which grew with the pool). The rest select their own.
                prefix = _sorted_prefix(row, min(U, 4 * self.k))  # (P,) columns
                seen = np.cumsum(self._O[:, prefix], axis=1)  # (M, P) own queries among the first p
                done = seen[:, -1] >= self.k
                at = np.argmax(seen[done] >= self.k, axis=1)  # where each of those reaches k
                running = np.cumsum(self._Y[np.ix_(done, prefix)], axis=1, dtype=np.float64)
                sums[done, j] = running[np.arange(len(at)), at]
                counts[done, j] = self.k
            for m in np.flatnonzero(~done):
                own = self._own[m]
                if len(own):
                    cols = own[_nearest(row[own], self.k)]
                    sums[m, j], counts[m, j] = self._Y[m, cols].sum(dtype=np.float64), len(cols)
        return sums, counts

    def with_models(self, models: Sequence[str], model: np.ndarray, query: np.ndarray, score: np.ndarray,
                    *, refreshed: Sequence[str] = ()) -> "KNNRouter | None":
        """This router, fitted on all of its data's evaluations (no validation), with evaluations appended to
        them (new models' and more of its models' own) and the models it holds that `models` lacks left out
        with their evaluations. The router that a fit on the evaluations of `models` gives, exactly, without
        reading the old ones again (a service's kNN follows the models added, refined and removed); call
        `pool_neighbourhoods` on it as after `fit`. `models`: the models wanted, in the order wanted; `model`,
        `query`, `score`: the appended evaluations, as positions in `models` and in the fitted data's queries,
        in stored order. `refreshed`: models of this one whose evaluations these rows give anew, all of them
        (some of theirs were deleted: a refine that replaced scores); their old ones are left out. None where
        that router would differ by more than those rows: a new model without evaluations, an evaluation on
        a query no fitted model was evaluated on (a new column), a query that only models left out were
        evaluated on (a column fewer), a fitted model without evaluations (its prior is the pool's mean,
        which the new rows move), a router fitted on a part of its data."""
        self._check_fitted()
        data = self._data
        models = list(models)
        old = {name: i for i, name in enumerate(data.models)}
        if len(set(models)) != len(models) or not (self._counts > 0).all() \
                or self._counts.sum() != len(data.scores):  # fitted on a part of its data (an evaluation's split)
            return None
        model, query = np.asarray(model, np.int64), np.asarray(query, np.int64)
        score = np.asarray(score, np.float32)
        anew = set(refreshed)
        source = np.array([-1 if name in anew else old.get(name, -1) for name in models],
                          dtype=np.int64)  # row in this router, -1: new (or given anew)
        added = source < 0
        gained = np.bincount(model, minlength=len(models))
        if (gained[added] == 0).any():
            return None
        column = np.searchsorted(self._train_q, query)
        if len(query) and (column.max() >= len(self._train_q) or (self._train_q[column] != query).any()):
            return None
        kept = ~added
        covered = self._O[source[kept]].any(axis=0)
        covered[column] = True
        if not covered.all():  # only models left out were evaluated on a query: a fit would not hold it
            return None
        grown = object.__new__(KNNRouter)
        grown.__dict__.update(self.__dict__)
        grown._Y = np.zeros((len(models), self._Y.shape[1]), dtype=np.float32)
        grown._O = np.zeros((len(models), self._O.shape[1]), dtype=bool)
        grown._Y[kept], grown._O[kept] = self._Y[source[kept]], self._O[source[kept]]
        grown._Y[model, column] = score  # after the old rows, as a fit assigns them in stored order
        grown._O[model, column] = True
        # a fit's _Split sums each model's scores in stored order: the old sum, then the new rows one by one
        sums = np.zeros(len(models))
        sums[kept] = self._sums[source[kept]]
        np.add.at(sums, model, score.astype(np.float64))
        counts = gained.copy()
        counts[kept] += self._counts[source[kept]]
        grown._sums, grown._counts, grown._prior = sums, counts, shrunk_means(sums, counts)
        grown._own = [self._own[r] if r >= 0 and not gained[i] else np.flatnonzero(grown._O[i])
                      for i, r in enumerate(source)]
        grown._pooled = None  # drawn again by pool_neighbourhoods
        left_out = set(data.models) - set(models)
        renumber = np.full(len(data.models), -1, np.int64)  # -1: left out
        renumber[source[kept]] = np.flatnonzero(kept)
        stays = renumber[data.model_index] >= 0
        grown._data = EvalData(models=models, query_ids=data.query_ids, tasks=data.tasks,
                               query_vectors=data.query_vectors,
                               model_index=np.concatenate([renumber[data.model_index][stays], model]),
                               query_index=np.concatenate([data.query_index[stays], query]),
                               scores=np.concatenate([data.scores[stays], score]),
                               unvectored={n: c for n, c in data.unvectored.items() if n not in left_out})
        return grown

    def pool_neighbourhoods(self, rows: Sequence[int]) -> "KNNRouter":
        """Draw the pooled neighbourhoods from the queries the models `rows` were evaluated on, and the
        priors' pool from those models (`shrunk_means`), so that a model added later (with queries of its
        own) changes no other model's neighbourhood or prior, hence no other model's prediction.
        Per-model neighbourhoods are each model's own already."""
        self._check_fitted()
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows):
            self._pooled = np.flatnonzero(self._O[rows].any(axis=0))
            self._prior = shrunk_means(self._sums, self._counts, rows)
        return self

    @property
    def settings(self) -> dict:
        """What `KNNRouter(tune=False, **settings)` needs to predict as this one does (JSON)."""
        return {"mode": self.mode, "k": self.k, "pseudo_count": float(self.pseudo_count)}

    def _shrink(self, sums: np.ndarray, counts: np.ndarray, c: float) -> np.ndarray:
        prior = self._prior[:, None]
        denom = counts + c
        with np.errstate(invalid="ignore", divide="ignore"):
            pred = (sums + c * prior) / denom
        return np.where(denom > 0, pred, np.broadcast_to(prior, pred.shape))

    def _stats(self, vectors: np.ndarray, mode: str, ks: Sequence[int | None]):
        """(len(ks), M, T) neighbour score sums and counts for each k, for the query vectors (T, D)."""
        M, T = self._data.n_models, len(vectors)
        sums = np.zeros((len(ks), M, T))
        counts = np.zeros((len(ks), M, T))
        U = len(self._train_q)
        for lo in range(0, T, self.chunk):
            block = slice(lo, min(lo + self.chunk, T))
            vecs = vectors[block].astype(np.float32, copy=False)
            sim = vecs @ self._train_vecs.T  # (t, U)
            if mode == "pooled":
                pooled = np.arange(U) if self._pooled is None else self._pooled
                # stable sort: ties broken by training-query index, so results are deterministic
                order = np.argsort(-sim[:, pooled], axis=1, kind="stable")
                cols = np.array([len(pooled) if k is None else min(k, len(pooled)) for k in ks]) - 1
                for m in range(M):
                    cs = np.cumsum(self._Y[m, pooled][order], axis=1, dtype=np.float64)
                    cc = np.cumsum(self._O[m, pooled][order], axis=1)
                    sums[:, m, block] = cs[:, cols].T
                    counts[:, m, block] = cc[:, cols].T
            else:
                for m in range(M):
                    own = self._own[m]
                    if len(own) == 0:
                        continue
                    order = np.argsort(-sim[:, own], axis=1, kind="stable")
                    cs = np.cumsum(self._Y[m, own][order], axis=1, dtype=np.float64)
                    cols = np.array([len(own) if k is None else min(k, len(own)) for k in ks]) - 1
                    sums[:, m, block] = cs[:, cols].T
                    counts[:, m, block] = (cols + 1)[:, None]
        return sums, counts


def shrunk_means(sums: np.ndarray, counts: np.ndarray, rows: Sequence[int] | None = None) -> np.ndarray:
    """(M,) each model's mean score, (s_m + a * p) / (n_m + a): its n_m scores (sum s_m) with a beta prior
    fitted to the pool's models (`rows`; None, or none of them scored: every model with a score) by the
    method of moments: p the mean of their means, a = p (1 - p) / t - 1 with t the variance of their true
    means (the variance of their means less what sampling adds: (var - p (1 - p) h) / (1 - h), h the mean
    of 1 / n). Empirical Bayes, nothing tuned: a model with one right answer reads near the pool, one with
    hundreds reads its own mean. Bounds: a >= 1, so none reads 0 or 1; a <= the pool's median count, so the
    prior never weighs more than a typical model's own answers (a few pool models that happen to agree
    must not pin a well-evidenced newcomer to their mean); under 3 pool models fix no spread: a = 1. A
    model without scores reads p."""
    sums, counts = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
    scored = np.flatnonzero(counts > 0)
    pool = scored if rows is None else np.asarray(rows, np.int64)
    pool = pool[counts[pool] > 0]
    if len(pool) == 0:
        pool = scored
    if len(pool) == 0:
        return np.full(len(sums), 0.5)
    means = sums[pool] / counts[pool]
    p = float(np.clip(means.mean(), 1e-3, 1 - 1e-3))
    cap = max(1.0, float(np.median(counts[pool])))
    h = float(np.mean(1 / counts[pool]))
    true_var = (float(means.var()) - p * (1 - p) * h) / (1 - h) if h < 1 else 0.0
    if len(pool) < 3:
        a = 1.0
    elif true_var <= 0:  # the means differ no more than sampling makes them: as much prior as allowed
        a = cap
    else:
        a = float(np.clip(p * (1 - p) / true_var - 1, 1.0, cap))
    return (sums + a * p) / (counts + a)


def _sorted_prefix(similarity: np.ndarray, n: int) -> np.ndarray:
    """At least the first n positions of a stable sort by descending value (every position equal to the
    n-th largest value is kept, so that this is exactly a prefix of that order)."""
    threshold = -np.partition(-similarity, n - 1)[n - 1]
    candidates = np.flatnonzero(similarity >= threshold)
    return candidates[np.argsort(-similarity[candidates], kind="stable")]


def _nearest(similarity: np.ndarray, k: int | None) -> np.ndarray:
    """Positions of the k largest values (all when k is None or >= len): those above the k-th largest,
    then the lowest positions equal to it, as a stable sort by descending value would take them."""
    n = len(similarity)
    if k is None or k >= n:
        return np.arange(n)
    threshold = -np.partition(-similarity, k - 1)[k - 1]
    above = np.flatnonzero(similarity > threshold)
    tied = np.flatnonzero(similarity == threshold)[: k - len(above)]
    return np.concatenate([above, tied])
