"""Landing adds and refines: the one write path of `Registry.add_model` / `refine` and the service's writer.

A batch of changes (distinct model names) lands in one forward pass and one store transaction. Each
change is checked on its own first (its name against the models table, its query ids against the stored
queries, the evaluations-per-model limit), so that one bad change fails alone with its file/line/field.
The texts no encoder has seen are encoded in one batch (outside the writer lock); one LOCUS forward pass
embeds every model of the batch from its evaluations; then the queries, query vectors, evaluations, model
rows (LOCUS vector and behaviour fingerprint) and history rows land in one transaction: all or none (a
crash inside it is rolled back from the journal by the next process to open the store).

Concurrency is optimistic: everything is decided from one state of the tables, and the transaction checks
that no other writer (a second CLI, the service) changed them meanwhile; if one did, the batch is decided
again from what is there, and the last attempt holds the writer lock throughout. Should the whole batch
fail, each change is retried alone, so that only the change at fault fails.
"""
from __future__ import annotations

import shlex
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from indexing.store import (
    EVALUATION_SCHEMA,
    EVALUATIONS,
    HEAVY_MODEL_COLUMNS,
    MODEL_SCHEMA,
    MODELS,
    QUERIES,
    QUERY_SCHEMA,
    VERSION_SCHEMA,
    VERSIONS,
    now_utc,
)
import registry.limits as limits
from registry.errors import InputError, NotFoundError, RegistryError
from registry.catalog.fingerprint_store import HeldEvaluations, fingerprint_columns, load_item_table
from registry.importers._common import ImportBatch, text_hash
from registry.records import ModelRecord
from registry.results import ModelChange

__all__ = ["Change", "land", "land_one"]

_ATTEMPTS = 4


@dataclass
class Change:
    """One add or refine: `batch` holds the model's evaluations (and the texts of queries it brings)."""

    id: str  # the key of its outcome (the service's job id)
    kind: str  # "add" or "refine"
    name: str
    batch: ImportBatch
    record: ModelRecord | None = None  # add: the model's record (refine keeps the stored one)
    replace: bool = False  # add over an existing model of that name
    max_evals: int | None = None  # embed from at most this many evaluations (a sample seeded by the name)
    source: str | None = None  # the evaluations' `source` column (default: the batch's)


@dataclass
class _Prepared:
    change: Change
    record: ModelRecord
    existing: dict[str, Any] | None
    new_queries: list[tuple[Any, str]]  # (Query, text hash) not yet stored
    query_ids: list[str] = field(default_factory=list)  # per final evaluation: its query id
    hashes: list[str] = field(default_factory=list)  # per final evaluation: its query's text hash
    scores: np.ndarray | None = None  # per final evaluation
    new_evaluations: int = 0
    warnings: list[str] = field(default_factory=list)  # decided against the store (each attempt afresh)


class _Moved(Exception):
    """Another writer changed the store between reading it and landing: land again from what is there."""


def land_one(view, change: Change) -> ModelChange:
    """Land one change; its error is raised."""
    outcome = land(view, [change])[change.id]
    if isinstance(outcome, RegistryError):
        raise outcome
    return outcome


def land(view, changes: list[Change], *,
         on_commit: Callable[[Any, dict[str, ModelChange]], None] | None = None, _encoded: set[str] | None = None
         ) -> dict[str, ModelChange | RegistryError]:
    """Land these changes (distinct names); per change id its `ModelChange`, or the error that failed it.
    `view` gives the store, the active encoder and query vectors (registry.operations.StoreView, or the
    service's warm state); `on_commit(store, results)` runs inside the transaction (the service writes its
    jobs' completion rows there, so a job and its model land together)."""
    outcomes: dict[str, ModelChange | RegistryError] = {}
    encoded = set() if _encoded is None else _encoded  # text hashes encoded for these changes, over every attempt
    try:
        for attempt in range(_ATTEMPTS):
            try:
                # The last attempt holds the writer lock throughout (encoding included), so that a busy
                # writer elsewhere cannot starve this one; the first ones leave other writers free.
                if attempt == _ATTEMPTS - 1:
                    with view.store.transaction():
                        stored = _land(view, changes, outcomes, on_commit, encoded)
                else:
                    stored = _land(view, changes, outcomes, on_commit, encoded)
                view.vectors_stored(*stored)  # committed: the view need not offer them to the next write
                landed = view.store.landed_generation()  # read after: this one's, or a later write's
                for outcome in outcomes.values():
                    if isinstance(outcome, ModelChange):
                        outcome.generation = landed
                break
            except _Moved:
                outcomes.clear()
    except RegistryError as err:
        if len(changes) == 1:
            outcomes[changes[0].id] = err
        else:
            for change in changes:  # one change spoilt the batch: find it by landing each alone
                if change.id not in outcomes:
                    outcomes.update(land(view, [change], on_commit=on_commit, _encoded=encoded))
    return outcomes


