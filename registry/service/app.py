"""The FastAPI application: `/v1/...` over one registry home, `/metrics`, `/openapi.json`, `/docs`.

Reads (route, similar, list, show, audit, ...) answer from the warm state or from the store; writes
that embed a model (add, refine) become jobs for the single writer (`jobs`); remove and restore are
one small transaction each. Every error is JSON: {"error": {"type", "message", "field", "file", "line"}}.
"""
from __future__ import annotations

import hmac
import logging
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, File, Form, Header, Path as PathParam, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from registry.errors import InputError, NotFoundError, RegistryError
from registry.evidence import MIN_EVALS
from registry.catalog import record_from_metadata
from registry.limits import check_model_name
from registry import results as r
from registry.service import schemas as s
from registry.service.settings import CLIENT_HEADER, ServiceSettings

__all__ = ["create_app", "API_VERSION"]

API_VERSION = "v1"
log = logging.getLogger("locus.service")
_UPLOAD_SUFFIXES = (".csv", ".jsonl", ".parquet")
_ERRORS = {code: {"model": r.ErrorResponse} for code in (401, 403, 404, 409, 413, 422)}


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, *, field: str | None = None, type_: str = "HTTPError",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.field, self.type, self.headers = status, field, type_, headers


def _model_name(name: str = PathParam(description="the model name, percent-encoded (`org%2Fmodel`)")) -> str:
    """The model name of a `/v1/models/{name}...` path: the segment as sent, decoded once (the edge
    keeps a `%2F` in it from becoming a path separator), checked as every name is."""
    from urllib.parse import unquote

    try:
        return check_model_name(unquote(name, errors="strict"))
    except UnicodeDecodeError:
        raise _HTTPError(422, "name: the model name is not UTF-8", field="name", type_="ValidationError") from None
    except InputError as err:
        raise _HTTPError(422, f"name: {err.problem}", field="name", type_="ValidationError") from None

Name = Annotated[str, Depends(_model_name)]



def _error(status: int, type_: str, message: str, *, field=None, file=None, line=None, headers=None) -> JSONResponse:
    body = {"error": {"type": type_, "message": message, "field": field, "file": file, "line": line}}
    return JSONResponse(body, status_code=status, headers=headers)


def _registry_status(err: RegistryError) -> int:
    if isinstance(err, InputError):
        return 422
    if isinstance(err, NotFoundError):
        return 404
    return 409  # the request clashes with the registry's state (name exists, no encoder, ...)


class _Edge:
    """Pure ASGI middleware around every request: a body over the limit is answered 413 before it is
    read whole (declared or chunked), an unexpected error is answered 500 in JSON with the connection
    kept, a Host that is not this loopback server is refused when there is no token (DNS rebinding),
    and each request is counted and timed for /metrics. (Starlette's `@app.middleware` runs the app in
    a second task with memory streams: on a 2-core machine that was a third of a cached route's CPU
    time.)"""

    def __init__(self, app, max_bytes: int, observe, host_ok=None, allowed=None) -> None:
        self.app, self.max_bytes, self.observe, self.host_ok = app, max_bytes, observe, host_ok
        self.allowed = allowed  # path -> the methods its routes answer (for OPTIONS and 405's Allow)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500
        started = False

        async def tracking_send(message):
            nonlocal started, status
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
            await send(message)

        scope = _name_kept_encoded(scope)
        try:
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if self.host_ok is not None and not self.host_ok(host):
                await _error(403, "Forbidden", f"Host {host[:100]!r} is not this server: without a token only "
                             "localhost, 127.0.0.1 or [::1] with its port is served", field="Host")(
                    scope, receive, tracking_send)
                return
            if scope["method"] == "OPTIONS" and self.allowed is not None:
                methods = self.allowed(scope["path"])
                if methods:  # every method of the resource, not one of them (no CORS: nothing more)
                    allow = ", ".join(sorted(methods | {"OPTIONS"}))
                    await PlainTextResponse("", status_code=204, headers={"Allow": allow})(
                        scope, receive, tracking_send)
                    return
            await self._limited(scope, receive, tracking_send, lambda: started)
        except Exception:  # noqa: BLE001 - a bug answers JSON and the connection stays open
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await _error(500, "InternalError", "the server failed; see its log")(scope, receive, tracking_send)
        finally:
            route = scope.get("route")
            self.observe(scope["method"], getattr(route, "path", "unmatched"), status,
                         time.perf_counter() - start)

    def _too_big(self, scope, receive, send):
        return _error(413, "PayloadTooLarge", f"the request body is over {self.max_bytes} bytes",
                      field="body")(scope, receive, send)

    async def _limited(self, scope, receive, send, started):
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = -1
            if declared > self.max_bytes or declared < 0:
                return await self._too_big(scope, receive, send)
        seen, over, replaced = 0, False, False

        async def counted():
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    over = True
                    raise _TooBig()
            return message

        async def guarded(message):
            # FastAPI turns any error while reading the body (ours included) into a 400: answer the
            # body that went over the limit 413 all the same, whoever read it.
            nonlocal replaced
            if replaced:
                return
            if over and message["type"] == "http.response.start" and not started():
                replaced = True
                await self._too_big(scope, receive, send)
                return
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except _TooBig:
            if not started():
                await self._too_big(scope, receive, send)


