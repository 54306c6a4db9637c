"""Similarity search over the models' embeddings: the FAISS index, kept in step with the table.

The index is built from the models table for the active encoder id and saved in `<home>/index/`
with the models' records and the store's generation token. A search first tries that saved index:
when no transaction is open and the generation token is unchanged since it was saved, nothing in the
tables has changed, and the search runs without opening LanceDB (so `registry search` starts fast).
Otherwise it opens the store, checks the index against the models table's version, and rebuilds it
when stale. A registry whose models carry vectors from more than one encoder is refused for search
until `registry embed --all`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from indexing.home import GENERATION_FILE, JOURNAL_FILE
from indexing.vector_index import METRICS, VectorIndex
from registry.errors import InputError, NotFoundError, RegistryError
from registry.records import ModelRecord

if TYPE_CHECKING:
    from indexing.store import Store

__all__ = ["EmbeddedModels", "open_index", "similar", "distance", "check_consistency"]

_INDEX_DIR = "index"
_CURRENT = "current.json"


@dataclass
class EmbeddedModels:
    index: VectorIndex
    records: dict[str, ModelRecord]  # every model, embedded or not
    encoders_seen: set[str]

    def vector(self, name: str) -> np.ndarray:
        if name not in self.records:
            raise NotFoundError.model(name, list(self.records))
        try:
            return self.index.vectors[self.index.names.index(name)]
        except ValueError:
            raise RegistryError(f"model {name!r} has no embedding yet: run `registry embed --all`") from None


def _generation(home: Path) -> str | None:
    try:
        return (home / GENERATION_FILE).read_text()
    except OSError:
        return None


def _saved(home: Path) -> EmbeddedModels | None:
    """The saved index when it is provably current (see module docstring), without LanceDB."""
    import json

    if (home / JOURNAL_FILE).exists():
        return None
    try:
        current = json.loads((home / _INDEX_DIR / _CURRENT).read_text())
    except (OSError, ValueError):
        return None
    generation = _generation(home)
    if generation is None or current.get("generation") != generation:
        return None
    loaded = VectorIndex.load(home / _INDEX_DIR, current["encoder_id"])
    if loaded is None:
        return None
    index, meta = loaded
    if meta.get("generation") != generation:
        return None
    records = {name: ModelRecord.model_validate(r) for name, r in meta["records"].items()}
    return EmbeddedModels(index, records, set(meta["encoders_seen"]))


def open_index(store_or_home, *, rebuild: bool = False) -> EmbeddedModels:
    """The index for the models table as it is now (the saved one if current, else rebuilt)."""
    import json

    is_path = isinstance(store_or_home, (str, Path))
    home = Path(store_or_home) if is_path else store_or_home.home
    if not rebuild:
        saved = _saved(home)
        if saved is not None:
            return _refuse_mixed(saved, home)
    from indexing.store import MODELS, Store
    from registry.catalog import record_of

    store = Store(home, create=False) if is_path else store_or_home
    generation = _generation(home)
    rows = {r["name"]: r for r in store.read(MODELS).to_pylist()}
    embedded = sorted(n for n, r in rows.items() if r.get("vector") is not None)
    encoders = {rows[n]["encoder_id"] for n in embedded}
    encoder_id = next(iter(encoders)) if len(encoders) == 1 else (store.config.get("active_encoder") or "none")
    chosen = [n for n in embedded if rows[n]["encoder_id"] == encoder_id]
    vectors = (np.array([rows[n]["vector"] for n in chosen], dtype=np.float32) if chosen
               else np.zeros((0, 0), dtype=np.float32))
    version = store.versions().get(MODELS, 0)
    directory = home / _INDEX_DIR
    loaded = None if rebuild else VectorIndex.load(directory, encoder_id)
    index, saved_generation = None, None
    if loaded is not None:
        candidate, meta = loaded
        if candidate.table_version == version and candidate.names == chosen:
            index, saved_generation = candidate, meta.get("generation")
    if index is None:
        index = VectorIndex.build(encoder_id, chosen, vectors, table_version=version)
    records = {n: record_of(r) for n, r in rows.items()}
    models = EmbeddedModels(index, records, encoders)
    if (chosen and generation is not None and saved_generation != generation
            and not (home / JOURNAL_FILE).exists()):
        meta = {"generation": generation, "encoders_seen": sorted(encoders),
                "records": {n: r.model_dump() for n, r in records.items()}}
        index.save(directory, meta)
        (directory / _CURRENT).write_text(json.dumps({"encoder_id": encoder_id, "generation": generation}))
    return _refuse_mixed(models, home)


def _refuse_mixed(models: EmbeddedModels, home: Path) -> EmbeddedModels:
    if len(models.encoders_seen) > 1:
        raise RegistryError(
            f"models carry vectors from {len(models.encoders_seen)} encoders "
            f"({', '.join(sorted(models.encoders_seen))}). Vectors from different encoders are not comparable: "
            "run `registry embed --all`."
        )
    return models


def _allowed_rows(models: EmbeddedModels, where: str | None) -> np.ndarray | None:
    if where is None:
        return None
    from registry.filters import parse_filter

    keep = parse_filter(where, list(models.records.values()))
    return np.array([i for i, n in enumerate(models.index.names) if keep.matches(models.records[n])], dtype=np.int64)


def similar(store: "Store | str | Path", query: str | np.ndarray, *, k: int = 5, metric: str = "cosine",
            where: str | None = None) -> list[dict[str, Any]]:
    """The k nearest models to a model name or a vector, nearest first (the model itself excluded)."""
    if metric not in METRICS:
        raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")
    if k < 1:
        raise InputError(f"k must be at least 1, not {k}", field="k")
    models = open_index(store)
    own = None
    if isinstance(query, str):
        query = _resolve_alias(store, query)
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
        results.append({"name": name, "distance": dist, "metadata": models.records[name].metadata()})
    return results[:k]


def _resolve_alias(store, name: str) -> str:
    """An alias (see `registry.aliases`) becomes its model's name; the CLI's search comes here with a
    bare home path, so resolve from the home's files (no LanceDB while they are current)."""
    from registry.aliases import read_aliases, resolve

    home = Path(store) if isinstance(store, (str, Path)) else store.home
    if name not in read_aliases(home):
        return name
    from registry import snapshot

    return resolve(home, name, live=snapshot.live_versions(home))


