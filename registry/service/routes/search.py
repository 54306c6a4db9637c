"""Search and route: the models nearest to a model or a vector, and models ranked for texts; from
the warm state (loaded index, LOCUS, encoded texts)."""
from __future__ import annotations

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from registry import results as r
from registry.evidence import MIN_EVALS
from registry.service import schemas as s
from registry.service.deps import State
from registry.service.errors import ERRORS
from registry.service.schemas import BY_PATTERN, LIMITS
from registry.service.json_body import UniqueKeysRoute

__all__ = ["router"]

router = APIRouter(route_class=UniqueKeysRoute)


@router.get("/v1/similar", response_model=r.SearchResult, responses=ERRORS, tags=["search"])
def similar(state: State,
            name: str = Query(min_length=1, max_length=LIMITS.max_name_chars),
            k: int = Query(default=5, ge=1, le=LIMITS.max_k),
            metric: str | None = Query(default=None, pattern="^(cosine|euclidean)$",
                                       description="default: cosine for locus, euclidean for fingerprint"),
            where: str | None = Query(default=None, max_length=LIMITS.max_where_chars),
            by: str | None = Query(default=None, pattern=BY_PATTERN,
                                   description="the vector searched (default: fingerprint when NAME has "
                                               "one, else locus; embedding/behaviour/behavior: the old names)"),
            min_evals: int = Query(default=MIN_EVALS, ge=0, le=2**31 - 1,
                                   description="models embedded from fewer evaluations are ranked after "
                                               "the others (0: every model by distance)")):
    """The k models nearest to NAME (NAME itself excluded), by behaviour fingerprint or LOCUS
    embedding; the result's `by` says which answered."""
    return state.similar(name, None, k=k, metric=metric, where=where, by=by, min_evals=min_evals)


@router.post("/v1/similar", response_model=r.SearchResult, responses=ERRORS, tags=["search"])
def similar_vector(body: s.SimilarByVector, state: State):
    """The k models nearest to a LOCUS vector."""
    return state.similar(None, body.vector, k=body.k, metric=body.metric, where=body.where,
                         min_evals=body.min_evals)


@router.post("/v1/route", response_model=s.RouteResponse, responses=ERRORS, tags=["route"])
async def route(body: s.RouteRequest, state: State):
    """Rank models by predicted P(correct) for one or many texts (one batched pass); fallbacks
    are the top model's nearest candidates. Encoded texts are cached."""
    options = dict(k=body.k, exclude=list(body.exclude), where=body.where, fallback=body.fallback, by=body.by,
                   min_evals=body.min_evals)
    options.update(max_cost=body.max_cost, willingness_to_pay=body.willingness_to_pay, unpriced=body.unpriced)
    # Texts already in memory on a loaded snapshot take well under a millisecond: answered on the
    # event loop, since a hop to the thread pool cost more than the routing. Anything that may
    # encode, read the store or reload goes to the pool.
    results = state.route_from_memory(body.texts(), **options)
    encoded = 0
    if results is None:
        results, encoded = await run_in_threadpool(state.route, body.texts(), **options)
    return {"results": results, "encoded_texts": encoded}
