"""The fingerprint column of the models table: computed from a model's stored evaluations and the item
table beside the active encoder, written in the same transaction as the LOCUS vector.

Stored in the identity form (`ItemTable.identity_vectors`: theta whitened by the probe rows), so the
Euclidean distance of two stored fingerprints is their RMS logit difference over the probe queries and
the FAISS index over the column (`indexing.model_index.ModelIndex`, by="fingerprint") is exact for it.
Beside it, the `behaviour` column (`ItemTable.behaviour_vectors`: the model's answers on the probe
queries, recorded where it has them, predicted where not, over the tasks it was evaluated on), whose
index (by="behaviour", inner product) finds a model's behavioural neighbours: both made by one table
from one read of the evaluations, in the same transaction.
Tagged with the item table's id: fingerprints of two tables are never compared. A model with fewer than
`MIN_FINGERPRINT_EVALS` usable evaluations gets none (null): r + 1 numbers from a handful of answers
would be mostly the ridge prior, and would sit near every other thin model.

Kept apart from `registry.analytics.fingerprints` (which needs the active encoder) so that embedding and the
catalog can write the column without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from encoder.fingerprint import ITEM_TABLE_CONFIG, ITEM_TABLE_WEIGHTS, ItemTable
from registry.errors import RegistryError

if TYPE_CHECKING:
    from indexing.store import Store

__all__ = ["MIN_FINGERPRINT_EVALS", "HeldEvaluations", "load_item_table", "place_queries", "compute", "fingerprint_columns",
           "rewrite_fingerprints"]

MIN_FINGERPRINT_EVALS = 16  # as many as training asks of a model (registry.catalog.embedding.MIN_EVALS_PER_MODEL)

_cache: dict[tuple[str, float], ItemTable] = {}


def load_item_table(store: Store, encoder_id: str | None = None) -> ItemTable | None:
    """The item table beside the active encoder (or `encoder_id`), or None when it has none (an encoder
    trained before them). Reads two files; loads no encoder weights."""
    encoder_id = encoder_id or store.config.get("active_encoder")
    if not encoder_id:
        return None
    directory = store.home / "encoders" / encoder_id
    config_file = directory / ITEM_TABLE_CONFIG
    if not config_file.is_file():
        return None
    # keyed by the file's mtime: a table refitted by another process (the CLI beside the service) is reread
    stat = config_file.stat()
    key = (str(directory), getattr(stat, "st_mtime_ns", None) or stat.st_mtime)
    if key in _cache:
        return _cache[key]
    try:
        table = ItemTable.from_files((directory / ITEM_TABLE_WEIGHTS).read_bytes(), config_file.read_text("utf-8"))
    except (ValueError, KeyError, OSError) as err:
        raise RegistryError(f"{config_file}: {err}") from err
    _cache[key] = table
    return table


def place_queries(store: "Store", table: ItemTable, ids: list[str], *,
                  vectors: dict | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The item table's parameters of stored queries: (the ids it can place, in the given order; F (n, r);
    b (n,)). A query the table has not seen is placed by its stored query vector (the text map); one with
    no vector either is left out. `vectors` (query id -> vector): those queries' vectors in hand, read then
    from nowhere else."""
    unknown = [q for q in ids if q not in table._row]
    if not unknown:
        f, b = table.item_params(ids)
        return list(ids), f, b
    from indexing.store import QUERIES

    # only the unknown queries' vectors: a model's evaluations are mostly known to the table, and reading every
    # stored vector (12,032 x 768 on MMLU-Pro) cost an add-model ~120 ms
    if vectors is not None:
        placed = {q: vectors[q] for q in unknown if q in vectors}
    else:
        wanted = set(unknown)
        rows = store.read(QUERIES, ["query_id", "text_hash"])  # two short columns: quicker than an IN filter
        found = {q: h for q, h in zip(rows.column("query_id").to_pylist(), rows.column("text_hash").to_pylist())
                 if q in wanted}
        vectors_of = store.cached_vectors(store.query_encoder, sorted(set(found.values())))
        placed = {q: vectors_of[h] for q, h in found.items() if h in vectors_of}
    kept = [q for q in ids if q in table._row or q in placed]
    dim = len(next(iter(placed.values()))) if placed else 1
    vectors = np.zeros((len(kept), dim), np.float32)
    for i, q in enumerate(kept):
        if q in placed:
            vectors[i] = placed[q]
    f, b = table.item_params(kept, vectors if placed else None)
    return kept, f, b


