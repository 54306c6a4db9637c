"""Embedding jobs: accepted, persisted, drained by one writer thread in batches.

A job is written to `<home>/service/jobs/<id>.json` (with its evaluations, or the uploaded file
beside it) before the request is answered, so an accepted job survives a crash of the service. The
writer takes every waiting job (one per model name, up to `max_batch_jobs`) and lands them together
(see `writer`); a job's completion row lands in the same transaction as its model, so on restart a
job file without a completion row is simply run again, and one with it is marked done: nothing is
lost and nothing lands twice.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import asdict
from pathlib import Path
from typing import Any

from indexing.home import as_path, write_text_atomic
from registry.errors import RegistryError
from registry.service.writer import JobSpec, done_job_ids, land_jobs

log = logging.getLogger("locus.service")

__all__ = ["JobQueue", "JobRecord"]

SERVICE_DIR = "service"


class JobRecord:
    __slots__ = ("spec", "state", "created", "started", "finished", "result", "error", "event", "generation")

    def __init__(self, spec: JobSpec, state: str = "queued") -> None:
        self.spec = spec
        self.state = state  # queued, running, done, failed
        self.created = time.time()
        self.started: float | None = None
        self.finished: float | None = None
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.event = threading.Event()
        self.generation: int | None = None  # the home's once it landed (X-Locus-Generation)

    def view(self) -> dict[str, Any]:
        error = dict(self.error) if self.error else None
        status = error.pop("status", None) if error else None
        return {"id": self.spec.id, "kind": self.spec.kind, "name": self.spec.name, "state": self.state,
                "created": self.created, "started": self.started, "finished": self.finished,
                "result": self.result, "error": error, "error_status": status}


def error_body(err: Exception) -> dict[str, Any]:
    if not isinstance(err, RegistryError):  # a bug: its text is for the log, not for the client (as a 500 answer)
        return {"type": "InternalError", "message": "the server failed on this job; see its log", "field": None,
                "file": None, "line": None}
    return {"type": type(err).__name__, "message": str(err), "field": getattr(err, "field", None),
            "file": getattr(err, "file", None), "line": getattr(err, "line", None)}


class JobQueue:
    def __init__(self, state, *, max_batch: int = 64, keep_finished: int = 10_000, compact_every: int = 0) -> None:
        self.state = state
        self.max_batch = max_batch
        self.compact_every = compact_every  # batches between compactions of the store (0: never)
        self._since_compaction = 0
        self.compactions = 0
        self.keep_finished = keep_finished
        self.directory = as_path(state.home) / SERVICE_DIR / "jobs"
        self.directory.mkdir(parents=True, exist_ok=True)
        self._jobs: dict[str, JobRecord] = {}
        self._waiting: deque[str] = deque()
        self._cond = threading.Condition()
        self._stop = False
        self.batches = 0
        self.landed = 0
        self.failed = 0
        self.batch_sizes: list[int] = []
        self._recover()
        self._thread = threading.Thread(target=self._run, name="locus-writer", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- public
    def submit(self, spec: JobSpec) -> JobRecord:
        job = JobRecord(spec)
        self._persist(job)
        with self._cond:
            self._jobs[spec.id] = job
            self._waiting.append(spec.id)
            self._cond.notify_all()
        return job

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    def get(self, job_id: str) -> JobRecord | None:
        job = self._jobs.get(job_id)
        if job is not None:
            return job
        if not all(c in "0123456789abcdef" for c in job_id) or len(job_id) != 32:
            return None
        path = self.directory / f"{job_id}.json"
        try:
            saved = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return None
        record = JobRecord(JobSpec(**{k: v for k, v in saved["spec"].items()}), saved["state"])
        record.result, record.error = saved.get("result"), saved.get("error")
        record.created, record.started, record.finished = (saved.get("created", 0.0), saved.get("started"),
                                                           saved.get("finished"))
        generation = saved.get("generation")
        record.generation = generation if isinstance(generation, int) else None
        return record

    def depth(self) -> int:
        return len(self._waiting)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    # --------------------------------------------------------------- persistence
    def _persist(self, job: JobRecord) -> None:
        spec = asdict(job.spec)
        if job.state in ("done", "failed"):
            spec["evaluations"] = None  # the payload is in the store now (or refused): keep the record small
        payload = {"spec": spec, "state": job.state, "created": job.created, "started": job.started,
                   "finished": job.finished, "result": job.result, "error": job.error, "generation": job.generation}
        write_text_atomic(self.directory / f"{job.spec.id}.json", json.dumps(payload))

    def _recover(self) -> None:
        """Jobs accepted before a crash: done if their completion row landed, else queued again."""
        pending = []
        for path in sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime):
            try:
                saved = json.loads(path.read_text("utf-8"))
            except (OSError, ValueError):
                continue
            if saved.get("state") in ("queued", "running"):
                pending.append(JobRecord(JobSpec(**saved["spec"])))
                pending[-1].created = saved.get("created", time.time())
        if not pending:
            return
        done = done_job_ids(self.state.store)
        for job in pending:
            if job.spec.id in done:
                job.state, job.result, job.finished = "done", done[job.spec.id], time.time()
                job.generation = self.state.generation()  # it landed before this start: the home holds it
                job.result = {**job.result, "generation": job.generation}  # its row was written before the count
                self._persist(job)
                self._cleanup(job)
                job.event.set()
            else:
                self._waiting.append(job.spec.id)
            self._jobs[job.spec.id] = job

    def _cleanup(self, job: JobRecord) -> None:
        if job.spec.file:
            Path(job.spec.file).unlink(missing_ok=True)

    # ----------------------------------------------------------------- writer
    def _take(self) -> list[JobRecord]:
        """Waiting jobs with distinct model names (a second job on a name waits for the next batch)."""
        taken, names, rest = [], set(), deque()
        while self._waiting and len(taken) < self.max_batch:
            job = self._jobs[self._waiting.popleft()]
            if job.spec.name in names:
                rest.append(job.spec.id)
                continue
            names.add(job.spec.name)
            taken.append(job)
        self._waiting.extendleft(reversed(rest))
        return taken

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                batch = self._take()
            now = time.time()
            for job in batch:
                job.state, job.started = "running", now
            try:
                outcomes = land_jobs(self.state, [job.spec for job in batch])
            except Exception as err:  # noqa: BLE001 - a bug must fail the jobs, not the writer thread
                log.exception("a batch of %d job(s) failed to land", len(batch))
                outcomes = {job.spec.id: err for job in batch}
                if len(batch) > 1:  # nothing of it landed (one transaction): each alone, so only a bad one fails
                    for job in batch:
                        try:
                            outcomes.update(land_jobs(self.state, [job.spec]))
                        except Exception as alone:  # noqa: BLE001
                            log.exception("job %s failed to land", job.spec.id)
                            outcomes[job.spec.id] = alone
            self.batches += 1
            self.batch_sizes.append(len(batch))
            del self.batch_sizes[:-1000]
            finished = time.time()
            for job in batch:
                outcome = outcomes.get(job.spec.id)
                if isinstance(outcome, dict):
                    job.state, job.result = "done", outcome
                    job.generation = outcome.get("generation")  # the home's, read after the landing
                    self.landed += 1
                else:
                    err = outcome if outcome is not None else RegistryError("the job was not landed")
                    job.state, job.error = "failed", error_body(err)
                    job.error["status"] = _status_of(err)
                    self.failed += 1
                job.finished = finished
                if job.state == "done":
                    # answered first: its completion row landed with the model, so a restart before the
                    # file says "done" finds it done in the store (_recover) and does not land it twice
                    job.event.set()
                    self._persist(job)
                    self._cleanup(job)
                else:
                    self._persist(job)
                    self._cleanup(job)
                    job.event.set()
            self._forget_old()
            self._since_compaction += 1
            with self._cond:
                idle = not self._waiting
            compacted = idle and self._compact_if_due()
            if (idle and (compacted or any(job.state == "done" for job in batch))) or self.state.readers_waiting():
                # answered already; with jobs waiting, their batch changes the state again: warm after it,
                # unless a read waits for the state this one landed (it arrived during the batch)
                self.state.warm()

    def _compact_if_due(self) -> bool:
        """Compact the store when `compact_every` batches have landed since the last time (every batch,
        landed or rolled back, leaves fragments and versions behind); writes queue meanwhile."""
        if not self.compact_every or self._since_compaction < self.compact_every:
            return False
        from registry.defaults import KEEP_VERSIONS_FOR

        self._since_compaction = 0
        started = time.perf_counter()
        try:
            self.state.store.compact(keep_versions_for=KEEP_VERSIONS_FOR)
        except Exception:  # noqa: BLE001 - maintenance failing must not stop the writer; the next one retries
            log.exception("compacting the store failed")
            return False
        self.compactions += 1
        log.info("compacted the store in %.1f s", time.perf_counter() - started)
        return True

    def _forget_old(self) -> None:
        with self._cond:  # request threads add jobs meanwhile: a dict changing size under the loop killed the writer
            finished = [j for j in self._jobs.values() if j.state in ("done", "failed")]
            if len(finished) > self.keep_finished:
                finished.sort(key=lambda j: j.finished or 0)
                for job in finished[: len(finished) - self.keep_finished]:
                    self._jobs.pop(job.spec.id, None)  # still readable from its file


def _status_of(err: Exception) -> int:
    from registry.errors import InputError, NotFoundError

    if isinstance(err, InputError):
        return 422
    if isinstance(err, NotFoundError):
        return 404
    if isinstance(err, RegistryError):
        return 409
    return 500
