"""Rows of the models table and of its history (`model_versions`) <-> `ModelRecord`.

One place for the conversions that adding, embedding, searching and restoring all need (they lived in
`registry.catalog.models`, which made `catalog` and `embedding` import each other).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

from registry.records import ModelRecord

if TYPE_CHECKING:
    from indexing.store import Store

__all__ = ["record_of", "model_rows", "version_row", "write_model", "info_of_row", "read_evaluations",
           "next_versions"]


def record_of(row: Mapping[str, Any]) -> ModelRecord:
    """The record of a models-table row (the `extra` column is a JSON object)."""
    fields = {k: row.get(k) for k in ModelRecord.model_fields if k not in ("extra", "tags")}
    extra = row.get("extra") or "{}"
    return ModelRecord(**fields, tags=row.get("tags") or [], extra=json.loads(extra) if isinstance(extra, str) else extra)


def model_rows(store: "Store", names=None, *, light: bool = False) -> dict[str, dict[str, Any]]:
    """name -> models-table row (only these names when given); `light`: without the behaviour vector
    (`indexing.store.HEAVY_MODEL_COLUMNS`), for a reader that neither searches by it nor writes the row back."""
    from indexing.store import HEAVY_MODEL_COLUMNS, MODELS

    wanted = None if names is None else set(names)
    table = store.read(MODELS, without=HEAVY_MODEL_COLUMNS if light else ())
    return {row["name"]: row for row in table.to_pylist() if wanted is None or row["name"] in wanted}


def next_versions(store: "Store", names) -> dict[str, int]:
    """The number the next version of each name gets: one more than any number it ever had, live or
    in its history (removed versions included), so a number is never given twice (MLflow's rule).
    Call it inside the transaction that writes the version: the writer lock keeps a CLI and the
    service from both taking the same number."""
    from indexing.store import MODELS, VERSIONS

    names = sorted(set(names))
    highest = {n: 0 for n in names}
    if not names:
        return {}
    for table in (VERSIONS, MODELS):
        rows = store.read_in(table, ["name", "version"], "name", names)
        for name, version in zip(rows.column("name").to_pylist(), rows.column("version").to_pylist()):
            if name in highest and version is not None:
                highest[name] = max(highest[name], int(version))
    return {n: v + 1 for n, v in highest.items()}


def version_row(row: Mapping[str, Any], event: str, when) -> dict[str, Any]:
    """A history row: a snapshot of the model row at `event` (add, refine, replace, embed, remove, restore)."""
    return {"name": row["name"], "version": int(row.get("version") or 1), "event": event,
            "record": record_of(row).model_dump_json(), "vector": row.get("vector"),
            "encoder_id": row.get("encoder_id"), "n_evals": row.get("n_evals"), "time": when,
            "fingerprint": row.get("fingerprint"), "behaviour": row.get("behaviour"), "table_id": row.get("table_id")}


def write_model(store: "Store", row: dict[str, Any], event: str) -> None:
    """Upsert the model row and append its history row (inside the caller's transaction)."""
    from indexing.store import MODEL_SCHEMA, MODELS, VERSION_SCHEMA, VERSIONS, now_utc

    store.upsert(MODELS, [row], MODEL_SCHEMA, "name")
    store.append(VERSIONS, [version_row(row, event, now_utc())], VERSION_SCHEMA)


def info_of_row(record, row: dict[str, Any]):
    """`ModelInfo` of one models-table row (what `Registry.show` returns)."""
    from registry.results import ModelInfo

    return ModelInfo(record=record, version=row.get("version"), encoder_id=row.get("encoder_id"),
                     n_evals=row.get("n_evals"), embedded=row.get("vector") is not None,
                     embedded_at=row.get("embedded_at"), added=row.get("added"))


def read_evaluations(store: "Store", names: list[str] | None):
    """(model, query_id, score) arrays of these models' evaluations (None: every model's), read with a
    filter in LanceDB rather than a scan of the whole table."""
    import numpy as np

    from indexing.errors import RegistryError
    from indexing.store import EVALUATIONS

    if store.count(EVALUATIONS) == 0:  # no LanceDB import for this: a search's refinement reads here
        raise RegistryError("the registry holds no evaluations yet (registry import PATH)")
    cols = ["model", "query_id", "score"]
    if names is None:
        table = store.read(EVALUATIONS, cols)
    else:
        table = store.read_in(EVALUATIONS, cols, "model", names)
    return (np.asarray(table.column("model").to_pylist(), dtype=object),
            np.asarray(table.column("query_id").to_pylist(), dtype=object),
            table.column("score").to_numpy(zero_copy_only=False).astype(np.float64))
