"""The model reads: the list (filtered by metadata), one model, its history; from the reader."""
from __future__ import annotations

from fastapi import APIRouter, Query

from registry import results as r
from registry.errors import InputError
from registry.service.deps import Name, Reader
from registry.service.errors import ERRORS
from registry.service.schemas import LIMITS
from registry.service.json_body import UniqueKeysRoute

__all__ = ["router"]

router = APIRouter(route_class=UniqueKeysRoute)


@router.get("/v1/models", response_model=list[r.ListedModel], responses=ERRORS, tags=["models"])
def list_models(reader: Reader, where: str | None = Query(default=None, max_length=LIMITS.max_where_chars)):
    """Model records, optionally filtered by a metadata expression."""
    return reader.list(where)


@router.get("/v1/models/{name}", response_model=r.ModelInfo, responses=ERRORS, tags=["models"])
def show(name: Name, reader: Reader):
    """A model's record with its version and embedding state."""
    return reader.show(name)


@router.get("/v1/models/{name}/history", response_model=r.ModelHistory, responses=ERRORS, tags=["models"])
def history(name: Name, reader: Reader):
    """Every version of a model, oldest first."""
    return reader.history(name)


@router.get("/v1/queries", response_model=r.QueryList, responses=ERRORS, tags=["queries"])
def queries(reader: Reader, task: str | None = Query(default=None, min_length=1, max_length=LIMITS.max_name_chars),
            offset: int = Query(default=0, ge=0),
            limit: int | None = Query(default=None, ge=0, le=LIMITS.max_listed_queries)):
    """Stored queries (id, text, task) by id, of one task or all: the ids a `query_id` in POST /v1/models
    refers to. Without a limit, every match from `offset`, at most 100,000 in one answer (more is a 422:
    page with offset and limit)."""
    listed = reader.queries(task=task, limit=LIMITS.max_listed_queries + 1 if limit is None else limit,
                            offset=offset)
    if len(listed.queries) > LIMITS.max_listed_queries:
        raise InputError(f"{listed.total - offset:,} queries match from offset {offset:,}, more than one answer "
                         f"lists ({LIMITS.max_listed_queries:,}): page with offset and limit", field="limit")
    return listed
