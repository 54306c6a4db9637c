"""The writes: add and refine a model (embedding jobs for the single writer), their jobs, remove and
restore (one small transaction each). Every route here needs `WRITE` but the job read."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, File, Form, Query, UploadFile
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from registry import operations, results as r
from registry.catalog.models import record_from_metadata
from registry.errors import InputError, NotFoundError
from registry.importers._common import DuplicateKey, unique_keys
from registry.limits import MAX_EVALS_PER_MODEL
from registry.service import schemas as s
from registry.service.deps import WRITE, Name, Queue, Settings, State, Uploads
from registry.service.errors import ERRORS, error_response
from registry.service.state import note_generation
from registry.service.writer import JobSpec
from registry.service.json_body import UniqueKeysRoute

__all__ = ["router", "uploads_dir"]

router = APIRouter(route_class=UniqueKeysRoute)
MaxEvalsForm = Form(None, ge=1, le=MAX_EVALS_PER_MODEL, description=s.MaxEvals.description)
_UPLOAD_SUFFIXES = (".csv", ".jsonl", ".parquet")

# OpenAPI links: which operations a response's model name (or job id) leads to. /docs lists them under each
# response; a stateful fuzzer (schemathesis) follows them from a created model to its reads and writes.
def model_links(*operations: str, name: str = "$response.body#/name") -> dict[str, dict]:
    return {"links": {op: {"operationId": LINKED[op], "parameters": {"name": name}} for op in operations}}


LINKED = {"show": "show_v1_models__name__get", "history": "history_v1_models__name__history_get",
          "accuracy": "accuracy_v1_models__name__accuracy_get", "drift": "drift_v1_models__name__drift_get",
          "refine": "refine_v1_models__name__refine_post", "remove": "remove_v1_models__name__delete",
          "restore": "restore_v1_models__name__restore_post"}
_JOB_LINK = {"links": {"job": {"operationId": "get_job_v1_jobs__job_id__get",
                               "parameters": {"job_id": "$response.body#/id"}}}}
CREATED = {201: {"model": r.ModelChange, **model_links("show", "history", "accuracy", "drift", "refine", "remove")},
           202: {"model": s.JobView, **_JOB_LINK}, **ERRORS}


@router.post("/v1/models", dependencies=WRITE, status_code=201, responses=CREATED, tags=["models"])
def add_model(body: s.AddModelRequest, queue: Queue, settings: Settings):
    """Add (or with `replace`, replace) a model from inline evaluations: an embedding job."""
    record_from_metadata(body.name, body.metadata)  # a bad value is refused now, not by a failed job
    spec = JobSpec(id=queue.new_id(), kind="add", name=body.name, evaluations=_spec_rows(body.evaluations),
                   metadata=dict(body.metadata), replace=body.replace, max_evals=body.max_evals)
    return _answer(queue.submit(spec), body.wait, settings)


@router.post("/v1/models/{name}/file", dependencies=WRITE, status_code=201, responses=CREATED, tags=["models"])
async def add_model_file(name: Name, queue: Queue, settings: Settings, uploads: Uploads,
                         file: UploadFile = File(...), metadata: str = Form("{}"),
                         replace: bool = Form(False), wait: bool = Form(True), max_evals: int | None = MaxEvalsForm):
    """Add a model from an uploaded CSV/JSONL/Parquet file of query/query_id, score[, task]."""
    meta = _metadata(name, metadata)
    return await _file_job(queue, settings, uploads, file, wait, kind="add", name=name, metadata=meta,
                           replace=replace, max_evals=max_evals)


@router.post("/v1/models/{name}/refine", dependencies=WRITE, status_code=201, responses=CREATED, tags=["models"])
def refine(name: Name, body: s.RefineRequest, queue: Queue, settings: Settings):
    """Add evaluations to a model and re-embed it as a new version (an embedding job)."""
    spec = JobSpec(id=queue.new_id(), kind="refine", name=name, evaluations=_spec_rows(body.evaluations),
                   max_evals=body.max_evals)
    return _answer(queue.submit(spec), body.wait, settings)


@router.post("/v1/models/{name}/refine/file", dependencies=WRITE, status_code=201, responses=CREATED,
             tags=["models"])
async def refine_file(name: Name, queue: Queue, settings: Settings, uploads: Uploads,
                      file: UploadFile = File(...), wait: bool = Form(True), max_evals: int | None = MaxEvalsForm):
    return await _file_job(queue, settings, uploads, file, wait, kind="refine", name=name, max_evals=max_evals)


@router.get("/v1/jobs/{job_id}", response_model=s.JobView, responses=ERRORS, tags=["jobs"])
def get_job(job_id: str, queue: Queue):
    job = queue.get(job_id)
    if job is None:
        raise NotFoundError(f"no job {job_id!r}")
    note_generation(job.generation)
    return job.view()


@router.delete("/v1/models/{name}", dependencies=WRITE, response_model=r.RemoveResult,
               responses={200: model_links("restore", "history"), **ERRORS}, tags=["models"])
def remove(name: Name, state: State):
    """Remove a model (its history stays: restore brings it back)."""
    removed = operations.remove(state, name)
    note_generation(removed.generation)
    return removed


@router.post("/v1/models/{name}/restore", dependencies=WRITE, response_model=r.RestoreResult,
             responses={200: model_links("show", "history", "remove"), **ERRORS}, tags=["models"])
def restore(name: Name, state: State, version: int | None = Query(default=None, ge=1, le=2**31 - 1)):
    restored = operations.restore(state, name, version)
    note_generation(restored.generation)
    return restored


# ------------------------------------------------------------------ helpers
def _answer(job, wait: bool, settings) -> JSONResponse:
    """201 with the change when the job landed (within the wait), its error when it failed, else 202
    with the job to poll."""
    if wait:
        job.event.wait(settings.limits.max_wait_s)
    view = job.view()
    if job.state == "done":
        note_generation(job.generation)
        return JSONResponse(r.ModelChange.model_validate(job.result).model_dump(mode="json"), status_code=201,
                            headers={"Location": f"/v1/jobs/{job.spec.id}", "X-Job-Id": job.spec.id})
    if job.state == "failed":
        e = job.error or {}
        return error_response(int(e.get("status") or 409), e.get("type", "RegistryError"), e.get("message", ""),
                              field=e.get("field"), file=e.get("file"), line=e.get("line"))
    return JSONResponse(s.JobView.model_validate(view).model_dump(mode="json"), status_code=202,
                        headers={"Location": f"/v1/jobs/{job.spec.id}", "X-Job-Id": job.spec.id})


def _spec_rows(evaluations: list[s.EvaluationIn]) -> list[dict[str, Any]]:
    return [e.model_dump(exclude_none=True) for e in evaluations]


def _metadata(name: str, metadata: str) -> dict:
    """An upload's metadata form field: a JSON object that makes a valid record, or a 422 now."""
    try:
        meta = json.loads(metadata, object_pairs_hook=unique_keys)
    except DuplicateKey as err:
        raise InputError(str(err), field="metadata") from None
    except (ValueError, RecursionError):  # RecursionError: nested too deeply for the parser
        raise InputError("metadata is not JSON (or nested too deeply)", field="metadata") from None
    if not isinstance(meta, dict):
        raise InputError("metadata must be a JSON object", field="metadata")
    record_from_metadata(name, meta)
    return meta