class _TooBig(Exception):
    pass


_MODELS_PREFIX = b"/v1/models/"


def _name_kept_encoded(scope):
    """`/v1/models/{name}/...` with the name segment as the client encoded it (normalised to
    percent-encoded UTF-8), the rest decoded. The server decodes the whole path before routing, which
    turned `org%2Fmodel` into two segments: a name holding '/' could be added but never reached. The
    route's `name` dependency decodes the segment once."""
    from urllib.parse import quote, unquote, unquote_to_bytes

    raw = scope.get("raw_path")
    if not raw or not raw.startswith(_MODELS_PREFIX):
        return scope
    segment, sep, rest = raw[len(_MODELS_PREFIX):].split(b"?", 1)[0].partition(b"/")
    path = "/v1/models/" + quote(unquote_to_bytes(segment), safe="") + sep.decode() + \
        unquote(rest.decode("latin-1"), encoding="utf-8", errors="replace")
    return {**scope, "path": path}


def _uploads_dir(home) -> Path:
    """Where uploaded files wait for the writer: in the home, or for an s3 home on this machine's disk
    (the importers read local files; a job whose spooled file is gone fails with a clear error)."""
    from indexing.home import as_path, is_remote

    home = as_path(home)
    if not is_remote(home):
        return home / "service" / "uploads"
    import tempfile

    return Path(tempfile.gettempdir()) / "locus-registry-uploads" / home.bucket / home.key


