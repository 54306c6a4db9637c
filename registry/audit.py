"""Duplicate-endpoint audit: which pairs of models are likely one model behind two names.

Two stages. The embeddings propose, the evaluations decide.

1. Candidates. Each model is embedded twice from two disjoint random halves of its own evaluations
   (several draws); the distances between its own embeddings, its self-spread, say how far one
   model's embedding moves with the evaluation sample. A pair of models closer than the self-spread's
   `quantile` (0.99 by default) is a candidate: a second endpoint of one model lands that close 99%
   of the time. Its score is the probability that two distinct models of this registry sit that close,
   from the distinct-pair distances ((count at or below + 1) / (pairs + 1)): small means suspicious.
   Embeddings make models evaluated on different queries comparable.
2. Evidence. Closeness in embedding space is where the audit looks, not proof: an encoder trained on
   a few dozen models places some distinct models of similar ability almost on top of each other (on
   MMLU-Pro, closer than many models' own self-spread). So every candidate is tested on the
   evaluations the registry holds for both, and cleared when they show two different models:
   - on the queries both answered, a one-sided binomial test of their disagreement rate against
     `tolerance` (the share of answers on which two endpoints serving one model may differ: sampling,
     batching, quantisation; 0.10 by default; `registry compare` puts Mistral-7B-v0.1 and v0.2 at 17.2%);
   - on the queries only one of them answered, a chi-square test that their accuracies agree within
     strata of task x query difficulty (difficulty: the rest of the pool's mean score on the query, in
     terciles), which holds when one model answered two samples of the same questions.
   A candidate is cleared when either test rejects "one model" at level `alpha`; what is left is
   flagged, with its evidence. Models with fewer than 30 answers on either side are not tested there.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from encoder.data import EvalData
from indexing.store import Store
from registry.errors import RegistryError

__all__ = ["audit"]


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return 1.0 - (a * b).sum(-1)


def _pairwise(z: np.ndarray, metric: str) -> np.ndarray:
    if metric == "cosine":
        u = z / np.linalg.norm(z, axis=1, keepdims=True)
        return np.clip(1.0 - u @ u.T, 0.0, 2.0)
    sq = (z * z).sum(1)
    return np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * z @ z.T, 0.0))


def self_spread(data: EvalData, active, *, draws: int = 4, max_evals: int = 1024,
                metric: str = "cosine", seed: int = 0) -> dict[str, list[float]]:
    """Per model of `data`, distances between embeddings built from disjoint halves of its evaluations."""
    from encoder.training import embed_models, evals_by_model

    own = evals_by_model(data, np.arange(len(data.scores)))
    spreads: dict[str, list[float]] = {}
    first, second, owners = [], [], []
    for m, name in enumerate(data.models):
        evals = own[m]
        if len(evals) < 32:
            continue
        rng = np.random.default_rng(seed + zlib.crc32(name.encode("utf-8")))
        half = min(len(evals) // 2, max_evals)
        for _ in range(draws):
            perm = rng.permutation(evals)
            first.append(np.sort(perm[:half]))
            second.append(np.sort(perm[half : 2 * half]))
            owners.append(name)
    if not owners:
        return {}
    # embed_models wants one set per model of `data`: embed in rounds of one draw per model.
    by_model = {name: [] for name in data.models}
    for a, b, name in zip(first, second, owners):
        by_model[name].append((a, b))
    empty = np.zeros(0, dtype=np.int64)
    for d in range(draws):
        sets_a = [by_model[n][d][0] if len(by_model[n]) > d else empty for n in data.models]
        sets_b = [by_model[n][d][1] if len(by_model[n]) > d else empty for n in data.models]
        za, zb = embed_models(active.locus, data, sets_a), embed_models(active.locus, data, sets_b)
        for m, name in enumerate(data.models):
            if len(sets_a[m]):
                dist = _cosine(za[m], zb[m]) if metric == "cosine" else np.linalg.norm(za[m] - zb[m])
                spreads.setdefault(name, []).append(float(dist))
    return spreads


MIN_EVIDENCE = 30  # answers needed before a test is run at all


@dataclass
class _Pool:
    """The pool's evaluations as the evidence tests read them, in O(evaluations) memory."""

    rows: list[tuple[np.ndarray, np.ndarray]]  # per model: (query indices, scores)
    task: np.ndarray  # (Q,) task index
    n_tasks: int
    total: np.ndarray  # (Q,) sum of scores over the pool
    count: np.ndarray  # (Q,) number of models scored

    @classmethod
    def of(cls, data: EvalData) -> "_Pool":
        _, task = np.unique(np.asarray(data.tasks, dtype=object).astype(str), return_inverse=True)
        order = np.argsort(data.model_index, kind="stable")
        bounds = np.searchsorted(data.model_index[order], np.arange(data.n_models + 1))
        rows = [(data.query_index[order[lo:hi]], data.scores[order[lo:hi]].astype(np.float64))
                for lo, hi in zip(bounds[:-1], bounds[1:])]
        return cls._build(rows, task)

    @classmethod
    def from_dense(cls, scores: np.ndarray, task: np.ndarray) -> "_Pool":
        rows = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)].astype(np.float64)) for r in scores]
        return cls._build(rows, np.asarray(task, dtype=np.int64))

    @classmethod
    def _build(cls, rows, task: np.ndarray) -> "_Pool":
        q = len(task)
        total, count = np.zeros(q), np.zeros(q)
        for idx, y in rows:
            np.add.at(total, idx, y)
            np.add.at(count, idx, 1)
        return cls(rows, task, int(task.max()) + 1 if q else 0, total, count)

    def dense(self, m: int) -> np.ndarray:
        out = np.full(len(self.task), np.nan)
        idx, y = self.rows[m]
        out[idx] = y
        return out

    def difficulty_bins(self, a: int, b: int, bins: int = 3) -> np.ndarray:
        """(Q,) tercile of each query's mean score over the pool without a and b (`bins` when unknown)."""
        total, count = self.total.copy(), self.count.copy()
        for m in (a, b):
            idx, y = self.rows[m]
            np.subtract.at(total, idx, y)
            np.subtract.at(count, idx, 1)
        known = count > 0.5
        out = np.full(len(total), bins, dtype=np.int64)
        if known.any():
            mean = total[known] / count[known]
            edges = np.quantile(mean, np.linspace(0, 1, bins + 1)[1:-1])
            out[known] = np.searchsorted(edges, mean)
        return out


