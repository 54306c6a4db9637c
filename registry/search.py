"""Similarity search over the models' embeddings, on the index `indexing.model_index.ModelIndex` owns.

This module adds what the registry knows and the index does not: model records (typed metadata), the
`--where` filter, and typed results.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from indexing.errors import InputError, RegistryError
from indexing.model_index import METRICS, ModelIndex
from registry.records import ModelRecord
from registry.rows import record_of

if TYPE_CHECKING:
    from indexing.store import Store
    from registry.fingerprints import PoolFingerprints
    from registry.results import Neighbour

__all__ = ["EmbeddedModels", "open_index", "open_embedded", "embedded_subset", "similar", "neighbours", "distance",
           "check_consistency", "BY", "behaviour_order", "index_fingerprints", "fingerprint_neighbours"]


class _Records(Mapping):
    """name -> ModelRecord over the index's table rows, each converted when first read: a search or an
    audit reads a handful of 10,000 records, and building them all cost 0.4 s there."""

    def __init__(self, rows: dict[str, dict]) -> None:
        self._rows, self._made = rows, {}

    def __getitem__(self, name: str) -> ModelRecord:
        if name not in self._made:
            self._made[name] = record_of(self._rows[name])
        return self._made[name]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._rows


@dataclass
class EmbeddedModels:
    """The index with the models' records: `index.names`, `index.vectors`, `index.encoder_id`,
    `index.search(...)`, `records` (every model, embedded or not), `vector(name)`."""

    index: ModelIndex
    records: Mapping[str, ModelRecord]

    def vector(self, name: str) -> np.ndarray:
        return self.index.vector(name)

    def allowed_rows(self, where: str | None) -> np.ndarray | None:
        """Rows of the index whose models match `where` (None: every row)."""
        if where is None:
            return None
        from registry.filters import matching

        keep = set(matching(where, list(self.records.values())))
        return np.array([i for i, n in enumerate(self.index.names) if n in keep], dtype=np.int64)


def open_index(store_or_home: "Store | str | Path", *, rebuild: bool = False,
               store: "Callable[[], Store] | None" = None) -> EmbeddedModels:
    """The index for the models table as it is now, with records (see `ModelIndex.open`)."""
    index = ModelIndex.open(store_or_home, rebuild=rebuild, store=store)
    return EmbeddedModels(index, _Records(index.rows))


def open_embedded(store: "Store") -> EmbeddedModels:
    """`open_index`, refusing a registry in which no model is embedded yet with a message saying so."""
    models = open_index(store)
    if not models.index.names:
        raise RegistryError(f"no model in the registry is embedded yet ({len(models.records)} models): "
                            "registry train, then registry embed --all")
    return models


def embedded_subset(store: "Store", where: str | None, *, need: int, what: str, min_evals: int = 0,
                    left_out: list[str] | None = None,
                    kept_thin: list[str] | None = None) -> tuple[list[str], np.ndarray, dict[str, ModelRecord]]:
    """(names, (n, d) float32 vectors, records) of the embedded models that match `where`, less those
    embedded from fewer than `min_evals` evaluations (appended to `left_out`) when at least `need`
    others remain (else they stay, appended to `kept_thin`: with no well-evidenced models to rank
    before, they outrank none); refuses fewer than `need`, saying `what` needs them."""
    from registry.evidence import thin_names

    models = open_embedded(store)
    names, z = list(models.index.names), models.index.vectors
    rows = models.allowed_rows(where)
    if rows is not None:
        if not len(rows):
            raise InputError(f"no embedded model matches {where!r} ({len(names)} embedded models)", field="where")
        names, z = [names[i] for i in rows], z[rows]
    thin = thin_names(models.index.rows, min_evals)
    keep = [i for i, n in enumerate(names) if n not in thin]
    if len(keep) < len(names):
        dropped = [n for n in names if n in thin]
        if len(keep) >= need:
            names, z = [names[i] for i in keep], z[keep]
        target = left_out if len(keep) >= need else kept_thin
        if target is not None:
            target.extend(dropped)
    if len(names) < need:
        scope = f" matching {where!r}" if where is not None else ""
        raise RegistryError(f"{what} needs at least {need} embedded models; the registry has {len(names)}{scope}")
    return names, np.asarray(z, dtype=np.float32), {n: models.records[n] for n in names}


BEHAVIOUR_CANDIDATES = 20  # by="behaviour" re-ranks at least this many of the embedding's nearest
BY = ("embedding", "behaviour")


def similar(store: "Store | str | Path", query: str | np.ndarray, *, k: int = 5, metric: str = "cosine",
            where: str | None = None, by: str = "embedding",
            open_store: "Callable[[], Store] | None" = None, min_evals: int = 0,
            left_out: list[str] | None = None) -> "list[Neighbour]":
    """The k nearest models to a model name or a vector, nearest first (the model itself excluded).

    by="behaviour" (a model name only): the max(4k, 20) nearest by behaviour fingerprint (identity
    distance among the models sharing a task with it, `registry.fingerprints`; when the encoder has an
    item table), then the embedding's nearest of as many that it did not propose, re-ranked by their
    excess agreement with the model on the queries both answered (`audit_stats.task_kappa`), so that a re-served copy comes before models
    of merely similar ability; a candidate with too few shared queries keeps its place. The vectors
    propose, the evaluations order. Models embedded from fewer than `min_evals` evaluations come after
    the others (registry.evidence); those that this pushed out of the k are appended to `left_out`."""
    if metric not in METRICS:
        raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k must be an integer of at least 1, not {k!r}", field="k")
    if by not in BY:
        raise InputError(f"by must be one of {', '.join(BY)}, not {by!r}", field="by")
    if by == "behaviour" and not isinstance(query, str):
        raise InputError("by='behaviour' needs a model name: a vector has no evaluations", field="by")
    models = open_index(store, store=open_store)
    return neighbours(models, query, k=int(k), metric=metric, where=where, by=by,
                      open_store=open_store if open_store is not None else lambda: _as_store(store),
                      min_evals=min_evals, left_out=left_out)


MAX_VECTOR_ABS = 1e6  # LOCUS embeddings are of order 1; far beyond this is a mistake (1e39 overflows float32)


def check_query_vector(vector, dim: int, metric: str) -> np.ndarray:
    """A search vector as float32 (dim,), or an InputError naming `vector`: the index's dimension,
    finite values within +-1e6, not all zero (a zero vector has no direction)."""
    try:
        x = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("the vector must be a list of numbers", field="vector") from None
    if x.ndim != 1 or x.shape[0] != dim:
        raise InputError(f"the vector has {x.size} values; the embeddings have {dim}", field="vector")
    if not np.isfinite(x).all() or np.abs(x).max(initial=0.0) > MAX_VECTOR_ABS:
        raise InputError(f"every value of the vector must be finite and within +-{MAX_VECTOR_ABS:g}", field="vector")
    if not x.any():  # refused for euclidean too, so that the rule does not depend on the metric
        raise InputError("the vector is all zeros: no embedding is, and it has no direction", field="vector")
    return x.astype(np.float32)


def neighbours(models: EmbeddedModels, query: str | np.ndarray, *, k: int, metric: str, where: str | None,
               by: str, open_store: "Callable[[], Store]", min_evals: int = 0,
               left_out: list[str] | None = None) -> "list[Neighbour]":
    """`similar` on an open index (the service keeps one warm); arguments already checked."""
    from registry.evidence import thin_names
    from registry.results import Neighbour

    if not isinstance(query, str):
        query = check_query_vector(query, models.index.vectors.shape[1], metric)
    thin = thin_names(models.index.rows, min_evals)
    wanted = k if by == "embedding" else max(4 * k, BEHAVIOUR_CANDIDATES)
    # as many more as there are thin models: ranked after the others, they must not shorten the k
    hits = models.index.neighbours(query, wanted + len(thin), metric=metric, allowed=models.allowed_rows(where))
    if by == "embedding":
        return _thin_last([Neighbour(name=name, distance=dist, metric=metric, metadata=models.records[name].metadata(),
                                     **_evidence(models, name)) for name, dist in hits], thin, k, left_out)
    store = open_store()
    identity, behaviour = _fingerprint_distances(index_fingerprints(store, models), models, query, where, wanted)
    if identity:
        # the fingerprint's nearest first (by identity distance: a copy sharing no query with its original
        # keeps this place, and identity finds it more often than behaviour distance does), then the
        # embedding's nearest it did not propose
        nearest_prints = sorted(identity, key=identity.get)[:wanted]
        proposed = set(nearest_prints)
        by_embedding = dict(hits)
        hits = [(name, by_embedding[name] if name in by_embedding else embedding_distance(models, query, name, metric))
                for name in nearest_prints] + [(name, dist) for name, dist in hits if name not in proposed]
    agreement = _agreement(store, query, [name for name, _ in hits])
    ranked = behaviour_order(hits, [agreement[name][0] for name, _ in hits])
    return _thin_last([Neighbour(name=name, distance=dist, metric=metric, metadata=models.records[name].metadata(),
                                 agreement_kappa=agreement[name][0], shared_queries=agreement[name][1],
                                 behaviour_distance=behaviour.get(name), **_evidence(models, name))
                       for name, dist in ranked], thin, k, left_out)


def _evidence(models: EmbeddedModels, name: str) -> dict:
    """A neighbour's evidence fields (registry.evidence): its n_evals and the low-evidence mark."""
    from registry.evidence import is_thin

    n = models.index.rows.get(name, {}).get("n_evals")
    return {"n_evals": n, "low_evidence": is_thin(n)}


