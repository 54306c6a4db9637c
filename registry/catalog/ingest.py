"""Landing an ImportBatch in the store: checks against what is stored, encodes new texts, writes.

Order of work, chosen so that a refused import changes nothing and a repeated import is a no-op:
1. check the batch against the store (query ids whose text differs, evaluations of unknown queries);
2. diff against the store: only new queries, models and evaluations (or changed scores) are written;
3. encode the texts that the chosen query encoder has never seen (outside the write lock: slow), in
   chunks, each committed to the query-vector cache at once (an interrupted import keeps them);
4. write the queries, models and evaluations in one store transaction.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

from indexing.store import (
    EVALUATION_SCHEMA,
    EVALUATIONS,
    MODEL_SCHEMA,
    MODELS,
    QUERIES,
    QUERY_SCHEMA,
    Store,
    now_utc,
)
from registry.errors import InputError
import registry.limits as limits
from registry.limits import DEFAULT_TASK, check_file_size, check_model_name
from registry.importers._common import ImportBatch, text_hash
from registry.records import ModelRecord
from registry.results import ImportReport
from registry.catalog.rows import next_versions
from registry.catalog.evaluation_log import EVALUATION_LOG, EVALUATION_LOG_SCHEMA, log_rows

__all__ = ["ImportReport", "Precomputed", "ingest", "load_precomputed", "model_row"]


@dataclass
class Precomputed:
    """Query vectors computed elsewhere: row i of `vectors` encodes query `ids[i]`."""

    encoder: str
    ids: list[str]
    vectors: np.ndarray
    vectors_file: str
    ids_file: str


def load_precomputed(vectors_file: Path, ids_file: Path, *, encoder: str, id_prefix: str = "") -> Precomputed:
    """Read `.npy` vectors and ids without unpickling; shapes are checked here, ids against the
    queries at ingest."""
    arrays = []
    for path in (vectors_file, ids_file):
        check_file_size(path)
        try:
            with open(path, "rb") as handle:
                if handle.read(6) != b"\x93NUMPY":  # else numpy calls any other file "pickled data"
                    raise InputError("not a .npy file (it does not start with the .npy magic bytes)", file=path)
            arrays.append(np.load(path, allow_pickle=False))
        except FileNotFoundError:
            raise InputError("file not found", file=path) from None
        except ValueError as err:
            raise InputError(f"not a plain .npy array ({err})", file=path) from None
    vectors, ids = arrays
    if vectors.ndim != 2 or vectors.shape[0] == 0:
        raise InputError(f"expected a 2-d (queries x dim) array, got shape {vectors.shape}", file=vectors_file)
    if not np.issubdtype(vectors.dtype, np.floating):
        raise InputError(f"expected floating-point vectors, got {vectors.dtype}", file=vectors_file)
    if ids.ndim != 1:
        raise InputError(f"expected a 1-d array of query ids, got shape {ids.shape}", file=ids_file)
    if len(ids) != len(vectors):
        raise InputError(
            f"{len(ids)} ids for {len(vectors)} vector rows in {vectors_file}", file=ids_file
        )
    vectors = vectors.astype(np.float32)
    if not np.isfinite(vectors).all():
        row = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise InputError(f"row {row} holds NaN or infinite values", file=vectors_file)
    id_list = [id_prefix + (str(int(i)) if np.issubdtype(ids.dtype, np.integer) else str(i)) for i in ids]
    if len(set(id_list)) != len(id_list):
        raise InputError("query ids repeat", file=ids_file)
    return Precomputed(encoder, id_list, vectors, str(vectors_file), str(ids_file))


def model_row(record: ModelRecord, added) -> dict:
    row = record.model_dump(exclude={"extra"})
    row["extra"] = json.dumps(record.extra, sort_keys=True)
    row["added"] = added
    row.update(vector=None, encoder_id=None, n_evals=None, embedded_at=None, version=1, fingerprint=None, table_id=None)
    return row


def _is_bare(record: ModelRecord) -> bool:
    """A record with nothing but a name: formats without model metadata must not erase what a
    richer import stored."""
    return record == ModelRecord(name=record.name)


def _merged(current: ModelRecord, given: ModelRecord) -> ModelRecord:
    """A stored model's record with what an import says of it: each field the import gives wins, each it
    leaves out stays (an `import --meta dataset=x` of evaluation rows erased the family, size and provider)."""
    typed = {k: getattr(given, k) if getattr(given, k) not in (None, []) else getattr(current, k)
             for k in ModelRecord.model_fields if k not in ("name", "extra")}
    return ModelRecord(name=current.name, **typed, extra={**current.extra, **given.extra})


ENCODE_CHUNK = 512  # texts encoded, then committed to the vector cache, at a time


def ingest(
    store: Store,
    batch: ImportBatch,
    *,
    encoder: str | None,
    load_encoder: Callable[[str], object] | None = None,
    precomputed: Precomputed | None = None,
    log: Callable[[str], None] | None = None,
    encode_chunk: int = ENCODE_CHUNK,
) -> ImportReport:
    """Check, diff, encode and write `batch`. `encoder` names the query encoder whose vectors the
    batch's new texts need (None: do not encode); `load_encoder(name)` is only called when some text
    has no vector yet. `log` receives one line per stage (checking, encoding with counts, writing).

    New texts are encoded `encode_chunk` at a time, and each chunk's vectors are committed to the
    query-vector cache (their own small transaction) as soon as they exist: an import interrupted while
    encoding keeps the texts already encoded, and a rerun encodes only the rest. The queries, models and
    evaluations are written at the end in one transaction: nothing half-written appears in them."""
    import time

    log = log or (lambda message: None)
    report = ImportReport(source=batch.source, warnings=list(batch.warnings))
    log(f"checking {batch.n_evaluations:,} evaluations of {len(set(batch.eval_models)):,} models on "
        f"{len(batch.queries):,} queries against the store ...")

    # 1. the batch against the store ---------------------------------------------------------
    stored_q = store.read(QUERIES, ["query_id", "text_hash", "task"])
    stored_hash = dict(zip(stored_q.column("query_id").to_pylist(), stored_q.column("text_hash").to_pylist()))
    renamed = batch.land_texts_on_stored({h: q for q, h in stored_hash.items()})  # as add-model and refine do
    new_queries, batch_hash = [], {}
    for query, (file, line) in zip(batch.queries, batch.query_origins):
        digest = text_hash(query.text)
        batch_hash[query.id] = digest
        if query.id in renamed:
            continue
        known = stored_hash.get(query.id)
        if known is None:
            new_queries.append((query, digest))
        elif known != digest:
            raise InputError(
                f"query id {query.id!r} is already stored with a different text "
                "(import with --id-prefix to keep both)", file=file, line=line, field="query_id",
            )
    for i, query_id in enumerate(batch.eval_queries):
        if query_id not in batch_hash and query_id not in stored_hash:
            file, line = batch.where(i)
            raise InputError(f"query id {query_id!r} is neither in this import nor in the store",
                             file=file, line=line, field="query_id")
    # a stored query keeps its task: a file giving it another (a row's task, or its query's) is told so, as
    # add-model and refine are
    for query, (file, line) in zip(batch.queries, batch.query_origins):
        if query.task and query.task != DEFAULT_TASK:
            batch.given_tasks.setdefault(query.id, (query.task, file, line))
    report.warnings.extend(batch.stored_task_warnings(
        dict(zip(stored_q.column("query_id").to_pylist(), stored_q.column("task").to_pylist())), renamed))

    if precomputed is not None:
        known_ids = batch_hash.keys() | stored_hash.keys()
        unknown = [q for q in precomputed.ids if q not in known_ids]
        if unknown:
            raise InputError(f"{len(unknown)} id(s) are not known queries, e.g. {unknown[0]!r}",
                             file=precomputed.ids_file)
        stored_dim = store.vector_dim(precomputed.encoder)
        if stored_dim is not None and stored_dim != precomputed.vectors.shape[1]:
            raise InputError(
                f"encoder {precomputed.encoder!r} already stores {stored_dim}-d vectors; "
                f"these are {precomputed.vectors.shape[1]}-d", file=precomputed.vectors_file,
            )
        given_ids = set(precomputed.ids)
        uncovered = [q.id for q, _ in new_queries if q.id not in given_ids]
        if uncovered and encoder == precomputed.encoder:
            report.warnings.append(f"{len(uncovered)} new queries have no precomputed vector; they are encoded")

    for record in batch.models:
        check_model_name(record.name, field="model")

    # 2. diff ---------------------------------------------------------------------------------
    stored_models = {row["name"]: row for row in store.read(MODELS).to_pylist()}
    insert_models, update_models = [], []
    for record in batch.models:
        row = stored_models.get(record.name)
        if row is None:
            insert_models.append(record)
        elif not _is_bare(record):
            current = ModelRecord(**{k: row[k] for k in ModelRecord.model_fields if k != "extra"},
                                  extra=json.loads(row["extra"] or "{}"))
            merged = _merged(current, record)
            if current != merged:
                update_models.append(merged)
    missing_models = sorted(set(batch.eval_models) - stored_models.keys() - {m.name for m in batch.models})
    insert_models.extend(ModelRecord(name=name) for name in missing_models)
    from registry.catalog.aliases import read_aliases, reads_as_version

    versioned = next((problem for r in insert_models if (problem := reads_as_version(r.name))), None)
    if versioned is not None:
        raise InputError(f"a new model of this import: {versioned}", field="model")
    aliases = read_aliases(store.home)
    hidden = sorted(r.name for r in insert_models if r.name in aliases)
    if hidden:  # as add-model refuses: a model and an alias must not answer to one name
        first = aliases[hidden[0]]
        raise InputError(f"{len(hidden)} new model name(s) of this import are aliases: {', '.join(map(repr, hidden[:5]))} "
                         f"({hidden[0]!r} points to {first['name']}); a model must not take an alias's name: import "
                         f"the evaluations under the model's own name, or `registry alias delete {hidden[0]}` first",
                         field="model")

    stored_e = store.read(EVALUATIONS, ["model", "query_id", "score"])
    stored_score = dict(zip(zip(stored_e.column("model").to_pylist(), stored_e.column("query_id").to_pylist()),
                            stored_e.column("score").to_numpy(zero_copy_only=False).tolist()))
    scores = batch.scores_array()
    new_rows, changed_rows = [], []
    for i, key in enumerate(zip(batch.eval_models, batch.eval_queries)):
        old = stored_score.get(key)
        if old is None:
            new_rows.append(i)
        elif old != scores[i]:  # both float32: an unchanged score compares equal
            changed_rows.append(i)
    _check_evaluations_per_model(batch, new_rows, stored_e.column("model").to_pylist())
    report.new_evaluations, report.updated_evaluations = len(new_rows), len(changed_rows)
    report.unchanged_evaluations = batch.n_evaluations - len(new_rows) - len(changed_rows)
    if changed_rows:
        report.warnings.append(f"{len(changed_rows)} evaluations were stored with another score; the new score replaces it")

    # 3. vectors: precomputed first, then encode what is still missing ------------------------
    # encoder name -> {text hash: (vector, came from the precomputed file)}
    vectors_to_store: dict[str, dict[str, tuple[np.ndarray, bool]]] = {}
    if precomputed is not None:
        all_hash = {**stored_hash, **batch_hash}
        given = {}
        for row, query_id in enumerate(precomputed.ids):
            given.setdefault(all_hash[query_id], precomputed.vectors[row])
        cached = store.cached_vectors(precomputed.encoder, list(given))
        vectors_to_store[precomputed.encoder] = {h: (v, True) for h, v in given.items() if h not in cached}
    if encoder is not None:
        pending = vectors_to_store.setdefault(encoder, {})
        # every text of the batch, stored ones too: a query stored without a vector (--no-encode) gets it
        # when its file is imported again with encoding on; the cache keeps the others from being redone
        wanted = {batch_hash[q.id]: q.text for q in batch.queries if batch_hash[q.id] not in pending}
        cached = store.cached_vectors(encoder, list(wanted))
        todo = [(d, t) for d, t in wanted.items() if d not in cached]
        if todo:
            if load_encoder is None:
                raise InputError(f"{len(todo)} query texts need encoding and no encoder loader was given")
            log(f"encoding {len(todo):,} new texts with {encoder} ({len(cached):,} already cached) ...")
            model = load_encoder(encoder)
            started, done = time.monotonic(), 0
            for start in range(0, len(todo), max(1, encode_chunk)):
                chunk = todo[start:start + max(1, encode_chunk)]
                vectors = np.asarray(model.encode([t for _, t in chunk]), dtype=np.float32)
                with store.transaction():
                    # Another writer may have cached some of these while we encoded outside the lock.
                    already = store.cached_vectors(encoder, [d for d, _ in chunk])
                    fresh = [(d, v) for (d, _), v in zip(chunk, vectors) if d not in already]
                    if fresh:
                        store.add_vectors(encoder, [d for d, _ in fresh], np.stack([v for _, v in fresh]))
                done += len(chunk)
                log(f"  encoded {done:,}/{len(todo):,} texts ({time.monotonic() - started:.0f} s; cached)")
            report.encoded_texts = len(todo)
        report.encoder = encoder

    # 4. write ------------------------------------------------------------------------------------
    log(f"writing {len(new_queries):,} queries, {len(insert_models) + len(update_models):,} models, "
        f"{len(new_rows) + len(changed_rows):,} evaluations in one transaction ...")
    now = now_utc()
    with store.transaction():
        store.append(QUERIES, [{"query_id": q.id, "text": q.text, "task": q.task, "text_hash": d}
                               for q, d in new_queries], QUERY_SCHEMA)
        if insert_models:
            # A name that was removed keeps its history: the re-imported model continues its numbers.
            numbers = next_versions(store, [r.name for r in insert_models])
            store.append(MODELS, [{**model_row(r, now), "version": numbers[r.name]} for r in insert_models],
                         MODEL_SCHEMA)
        if update_models:
            # New metadata, same embedding: a metadata change does not touch the vector.
            embedding = ("vector", "encoder_id", "n_evals", "embedded_at", "version", "fingerprint", "behaviour",
                         "table_id")
            rows = [{**model_row(r, stored_models[r.name]["added"]),
                     **{k: stored_models[r.name][k] for k in embedding}} for r in update_models]
            store.upsert(MODELS, rows, MODEL_SCHEMA, "name")
        for rows, upsert in ((new_rows, False), (changed_rows, True)):
            if not rows:
                continue
            data = pa.table({
                "model": pa.array([batch.eval_models[i] for i in rows], pa.string()),
                "query_id": pa.array([batch.eval_queries[i] for i in rows], pa.string()),
                "score": pa.array(scores[rows], pa.float32()),
                "source": pa.array([batch.source] * len(rows), pa.string()),
                "time": pa.array([now] * len(rows), pa.timestamp("us", tz="UTC")),
            }, schema=EVALUATION_SCHEMA)
            if upsert:
                store.upsert(EVALUATIONS, data, EVALUATION_SCHEMA, ["model", "query_id"], insert=False)
            else:
                store.append(EVALUATIONS, data, EVALUATION_SCHEMA)
            # logged under the model's version as imported: a later refine that re-scores these queries
            # replaces them in the evaluations table, and drift compares against them
            known = {**{n: int(r.get("version") or 1) for n, r in stored_models.items()}, **(numbers if insert_models else {})}
            store.append(EVALUATION_LOG, log_rows(data, {m: known.get(m, 1) for m in set(data.column("model").to_pylist())}),
                         EVALUATION_LOG_SCHEMA)
        for name, by_hash in vectors_to_store.items():
            # Another writer may have cached some of these while we encoded outside the lock.
            already = store.cached_vectors(name, list(by_hash))
            fresh = {h: item for h, item in by_hash.items() if h not in already}
            if fresh:
                store.add_vectors(name, list(fresh), np.stack([v for v, _ in fresh.values()]))
            report.stored_precomputed += sum(1 for _, from_file in fresh.values() if from_file)
    report.new_queries = len(new_queries)
    report.new_models = len(insert_models)
    report.updated_models = len(update_models)
    return report



def _check_evaluations_per_model(batch: ImportBatch, new_rows: list[int], stored_models: list[str]) -> None:
    """Refuse a batch that would leave a model with more than `limits.MAX_EVALS_PER_MODEL` stored evaluations,
    naming the file and line of the first one over the limit."""
    from collections import Counter

    added = Counter(batch.eval_models[i] for i in new_rows)
    if not added or max(added.values()) + len(stored_models) <= limits.MAX_EVALS_PER_MODEL:
        return  # cheap common case: even all stored rows plus the largest addition fit
    stored = Counter(stored_models)
    seen: Counter = Counter()
    for i in new_rows:
        model = batch.eval_models[i]
        seen[model] += 1
        if seen[model] + stored[model] > limits.MAX_EVALS_PER_MODEL:
            file, line = batch.where(i)
            raise InputError(f"model {model!r} would hold more than {limits.MAX_EVALS_PER_MODEL:,} evaluations "
                             f"({stored[model]:,} stored, {added[model]:,} new in this import); the limit is "
                             "per model", file=file, line=line, field="model")