def evidence(pool: _Pool, a: int, b: int, *, tolerance: float, alpha: float) -> dict[str, Any]:
    """Test "a and b are one model" on their evaluations; `cleared` when a test rejects it."""
    from scipy.stats import binom, chi2

    ya, yb = pool.dense(a), pool.dense(b)
    has_a, has_b = ~np.isnan(ya), ~np.isnan(yb)
    shared = has_a & has_b
    out: dict[str, Any] = {"shared_queries": int(shared.sum()), "disagreement": None, "p_disagreement": None,
                           "homogeneity_p": None, "homogeneity_strata": 0, "cleared": False, "reason": None}
    if shared.sum() >= MIN_EVIDENCE:
        differ = np.abs(ya[shared] - yb[shared])
        n, k = int(shared.sum()), int(round(differ.sum()))
        out["disagreement"] = float(differ.mean())
        out["p_disagreement"] = p_value = float(binom.sf(k - 1, n, tolerance))  # P(X >= k | rate = tolerance)
        if p_value < alpha:
            out.update(cleared=True, reason=f"they disagree on {out['disagreement']:.1%} of {n} shared queries "
                                            f"(tolerance {tolerance:.0%}, p={p_value:.2g})")
            return out
    only_a, only_b = has_a & ~has_b, has_b & ~has_a
    if only_a.sum() >= MIN_EVIDENCE and only_b.sum() >= MIN_EVIDENCE:
        bins = 3
        stratum = pool.task * (bins + 1) + pool.difficulty_bins(a, b, bins)
        size = pool.n_tasks * (bins + 1)
        na = np.bincount(stratum[only_a], minlength=size)
        nb = np.bincount(stratum[only_b], minlength=size)
        ka = np.bincount(stratum[only_a], weights=ya[only_a], minlength=size)
        kb = np.bincount(stratum[only_b], weights=yb[only_b], minlength=size)
        use = (na > 0) & (nb > 0)
        na, nb, ka, kb = na[use], nb[use], ka[use], kb[use]
        p = (ka + kb) / (na + nb)
        var = p * (1 - p) * (1 / na + 1 / nb)  # an upper bound for scores in [0, 1], exact for 0/1
        ok = var > 0
        statistic = float((((ka / na - kb / nb) ** 2)[ok] / var[ok]).sum())
        out["homogeneity_strata"] = int(ok.sum())
        if ok.any():
            out["homogeneity_p"] = float(chi2.sf(statistic, int(ok.sum())))
            if out["homogeneity_p"] < alpha:
                out.update(cleared=True, reason=f"their accuracies differ across task x difficulty "
                                                f"({int(ok.sum())} strata, p={out['homogeneity_p']:.2g})")
    return out