def _prepare(change: Change, stored_models, by_id: dict[str, str], by_hash: dict[str, str],
             claimed: dict[str, str], stored_tasks: dict[str, str] | None = None, *,
             missing: Callable[[str], NotFoundError] | None = None) -> _Prepared:
    """`missing(name)`: the error for a refine of a model not stored (`models.not_live`: a removed model says
    so); without it, the closest stored names."""
    from registry.catalog.rows import record_of

    existing = stored_models.get(change.name)
    if change.kind == "add":
        if existing is not None and not change.replace:
            raise RegistryError(f"a model named {change.name!r} exists: `registry refine {shlex.quote(change.name)} --evals FILE` "
                                "(HTTP: POST /v1/models/NAME/refine) adds evaluations to it as a new version; "
                                "--replace (replace: true) starts it afresh")
        record = change.record if change.record is not None else ModelRecord(name=change.name)
    elif change.kind == "refine":
        if existing is None:
            raise missing(change.name) if missing else NotFoundError.model(change.name, list(stored_models))
        record = record_of(existing)
    else:
        raise InputError(f"unknown change kind {change.kind!r}", field="kind")
    batch = change.batch
    renamed = batch.land_texts_on_stored(by_hash)
    new_queries, batch_hash = [], {}
    for query, (file, line) in zip(batch.queries, batch.query_origins):
        if query.id in renamed:
            continue
        digest = text_hash(query.text)
        stored = by_id.get(query.id)
        if stored is not None and stored != digest:
            raise InputError(f"query id {query.id!r} is already stored with a different text", file=file, line=line,
                             field="query_id")
        other = claimed.get(query.id)
        if other is not None and other != digest:
            raise InputError(f"query id {query.id!r} is given with a different text by another model landing now",
                             file=file, line=line, field="query_id")
        batch_hash[query.id] = digest
        if stored is None:
            new_queries.append((query, digest))
    for i, query_id in enumerate(batch.eval_queries):
        if query_id not in batch_hash and query_id not in by_id:
            file, line = batch.where(i)
            raise InputError(f"query id {query_id!r} is neither in these evaluations nor in the store",
                             file=file, line=line, field="query_id")
    # a stored query keeps its task: a row giving it another one is said so, not silently dropped
    warnings = batch.stored_task_warnings(stored_tasks or {}, renamed)
    return _Prepared(change, record, existing, new_queries, warnings=warnings)