def _thin_last(found: list, thin: set[str], k: int, left_out: list[str] | None) -> list:
    """The first k of `found` with the `thin` models after the others; those pushed out go to `left_out`."""
    from registry.evidence import demote_thin

    kept, pushed = demote_thin(found, lambda hit: hit.name in thin, k)
    if left_out is not None:
        left_out.extend(hit.name for hit in pushed)
    return kept


def embedding_distance(models: EmbeddedModels, a: str, b: str, metric: str) -> float:
    x, y = models.vector(a).astype(np.float64), models.vector(b).astype(np.float64)
    if metric == "cosine":
        return float(1.0 - x @ y / max(np.linalg.norm(x) * np.linalg.norm(y), 1e-12))
    return float(np.linalg.norm(x - y))


def index_fingerprints(store: "Store", models: EmbeddedModels) -> "PoolFingerprints | None":
    """Every model's behaviour fingerprint for the index's encoder (`registry.fingerprints`), or None
    when that encoder has no item table. Reads the models table: get it once per search or audit."""
    from registry.fingerprints import load_item_table, pool_fingerprints

    table = load_item_table(store, models.index.encoder_id)
    return None if table is None else pool_fingerprints(store, table)


def _fingerprint_distances(prints: "PoolFingerprints | None", models: EmbeddedModels, query: str,
                           where: str | None, limit: int) -> tuple[dict[str, float], dict[str, float]]:
    """(identity, behaviour): embedded model -> fingerprint distance from `query` (registry.fingerprints:
    RMS logit difference; expected disagreement), for the models passing `where` that share a task with
    it, at least the `limit` nearest by identity; empty without fingerprints or when the model has none."""
    if prints is None or query not in prints.versions:
        return {}, {}
    rows = models.allowed_rows(where)
    allowed = set(models.index.names) if rows is None else {models.index.names[i] for i in rows}
    identity = prints.identity_to(query)
    order = [i for i in np.argsort(identity, kind="stable") if prints.names[i] != query and prints.names[i] in allowed]
    # the behaviour distance (and whether the pair shares a task) only for the nearest by identity, in
    # growing slices until enough share one: an (N x probe) product per search is what a large pool cannot pay
    identities, behaviours, start, size = {}, {}, 0, 4 * limit
    while start < len(order) and len(identities) < limit:
        chunk = np.asarray(order[start:start + size], dtype=np.int64)
        behaviour = prints.behaviour_to(query, chunk)
        for i, d in zip(chunk, behaviour):
            if np.isfinite(d):
                identities[prints.names[i]], behaviours[prints.names[i]] = float(identity[i]), float(d)
        start, size = start + size, size * 4
    return identities, behaviours