def distance(store: "Store | str | Path", a: str, b: str, *, metric: str = "cosine") -> float:
    models = open_index(store)
    x, y = models.vector(a), models.vector(b)
    if metric == "cosine":
        return float(1.0 - x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))
    if metric == "euclidean":
        return float(np.linalg.norm(x - y))
    raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")


def check_consistency(store) -> list[str]:
    """Problems found (empty when all is well): the index agrees with the table, every evaluation
    names a stored query."""
    from indexing.store import EVALUATIONS, MODELS, QUERIES

    problems = []
    models = open_index(store)
    rows = {r["name"]: r for r in store.read(MODELS).to_pylist()}
    names = sorted(n for n, r in rows.items() if r.get("vector") is not None)
    if models.index.names != names:
        problems.append("index names differ from the embedded models in the table")
    for i, name in enumerate(models.index.names):
        if name not in rows or not np.allclose(models.index.vectors[i], rows[name]["vector"]):
            problems.append(f"index vector of {name!r} differs from the table")
    evals = store.read(EVALUATIONS, ["model", "query_id"])
    known_q = set(store.read(QUERIES, ["query_id"]).column("query_id").to_pylist())
    orphans = set(evals.column("query_id").to_pylist()) - known_q
    if orphans:
        problems.append(f"{len(orphans)} evaluated query ids are not in the queries table")
    return problems
