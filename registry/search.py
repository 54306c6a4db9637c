"""Similarity search over the models' embeddings: the FAISS index, kept in step with the table.

The index is built from the models table for the active encoder id and saved in `<home>/index/`.
Every open checks it against the table's version and rebuilds it when stale. A registry whose models
carry vectors from more than one encoder is refused for search until `registry embed --all`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from indexing.store import MODELS, Store
from indexing.vector_index import METRICS, VectorIndex
from registry.catalog import record_of
from registry.errors import InputError, NotFoundError, RegistryError

__all__ = ["EmbeddedModels", "open_index", "similar", "distance", "check_consistency"]


@dataclass
class EmbeddedModels:
    index: VectorIndex
    rows: dict[str, dict[str, Any]]  # name -> models table row (every model, embedded or not)

    def vector(self, name: str) -> np.ndarray:
        if name not in self.rows:
            raise NotFoundError.model(name, list(self.rows))
        try:
            return self.index.vectors[self.index.names.index(name)]
        except ValueError:
            raise RegistryError(f"model {name!r} has no embedding yet: run `registry embed --all`") from None


def open_index(store: Store, *, rebuild: bool = False) -> EmbeddedModels:
    """The index for the models table as it is now (loaded if fresh, else rebuilt and saved)."""
    table = store.read(MODELS)
    rows = {r["name"]: r for r in table.to_pylist()}
    embedded = sorted(n for n, r in rows.items() if r.get("vector") is not None)
    encoders = {rows[n]["encoder_id"] for n in embedded}
    if len(encoders) > 1:
        active = store.config.get("active_encoder")
        stale = sorted(n for n in embedded if rows[n]["encoder_id"] != active)
        raise RegistryError(
            f"models carry vectors from {len(encoders)} encoders ({', '.join(sorted(map(str, encoders)))}); "
            f"{len(stale)} differ from the active encoder {active}, e.g. {', '.join(stale[:3])}. "
            "Vectors from different encoders are not comparable: run `registry embed --all`."
        )
    encoder_id = encoders.pop() if encoders else (store.config.get("active_encoder") or "none")
    vectors = (np.array([rows[n]["vector"] for n in embedded], dtype=np.float32) if embedded
               else np.zeros((0, 0), dtype=np.float32))
    version = store.versions().get(MODELS, 0)
    directory = store.home / "index"
    index = None if rebuild else VectorIndex.load(directory, encoder_id, table_version=version, vectors=vectors,
                                                  names=embedded)
    if index is None:
        index = VectorIndex.build(encoder_id, embedded, vectors, table_version=version)
        if embedded:
            index.save(directory)
    return EmbeddedModels(index, rows)


def _allowed_rows(models: EmbeddedModels, where: str | None) -> np.ndarray | None:
    if where is None:
        return None
    from registry.filters import parse_filter

    records = [record_of(models.rows[n]) for n in models.index.names]
    keep = parse_filter(where, [record_of(r) for r in models.rows.values()])
    return np.array([i for i, r in enumerate(records) if keep(_flat(r))], dtype=np.int64)


def _flat(record) -> dict[str, Any]:
    flat = record.metadata()
    flat["name"] = record.name
    return flat


def similar(store: Store, query: str | np.ndarray, *, k: int = 5, metric: str = "cosine",
            where: str | None = None) -> list[dict[str, Any]]:
    """The k nearest models to a model name or a vector, nearest first (the model itself excluded)."""
    if metric not in METRICS:
        raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")
    if k < 1:
        raise InputError(f"k must be at least 1, not {k}", field="k")
    models = open_index(store)
    own = None
    if isinstance(query, str):
        own = query
        vector = models.vector(query)
    else:
        vector = np.asarray(query, dtype=np.float32).reshape(-1)
        if models.index.names and vector.shape[0] != models.index.vectors.shape[1]:
            raise InputError(f"the vector has {vector.shape[0]} dimensions; the registry's have "
                             f"{models.index.vectors.shape[1]}", field="vector")
    allowed = _allowed_rows(models, where)
    if allowed is not None and own is not None:
        allowed = allowed[allowed != models.index.names.index(own)]
    hits = models.index.search(vector, k + (1 if own is not None and allowed is None else 0), metric=metric,
                               allowed=allowed)
    results = []
    for row, dist in hits:
        name = models.index.names[row]
        if name == own:
            continue
        results.append({"name": name, "distance": dist, "metadata": record_of(models.rows[name]).metadata()})
    return results[:k]


def distance(store: Store, a: str, b: str, *, metric: str = "cosine") -> float:
    models = open_index(store)
    x, y = models.vector(a), models.vector(b)
    if metric == "cosine":
        return float(1.0 - x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))
    if metric == "euclidean":
        return float(np.linalg.norm(x - y))
    raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")


def check_consistency(store: Store) -> list[str]:
    """Problems found (empty when all is well): the index agrees with the table, every evaluation
    names a stored model and query."""
    problems = []
    models = open_index(store)
    names = sorted(n for n, r in models.rows.items() if r.get("vector") is not None)
    if models.index.names != names:
        problems.append("index names differ from the embedded models in the table")
    for i, name in enumerate(models.index.names):
        if not np.allclose(models.index.vectors[i], models.rows[name]["vector"]):
            problems.append(f"index vector of {name!r} differs from the table")
    from indexing.store import EVALUATIONS, QUERIES

    evals = store.read(EVALUATIONS, ["model", "query_id"])
    known_q = set(store.read(QUERIES, ["query_id"]).column("query_id").to_pylist())
    orphans = set(evals.column("query_id").to_pylist()) - known_q
    if orphans:
        problems.append(f"{len(orphans)} evaluated query ids are not in the queries table")
    return problems