@dataclass
class HeldEvaluations:
    """Evaluations a writer holds as they will be stored (one row per model and query), with what the
    fingerprint needs of their queries, so that it reads nothing back (`fingerprint_columns(held=...)`)."""
    models: np.ndarray  # (n,) model name per row
    query_ids: np.ndarray  # (n,)
    scores: np.ndarray  # (n,)
    vectors: dict  # query id -> its stored query vector (read only for queries the item table has not seen)
    tasks: dict  # query id -> task (None or "" when none)


def compute(store: Store, table: ItemTable, names: list[str], *, held: HeldEvaluations | None = None) -> dict[str, tuple]:
    """name -> (theta, coverage, evaluations used, answers on the probe queries (NaN where none)) from the
    stored evaluations of these models, or from `held` (the same rows, in hand)."""
    if not names:
        return {}
    from indexing.store import QUERIES
    from registry.catalog.rows import read_evaluations

    wanted = set(names)
    if held is not None:
        models, qids, scores = held.models, held.query_ids, held.scores
    else:  # a long IN list is slower than one scan of the table
        models, qids, scores = read_evaluations(store, names if len(names) <= 500 else None)
    if held is not None or len(names) > 500:
        keep = np.fromiter((m in wanted for m in models), dtype=bool, count=len(models))
        models, qids, scores = models[keep], qids[keep], scores[keep]
    ids_kept, f, b = place_queries(store, table, sorted(set(qids.tolist())),
                                   vectors=None if held is None else held.vectors)
    if held is not None:
        task_of = held.tasks
    else:
        tasks = store.read(QUERIES, ["query_id", "task"])
        task_of = dict(zip(tasks.column("query_id").to_pylist(), tasks.column("task").to_pylist()))
    if not ids_kept:
        return {}
    id_pos = {q: i for i, q in enumerate(ids_kept)}
    task_at = np.asarray([task_of.get(q) or "" for q in ids_kept], dtype=object)
    usable = np.fromiter((q in id_pos for q in qids), dtype=bool, count=len(qids))
    models, scores = models[usable], scores[usable]
    q_all = np.fromiter((id_pos[q] for q in qids[usable]), dtype=np.int64, count=int(usable.sum()))
    order = np.argsort(models, kind="stable")  # one pass over the rows, grouped by model
    owners, starts = np.unique(models[order], return_index=True)
    out = {}
    for name, lo, hi in zip(owners, starts, [*starts[1:], len(order)]):
        sel = order[lo:hi]
        q = q_all[sel]
        out[str(name)] = (table.fingerprint(f[q], b[q], scores[sel]), table.coverage([set(task_at[q].tolist())])[0],
                          int(len(sel)), table.probe_answers([ids_kept[i] for i in q], scores[sel]))
    return out


def fingerprint_columns(store: "Store", table: "ItemTable | None", names: list[str], *,
                        held: HeldEvaluations | None = None) -> dict[str, dict]:
    """name -> {"fingerprint": list (identity form) or None, "behaviour": list (`ItemTable.behaviour_vectors`)
    or None, "table_id": str or None} for these models, from their evaluations as stored now (call it
    inside the transaction that writes them)."""
    empty = {"fingerprint": None, "behaviour": None, "table_id": None}
    if table is None or not names:
        return {n: dict(empty) for n in names}
    made = compute(store, table, list(names), held=held)
    out = {}
    for name in names:
        got = made.get(name)
        if got is None or got[2] < MIN_FINGERPRINT_EVALS or not np.isfinite(got[0]).all():
            out[name] = dict(empty)
        else:
            vector = table.identity_vectors(got[0][None, :])[0].astype(np.float32)
            behaviour = table.behaviour_vectors(got[0][None, :], got[1][None, :], got[3][None, :])[0].astype(np.float32)
            out[name] = {"fingerprint": vector.tolist(), "behaviour": behaviour.tolist(), "table_id": table.table_id}
    return out


def rewrite_fingerprints(store: "Store", table: "ItemTable | None", *, migrating: bool = False) -> int:
    """Recompute every model's fingerprint column with `table` (a new item table: `registry train`,
    `fit-fingerprints`, the format-2 migration) in one transaction; returns how many models got one.
    No history rows: the evaluations did not change, only the table that reads them."""
    from indexing.store import HEAVY_MODEL_COLUMNS, MODEL_SCHEMA, MODELS

    with store.transaction(migrating=migrating):
        rows = store.read(MODELS, without=HEAVY_MODEL_COLUMNS).to_pylist()  # rewritten below
        if not rows:
            return 0
        columns = fingerprint_columns(store, table, [r["name"] for r in rows])
        for row in rows:
            row.update(columns[row["name"]])
        store.upsert(MODELS, rows, MODEL_SCHEMA, "name", insert=False)
    return sum(1 for c in columns.values() if c["fingerprint"] is not None)
