"""The server's own state: the store's counts, health (what is loaded, the queue), /metrics."""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from registry import results as r
from registry.service import schemas as s
from registry.service.deps import Metrics, Queue, Reader, Settings, State
from registry.service.json_body import UniqueKeysRoute

__all__ = ["router"]

router = APIRouter(route_class=UniqueKeysRoute)


@router.get("/v1/stats", response_model=r.Stats, tags=["health"])
def stats(reader: Reader):
    return reader.stats()


@router.get("/v1/health", response_model=s.Health, tags=["health"])
def health(settings: Settings, state: State, queue: Queue, reader: Reader):
    return _health(settings, state, queue, reader)


@router.get("/metrics", response_class=PlainTextResponse, tags=["health"])
def prometheus(metrics: Metrics) -> PlainTextResponse:
    return PlainTextResponse(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


def model_counts(snap, count_all) -> tuple[int, int]:
    """(every model, the embedded ones) of a state snapshot, as /v1/health and `serve --json` report them;
    `count_all()` counts the models where nothing is embedded (the snapshot then holds no model table)."""
    if snap.models is None:
        return count_all(), 0
    return len(snap.models.records), len(snap.models.index.names)


def _health(settings, state, queue, reader) -> dict:
    snap = state.snapshot()
    models = snap.models
    n_models, embedded = model_counts(snap, lambda: reader.stats().n_models)
    return {"status": "ok" if snap.problem is None else "degraded", "problem": snap.problem,
            "home": str(settings.home), "device": settings.device, "query_backend": _backend(state, snap),
            "models": n_models, "embedded": embedded,
            "dimension": int(models.index.vectors.shape[1]) if models is not None else None,
            "encoder_id": snap.encoder_id,
            "query_encoder": snap.active.query_encoder if snap.active is not None else None,
            "queue_depth": queue.depth(), "reloads": state.reloads, "auth": settings.token is not None}


def _backend(state, snap) -> str:
    """The query encoder's engine as loaded (openvino under "auto" falls back to torch when it cannot
    run the model), else what the settings resolve to."""
    if snap.active is not None:
        return state.query_encoder(snap.active.query_encoder).backend
    from encoder.query_encoder import resolve_backend

    return resolve_backend(state.settings.query_backend, state.settings.device)
