"""Duplicate-endpoint audit: which pairs of models sit closer than distinct models do.

The threshold comes from the data, not a constant. Two distributions are measured:
- self-spread: each model is embedded twice from two disjoint random halves of its own evaluations
  (several draws); the distances between its own embeddings say how far one model's embedding moves
  with the evaluation sample;
- distinct spread: distances between the embeddings of different models.
The threshold is where the two meet, the equal-error point: the distance d at which the fraction of
self-distances above d equals the fraction of distinct-pair distances at or below d, capped by the
self-spread's `quantile` (0.99 by default). A pair is flagged when its distance is at most the
threshold. Its score is the probability that two distinct models sit that close, estimated from the
distinct-pair distances ((count at or below + 1) / (pairs + 1)): small means suspicious. Pairs are
compared through their embeddings, so models evaluated on different queries are still comparable.
"""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np

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


def self_spread(store: Store, active, names: list[str], *, draws: int = 4, max_evals: int = 1024,
                metric: str = "cosine", seed: int = 0) -> dict[str, list[float]]:
    """Per model, distances between embeddings built from disjoint halves of its evaluations."""
    from encoder.training import embed_models, evals_by_model
    from registry.dataset import load_eval_data

    data = load_eval_data(store, active.query_encoder, models=names)
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


def equal_error_threshold(self_d: np.ndarray, distinct: np.ndarray, *, cap: float) -> float:
    """The distance where missing a duplicate (its self-distance lies above) is as likely as
    flagging a distinct pair (its distance lies at or below), never above `cap`."""
    candidates = np.unique(np.concatenate([self_d, distinct, [cap]]))
    candidates = candidates[candidates <= cap]
    miss = 1.0 - np.searchsorted(self_d, candidates, side="right") / len(self_d)
    false = np.searchsorted(distinct, candidates, side="right") / len(distinct)
    return float(candidates[int(np.argmin(np.abs(miss - false)))])


def audit(store: Store, *, model: str | None = None, metric: str = "cosine", quantile: float = 0.99,
          draws: int = 4, max_spread_models: int = 200, seed: int = 0) -> dict[str, Any]:
    from registry.embedding import active_encoder
    from registry.search import open_index

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
    spreads = self_spread(store, active, list(sample), draws=draws, metric=metric, seed=seed)
    if not spreads:
        raise RegistryError("no model has the 32+ evaluations needed to estimate self-spread")
    self_d = np.sort(np.concatenate([np.asarray(v) for v in spreads.values()]))
    dist = _pairwise(z, metric)
    iu = np.triu_indices(len(names), k=1)
    distinct = np.sort(dist[iu])
    threshold = equal_error_threshold(self_d, distinct, cap=float(np.quantile(self_d, quantile)))
    rows = range(len(names)) if model is None else [names.index(model)]
    flags = []
    for i in rows:
        for j in range(len(names)):
            if j == i or (model is None and j < i):
                continue
            if dist[i, j] <= threshold:
                below = int(np.searchsorted(distinct, dist[i, j], side="right"))
                flags.append({"a": names[i], "b": names[j], "distance": float(dist[i, j]),
                              "score": (below + 1) / (len(distinct) + 1)})
    flags.sort(key=lambda f: f["distance"])
    return {
        "flags": flags, "threshold": threshold, "models": len(names), "metric": metric, "quantile": quantile,
        "self_spread": {"median": float(np.median(self_d)), "quantile": float(np.quantile(self_d, quantile)),
                        "max": float(self_d.max()), "models": len(spreads), "draws": draws},
        "distinct": {"min": float(distinct[0]), "median": float(np.median(distinct)), "pairs": int(len(distinct))},
    }
