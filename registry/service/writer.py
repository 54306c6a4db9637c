"""Landing a batch of add/refine jobs: one forward pass, one store transaction.

The writer thread hands over every job waiting (distinct model names, up to a batch size). Each is
checked on its own first (its evaluations parsed, its name against the models table, its query ids
against the stored queries), so that one bad job fails alone with its file/line/field. The texts no
encoder has seen are encoded in one batch; then one LOCUS forward pass embeds every model of the
batch from its evaluations, and the queries, vectors, evaluations, model rows, history rows and the
jobs' own completion rows land in one store transaction: all of them or none (a crash inside it is
rolled back from the journal by the next process to open the store). Should the whole transaction
fail, each job is retried alone, so that only the job at fault fails.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from indexing.store import (
    EVALUATION_SCHEMA,
    EVALUATIONS,
    MODEL_SCHEMA,
    MODELS,
    QUERIES,
    QUERY_SCHEMA,
    VERSION_SCHEMA,
    VERSIONS,
    now_utc,
)
from registry.errors import InputError, NotFoundError, RegistryError
from registry.importers._common import ImportBatch, text_hash
from registry.records import ModelRecord, Query

__all__ = ["JobSpec", "land_jobs", "JOBS_TABLE", "JOB_SCHEMA", "done_job_ids"]

JOBS_TABLE = "service_jobs"  # one row per landed job, written in the job's own transaction
JOB_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("name", pa.string(), nullable=False),
    pa.field("result", pa.string(), nullable=False),  # JSON of the job's result
    pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
])


@dataclass
class JobSpec:
    id: str
    kind: str  # "add" or "refine"
    name: str
    evaluations: list[dict[str, Any]] | None = None  # inline rows: query and/or query_id, score, task
    file: str | None = None  # an uploaded CSV/JSONL/Parquet file, kept under the service directory
    file_label: str | None = None  # the file's name as the client sent it (named in errors)
    metadata: dict[str, Any] = field(default_factory=dict)
    replace: bool = False
    max_evals: int | None = None


@dataclass
class _Prepared:
    spec: JobSpec
    record: ModelRecord
    existing: dict[str, Any] | None
    batch: ImportBatch
    new_queries: list[tuple[Query, str]]  # (query, text hash) not yet stored
    hashes: list[str] = field(default_factory=list)  # per final evaluation: its query's text hash
    scores: np.ndarray | None = None  # per final evaluation
    new_evaluations: int = 0


def done_job_ids(store) -> dict[str, dict[str, Any]]:
    """Results of the jobs that landed (read on restart to tell finished jobs from lost ones)."""
    if not store.has_table(JOBS_TABLE):
        return {}
    table = store.read(JOBS_TABLE)
    return {i: json.loads(r) for i, r in zip(table.column("id").to_pylist(), table.column("result").to_pylist())}


def _parse(spec: JobSpec) -> ImportBatch:
    from registry.catalog import evaluations_batch

    if spec.file is not None:
        from registry.importers.tabular import read_model_evaluations

        label = spec.file_label or "upload"
        spooled = (spec.file, Path(spec.file).name)  # never shown: the client knows its file by its own name
        try:
            batch = read_model_evaluations(Path(spec.file), spec.name)
        except InputError as err:  # name the file as the client sent it, not our spool path
            raise InputError(_unspooled(err.problem, spooled, label), file=label, line=err.line,
                             field=err.field) from None
        batch.warnings = [_unspooled(w, spooled, label) for w in batch.warnings]
        return batch
    return evaluations_batch(spec.name, spec.evaluations or [])


def _unspooled(text: str, spooled: tuple[str, ...], label: str) -> str:
    for path in spooled:
        text = text.replace(path, label)
    return text


def _prepare(spec: JobSpec, stored_models, by_id: dict[str, str], by_hash: dict[str, str],
             claimed: dict[str, str]) -> _Prepared:
    existing = stored_models.get(spec.name)
    if spec.kind == "add":
        if existing is not None and not spec.replace:
            raise RegistryError(f"a model named {spec.name!r} exists; refine it, or add with replace")
        from registry.catalog import check_model_name, record_from_metadata

        record = record_from_metadata(check_model_name(spec.name), spec.metadata)
    elif spec.kind == "refine":
        if existing is None:
            raise NotFoundError.model(spec.name, list(stored_models))
        from registry.rows import record_of

        record = record_of(existing)
    else:
        raise InputError(f"unknown job kind {spec.kind!r}", field="kind")
    batch = _parse(spec)
    # Evaluations given by text land on the stored query with that text (as catalog does).
    renamed, new_queries, batch_hash = {}, [], {}
    for query, (file, line) in zip(batch.queries, batch.query_origins):
        digest = text_hash(query.text)
        known = by_hash.get(digest)
        if known is not None and query.id.startswith("t:"):
            renamed[query.id] = known
            continue
        stored = by_id.get(query.id)
        if stored is not None and stored != digest:
            raise InputError(f"query id {query.id!r} is already stored with a different text", file=file, line=line,
                             field="query_id")
        other = claimed.get(query.id)
        if other is not None and other != digest:
            raise InputError(f"query id {query.id!r} is given with a different text by another job landing now",
                             file=file, line=line, field="query_id")
        batch_hash[query.id] = digest
        if stored is None:
            new_queries.append((query, digest))
    if renamed:
        batch.eval_queries = [renamed.get(q, q) for q in batch.eval_queries]
        batch.drop_duplicate_evaluations()
    for i, query_id in enumerate(batch.eval_queries):
        if query_id not in batch_hash and query_id not in by_id:
            file, line = batch.where(i)
            raise InputError(f"query id {query_id!r} is neither in these evaluations nor in the store",
                             file=file, line=line, field="query_id")
    return _Prepared(spec, record, existing, batch, new_queries)


def land_jobs(state, specs: list[JobSpec]) -> dict[str, dict[str, Any] | RegistryError]:
    """Land these jobs (distinct model names); per job id its result, or the error that failed it."""
    outcomes: dict[str, dict[str, Any] | RegistryError] = {}
    try:
        for attempt in range(_ATTEMPTS):
            try:
                # The last attempt holds the writer lock throughout (encoding included), so that a
                # busy CLI writer cannot starve the job; the first ones leave other writers free.
                if attempt == _ATTEMPTS - 1:
                    with state.store.transaction():
                        _land(state, specs, outcomes)
                else:
                    _land(state, specs, outcomes)
                break
            except _Moved:
                outcomes.clear()
    except RegistryError as err:
        if len(specs) == 1:
            outcomes[specs[0].id] = err
        else:
            for spec in specs:  # one job spoilt the batch: find it by landing each alone
                if spec.id not in outcomes:
                    outcomes.update(land_jobs(state, [spec]))
    return outcomes


_ATTEMPTS = 4


class _Moved(Exception):
    """Another writer changed the store between reading it and landing: land again from what is there."""


def _land(state, specs: list[JobSpec], outcomes) -> None:
    from encoder.data import EvalData
    from encoder.inference import embed_models
    from registry.catalog import _sql_literal
    from registry.fingerprint_store import fingerprint_columns, load_item_table
    from registry.ingest import model_row
    from registry.results import ModelChange
    from registry.rows import next_versions, version_row

    store = state.store
    seen = store.versions()  # everything below is decided from this state of the tables
    active = state.snapshot().require_active()
    stored_models = {row["name"]: row for row in store.read(MODELS).to_pylist()}
    queries = store.read(QUERIES, ["query_id", "text_hash"])
    by_id = dict(zip(queries.column("query_id").to_pylist(), queries.column("text_hash").to_pylist()))
    by_hash = {h: q for q, h in by_id.items()}

    prepared: list[_Prepared] = []
    claimed: dict[str, str] = {}
    for spec in specs:
        try:
            job = _prepare(spec, stored_models, by_id, by_hash, claimed)
        except RegistryError as err:
            outcomes[spec.id] = err
            continue
        claimed.update({q.id: d for q, d in job.new_queries})
        prepared.append(job)
    if not prepared:
        return

    # Each model's evaluations after the write: an add holds exactly what it brings; a refine
    # holds what is stored plus what it brings (a new score for a stored query replaces it).
    refined = [p.spec.name for p in prepared if p.spec.kind == "refine"]
    stored_evals: dict[str, dict[str, float]] = {n: {} for n in refined}
    if refined:
        listed = ", ".join(_sql_literal(n) for n in refined)  # stored model names, quoted
        table = store.table(EVALUATIONS).search().where(f"model IN ({listed})").select(
            ["model", "query_id", "score"]).limit(None).to_arrow()
        for m, q, s in zip(table.column("model").to_pylist(), table.column("query_id").to_pylist(),
                           table.column("score").to_pylist()):
            stored_evals[m][q] = s
    new_hash = {q.id: d for p in prepared for q, d in p.new_queries}
    texts = {d: q.text for p in prepared for q, d in p.new_queries}
    for p in prepared:
        given = dict(zip(p.batch.eval_queries, p.batch.scores_array().tolist()))
        final = dict(stored_evals.get(p.spec.name, {})) if p.spec.kind == "refine" else {}
        p.new_evaluations = sum(1 for q, s in given.items() if final.get(q) != s)
        final.update(given)
        p.hashes = [new_hash.get(q) or by_id[q] for q in final]
        p.scores = np.asarray(list(final.values()), dtype=np.float32)

    # Query vectors: memory, then the store's cache, then one encoding batch for the rest.
    wanted = sorted({h for p in prepared for h in p.hashes})
    vectors, encoded = _vectors(state, store, active.query_encoder, wanted, texts, by_hash)

    # One forward pass of F over every model of the batch (padded sets, see embed_models).
    position = {h: i for i, h in enumerate(wanted)}
    model_index = np.concatenate([np.full(len(p.hashes), m, dtype=np.int64) for m, p in enumerate(prepared)])
    query_index = np.concatenate([np.array([position[h] for h in p.hashes], dtype=np.int64) for p in prepared])
    data = EvalData(models=[p.spec.name for p in prepared], query_ids=wanted, tasks=[""] * len(wanted),
                    query_vectors=np.stack([vectors[h] for h in wanted]).astype(np.float32),  # (Q, D)
                    model_index=model_index, query_index=query_index,
                    scores=np.concatenate([p.scores for p in prepared]))
    per_model, start = [], 0
    for p in prepared:
        evals = np.arange(start, start + len(p.hashes))
        start += len(p.hashes)
        limit = p.spec.max_evals
        if limit is not None and len(evals) > limit:  # seeded by the name, as catalog does
            rng = np.random.default_rng(zlib.crc32(p.spec.name.encode("utf-8")))
            evals = np.sort(rng.choice(evals, size=limit, replace=False))
        per_model.append(evals)
    if data.query_vectors.shape[1] != active.config.query_dim:
        raise RegistryError(f"encoder {active.encoder_id} reads {active.config.query_dim}-d query vectors; "
                            f"{active.query_encoder} gives {data.query_vectors.shape[1]}-d")
    z = embed_models(active.locus, data, per_model)  # (M, d)

    now = now_utc()
    numbers = next_versions(store, [p.spec.name for p in prepared])  # removed versions count too
    model_rows, events, job_rows, results = [], [], [], {}
    for p, zm, evals in zip(prepared, z, per_model):
        existing = p.existing
        event = p.spec.kind if p.spec.kind == "refine" else ("replace" if existing else "add")
        version = numbers[p.spec.name]
        row = model_row(p.record, existing["added"] if existing else now)
        row.update(vector=zm.astype(np.float32).tolist(), encoder_id=active.encoder_id, n_evals=int(len(evals)),
                   embedded_at=now, version=version)
        model_rows.append(row)
        events.append(event)
        result = ModelChange(name=p.spec.name, version=version, event=event, encoder_id=active.encoder_id,
                             n_evals=int(len(evals)), new_evaluations=p.new_evaluations,
                             encoded_texts=sum(1 for q, d in p.new_queries if d in encoded),
                             warnings=list(p.batch.warnings) + _thin(p.spec.name, len(evals))).model_dump(mode="json")
        results[p.spec.id] = result
        job_rows.append({"id": p.spec.id, "kind": p.spec.kind, "name": p.spec.name, "result": json.dumps(result),
                         "time": now})

    with store.transaction():
        if store.versions() != seen:  # a CLI (or the service's remove/restore) wrote meanwhile
            raise _Moved()
        fresh = {}
        for p in prepared:
            for q, d in p.new_queries:
                fresh.setdefault(q.id, {"query_id": q.id, "text": q.text, "task": q.task, "text_hash": d})
        if fresh:
            store.table(QUERIES, QUERY_SCHEMA).add(pa.Table.from_pylist(list(fresh.values()), schema=QUERY_SCHEMA))
        if encoded:
            already = store.cached_vectors(active.query_encoder, list(encoded))
            keep = [h for h in encoded if h not in already]
            if keep:
                store.add_vectors(active.query_encoder, keep, np.stack([encoded[h] for h in keep]))
        evaluations = store.table(EVALUATIONS, EVALUATION_SCHEMA)
        added = [p for p in prepared if p.spec.kind == "add"]
        if added:
            # A fresh add holds exactly the evaluations given: a removed model of that name kept
            # its evaluations (for restore), and they must not leak into the new one.
            evaluations.delete(f"model IN ({', '.join(_sql_literal(p.spec.name) for p in added)})")
        for group, upsert in ((added, False), ([p for p in prepared if p.spec.kind == "refine"], True)):
            if not group:
                continue
            rows = _evaluation_rows(group, now)
            if upsert:
                evaluations.merge_insert(["model", "query_id"]).when_matched_update_all() \
                    .when_not_matched_insert_all().execute(rows)
            else:
                evaluations.add(rows)
        # the fingerprints from the evaluations just written, in this transaction with the LOCUS vectors
        prints = fingerprint_columns(store, load_item_table(store, active.encoder_id), [r["name"] for r in model_rows])
        for row in model_rows:
            row.update(prints[row["name"]])
        store.table(MODELS, MODEL_SCHEMA).merge_insert("name").when_matched_update_all() \
            .when_not_matched_insert_all().execute(pa.Table.from_pylist(model_rows, schema=MODEL_SCHEMA))
        store.table(VERSIONS, VERSION_SCHEMA).add(pa.Table.from_pylist(
            [version_row(row, event, now) for row, event in zip(model_rows, events)], schema=VERSION_SCHEMA))
        store.table(JOBS_TABLE, JOB_SCHEMA).add(pa.Table.from_pylist(job_rows, schema=JOB_SCHEMA))
    state.remember(active.query_encoder, encoded)
    outcomes.update(results)


def _thin(name: str, n_evals: int) -> list[str]:
    from registry.evidence import thin_warning

    warning = thin_warning(name, n_evals)
    return [warning] if warning else []


def _evaluation_rows(group: list[_Prepared], now) -> pa.Table:
    models, queries, scores, sources = [], [], [], []
    for p in group:
        given = dict(zip(p.batch.eval_queries, p.batch.scores_array().tolist()))
        models.extend([p.spec.name] * len(given))
        queries.extend(given)
        scores.extend(given.values())
        sources.extend([f"service:{p.spec.id}"] * len(given))
    return pa.table({
        "model": pa.array(models, pa.string()), "query_id": pa.array(queries, pa.string()),
        "score": pa.array(scores, pa.float32()), "source": pa.array(sources, pa.string()),
        "time": pa.array([now] * len(models), pa.timestamp("us", tz="UTC")),
    }, schema=EVALUATION_SCHEMA)


def _vectors(state, store, encoder: str, wanted: list[str], texts: dict[str, str], by_hash: dict[str, str]):
    """Vectors for these text hashes, and those that had to be encoded now (hash -> vector)."""
    found: dict[str, np.ndarray] = {}
    with state._texts_lock:
        for h in wanted:
            v = state._texts.get((encoder, h))
            if v is not None:
                found[h] = v
    missing = [h for h in wanted if h not in found]
    if missing:
        found.update(store.cached_vectors(encoder, missing))
    todo = [h for h in wanted if h not in found]
    encoded: dict[str, np.ndarray] = {}
    if todo:
        unknown = [h for h in todo if h not in texts]
        if unknown:  # a stored query never encoded with this encoder: read its text
            stored = store.read(QUERIES, ["text_hash", "text"])
            text_of = dict(zip(stored.column("text_hash").to_pylist(), stored.column("text").to_pylist()))
            texts = {**texts, **{h: text_of[h] for h in unknown if h in text_of}}
        # Directly, not through the routes' encoding thread: a job may bring thousands of new texts,
        # and routes should not wait behind them.
        vectors = state.query_encoder(encoder).encode([texts[h] for h in todo], progress=False)
        encoded = dict(zip(todo, vectors))
        found.update(encoded)
        state.texts_encoded += len(todo)
    state.remember(encoder, {h: found[h] for h in missing})
    return found, encoded