async def _file_job(queue, settings, uploads: Path, file: UploadFile, wait: bool, **spec):
    """An add or refine from an uploaded file: spooled to disk, then a job like an inline one."""
    job_id = queue.new_id()
    path, label = await _spool(file, uploads, job_id)
    job = JobSpec(id=job_id, file=path, file_label=label, **spec)
    return await run_in_threadpool(lambda: _answer(queue.submit(job), wait, settings))


async def _spool(file: UploadFile, uploads: Path, job_id: str) -> tuple[str, str]:
    label = Path(file.filename or "upload").name
    suffix = Path(label).suffix.lower()
    if suffix not in _UPLOAD_SUFFIXES:
        raise InputError(f"expected a .csv, .jsonl or .parquet file, not {label!r}", field="file")
    path = uploads / f"{job_id}{suffix}"
    with open(path, "wb") as out:
        while chunk := await file.read(1 << 20):
            out.write(chunk)
    return str(path), label


def uploads_dir(home) -> Path:
    """Where uploaded files wait for the writer: in the home, or for an s3 home on this machine's disk
    (the importers read local files; a job whose spooled file is gone fails with a clear error)."""
    from indexing.home import as_path, is_remote

    home = as_path(home)
    if not is_remote(home):
        return home / "service" / "uploads"
    import tempfile

    return Path(tempfile.gettempdir()) / "locus-registry-uploads" / home.bucket / home.key