def audit(store: Store, *, model: str | None = None, metric: str = "cosine", quantile: float = 0.99,
          tolerance: float = 0.10, alpha: float = 0.01, draws: int = 4, max_spread_models: int = 200,
          seed: int = 0) -> dict[str, Any]:
    from registry.embedding import active_encoder
    from registry.search import open_index

    if not 0.0 <= tolerance < 1.0 or not 0.0 < alpha < 1.0:
        raise RegistryError(f"tolerance must be in [0, 1) and alpha in (0, 1); got {tolerance} and {alpha}")
    models = open_index(store)
    names, z = models.index.names, models.index.vectors
    if len(names) < 2:
        raise RegistryError("the audit needs at least 2 embedded models (registry embed --all)")
    if model is not None and model not in names:
        models.vector(model)  # raises the not-found / not-embedded error with close names
    active = active_encoder(store)
    if active.encoder_id != models.index.encoder_id:
        raise RegistryError(f"models were embedded by {models.index.encoder_id}, the active encoder is "
                            f"{active.encoder_id}: run `registry embed --all`")
    rng = np.random.default_rng(seed)
    sample = names if len(names) <= max_spread_models else sorted(rng.choice(names, max_spread_models, replace=False))
    from registry.dataset import load_eval_data

    data = load_eval_data(store, active.query_encoder, models=list(names))
    spreads = self_spread(data.select_models(list(sample)), active, draws=draws, metric=metric, seed=seed)
    if not spreads:
        raise RegistryError("no model has the 32+ evaluations needed to estimate self-spread")
    self_d = np.sort(np.concatenate([np.asarray(v) for v in spreads.values()]))
    dist = _pairwise(z, metric)
    iu = np.triu_indices(len(names), k=1)
    distinct = np.sort(dist[iu])
    threshold = float(np.quantile(self_d, quantile))
    rows = range(len(names)) if model is None else [names.index(model)]
    pool = _Pool.of(data)
    flags, cleared = [], []
    for i in rows:
        for j in range(len(names)):
            if j == i or (model is None and j < i) or dist[i, j] > threshold:
                continue
            below = int(np.searchsorted(distinct, dist[i, j], side="right"))
            pair = {"a": names[i], "b": names[j], "distance": float(dist[i, j]),
                    "score": (below + 1) / (len(distinct) + 1)}
            pair["evidence"] = evidence(pool, i, j, tolerance=tolerance, alpha=alpha)
            (cleared if pair["evidence"]["cleared"] else flags).append(pair)
    flags.sort(key=lambda f: f["distance"])
    cleared.sort(key=lambda f: f["distance"])
    return {
        "flags": flags, "threshold": threshold, "models": len(names), "metric": metric, "quantile": quantile,
        "tolerance": tolerance, "alpha": alpha, "candidates": len(flags) + len(cleared), "cleared": cleared,
        "self_spread": {"median": float(np.median(self_d)), "quantile": float(np.quantile(self_d, quantile)),
                        "max": float(self_d.max()), "models": len(spreads), "draws": draws},
        "distinct": {"min": float(distinct[0]), "median": float(np.median(distinct)), "pairs": int(len(distinct))},
    }