def create_app(settings: ServiceSettings, *, state=None) -> FastAPI:
    """The application over `settings.home` (which must hold a registry)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    from registry.api import Registry
    from registry.service.jobs import JobQueue
    from registry.service.state import WarmState
    from registry.service.writer import JobSpec

    import torch

    torch.set_num_threads(settings.torch_threads)
    limits = settings.limits
    state = state or WarmState(settings)
    queue = JobQueue(state, max_batch=settings.max_batch_jobs)
    reader = Registry.open(settings.home, create=False)  # its own Store: never inside the writer's transaction
    uploads = _uploads_dir(settings.home)
    uploads.mkdir(parents=True, exist_ok=True)

    app = FastAPI(
        title="locus-registry", version="1",
        description="A registry of language models embedded with LOCUS, over HTTP. Write endpoints need "
                    "`Authorization: Bearer <token>` when the server was started with a token. Limits: "
                    f"body {limits.max_body_bytes} bytes, model name {limits.max_name_chars} characters, "
                    f"query text {limits.max_query_chars} characters, {limits.max_evaluations} evaluations "
                    f"per request, {limits.max_route_queries} texts per route call.",
    )
    app.state.settings, app.state.warm, app.state.jobs = settings, state, queue
    _warm_up(state)
    _schema_as_served(app, state, settings)

    metrics = CollectorRegistry()
    requests = Counter("locus_http_requests", "HTTP requests", ["method", "route", "status"], registry=metrics)
    latency = Histogram("locus_http_request_seconds", "HTTP request latency", ["route"], registry=metrics,
                        buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30))
    Gauge("locus_job_queue_depth", "jobs waiting for the writer", registry=metrics).set_function(queue.depth)
    Gauge("locus_jobs_landed", "jobs landed since start", registry=metrics).set_function(lambda: queue.landed)
    Gauge("locus_jobs_failed", "jobs failed since start", registry=metrics).set_function(lambda: queue.failed)
    Gauge("locus_writer_batches", "writer batches since start", registry=metrics).set_function(lambda: queue.batches)
    Gauge("locus_state_reloads", "warm-state reloads", registry=metrics).set_function(lambda: state.reloads)
    Gauge("locus_text_cache_size", "encoded texts in memory", registry=metrics).set_function(
        lambda: state.cached_texts)
    Gauge("locus_text_cache_hits", "query texts answered from memory", registry=metrics).set_function(
        lambda: state.text_hits)
    Gauge("locus_texts_encoded", "query texts encoded since start", registry=metrics).set_function(
        lambda: state.texts_encoded)
    Gauge("locus_text_batches", "batches the text-encoding thread ran (requests waiting together share one)",
          registry=metrics).set_function(lambda: state.encoder.batches)

    def _observe(method: str, template: str, status: int, seconds: float) -> None:
        requests.labels(method, template, str(status)).inc()
        latency.labels(template).observe(seconds)

    from registry.service.settings import loopback_host

    def _routes(routes):
        # FastAPI >= 0.16x keeps an included router whole (no prefix here: the web router's paths are full)
        for route in routes:
            inner = getattr(route, "original_router", None)
            yield from (_routes(inner.routes) if inner is not None else (route,))

    def _allowed(path: str) -> set[str]:
        return {m for route in _routes(app.routes) if getattr(route, "methods", None) and route.path_regex.match(path)
                for m in route.methods}

    app.add_middleware(_Edge, max_bytes=limits.max_body_bytes, observe=_observe, allowed=_allowed,
                       host_ok=None if settings.token else (lambda host: loopback_host(host, settings.port)))

    # ------------------------------------------------------------ errors
    @app.exception_handler(RegistryError)
    async def _registry_error(request: Request, err: RegistryError):
        return _error(_registry_status(err), type(err).__name__, str(err), field=getattr(err, "field", None),
                      file=getattr(err, "file", None), line=getattr(err, "line", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, err: RequestValidationError):
        problems = err.errors()
        first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ())]
        if loc and loc[0] in ("body", "query", "path", "form", "header"):
            loc = loc[1:]  # where the field sits (body, query string) is not part of its name
        field = ".".join(loc) or None
        message = first.get("msg", "invalid request")
        message = message.removeprefix("Value error, ")  # our validators' own words, as a path refusal says them
        if field and first.get("type") in ("too_long", "string_too_long"):
            return _error(422, "LimitExceeded", f"{field}: {message}", field=field)
        return _error(422, "ValidationError", f"{field}: {message}" if field else message, field=field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException):
        if err.status_code == 400:  # FastAPI's "error parsing the body": a malformed body, as documented
            return _error(422, "ValidationError", f"body: {err.detail}", field="body")
        return _error(err.status_code, "HTTPError", str(err.detail), headers=getattr(err, "headers", None))

    @app.exception_handler(_HTTPError)
    async def _ours(request: Request, err: _HTTPError):
        return _error(err.status, err.type, str(err), field=err.field, headers=err.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error(500, "InternalError", f"{type(err).__name__}: the server failed; see its log")

    # ------------------------------------------------------------ auth
    bearer = HTTPBearer(auto_error=False)

    def require_token(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
                      client: str | None = Header(default=None, alias=CLIENT_HEADER, max_length=200,
                                                  description="needed on a write without a token unless "
                                                              "the body is JSON (see the README, Security)")) -> None:
        if settings.token is None:  # loopback only (refused otherwise at start); not from a web page
            _not_from_a_web_page(request, client)
            return
        given = credentials.credentials if credentials is not None else ""
        if not hmac.compare_digest(given.encode("utf-8"), settings.token.encode("utf-8")):
            raise _HTTPError(401, "a valid bearer token is required for this endpoint", field="Authorization",
                             type_="Unauthorized", headers={"WWW-Authenticate": "Bearer"})

    def _not_from_a_web_page(request: Request, client: str | None) -> None:
        headers = request.headers
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin):
            raise _HTTPError(403, f"a write from the web page at {origin[:100]!r} is refused: without a token "
                             "this server takes writes from local programs only", field="Origin", type_="Forbidden")
        if headers.get("sec-fetch-site", "none") not in ("none", "same-origin"):
            raise _HTTPError(403, "a cross-site write is refused (Sec-Fetch-Site)", field="Sec-Fetch-Site",
                             type_="Forbidden")
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        # Only a POST can be "simple" (no preflight); DELETE always asks the browser's CORS check first.
        if request.method == "POST" and kind != "application/json" and not client:
            raise _HTTPError(403, f"without a token a write must be JSON or carry the {CLIENT_HEADER} header "
                             f"(a web page can send {kind or 'a bodiless request'} to any local server)",
                             field=CLIENT_HEADER, type_="Forbidden")

    def _same_origin(origin: str) -> bool:
        scheme, _, host = origin.partition("://")
        return scheme == "http" and loopback_host(host, settings.port)

    write = [Depends(require_token)]


    # ------------------------------------------------------------ jobs
    def _answer(job, wait: bool) -> JSONResponse:
        if wait:
            job.event.wait(limits.max_wait_s)
        view = job.view()
        if job.state == "done":
            return JSONResponse(r.ModelChange.model_validate(job.result).model_dump(mode="json"), status_code=201,
                                headers={"Location": f"/v1/jobs/{job.spec.id}", "X-Job-Id": job.spec.id})
        if job.state == "failed":
            e = job.error or {}
            return _error(int(e.get("status") or 409), e.get("type", "RegistryError"), e.get("message", ""),
                          field=e.get("field"), file=e.get("file"), line=e.get("line"))
        return JSONResponse(s.JobView.model_validate(view).model_dump(mode="json"), status_code=202,
                            headers={"Location": f"/v1/jobs/{job.spec.id}", "X-Job-Id": job.spec.id})

    def _spec_rows(evaluations: list[s.EvaluationIn]) -> list[dict[str, Any]]:
        return [e.model_dump(exclude_none=True) for e in evaluations]

    async def _spool(file: UploadFile, job_id: str) -> tuple[str, str]:
        label = Path(file.filename or "upload").name
        suffix = Path(label).suffix.lower()
        if suffix not in _UPLOAD_SUFFIXES:
            raise InputError(f"expected a .csv, .jsonl or .parquet file, not {label!r}", field="file")
        path = uploads / f"{job_id}{suffix}"
        with open(path, "wb") as out:
            while chunk := await file.read(1 << 20):
                out.write(chunk)
        return str(path), label

    created = {201: {"model": r.ModelChange}, 202: {"model": s.JobView}, **_ERRORS}

    @app.post("/v1/models", dependencies=write, status_code=201, responses=created, tags=["models"])
    def add_model(body: s.AddModelRequest):
        """Add (or with `replace`, replace) a model from inline evaluations: an embedding job."""
        record_from_metadata(body.name, body.metadata)  # a bad value is refused now, not by a failed job
        spec = JobSpec(id=queue.new_id(), kind="add", name=body.name, evaluations=_spec_rows(body.evaluations),
                       metadata=dict(body.metadata), replace=body.replace)
        return _answer(queue.submit(spec), body.wait)

    @app.post("/v1/models/{name}/file", dependencies=write, status_code=201, responses=created, tags=["models"])
    async def add_model_file(name: Name, file: UploadFile = File(...), metadata: str = Form("{}"),
                             replace: bool = Form(False), wait: bool = Form(True)):
        """Add a model from an uploaded CSV/JSONL/Parquet file of query/query_id, score[, task]."""
        import json

        try:
            meta = json.loads(metadata)
        except ValueError:
            raise InputError("metadata is not JSON", field="metadata") from None
        if not isinstance(meta, dict):
            raise InputError("metadata must be a JSON object", field="metadata")
        record_from_metadata(name, meta)
        job_id = queue.new_id()
        path, label = await _spool(file, job_id)
        spec = JobSpec(id=job_id, kind="add", name=name, file=path, file_label=label, metadata=meta,
                       replace=replace)
        return await run_in_threadpool(lambda: _answer(queue.submit(spec), wait))

    @app.post("/v1/models/{name}/refine", dependencies=write, status_code=201, responses=created, tags=["models"])
    def refine(name: Name, body: s.RefineRequest):
        """Add evaluations to a model and re-embed it as a new version (an embedding job)."""
        spec = JobSpec(id=queue.new_id(), kind="refine", name=name, evaluations=_spec_rows(body.evaluations))
        return _answer(queue.submit(spec), body.wait)

    @app.post("/v1/models/{name}/refine/file", dependencies=write, status_code=201, responses=created,
              tags=["models"])
    async def refine_file(name: Name, file: UploadFile = File(...), wait: bool = Form(True)):
        from starlette.concurrency import run_in_threadpool

        job_id = queue.new_id()
        path, label = await _spool(file, job_id)
        spec = JobSpec(id=job_id, kind="refine", name=name, file=path, file_label=label)
        return await run_in_threadpool(lambda: _answer(queue.submit(spec), wait))

    @app.get("/v1/jobs/{job_id}", response_model=s.JobView, responses=_ERRORS, tags=["jobs"])
    def get_job(job_id: str):
        job = queue.get(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r}")
        return job.view()

    @app.delete("/v1/models/{name}", dependencies=write, response_model=r.RemoveResult, responses=_ERRORS,
                tags=["models"])
    def remove(name: Name):
        """Remove a model (its history stays: restore brings it back)."""
        from registry.operations import remove as remove_model

        return remove_model(state, name)

    @app.post("/v1/models/{name}/restore", dependencies=write, response_model=r.RestoreResult, responses=_ERRORS,
              tags=["models"])
    def restore(name: Name, version: int | None = Query(default=None, ge=1, le=2**31 - 1)):
        from registry.operations import restore as restore_model

        return restore_model(state, name, version)

    # ------------------------------------------------------------ reads
    @app.get("/v1/models", response_model=list[r.ListedModel], responses=_ERRORS, tags=["models"])
    def list_models(where: str | None = Query(default=None, max_length=limits.max_where_chars)):
        """Model records, optionally filtered by a metadata expression."""
        return reader.list(where)

    @app.get("/v1/models/{name}", response_model=r.ModelInfo, responses=_ERRORS, tags=["models"])
    def show(name: Name):
        """A model's record with its version and embedding state."""
        return reader.show(name)

    @app.get("/v1/models/{name}/history", response_model=r.ModelHistory, responses=_ERRORS, tags=["models"])
    def history(name: Name):
        """Every version of a model, oldest first."""
        return reader.history(name)

    @app.get("/v1/similar", response_model=r.SearchResult, responses=_ERRORS, tags=["search"])
    def similar(name: str = Query(min_length=1, max_length=limits.max_name_chars),
                k: int = Query(default=5, ge=1, le=limits.max_k),
                metric: str | None = Query(default=None, pattern="^(cosine|euclidean)$",
                                           description="default: cosine for locus, euclidean for fingerprint"),
                where: str | None = Query(default=None, max_length=limits.max_where_chars),
                by: str | None = Query(default=None, pattern="^(locus|fingerprint|embedding|behaviour)$",
                                       description="the vector searched (default: fingerprint when NAME has "
                                                   "one, else locus; embedding/behaviour: the old names)"),
                min_evals: int = Query(default=MIN_EVALS, ge=0, le=2**31 - 1,
                                       description="models embedded from fewer evaluations are ranked after "
                                                   "the others (0: every model by distance)")):
        """The k models nearest to NAME (NAME itself excluded), by behaviour fingerprint or LOCUS
        embedding; the result's `by` says which answered."""
        return state.similar(name, None, k=k, metric=metric, where=where, by=by, min_evals=min_evals)

    @app.post("/v1/similar", response_model=r.SearchResult, responses=_ERRORS, tags=["search"])
    def similar_vector(body: s.SimilarByVector):
        """The k models nearest to a LOCUS vector."""
        return state.similar(None, body.vector, k=body.k, metric=body.metric, where=body.where,
                             min_evals=body.min_evals)

    @app.post("/v1/route", response_model=s.RouteResponse, responses=_ERRORS, tags=["route"])
    async def route(body: s.RouteRequest):
        """Rank models by predicted P(correct) for one or many texts (one batched pass); fallbacks
        are the top model's nearest candidates. Encoded texts are cached."""
        options = dict(k=body.k, exclude=list(body.exclude), where=body.where, fallback=body.fallback, by=body.by,
                       min_evals=body.min_evals)
        # Texts already in memory on a loaded snapshot take well under a millisecond: answered on the
        # event loop, since a hop to the thread pool cost more than the routing. Anything that may
        # encode, read the store or reload goes to the pool.
        results = state.route_from_memory(body.texts(), **options)
        encoded = 0
        if results is None:
            results, encoded = await run_in_threadpool(state.route, body.texts(), **options)
        return {"results": results, "encoded_texts": encoded}

    @app.get("/v1/audit", response_model=r.AuditReport, responses=_ERRORS, tags=["audit"])
    def audit(model: str | None = Query(default=None, min_length=1, max_length=limits.max_name_chars),
              metric: str = Query(default="cosine", pattern="^(cosine|euclidean)$"),
              k: int = Query(default=10, ge=1, le=1000),
              alpha: float = Query(default=0.01, gt=0.0, lt=1.0),
              max_noise: float = Query(default=0.12, gt=0.0, lt=1.0),
              by: str | None = Query(default=None, pattern="^(locus|fingerprint|embedding|behaviour)$",
                                     description="the index proposing candidates (default: both)")):
        """Likely duplicates: the whole pool, or one model against its nearest neighbours (the CI
        call), judged against the pool's cached calibration."""
        return reader.audit(model=model, metric=metric, k=k, alpha=alpha, max_noise=max_noise, by=by)

    @app.post("/v1/profile", response_model=r.ProfileResult, responses=_ERRORS, tags=["analytics"])
    def profile(body: s.ProfileRequest):
        """Real models nearest to a hypothetical one with these task accuracies."""
        return (reader.profile(dict(body.targets), k=body.k, evals=body.evals, seed=body.seed,
                                     where=body.where))

    @app.get("/v1/portfolio", response_model=r.PortfolioResult, responses=_ERRORS, tags=["analytics"])
    def portfolio(k: int | None = Query(default=None, ge=1, le=limits.max_k),
                  budget_b: float | None = Query(default=None, gt=0, le=1e7),
                  method: str | None = Query(default=None, pattern="^(kcenter|kmedoids|greedy-budget)$"),
                  where: str | None = Query(default=None, max_length=limits.max_where_chars),
                  include_unknown_params: bool = False,
                  seed: int = Query(default=0, ge=0, le=2**31 - 1)):
        """A small set of models that covers the pool, with routing accuracies."""
        return (reader.portfolio(k=k, budget_b=budget_b, method=method, where=where,
                                       include_unknown_params=include_unknown_params, seed=seed))

    @app.get("/v1/stats", response_model=r.Stats, tags=["health"])
    def stats():
        return reader.stats()

    @app.get("/v1/health", response_model=s.Health, tags=["health"])
    def health():
        snap = state.snapshot()
        models = snap.models
        n_models = len(models.records) if models is not None else reader.stats().n_models
        embedded = len(models.index.names) if models is not None else 0
        return {"status": "ok" if snap.problem is None else "degraded", "problem": snap.problem,
                "home": str(settings.home), "device": settings.device, "query_backend": _backend(state, snap),
                "models": n_models, "embedded": embedded,
                "dimension": int(models.index.vectors.shape[1]) if models is not None else None,
                "encoder_id": snap.encoder_id,
                "query_encoder": snap.active.query_encoder if snap.active is not None else None,
                "queue_depth": queue.depth(), "reloads": state.reloads, "auth": settings.token is not None}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["health"])
    def prometheus() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(metrics).decode("utf-8"),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    from registry.service.web import web_router  # the web UI at / and the /v1 reads its pages need

    app.include_router(web_router(settings, reader=reader, state=state, write=write))

    @app.on_event("shutdown")
    def _stop() -> None:
        queue.stop()

    return app


