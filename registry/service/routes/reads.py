"""The model reads: the list (filtered by metadata), one model, its history; from the reader."""
from __future__ import annotations

from fastapi import APIRouter, Query

from registry import results as r
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