def _land(view, changes: list[Change], outcomes, on_commit, encoded_before: set[str]) -> tuple[str, list[str]]:
    """Land `changes` in one transaction, filling `outcomes`; (the query encoder, the text hashes whose
    vectors the store holds now that it may not have held before)."""
    from encoder.data import EvalData
    from encoder.inference import embed_models
    from registry.catalog.ingest import model_row
    from registry.catalog.evaluation_log import EVALUATION_LOG, EVALUATION_LOG_SCHEMA, log_rows
    from registry.catalog.models import not_live
    from registry.catalog.rows import next_versions, version_row

    store = view.store
    seen = store.versions()  # everything below is decided from this state of the tables
    active = view.active()
    stored_models = {row["name"]: row for row in store.read(MODELS, without=HEAVY_MODEL_COLUMNS).to_pylist()}
    queries = store.read(QUERIES, ["query_id", "text_hash", "task"])
    by_id = dict(zip(queries.column("query_id").to_pylist(), queries.column("text_hash").to_pylist()))
    by_hash = {h: q for q, h in by_id.items()}
    stored_tasks = dict(zip(queries.column("query_id").to_pylist(), queries.column("task").to_pylist()))

    from registry.catalog.aliases import read_aliases, reads_as_version

    aliases = read_aliases(store.home)
    prepared: list[_Prepared] = []
    claimed: dict[str, str] = {}
    for change in changes:
        new_name = change.kind == "add" and change.name not in stored_models
        if new_name and (versioned := reads_as_version(change.name)):
            outcomes[change.id] = InputError(versioned, field="name")
            continue
        if new_name and change.name in aliases:
            # `alias set` refuses a model's name; the reverse too, or the two would answer to one name
            outcomes[change.id] = RegistryError(
                f"{change.name!r} is an alias (of {aliases[change.name]['name']}); a model must not take an "
                f"alias's name: `registry alias delete {change.name}` first, or name the model otherwise")
            continue
        try:
            job = _prepare(change, stored_models, by_id, by_hash, claimed, stored_tasks,
                           missing=lambda name: not_live(store, name, list(stored_models)))
        except RegistryError as err:
            outcomes[change.id] = err
            continue
        claimed.update({q.id: d for q, d in job.new_queries})
        prepared.append(job)
    if not prepared:
        return active.query_encoder, []

    # Each model's evaluations after the write: an add holds exactly what it brings (a removed model of
    # that name kept its evaluations, for restore, and they must not leak into the new one); a refine
    # holds what is stored plus what it brings (a new score for a stored query replaces the old).
    refined = [p.change.name for p in prepared if p.change.kind == "refine"]
    stored_evals: dict[str, dict[str, float]] = {n: {} for n in refined}
    if refined:
        table = store.read_in(EVALUATIONS, ["model", "query_id", "score"], "model", refined)
        for m, q, s in zip(table.column("model").to_pylist(), table.column("query_id").to_pylist(),
                           table.column("score").to_pylist()):
            stored_evals[m][q] = s
    new_hash = {q.id: d for p in prepared for q, d in p.new_queries}
    texts: dict[str, str | None] = {d: q.text for p in prepared for q, d in p.new_queries}
    for p in list(prepared):
        given = dict(zip(p.change.batch.eval_queries, p.change.batch.scores_array().tolist()))
        final = dict(stored_evals.get(p.change.name, {})) if p.change.kind == "refine" else {}
        p.new_evaluations = sum(1 for q, s in given.items() if final.get(q) != s)
        final.update(given)
        if len(final) > limits.MAX_EVALS_PER_MODEL:
            outcomes[p.change.id] = InputError(
                f"model {p.change.name!r} would hold more than {limits.MAX_EVALS_PER_MODEL:,} evaluations "
                f"({len(final):,}); see docs/service.md for the limits", field="evaluations")
            prepared.remove(p)
            continue
        if p.change.kind == "refine" and p.new_evaluations == 0 and _embedded_from(
                stored_models[p.change.name], active.encoder_id, len(final), p.change.max_evals):
            # nothing the stored version lacks: no new version (history numbers name changes only)
            current = stored_models[p.change.name]
            outcomes[p.change.id] = ModelChange(
                name=p.change.name, version=int(current.get("version") or 1), event="unchanged",
                encoder_id=active.encoder_id, n_evals=int(current["n_evals"]), new_evaluations=0, encoded_texts=0,
                warnings=list(p.change.batch.warnings) + p.warnings + [
                    f"{p.change.name}: every evaluation given is stored already with the same score; "
                    f"version {int(current.get('version') or 1)} stays, no new version"])
            prepared.remove(p)
            continue
        if p.change.kind == "refine" and p.new_evaluations == 0:  # a version all the same: say what changed
            stored = stored_models[p.change.name]
            used = len(final) if p.change.max_evals is None else min(len(final), p.change.max_evals)
            why = (f"from {used} of its {len(final)} evaluations (the stored vector read {stored.get('n_evals')})"
                   if stored.get("encoder_id") == active.encoder_id and stored.get("vector") is not None
                   else f"under encoder {active.encoder_id}")
            p.warnings.append(f"{p.change.name}: no new evaluations; the new version re-embeds the stored ones {why}")
        p.query_ids = list(final)
        p.hashes = [new_hash.get(q) or by_id[q] for q in final]
        p.scores = np.asarray(list(final.values()), dtype=np.float32)
    if not prepared:
        return active.query_encoder, []

    # Query vectors: the view's caches, then the store's, then one encoding batch for the rest.
    wanted = sorted({h for p in prepared for h in p.hashes})
    vectors, encoded = view.text_vectors(active.query_encoder, {h: texts.get(h) for h in wanted}, bulk=True)
    encoded_before.update(encoded)  # an attempt after this one finds them in the view's memory, not encoded

    # One forward pass of F over every model of the batch (padded sets, see embed_models).
    position = {h: i for i, h in enumerate(wanted)}
    model_index = np.concatenate([np.full(len(p.hashes), m, dtype=np.int64) for m, p in enumerate(prepared)])
    query_index = np.concatenate([np.array([position[h] for h in p.hashes], dtype=np.int64) for p in prepared])
    data = EvalData(models=[p.change.name for p in prepared], query_ids=wanted, tasks=[""] * len(wanted),
                    query_vectors=np.stack([vectors[h] for h in wanted]).astype(np.float32),  # (Q, D)
                    model_index=model_index, query_index=query_index,
                    scores=np.concatenate([p.scores for p in prepared]))
    if data.query_vectors.shape[1] != active.config.query_dim:
        raise RegistryError(f"encoder {active.encoder_id} reads {active.config.query_dim}-d query vectors; "
                            f"{active.query_encoder} gives {data.query_vectors.shape[1]}-d")
    per_model, start = [], 0
    for p in prepared:
        evals = np.arange(start, start + len(p.hashes))
        start += len(p.hashes)
        limit = p.change.max_evals
        if limit is not None and len(evals) > limit:  # a sample seeded by the name: re-embedding reproduces it
            rng = np.random.default_rng(zlib.crc32(p.change.name.encode("utf-8")))
            evals = np.sort(rng.choice(evals, size=limit, replace=False))
        per_model.append(evals)
    z = embed_models(active.locus, data, per_model)  # (M, d)

    now = now_utc()
    model_rows, events, results = [], [], {}
    for p, zm, evals in zip(prepared, z, per_model):
        event = p.change.kind if p.change.kind == "refine" else ("replace" if p.existing else "add")
        row = model_row(p.record, p.existing["added"] if p.existing else now)
        row.update(vector=zm.astype(np.float32).tolist(), encoder_id=active.encoder_id, n_evals=int(len(evals)),
                   embedded_at=now)
        model_rows.append(row)
        events.append(event)

    with store.transaction():
        if store.versions() != seen:  # another writer changed the tables meanwhile
            raise _Moved()
        numbers = next_versions(store, [p.change.name for p in prepared])  # removed versions count too
        fresh = {}
        for p in prepared:
            for q, d in p.new_queries:
                fresh.setdefault(q.id, {"query_id": q.id, "text": q.text, "task": q.task, "text_hash": d})
        store.append(QUERIES, list(fresh.values()), QUERY_SCHEMA)
        # the vectors encoded now, and those the view held that the store may lack (a service's route
        # encoded the text and kept it in memory): a query stored without one is left out by every reader
        storing = list(dict.fromkeys([*encoded, *sorted(view.unstored_vectors(active.query_encoder, wanted))]))
        if storing:
            already = store.cached_vectors(active.query_encoder, storing)
            keep = [h for h in storing if h not in already]
            if keep:
                store.add_vectors(active.query_encoder, keep, np.stack([vectors[h] for h in keep]))
        added = [p for p in prepared if p.change.kind == "add"]
        store.delete_in(EVALUATIONS, "model", [p.change.name for p in added])
        store.append(EVALUATIONS, _evaluation_rows(added, now), EVALUATION_SCHEMA)
        store.upsert(EVALUATIONS, _evaluation_rows([p for p in prepared if p.change.kind == "refine"], now),
                     EVALUATION_SCHEMA, ["model", "query_id"])
        # the fingerprints of the evaluations just written (from the rows in hand: reading them back cost an
        # add-model ~60 ms), in this transaction with the LOCUS vectors
        prints = fingerprint_columns(store, load_item_table(store, active.encoder_id), [r["name"] for r in model_rows],
                                     held=_held(prepared, vectors, queries))
        for p, row, event in zip(prepared, model_rows, events):
            row.update(prints[row["name"]], version=numbers[row["name"]])
            results[p.change.id] = ModelChange(
                name=p.change.name, version=row["version"], event=event,
                encoder_id=active.encoder_id, n_evals=row["n_evals"], new_evaluations=p.new_evaluations,
                encoded_texts=sum(1 for _, d in p.new_queries if d in encoded_before),
                warnings=list(p.change.batch.warnings) + p.warnings + _thin(p.change.name, row["n_evals"]))
        store.upsert(MODELS, model_rows, MODEL_SCHEMA, "name")
        store.append(VERSIONS, [version_row(row, event, now) for row, event in zip(model_rows, events)],
                     VERSION_SCHEMA)
        # what each version brought, kept after a later refine replaces a score (drift compares versions)
        store.append(EVALUATION_LOG, log_rows(pa.concat_tables([_evaluation_rows(added, now), _evaluation_rows(
            [p for p in prepared if p.change.kind == "refine"], now)]), numbers), EVALUATION_LOG_SCHEMA)
        if on_commit is not None:
            on_commit(store, results)
    outcomes.update(results)
    return active.query_encoder, storing