def _warm_up(state) -> None:
    """Load everything a request needs before the first request: the snapshot (LOCUS, the index)
    and the query encoder, with one encoding so that lazy initialisation is paid now."""
    snap = state.snapshot()
    if snap.active is not None:
        state.query_encoder(snap.active.query_encoder).encode(["warm-up"], progress=False)


def _schema_as_served(app, state, settings) -> None:
    """/openapi.json as this server enforces it: POST /v1/similar's vector length as the embeddings
    have it now (it changes only with a retrain), not all zeros; without a token, no bearer scheme
    (writes are open to local programs, README "Security")."""
    build = app.openapi

    def openapi():
        schema = build()
        if settings.token is None:
            schema.get("components", {}).pop("securitySchemes", None)
            for item in schema["paths"].values():
                for operation in item.values():
                    if isinstance(operation, dict):
                        operation.pop("security", None)
        vector = schema["components"]["schemas"]["SimilarByVector"]["properties"]["vector"]
        models = state.snapshot().models
        if models is not None:
            vector["minItems"] = vector["maxItems"] = int(models.index.vectors.shape[1])
        vector["not"] = {"items": {"const": 0}}
        return schema

    app.openapi = openapi


def _backend(state, snap) -> str:
    """The query encoder's engine as loaded (openvino under "auto" falls back to torch when it cannot
    run the model), else what the settings resolve to."""
    if snap.active is not None:
        return state.query_encoder(snap.active.query_encoder).backend
    from encoder.query_encoder import resolve_backend

    return resolve_backend(state.settings.query_backend, state.settings.device)


def _plain(value: Any) -> Any:
    """A result as JSON-ready data (pydantic models, dataclasses, numpy scalars)."""
    import dataclasses

    import numpy as np

    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
