"""The store's evaluations as `EvalData` arrays, for training, embedding and evaluation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import pyarrow as pa
import pyarrow.compute as pc

from encoder.data import EvalData
from indexing.store import EVALUATIONS, MODELS, QUERIES, Store
from registry.errors import RegistryError

__all__ = ["load_eval_data", "QueryVectors", "load_query_vectors", "EVAL_COLUMNS", "positions_in", "GETS_A_VECTOR"]

EVAL_COLUMNS = ["model", "query_id", "score"]  # what load_eval_data reads of the evaluations table
# how a stored query without a vector (its text imported with --no-encode) gets one: said wherever one is left out
GETS_A_VECTOR = ("a query gets its vector when its text is imported again without --no-encode, or when a model is "
                 "added or refined with an evaluation on it")


def load_eval_data(store: Store, encoder: str, *, models: list[str] | None = None,
                   evaluations: pa.Table | None = None, query_vectors: "QueryVectors | None" = None) -> EvalData:
    """Every query that has a vector from `encoder` and a score from one of `models`, and their evaluations
    (when None: every model in the models table that has evaluations; a removed model keeps its
    evaluations for restore, but is not part of the pool), in a stable order (models as given or
    sorted, queries as stored). Queries without a vector are left out with their evaluations;
    `registry import` with encoding on fills them. `evaluations`: the model, query_id and score columns
    of the evaluations table, read by the caller (default: read here); `query_vectors`: `load_query_vectors`'s
    answer, likewise."""
    evals = store.read(EVALUATIONS, EVAL_COLUMNS) if evaluations is None else evaluations
    if evals.num_rows == 0:
        raise RegistryError("the registry holds no evaluations yet (registry import PATH)")
    queries = load_query_vectors(store, encoder) if query_vectors is None else query_vectors
    kept_ids = queries.query_ids

    if models is None:
        live = set(store.read(MODELS, ["name"]).column("name").to_pylist())
        names = sorted(set(pc.unique(evals.column("model")).to_pylist()) & live)
    else:
        names = list(models)
    # positions by arrow's hash lookup: a Python dict per row cost ~0.3 s on 385k evaluations, and a route
    # of the service rebuilds its kNN from these after every write
    model_index = positions_in(evals.column("model"), names)
    query_index = positions_in(evals.column("query_id"), kept_ids)
    keep = (model_index >= 0) & (query_index >= 0)
    lost = np.bincount(model_index[(model_index >= 0) & (query_index < 0)], minlength=len(names))
    # Only the queries some model of the pool was evaluated on: in a registry holding two datasets a
    # per-dataset pool must not split, route or score on the other dataset's queries, where nobody
    # in it has a score.
    evaluated = np.zeros(len(kept_ids), dtype=bool)
    evaluated[query_index[keep]] = True
    renumber = np.cumsum(evaluated) - 1
    order = np.flatnonzero(evaluated).tolist()
    if not order:
        raise RegistryError(f"none of the {len(names)} model(s) asked for has an evaluation on a query with a "
                            f"vector from {encoder!r}")
    return EvalData(
        models=names,
        query_ids=[kept_ids[i] for i in order],
        tasks=[queries.tasks[i] for i in order],
        query_vectors=queries.vectors[np.asarray(order, dtype=np.int64)],
        model_index=model_index[keep],
        query_index=renumber[query_index[keep]].astype(np.int64),
        scores=evals.column("score").to_numpy(zero_copy_only=False)[keep].astype(np.float32),
        unvectored={names[i]: int(lost[i]) for i in np.flatnonzero(lost)},
    )


def positions_in(column, values: list[str]) -> np.ndarray:
    """(rows,) int64: each row's position in `values` (the first, if repeated), -1 where absent."""
    found = pc.index_in(column, value_set=pa.array(values, type=column.type))
    return found.fill_null(-1).to_numpy().astype(np.int64, copy=False)


@dataclass
class QueryVectors:
    query_ids: list[str]  # Q ids, in stored order
    tasks: list[str]  # Q task names
    vectors: np.ndarray  # (Q, D) float32, from the query encoder


def load_query_vectors(store: Store, encoder: str) -> QueryVectors:
    """The stored queries that have a vector from `encoder`, in stored order: the query side of
    `load_eval_data`, also what the Ray engine ships to its workers (the evaluations it reads itself)."""
    queries = store.read(QUERIES, ["query_id", "task", "text_hash"])
    rows, matrix = store.vector_rows(encoder, queries.column("text_hash"))
    order = np.flatnonzero(rows >= 0)
    if not len(order):
        others = [name for name in store.vector_encoders() if name != encoder]
        hint = (f"the stored vectors come from {', '.join(others)}: `registry init --encoder {others[0]}` makes "
                f"it the query encoder, or import again with --encoder {encoder}" if others
                else f"import with --encoder {encoder}")
        raise RegistryError(f"no query vectors from {encoder!r} (the registry's query encoder); {hint}")
    query_ids, tasks = queries.column("query_id").to_pylist(), queries.column("task").to_pylist()
    return QueryVectors(
        query_ids=[query_ids[i] for i in order],
        tasks=[tasks[i] for i in order],
        vectors=matrix[rows[order]].astype(np.float32, copy=False),  # a copy: the kept matrix stays read-only
    )