def fingerprint_neighbours(prints: "PoolFingerprints | None", models: EmbeddedModels, name: str, k: int) -> list[str]:
    """The k models nearest to `name` by behaviour fingerprint (identity distance, among those sharing
    a task with it), nearest first; empty without fingerprints (`index_fingerprints`) or for a model
    that has none."""
    identity, _ = _fingerprint_distances(prints, models, name, None, k)
    return sorted(identity, key=lambda n: (identity[n], n))[:k]


def behaviour_order(hits: list, kappas: list[float | None]) -> list:
    """`hits` (nearest first) re-ordered by kappa, highest first, within the places held by hits
    with evidence; a hit without shared queries keeps its embedding place (nothing says otherwise)."""
    slots = [i for i, kappa in enumerate(kappas) if kappa is not None]
    out = list(hits)
    for slot, i in zip(slots, sorted(slots, key=lambda i: -kappas[i])):
        out[slot] = hits[i]
    return out


def _as_store(store: "Store | str | Path") -> "Store":
    from indexing.store import Store

    return store if isinstance(store, Store) else Store(store, create=False)  # Store handles s3:// too


def _agreement(store: "Store", query: str, names: list[str]) -> dict[str, tuple[float | None, int]]:
    """name -> (task_kappa with `query`, shared queries), from the evaluations of these models only."""
    from indexing.store import QUERIES
    from registry.audit_stats import task_kappa
    from registry.rows import read_evaluations

    models, qids, scores = read_evaluations(store, [query, *names])
    tasks = store.read(QUERIES, ["query_id", "task"])
    task_of = dict(zip(tasks.column("query_id").to_pylist(), tasks.column("task").to_pylist()))
    q_pos = {q: i for i, q in enumerate(sorted(set(qids.tolist())))}
    _, task = np.unique(np.asarray([str(task_of.get(q)) for q in q_pos], dtype=object).astype(str), return_inverse=True)

    def rows(name):
        sel = models == name
        idx = np.fromiter((q_pos[q] for q in qids[sel]), dtype=np.int64, count=int(sel.sum()))
        idx, first = np.unique(idx, return_index=True)  # a query scored twice: its first score
        return idx, scores[sel][first]

    own = rows(query)
    return {name: task_kappa(*own, *rows(name), task) for name in names}


def distance(store: "Store | str | Path", a: str, b: str, *, metric: str = "cosine") -> float:
    if metric not in METRICS:
        raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")
    return embedding_distance(open_index(store), a, b, metric)


def check_consistency(store: "Store") -> list[str]:
    """Problems found (empty when all is well): the index agrees with the table, every evaluation
    names a stored query."""
    from indexing.store import EVALUATIONS, QUERIES

    problems = open_index(store).index.problems(store)
    evals = store.read(EVALUATIONS, ["model", "query_id"])
    known_q = set(store.read(QUERIES, ["query_id"]).column("query_id").to_pylist())
    orphans = set(evals.column("query_id").to_pylist()) - known_q
    if orphans:
        problems.append(f"{len(orphans)} evaluated query ids are not in the queries table")
    return problems
