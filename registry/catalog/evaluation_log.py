"""Which evaluations each version of a model brought: the append-only `evaluation_log` table.

The evaluations table holds one score per (model, query): a refine that re-scores a stored query
replaces the old score (and its time), so after two refines the first version's answers on those
queries are gone, and drift (registry.analytics.drift) could not compare a version with the one
before on the queries both answered. Every add, refine and replace therefore also appends the
evaluations it brings here, with the version number it lands as, in the same transaction as the
version row (registry.catalog.landing); a restore logs the whole set it brings back (`version_evaluations`
rebuilds any version's set from these rows). Nothing here is ever updated or deleted.

`registry import` logs what it writes under the model's version at the time (an import makes no
version). Homes made before store format 3 get the log filled from the evaluations table
by migration 3 (`backfill`): each row's version is the one whose history row has the row's time
(landing writes both with one timestamp), else the model's last version at or before it; scores that
a refine replaced before the log existed cannot be recovered.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from indexing.store import EVALUATION_LOG, EVALUATION_LOG_SCHEMA  # every table's schema lives there

if TYPE_CHECKING:
    from indexing.store import Store

__all__ = ["EVALUATION_LOG", "EVALUATION_LOG_SCHEMA", "log_rows", "read_log", "version_evaluations", "backfill"]



def log_rows(evaluations: pa.Table, versions: dict[str, int]) -> pa.Table:
    """Log rows of evaluations-table rows (model, query_id, score, time) landing as these versions."""
    models = evaluations.column("model").to_pylist()
    return pa.table({
        "model": evaluations.column("model"), "query_id": evaluations.column("query_id"),
        "score": evaluations.column("score").cast(pa.float32()),
        "version": pa.array([versions[m] for m in models], pa.int32()),
        "time": evaluations.column("time").cast(pa.timestamp("us", tz="UTC")),
    }, schema=EVALUATION_LOG_SCHEMA)


def read_log(store: "Store", name: str) -> pa.Table:
    """Every logged evaluation of one model (empty when none, or on a home without the table)."""
    if not store.has_table(EVALUATION_LOG):
        return EVALUATION_LOG_SCHEMA.empty_table()
    return store.read_in(EVALUATION_LOG, EVALUATION_LOG_SCHEMA.names, "model", [name])


def version_evaluations(store: "Store", name: str, version: int, history: list[dict]) -> dict[str, float] | None:
    """query id -> score of the evaluations version `version` of `name` held, rebuilt from its history
    rows (`history`: every row of the model, oldest first) and the log: an add, replace or restore holds its
    own logged rows, a refine the version before it updated by its rows, and a version made by an import
    the rows logged under it, in time order. None when the log cannot say (a restore made before restores
    were logged, a home that predates the log)."""
    log = read_log(store, name).to_pylist()
    by_version: dict[int, list[dict]] = {}
    for row in sorted(log, key=lambda r: r["time"]):
        by_version.setdefault(int(row["version"]), []).append(row)
    making = {}  # version -> the event that made it (the first history row of that number)
    for row in history:
        making.setdefault(int(row["version"]), row["event"])
    numbers = sorted(making)

    def held(v: int) -> dict[str, float] | None:
        rows = by_version.get(v, [])
        if making.get(v) == "refine":  # the version live before it (numbers only grow), updated by its rows
            earlier = [u for u in numbers if u < v]
            base = held(earlier[-1]) if earlier else None
            if base is None:
                return None
        elif rows:  # add, replace, restore (whole), or a version an import made (its rows, in time order)
            base = {}
        else:
            return None  # nothing logged for it: the log cannot rebuild this version
        return base | {r["query_id"]: float(r["score"]) for r in rows}

    return held(int(version))


def backfill(store: "Store") -> int:
    """Migration 3: log every stored evaluation under the version it most likely came with (see the
    module docstring); returns the rows logged. Idempotent: a home whose log has rows is left alone."""
    from indexing.store import EVALUATIONS, MODELS, VERSIONS

    if store.has_table(EVALUATION_LOG) and store.count(EVALUATION_LOG):
        return 0
    evals = store.read(EVALUATIONS, ["model", "query_id", "score", "time"])
    if not evals.num_rows:
        return 0
    history = store.read(VERSIONS, ["name", "version", "event", "time"]).to_pylist()
    by_model: dict[str, list[tuple[int, int]]] = {}
    for row in history:
        if row["event"] in ("add", "refine", "replace"):
            by_model.setdefault(row["name"], []).append((_micros(row["time"]), int(row["version"])))
    current = {r["name"]: int(r["version"] or 1) for r in store.read(MODELS, ["name", "version"]).to_pylist()}
    times = evals.column("time").cast(pa.int64()).to_numpy(zero_copy_only=False)
    models = np.asarray(evals.column("model").to_pylist(), dtype=object)
    versions = np.empty(evals.num_rows, dtype=np.int32)
    for model in set(models.tolist()):
        sel = np.flatnonzero(models == model)
        made = sorted(by_model.get(model, []))
        when = np.array([w for w, _ in made], dtype=np.int64)
        number = np.array([v for _, v in made], dtype=np.int32)
        at = np.searchsorted(when, times[sel], side="right") - 1  # the last version at or before the row
        versions[sel] = np.where(at >= 0, number[np.maximum(at, 0)] if len(made) else 0, current.get(model, 1))
    table = pa.table({
        "model": evals.column("model"), "query_id": evals.column("query_id"),
        "score": evals.column("score").cast(pa.float32()), "version": pa.array(versions, pa.int32()),
        "time": evals.column("time").cast(pa.timestamp("us", tz="UTC")),
    }, schema=EVALUATION_LOG_SCHEMA)
    store.append(EVALUATION_LOG, table, EVALUATION_LOG_SCHEMA)
    return table.num_rows


def _micros(when) -> int:
    return int(pa.scalar(when, pa.timestamp("us", tz="UTC")).cast(pa.int64()).as_py())
