"""Adding, refining, removing and restoring models: each a single store transaction.

`add_model` onboards a model with one forward pass of the active encoder over its evaluations
(no training). Query texts are encoded and cached first, outside the write lock; then the
evaluations, the model row with its vector, and a row of its history land together, or not at all.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from encoder.data import EvalData
from indexing.store import EVALUATIONS, MODELS, VERSION_SCHEMA, VERSIONS, Store, now_utc
from registry.embedding import DEFAULT_MAX_EMBED_EVALS
from registry.errors import InputError, NotFoundError, RegistryError
from registry.fingerprint_store import fingerprint_columns, load_item_table
from registry.importers._common import ImportBatch, query_id_for_text, text_hash
from registry.ingest import ImportReport, ingest, model_row
from registry.limits import check_model_name
from registry.records import ModelRecord, Query, check_score, validation_problem
from registry.results import HistoryEntry, ModelChange, ModelHistory, RemoveResult, RestoreResult
from registry.rows import model_rows, next_versions, record_of, version_row, write_model

# version_row, model_rows and record_of live in registry.rows; imported here for callers that used them here.
__all__ = ["evaluations_batch", "add_model", "refine", "remove", "restore", "history", "history_rows",
           "embed_model_rows", "check_model_name", "record_from_metadata", "version_row", "model_rows", "record_of"]


def record_from_metadata(name: str, metadata: Mapping[str, Any] | None) -> ModelRecord:
    """A ModelRecord from flat metadata (`--meta k=v`), an InputError naming `metadata` and the key
    when a value is refused (never pydantic's own message)."""
    try:
        return ModelRecord.from_flat(name, dict(metadata or {}))
    except ValueError as err:  # pydantic's ValidationError is one
        key, problem = validation_problem(err)
        if key is not None and key in (metadata or {}):
            problem = f"{key}={metadata[key]}: {problem}"
        raise InputError(problem, field="metadata") from None


def evaluations_batch(name: str, evaluations: str | Path | Iterable[Any]) -> ImportBatch:
    """A model's evaluations from a file (CSV/JSONL/Parquet) or from Python: (query, score) or
    (query, score, task) tuples, or mappings with `query` (text) and/or `query_id`, `score`, `task`."""
    if isinstance(evaluations, (str, Path)):
        from registry.importers.tabular import read_model_evaluations

        return read_model_evaluations(Path(evaluations), name)
    batch = ImportBatch(source=f"add-model:{name}")
    seen: dict[str, str] = {}
    for i, item in enumerate(evaluations, start=1):
        if isinstance(item, Mapping):
            text, query_id, score, task = item.get("query"), item.get("query_id"), item.get("score"), item.get("task")
        else:
            values = tuple(item)
            if len(values) not in (2, 3):
                raise InputError("expected (query, score) or (query, score, task)", file="evaluations", line=i)
            text, score = values[0], values[1]
            task = values[2] if len(values) == 3 else None
            query_id = None
        try:
            score = check_score(score)
        except ValueError as err:
            raise InputError(str(err), file="evaluations", line=i, field="score") from None
        if query_id is None:
            if not isinstance(text, str) or not text.strip():
                raise InputError("no query text and no query_id", file="evaluations", line=i, field="query")
            query_id = query_id_for_text(text)
        query_id = str(query_id)
        if isinstance(text, str) and text.strip() and query_id not in seen:
            seen[query_id] = text
            batch.add_query(Query(id=query_id, text=text, task=task or ""), file="evaluations", line=i, field="query")
        batch.add_evaluation(name, query_id, score, file="evaluations", line=i)
    if not batch.n_evaluations:
        raise InputError("no evaluations given", file="evaluations")
    batch.refuse_conflicting_scores()
    batch.drop_duplicate_evaluations()
    return batch


def _encode_new_texts(store: Store, batch: ImportBatch, encoder: str) -> int:
    """Cache vectors for the batch's texts in their own small transaction, so the main write does
    not hold the lock while a sentence-transformer runs."""
    from encoder.query_encoder import load_query_encoder

    wanted = {text_hash(q.text): q.text for q in batch.queries}
    cached = store.cached_vectors(encoder, list(wanted))
    todo = [(h, t) for h, t in wanted.items() if h not in cached]
    if not todo:
        return 0
    vectors = load_query_encoder(encoder).encode([t for _, t in todo])
    with store.transaction():
        already = store.cached_vectors(encoder, [h for h, _ in todo])
        fresh = [(h, v) for (h, _), v in zip(todo, vectors) if h not in already]
        if fresh:
            store.add_vectors(encoder, [h for h, _ in fresh], np.stack([v for _, v in fresh]))
    return len(todo)


def _model_eval_data(store: Store, name: str, encoder: str) -> EvalData:
    """One model's stored evaluations with their query vectors."""
    from indexing.store import QUERIES

    evals = store.read(EVALUATIONS, ["model", "query_id", "score"])
    evals = evals.filter(pc.equal(evals.column("model"), pa.scalar(name)))
    if evals.num_rows == 0:
        raise RegistryError(f"model {name!r} has no evaluations")
    queries = store.read(QUERIES, ["query_id", "text_hash", "task"])
    own = set(evals.column("query_id").to_pylist())
    qrows = [(q, h, t) for q, h, t in zip(*(queries.column(c).to_pylist() for c in ("query_id", "text_hash", "task")))
             if q in own]
    vectors = store.cached_vectors(encoder, [h for _, h, _ in qrows])
    qrows = [r for r in qrows if r[1] in vectors]
    if not qrows:
        raise RegistryError(f"none of {name!r}'s queries has a vector from {encoder!r}")
    position = {q: i for i, (q, _, _) in enumerate(qrows)}
    keep = [i for i, q in enumerate(evals.column("query_id").to_pylist()) if q in position]
    query_index = np.array([position[evals.column("query_id")[i].as_py()] for i in keep], dtype=np.int64)
    return EvalData(
        models=[name], query_ids=[q for q, _, _ in qrows], tasks=[t for _, _, t in qrows],
        query_vectors=np.stack([vectors[h] for _, h, _ in qrows]).astype(np.float32),
        model_index=np.zeros(len(keep), dtype=np.int64), query_index=query_index,
        scores=evals.column("score").to_numpy(zero_copy_only=False)[keep].astype(np.float32),
    )


def embed_model_rows(store: Store, active, names: list[str], *, max_evals: int | None, seed: int = 0):
    """(vector, n_evals) per name, each from up to `max_evals` of its stored evaluations (a sample
    seeded by the name, so re-embedding is reproducible)."""
    import zlib

    from encoder.inference import embed_models

    out = {}
    for name in names:
        data = _model_eval_data(store, name, active.query_encoder)
        evals = np.arange(len(data.scores))
        if max_evals is not None and len(evals) > max_evals:
            rng = np.random.default_rng(seed + zlib.crc32(name.encode("utf-8")))
            evals = np.sort(rng.choice(evals, size=max_evals, replace=False))
        z = embed_models(active.locus, data, [evals])[0]
        out[name] = (z.astype(np.float32), int(len(evals)))
    return out


def add_model(store: Store, name: str, evaluations, metadata: Mapping[str, Any] | ModelRecord | None = None, *,
              replace: bool = False, max_evals: int | None = DEFAULT_MAX_EMBED_EVALS) -> ModelChange:
    from registry.embedding import active_encoder

    name = check_model_name(name)
    active = active_encoder(store)
    existing = model_rows(store).get(name)
    if existing is not None and not replace:
        raise RegistryError(f"a model named {name!r} exists: `registry refine {name} --evals FILE` adds "
                            "evaluations to it (a new version); --replace starts it afresh")
    if isinstance(metadata, ModelRecord):
        record = metadata.model_copy(update={"name": name})
    else:
        record = record_from_metadata(name, metadata)
    batch = evaluations_batch(name, evaluations)
    batch.models = [record]
    # A fresh add holds exactly the evaluations given: a removed model of that name kept its
    # evaluations (for restore), and they must not leak into the new one.
    return _land(store, active, batch, record, event="add", replace=replace, replace_evaluations=True,
                 max_evals=max_evals)


def refine(store: Store, name: str, evaluations, *, max_evals: int | None = DEFAULT_MAX_EMBED_EVALS) -> ModelChange:
    from registry.embedding import active_encoder

    active = active_encoder(store)
    existing = model_rows(store).get(name)
    if existing is None:
        raise NotFoundError.model(name, list(model_rows(store)))
    batch = evaluations_batch(name, evaluations)
    return _land(store, active, batch, record_of(existing), event="refine", replace=False,
                 replace_evaluations=False, max_evals=max_evals)


def _reuse_stored_queries(store: Store, batch: ImportBatch) -> None:
    """Evaluations given by text land on the stored query with that text, if there is one, rather
    than on a second query with a text-derived id."""
    from indexing.store import QUERIES

    stored = store.read(QUERIES, ["query_id", "text_hash"])
    by_hash = dict(zip(stored.column("text_hash").to_pylist(), stored.column("query_id").to_pylist()))
    renamed = {}
    kept, origins = [], []
    for query, origin in zip(batch.queries, batch.query_origins):
        known = by_hash.get(text_hash(query.text))
        if known is not None and query.id.startswith("t:"):
            renamed[query.id] = known
        else:
            kept.append(query)
            origins.append(origin)
    if renamed:
        batch.queries, batch.query_origins = kept, origins
        batch.eval_queries = [renamed.get(q, q) for q in batch.eval_queries]
        batch.drop_duplicate_evaluations()


def _land(store, active, batch, record, *, event, replace, replace_evaluations, max_evals) -> ModelChange:
    _reuse_stored_queries(store, batch)
    encoded = _encode_new_texts(store, batch, active.query_encoder)
    with store.transaction():
        # What was read before the lock may be stale: another writer (the service, a second CLI) may
        # have added, refined or removed this model meanwhile. Decide on the row as it is now.
        existing = model_rows(store, [record.name]).get(record.name)
        if event == "refine":
            if existing is None:
                raise NotFoundError(f"model {record.name!r} was removed by another writer meanwhile")
            record = record_of(existing)
        elif existing is not None and not replace:
            raise RegistryError(f"a model named {record.name!r} exists (added by another writer just now); "
                                "refine it, or add with --replace")
        else:
            event = "replace" if existing is not None else "add"
        version = next_versions(store, [record.name])[record.name]  # before ingest writes a row
        if replace_evaluations:
            table = store.table(EVALUATIONS)
            table.delete(f"model = {_sql_literal(record.name)}")
        report: ImportReport = ingest(store, batch, encoder=active.query_encoder, load_encoder=None)
        vectors = embed_model_rows(store, active, [record.name], max_evals=max_evals)
        z, n_evals = vectors[record.name]
        row = model_row(record, existing["added"] if existing else now_utc())
        row.update(vector=z.tolist(), encoder_id=active.encoder_id, n_evals=n_evals, embedded_at=now_utc(),
                   version=version)
        row.update(fingerprint_columns(store, load_item_table(store, active.encoder_id), [record.name])[record.name])
        write_model(store, row, event)
    from registry.evidence import thin_warning

    thin = thin_warning(record.name, n_evals)
    return ModelChange(name=record.name, version=version, event=event, encoder_id=active.encoder_id,
                       n_evals=n_evals, new_evaluations=report.new_evaluations, encoded_texts=encoded,
                       warnings=report.warnings + ([thin] if thin else []))


def _sql_literal(value: str) -> str:
    """A quoted SQL string literal. Only for names already validated as stored model names: user
    filter text never reaches the database."""
    return "'" + value.replace("'", "''") + "'"


def remove(store: Store, name: str) -> RemoveResult:
    with store.transaction():
        rows = model_rows(store)  # under the lock: a concurrent writer's change is seen
        if name not in rows:
            raise NotFoundError.model(name, list(rows))
        store.table(VERSIONS, VERSION_SCHEMA).add(pa.Table.from_pylist(
            [version_row(rows[name], "remove", now_utc())], schema=VERSION_SCHEMA))
        store.table(MODELS).delete(f"name = {_sql_literal(name)}")
    return RemoveResult(name=name, removed=True, version=rows[name].get("version"))


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
        raise NotFoundError.model(name, sorted({r["name"] for r in table.to_pylist()}))
    return sorted(rows, key=lambda r: r["time"])


def restore(store: Store, name: str, version: int | None = None) -> RestoreResult:
    """Bring back a removed model (or an older version of a live one) from its history, as a new
    version: the restored copy gets the next number, so every number names one thing forever."""
    with store.transaction():
        past = history_rows(store, name)  # a "remove" row is a snapshot of the model as it was removed
        if version is not None:
            past = [r for r in past if r["version"] == version]
            if not past:
                raise NotFoundError(f"model {name!r} has no version {version}")
        chosen = past[-1]
        record = ModelRecord.model_validate_json(chosen["record"])
        current = model_rows(store, [name]).get(name)
        row = model_row(record, current["added"] if current else chosen["time"])
        row.update(vector=chosen["vector"], encoder_id=chosen["encoder_id"], n_evals=chosen["n_evals"],
                   embedded_at=chosen["time"], version=next_versions(store, [name])[name])
        # the version's fingerprint when the item table that made it is still the current one; else
        # none (a fingerprint of another table is never compared with this table's)
        table = load_item_table(store)
        same = table is not None and chosen.get("table_id") == table.table_id
        row.update(fingerprint=chosen.get("fingerprint") if same else None, table_id=table.table_id if same else None)
        write_model(store, row, "restore")
    return RestoreResult(name=name, restored_version=chosen["version"], version=row["version"])