def _embedded_from(row: dict, encoder_id: str, n_held: int, max_evals: int | None) -> bool:
    """Whether a stored model row is the embedding a landing of `n_held` evaluations would write now."""
    wanted = n_held if max_evals is None else min(n_held, max_evals)
    return row.get("vector") is not None and row.get("encoder_id") == encoder_id and row.get("n_evals") == wanted


def _held(prepared: list[_Prepared], vectors: dict, queries) -> HeldEvaluations:
    """Each model's evaluations as the transaction stores them, with their queries' vectors and tasks."""
    tasks = dict(zip(queries.column("query_id").to_pylist(), queries.column("task").to_pylist()))
    tasks.update({q.id: q.task for p in prepared for q, _ in p.new_queries})
    return HeldEvaluations(
        models=np.asarray([p.change.name for p in prepared for _ in p.query_ids], dtype=object),
        query_ids=np.asarray([q for p in prepared for q in p.query_ids], dtype=object),
        scores=np.concatenate([p.scores for p in prepared]).astype(np.float64),
        vectors={q: vectors[h] for p in prepared for q, h in zip(p.query_ids, p.hashes)},
        tasks=tasks)


def _thin(name: str, n_evals: int) -> list[str]:
    from registry.evidence import thin_warning

    warning = thin_warning(name, n_evals)
    return [warning] if warning else []


def _evaluation_rows(group: list[_Prepared], now) -> pa.Table:
    models, queries, scores, sources = [], [], [], []
    for p in group:
        given = dict(zip(p.change.batch.eval_queries, p.change.batch.scores_array().tolist()))
        models.extend([p.change.name] * len(given))
        queries.extend(given)
        scores.extend(given.values())
        sources.extend([p.change.source or p.change.batch.source] * len(given))
    return pa.table({
        "model": pa.array(models, pa.string()), "query_id": pa.array(queries, pa.string()),
        "score": pa.array(scores, pa.float32()), "source": pa.array(sources, pa.string()),
        "time": pa.array([now] * len(models), pa.timestamp("us", tz="UTC")),
    }, schema=EVALUATION_SCHEMA)
