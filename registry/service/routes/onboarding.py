"""Adaptive onboarding: the stored queries to evaluate a model on first (`Registry.suggest_queries`),
from the reader. GET for a stored model or the pool; POST (a read, no token) when a model not yet added
brings the answers it has so far, too many for a query string."""
from __future__ import annotations

from fastapi import APIRouter, Query
from pydantic import Field

from registry import results as r
from registry.service.deps import Reader
from registry.service.errors import ERRORS
from registry.service.schemas import LIMITS, _Strict
from registry.service.json_body import UniqueKeysRoute

__all__ = ["router", "SuggestRequest"]

router = APIRouter(route_class=UniqueKeysRoute)

MAX_SUGGEST = LIMITS.max_evaluations  # as many as one add-model may carry


class SuggestRequest(_Strict):
    name: str | None = Field(default=None, min_length=1, max_length=LIMITS.max_name_chars,
                             description="a stored model (or, with from_pool, a name not yet added)")
    n: int = Field(default=64, ge=1, le=MAX_SUGGEST, description="queries to suggest")
    task: str | None = Field(default=None, min_length=1, max_length=LIMITS.max_name_chars)
    from_pool: bool = Field(default=False, description="at the pool's prior, not the model's fingerprint")
    answered: dict[str, float] | None = Field(
        default=None, max_length=LIMITS.max_evaluations,
        description="query id -> score in [0, 1]: the answers a model not yet added already has")


@router.get("/v1/suggest-queries", response_model=r.QuerySuggestions, responses=ERRORS, tags=["analytics"])
def suggest_queries(reader: Reader,
                    name: str | None = Query(default=None, min_length=1, max_length=LIMITS.max_name_chars),
                    n: int = Query(default=64, ge=1, le=MAX_SUGGEST),
                    task: str | None = Query(default=None, min_length=1, max_length=LIMITS.max_name_chars),
                    from_pool: bool = False):
    """The n stored queries whose answers would tell the most about a model (or, without a name, a model
    not yet added), its answered queries left out."""
    return reader.suggest_queries(name, n, task=task, from_pool=from_pool)


@router.post("/v1/suggest-queries", response_model=r.QuerySuggestions, responses=ERRORS, tags=["analytics"])
def suggest_queries_post(body: SuggestRequest, reader: Reader):
    """As the GET, with the answers a model not yet added has so far (`answered`): the next batch."""
    return reader.suggest_queries(body.name, body.n, task=body.task, from_pool=body.from_pool, answered=body.answered)
