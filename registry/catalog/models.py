"""The catalog's pieces: a model's evaluations as a batch, its record from metadata, removing and
restoring it (each one store transaction), and its history.

Adding and refining (one forward pass of the active encoder, no training) land through
`registry.catalog.landing`; `registry.operations` is where every path (the API, the service) runs them.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Iterable, Mapping

from indexing.store import MODELS, VERSION_SCHEMA, VERSIONS, Store, now_utc
from registry.errors import InputError, NotFoundError
from registry.catalog.fingerprint_store import load_item_table
from registry.importers._common import ImportBatch, parse_typed_score, query_id_for_text
from registry.catalog.ingest import model_row
from registry.limits import check_model_name
from registry.records import ModelRecord, Query, validation_problem
from registry.results import HistoryEntry, ModelHistory, RemoveResult, RestoreResult
from registry.catalog.rows import model_rows, next_versions, record_of, version_row, write_model

# version_row, model_rows and record_of live in registry.catalog.rows; imported here for callers that used them here.
__all__ = ["evaluations_batch", "remove", "restore", "history", "history_rows", "check_model_name",
           "record_from_metadata", "version_row", "model_rows", "record_of"]


def record_from_metadata(name: str, metadata: Mapping[str, Any] | None) -> ModelRecord:
    """A ModelRecord from flat metadata (`--meta k=v`), an InputError naming `metadata` and the key
    when a value is refused (never pydantic's own message)."""
    from registry.checks import check_mapping

    check_mapping(metadata, "metadata")
    try:
        return ModelRecord.from_flat(name, dict(metadata or {}))
    except ValueError as err:  # pydantic's ValidationError is one
        key, problem = validation_problem(err)
        if key is not None and key in (metadata or {}) and not problem.startswith(f"{key} "):
            problem = f"{key}={metadata[key]}: {problem}"
        raise InputError(problem, field="metadata") from None


def evaluations_batch(name: str, evaluations: str | Path | Iterable[Any]) -> ImportBatch:
    """A model's evaluations from a file (CSV/JSONL/Parquet) or from Python: (query, score) or
    (query, score, task) tuples, or mappings with `query` (text) and/or `query_id`, `score`, `task`; an
    ImportBatch already read is taken as it is."""
    if isinstance(evaluations, ImportBatch):
        return evaluations
    if isinstance(evaluations, (str, Path)):
        from registry.importers.tabular import read_model_evaluations

        return read_model_evaluations(Path(evaluations), name)
    if isinstance(evaluations, (Mapping, bytes)) or not isinstance(evaluations, Iterable):
        raise InputError("evaluations are a file path or a list of (query, score[, task]) pairs or mappings, "
                         f"not {type(evaluations).__name__}", file="evaluations")
    batch = ImportBatch(source=f"add-model:{name}")
    seen: dict[str, str] = {}
    for i, item in enumerate(evaluations, start=1):
        if isinstance(item, Mapping):
            text, query_id, score, task = item.get("query"), item.get("query_id"), item.get("score"), item.get("task")
        else:
            values = tuple(item) if isinstance(item, (tuple, list)) else ()
            if len(values) not in (2, 3):
                raise InputError("expected (query, score) or (query, score, task)", file="evaluations", line=i)
            text, score = values[0], values[1]
            task = values[2] if len(values) == 3 else None
            query_id = None
        # a number, as in a JSON Lines file or an HTTP body: True or "0.5" is refused alike by every face
        score = parse_typed_score(score, file="evaluations", line=i, field="score")
        if task is not None and not isinstance(task, str):
            raise InputError(f"task must be text, not {type(task).__name__}", file="evaluations", line=i, field="task")
        if query_id is not None and not isinstance(query_id, str):
            raise InputError(f"query_id must be text, not {type(query_id).__name__}", file="evaluations", line=i,
                             field="query_id")
        if query_id is None:
            if not isinstance(text, str) or not text.strip():
                raise InputError("no query text and no query_id", file="evaluations", line=i, field="query")
            query_id = query_id_for_text(text)
        query_id = str(query_id)
        if isinstance(text, str) and text.strip() and query_id not in seen:
            seen[query_id] = text
            batch.add_query(Query(id=query_id, text=text, task=task or ""), file="evaluations", line=i, field="query")
        batch.add_evaluation(name, query_id, score, file="evaluations", line=i,
                             task=task if isinstance(task, str) else None)
    if not batch.n_evaluations:
        raise InputError("no evaluations given", file="evaluations")
    batch.refuse_conflicting_scores()
    batch.drop_duplicate_evaluations()
    return batch


def remove(store: Store, name: str) -> RemoveResult:
    with store.transaction():
        rows = model_rows(store)  # under the lock: a concurrent writer's change is seen
        if name not in rows:
            raise not_live(store, name, list(rows))
        store.append(VERSIONS, [version_row(rows[name], "remove", now_utc())], VERSION_SCHEMA)
        store.delete_in(MODELS, "name", [name])
    from registry.catalog.aliases import read_aliases

    # kept (a restore brings them back with the model), but said: until then they answer "removed"
    pointing = sorted(a for a, entry in read_aliases(store.home).items() if entry["name"] == name)
    return RemoveResult(name=name, removed=True, version=rows[name].get("version"), aliases=pointing,
                        generation=store.landed_generation())


def history(store: Store, name: str) -> ModelHistory:
    """Every version of a model, oldest first."""
    return ModelHistory(name=name, versions=[
        HistoryEntry(version=r["version"], event=r["event"], time=r["time"], encoder_id=r["encoder_id"],
                     n_evals=r["n_evals"], record=ModelRecord.model_validate_json(r["record"]))
        for r in history_rows(store, name)])


def history_rows(store: Store, name: str) -> list[dict[str, Any]]:
    """The raw history rows of a model (with vectors), oldest first."""
    table = store.read(VERSIONS)
    rows = [r for r in table.to_pylist() if r["name"] == name]
    if not rows:
        if name in model_rows(store, [name], light=True):
            raise no_history_yet(name)
        raise NotFoundError.model(name, sorted({r["name"] for r in table.to_pylist()}))
    return sorted(rows, key=lambda r: r["time"])


def is_restore_of(rows: list[dict[str, Any]], live: int, version: int) -> bool:
    """Whether live version `live` is a restore of `version` (a restore gets a new number, MLflow's rule, but
    holds the restored version's record and vector). `rows`: the model's history rows."""
    key = ("record", "vector", "encoder_id", "n_evals")
    now = [r for r in rows if r["version"] == live and r["event"] == "restore"]
    return bool(now) and any(r["version"] == version and all(r[k] == now[-1][k] for k in key) for r in rows)


def not_live(store: Store, name: str, live: list[str]) -> NotFoundError:
    """The error for `name`, not among the `live` models: a removed model says how to bring it back, any
    other name the closest live ones."""
    if isinstance(name, str) and store.read_in(VERSIONS, ["name"], "name", [name]).num_rows:
        return NotFoundError.removed(name)
    return NotFoundError.model(name, live)


def no_history_yet(name: str) -> NotFoundError:
    """A live model without a version: an import made it and nothing has embedded it (an import writes no
    history row; `embed` writes its first)."""
    return NotFoundError(f"model {name!r} has no versions yet: it came in by `registry import` and has not been "
                         "embedded (`registry embed --all` makes its first version)")


def _first_held(store: Store, name: str, first_version_time):
    """When the registry first held a model that no add made (an import writes no history row): its first
    history row's time, or its earliest stored evaluation's when that is earlier."""
    import pyarrow.compute as pc

    from indexing.store import EVALUATIONS

    times = store.read_in(EVALUATIONS, ["time"], "model", [name]).column("time")
    earliest = pc.min(times).as_py() if len(times) else None
    return min(first_version_time, earliest) if earliest is not None else first_version_time


def restore(store: Store, name: str, version: int | None = None) -> RestoreResult:
    """Bring back a removed model (or an older version of a live one) from its history, as a new
    version: the restored copy gets the next number, so every number names one thing forever."""
    with store.transaction():
        past = history = history_rows(store, name)  # a "remove" row is a snapshot of the model as it was removed
        current = model_rows(store, [name]).get(name)
        live = None if current is None else int(current.get("version") or 1)
        if version is None and live is not None:
            raise InputError(f"model {name!r} is live (version {live}); name the version to bring back: "
                             f"registry restore {shlex.quote(name)} --version V (registry history {shlex.quote(name)} lists them)",
                             field="version")
        if version is not None:
            past = [r for r in past if r["version"] == version]
            if not past:
                raise NotFoundError(f"model {name!r} has no version {version}", field="version")
        chosen = past[-1]
        if live is not None and (version == live or is_restore_of(history, live, version)):
            # already what the model is (itself, or a restore of that version): no new, identical version
            return RestoreResult(name=name, restored_version=version, version=live, restored=False)
        record = ModelRecord.model_validate_json(chosen["record"])
        # the times the version was made and the model first added: a "remove" row is only a snapshot, and its
        # time (the removal's) was given as both
        made = [r for r in history if r["version"] == chosen["version"] and r["event"] != "remove"]
        made_at = made[-1]["time"] if made else chosen["time"]
        adds = [r for r in history if r["event"] in ("add", "replace") and r["time"] <= made_at]
        row = model_row(record, current["added"] if current else adds[-1]["time"] if adds else
                        _first_held(store, name, history[0]["time"]))
        row.update(vector=chosen["vector"], encoder_id=chosen["encoder_id"], n_evals=chosen["n_evals"],
                   embedded_at=made_at if chosen["vector"] is not None else None,
                   version=next_versions(store, [name])[name])
        # the version's fingerprint when the item table that made it is still the current one; else
        # none (a fingerprint of another table is never compared with this table's)
        table = load_item_table(store)
        same = table is not None and chosen.get("table_id") == table.table_id
        row.update(fingerprint=chosen.get("fingerprint") if same else None,
                   behaviour=chosen.get("behaviour") if same else None, table_id=table.table_id if same else None)
        _restore_evaluations(store, name, int(chosen["version"]), row["version"], history)
        write_model(store, row, "restore")
    return RestoreResult(name=name, restored_version=chosen["version"], version=row["version"],
                         generation=store.landed_generation())


def _restore_evaluations(store: Store, name: str, restored: int, version: int, history: list[dict]) -> None:
    """The model's evaluations become the ones version `restored` held (logged under the new `version`,
    whole), so a later embed or refine starts from the restored version, not from every evaluation any
    version brought. Left as they are when the log cannot rebuild that version (registry.catalog.evaluation_log)."""
    import pyarrow as pa

    from indexing.store import EVALUATION_LOG, EVALUATION_LOG_SCHEMA, EVALUATION_SCHEMA, EVALUATIONS
    from registry.catalog.evaluation_log import log_rows, version_evaluations

    held = version_evaluations(store, name, restored, history)
    if held is None:
        return
    rows = pa.table({"model": pa.array([name] * len(held), pa.string()), "query_id": pa.array(list(held), pa.string()),
                     "score": pa.array(list(held.values()), pa.float32()),
                     "source": pa.array([f"restore of v{restored}"] * len(held), pa.string()),
                     "time": pa.array([now_utc()] * len(held), pa.timestamp("us", tz="UTC"))}, schema=EVALUATION_SCHEMA)
    store.delete_in(EVALUATIONS, "model", [name])
    store.append(EVALUATIONS, rows, EVALUATION_SCHEMA)
    store.append(EVALUATION_LOG, log_rows(rows, {name: version}), EVALUATION_LOG_SCHEMA)
