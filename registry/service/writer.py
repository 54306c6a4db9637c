"""The service's writer: jobs in, `registry.catalog.landing` underneath.

The job queue hands over every job waiting (distinct model names, up to a batch size). Each job becomes
a change (its evaluations parsed here, so that a bad upload fails alone, naming the file as the client
sent it), and the batch lands through `registry.catalog.landing.land` on the warm state: the same write as the
library's add/refine, one forward pass and one store transaction for the batch, with each job's own
completion row written in that transaction (so a job and its model land together, or neither does).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from indexing.store import now_utc
from registry.errors import InputError, RegistryError

log = logging.getLogger("locus.service")

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


def done_job_ids(store) -> dict[str, dict[str, Any]]:
    """Results of the jobs that landed (read on restart to tell finished jobs from lost ones)."""
    if not store.has_table(JOBS_TABLE):
        return {}
    table = store.read(JOBS_TABLE)
    return {i: json.loads(r) for i, r in zip(table.column("id").to_pylist(), table.column("result").to_pylist())}


def land_jobs(state, specs: list[JobSpec]) -> dict[str, dict[str, Any] | RegistryError]:
    """Land these jobs (distinct model names); per job id its result (JSON), or the error that failed it."""
    from registry.catalog.landing import land

    outcomes: dict[str, dict[str, Any] | RegistryError] = {}
    changes = []
    for spec in specs:
        try:
            changes.append(_change(state, spec))
        except RegistryError as err:
            outcomes[spec.id] = err
        except Exception as err:  # noqa: BLE001 - a bug in one job's input fails that job, not its batch
            log.exception("job %s failed while it was read", spec.id)
            outcomes[spec.id] = err
    kinds = {spec.id: spec.kind for spec in specs}

    def completion_rows(store, results) -> None:
        now = now_utc()
        store.append(JOBS_TABLE, [{"id": i, "kind": kinds[i], "name": r.name,
                                   "result": json.dumps(r.model_dump(mode="json")), "time": now}
                                  for i, r in results.items()], JOB_SCHEMA)

    by_id = {spec.id: spec for spec in specs}
    for job_id, outcome in land(state, changes, on_commit=completion_rows).items():
        if isinstance(outcome, InputError) and by_id[job_id].file is not None:
            outcome = _named_as_sent(outcome, by_id[job_id])  # a row refused against the store names the upload
        outcomes[job_id] = outcome if isinstance(outcome, RegistryError) else outcome.model_dump(mode="json")
    return outcomes


def _named_as_sent(err: InputError, spec: JobSpec) -> InputError:
    """`err` naming the uploaded file as the client sent it, never the server's spool path."""
    label = spec.file_label or "upload"
    spooled = (spec.file, Path(spec.file).name)
    file = label if err.file is not None and any(p in str(err.file) for p in spooled) else err.file
    return InputError(_unspooled(err.problem, spooled, label), file=file, line=err.line, field=err.field, unit=err.unit)


def _change(state, spec: JobSpec):
    """The job as a `registry.catalog.landing.Change` (names resolved and checked, evaluations parsed)."""
    from registry.operations import add_change, refine_change

    evaluations = _parse(spec) if spec.file is not None else (spec.evaluations or [])
    source = f"service:{spec.id}"
    if spec.kind == "add":
        return add_change(spec.name, evaluations, spec.metadata, replace=spec.replace, max_evals=spec.max_evals,
                          id=spec.id, source=source)
    if spec.kind == "refine":
        return refine_change(state, spec.name, evaluations, max_evals=spec.max_evals, id=spec.id, source=source)
    raise InputError(f"unknown job kind {spec.kind!r}", field="kind")


def _parse(spec: JobSpec):
    """An uploaded file's evaluations (an ImportBatch), errors naming the file as the client sent it."""
    from registry.importers.tabular import read_model_evaluations

    label = spec.file_label or "upload"
    spooled = (spec.file, Path(spec.file).name)  # never shown: the client knows its file by its own name
    try:
        batch = read_model_evaluations(Path(spec.file), spec.name)
    except InputError as err:  # name the file as the client sent it, not our spool path
        raise InputError(_unspooled(err.problem, spooled, label), file=label, line=err.line,
                         field=err.field, unit=err.unit) from None
    batch.warnings = [_unspooled(w, spooled, label) for w in batch.warnings]
    batch.rename_file(str(Path(spec.file)), label)
    return batch


def _unspooled(text: str, spooled: tuple[str, ...], label: str) -> str:
    for path in spooled:
        text = text.replace(path, label)
    return text
