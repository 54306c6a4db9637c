"""The FastAPI application: `/v1/...` over one registry home, `/metrics`, `/openapi.json`, `/docs`.

Reads (route, similar, list, show, audit, ...) answer from the warm state or from the store; writes
that embed a model (add, refine) become jobs for the single writer (`jobs`); remove and restore are
one small transaction each. Every error is JSON: {"error": {"type", "message", "field", "file", "line"}}.

`create_app` builds the shared objects (settings, warm state, job queue, reading Registry, metrics)
and puts them on `app.state`; the endpoints live in `routes/` (one `APIRouter` per area) and ask for
those objects through `deps`; errors are `errors`, the middleware is `edge`.
"""
from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import fields

from fastapi import Depends, FastAPI

from registry.api import Registry
from registry.service.deps import WRITE, check_write_before_body, read_mode, single_valued_parameters
from registry.service.edge import Edge, allowed_methods
from registry.service.errors import add_error_handlers
from registry.service.jobs import JobQueue
from registry.service.metrics import ServiceMetrics
from registry.service.routes import ROUTERS
from registry.service.routes.models import uploads_dir
from registry.service.schemas import LIMITS
from registry.service.settings import ServiceSettings, configure_torch, loopback_host
from registry.service.state import WarmState
from registry.service.web import web_router

__all__ = ["create_app", "API_VERSION"]

log = logging.getLogger("locus.service")

API_VERSION = "v1"
# Limits the server reads from its settings as it runs; the others are fixed in the request schemas
# (`schemas.LIMITS`: the routes' query parameters and the bodies), so they cannot differ per server.
_RUNTIME_LIMITS = {"max_body_bytes", "max_wait_s"}


def create_app(settings: ServiceSettings, *, state=None) -> FastAPI:
    """The application over `settings.home` (which must hold a registry)."""
    _check_limits(settings)
    if settings.device != "cpu":  # LOCUS runs on the GPU from the first request: torch is needed now
        configure_torch(settings)
    limits = settings.limits
    state = state or WarmState(settings)
    queue = JobQueue(state, max_batch=settings.max_batch_jobs, compact_every=settings.compact_every)
    reader = Registry.open(settings.home, create=False)  # its own Store: never inside the writer's transaction
    uploads = uploads_dir(settings.home)
    uploads.mkdir(parents=True, exist_ok=True)

    app = FastAPI(
        title="locus-registry", version="1",
        description="A registry of language models embedded with LOCUS, over HTTP. Write endpoints need "
                    "`Authorization: Bearer <token>` when the server was started with a token. Limits: "
                    f"body {limits.max_body_bytes} bytes, model name {limits.max_name_chars} characters, "
                    f"query text {limits.max_query_chars} characters, {limits.max_evaluations} evaluations "
                    f"per request, {limits.max_route_queries} texts per route call.",
        dependencies=[Depends(single_valued_parameters), Depends(read_mode)],
    )
    metrics = ServiceMetrics(state, queue)
    app.state.settings, app.state.warm, app.state.jobs = settings, state, queue
    app.state.reader, app.state.uploads, app.state.metrics = reader, uploads, metrics
    _warm_up(state)
    _schema_as_served(app, state, settings)

    app.add_middleware(Edge, max_bytes=limits.max_body_bytes, observe=metrics.observe,
                       allowed=lambda path: allowed_methods(app.routes, path),
                       host_ok=None if settings.token else (lambda host: loopback_host(host, settings.port)))
    add_error_handlers(app, before_body=check_write_before_body)
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(web_router(settings, reader=reader, state=state, write=WRITE))  # the web UI at /

    @app.on_event("shutdown")
    def _stop() -> None:
        queue.stop()

    return app


def _check_limits(settings: ServiceSettings) -> None:
    """Refuse limits that the request schemas would not enforce (they document and check the defaults)."""
    for f in fields(settings.limits):
        if f.name not in _RUNTIME_LIMITS and getattr(settings.limits, f.name) != getattr(LIMITS, f.name):
            raise ValueError(f"limits.{f.name}: only {sorted(_RUNTIME_LIMITS)} can be set per server; "
                             f"{f.name} is fixed at {getattr(LIMITS, f.name)} by the request schemas")


def _warm_up(state) -> None:
    """Load everything a request needs before the first request: the snapshot (LOCUS, the index)
    and the query encoder, with one encoding so that lazy initialisation is paid now. LanceDB, which only
    writes need (reads go through the saved index and lance), is imported beside the first requests:
    importing it cost the first add-model 1.6 s (scripts/bench_service.py's add-model p99), and start-up
    need not wait for it."""
    snap = state.snapshot()
    if snap.active is not None:
        state.query_encoder(snap.active.query_encoder).encode(["warm-up"], progress=False)
    threading.Thread(target=importlib.import_module, args=("lancedb",), name=LANCEDB_IMPORT, daemon=True).start()
    # torch and the torch LOCUS, which on the CPU only writes need (routes read G in numpy), likewise:
    # importing torch was 1.4 s of a 2.4 s start
    threading.Thread(target=_load_for_writes, args=(state,), name=TORCH_IMPORT, daemon=True).start()


def _load_for_writes(state) -> None:
    try:
        if state.snapshot().active is not None:
            state.active()
    except Exception:  # noqa: BLE001 - the first write loads it and says what is wrong
        log.exception("loading the encoder for writes failed")


LANCEDB_IMPORT = "locus-import-lancedb"
TORCH_IMPORT = "locus-import-torch"


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
        # every route answers 403 (the Host / Origin checks) and 413 (the body limit) before it runs, and one
        # that reads the warm state 503 when the state it needs is not loaded within the wait
        error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}
        for item in schema["paths"].values():
            for operation in item.values():
                if isinstance(operation, dict) and "responses" in operation:
                    for code, why in (("403", "Refused by the Host or Origin check"), ("413", "Request body too large"),
                                      ("503", "The state a read needs was not loaded within the wait: a write "
                                              "is under way (Retry-After)")):
                        operation["responses"].setdefault(code, {"description": why, **error})
        vector = schema["components"]["schemas"]["SimilarByVector"]["properties"]["vector"]
        models = state.snapshot().models
        if models is not None:
            vector["minItems"] = vector["maxItems"] = int(models.index.vectors.shape[1])
        vector["not"] = {"items": {"const": 0}}
        return schema

    app.openapi = openapi
