"""The web UI of `registry serve`: pages at `/`, their script and styles at `/static/`, and the few
`/v1` reads the pages need that the API did not have (the model table, a model's accuracy per task,
the map's points, compare, aliases).

No registry logic lives here: the pages are a shell that the browser fills by calling `/v1` (the
same endpoints a script calls), and the `/v1` routes below call the library (`registry.analytics.browse`,
`Registry.compare`, `Registry.set_alias`, ...). Templates, JavaScript and CSS ship inside the
package (`registry/service/webui/`), so the UI works offline and without a build step.
"""
from __future__ import annotations

import html
import logging
import threading
import time
from collections import OrderedDict
from importlib import resources
from string import Template
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from registry.defaults import CLUSTER_LINKAGE
from registry.errors import NotFoundError
from registry.evidence import MIN_EVALS
from registry.results import Alias, ClustersResult, Comparison, ErrorResponse
from registry.service.deps import AliasName, Name
from registry.service.json_body import UniqueKeysRoute
from registry.service.schemas import BY_PATTERN

__all__ = ["web_router", "CSP", "PAGES"]

log = logging.getLogger("locus.service")
TABLE_POLL_S = 2.0  # how often the UI's table checks the store for a new generation (two small file reads)

# Everything from this origin, nothing inline, no framing: the pages need no more.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_UI_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
               "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}
# path -> (page id the script dispatches on, title)
PAGES = {"/": ("models", "Models"), "/models": ("models", "Models"), "/model": ("model", "Model"),
         "/map": ("map", "Map"), "/audit": ("audit", "Audit"), "/route": ("route", "Route playground"),
         "/compare": ("compare", "Compare"), "/families": ("families", "Families"),
         "/portfolio": ("portfolio", "Portfolio"), "/add": ("add", "Add a model"), "/api": ("api", "API reference")}
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".svg": "image/svg+xml", ".png": "image/png"}
_ERRORS = {code: {"model": ErrorResponse} for code in (401, 403, 404, 409, 413, 422)}


class AliasTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(min_length=1, max_length=256, description="NAME (its live version) or NAME@VERSION")


def _static_files() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, content type) of the shipped static files, read once (a fixed set: a request
    can name only these, never a path)."""
    root = resources.files("registry.service") / "webui" / "static"
    files = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return files


def _shell() -> Template:
    return Template((resources.files("registry.service") / "webui" / "page.html").read_text("utf-8"))


class _ByGeneration:
    """Answers of deterministic reads for the current generation of the store (the key WarmState
    reloads on: any write, by the service or the CLI, changes it and empties this). The model table
    is one scan of every evaluation, a comparison one LOCUS pass over every stored query: a person
    going back and forth between pages should pay them once per change, not once per view."""

    def __init__(self, size: int = 256) -> None:
        self._lock = threading.Lock()
        self._generation: Any = None
        self._answers: OrderedDict[tuple, Any] = OrderedDict()
        self._size = size

    def get(self, generation, key: tuple, compute):
        with self._lock:
            if generation != self._generation:
                self._generation, self._answers = generation, OrderedDict()
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        answer = compute()  # outside the lock: a slow comparison does not hold up the table
        with self._lock:
            if generation == self._generation:
                self._answers[key] = answer
                while len(self._answers) > self._size:
                    self._answers.popitem(last=False)
        return answer


def web_router(settings, *, reader, state, write: list) -> APIRouter:
    """The UI's pages and static files, and its `/v1` reads; `write` is the app's token dependency."""
    from registry.analytics import browse
    from registry.api import Registry

    limits = settings.limits
    router = APIRouter(route_class=UniqueKeysRoute)
    static = _static_files()
    shell = _shell()
    cache = _ByGeneration()

    def cached(key: tuple, compute):
        return cache.get(state.snapshot().key, key, compute)

    building = threading.Lock()  # one build of the table at a time: a second caller waits for it

    def data() -> browse.TableData:
        generation = state.snapshot().key
        with building:
            return cache.get(generation, ("table",), lambda: browse.table_data(reader.store))

    def keep_table_warm() -> None:
        """Build the table at start and again soon after each write (by the service or the CLI), so a
        visit rarely waits for the build: at 10,000 models it is a scan of 2 million evaluations."""
        while True:
            try:
                data()
            except Exception:  # an empty or broken home: the page's own request says what is wrong
                log.debug("could not build the model table", exc_info=True)
            time.sleep(TABLE_POLL_S)

    from indexing.home import is_remote

    if not is_remote(settings.home):  # on s3 each check for a change is a request: build on demand there
        threading.Thread(target=keep_table_warm, name="locus-web-table", daemon=True).start()

    # ------------------------------------------------------------------ pages
    def page(path: str):
        page_id, title = PAGES[path]

        def handler(request: Request) -> HTMLResponse:
            body = shell.substitute(page=page_id, title=html.escape(title),
                                    auth="token" if settings.token is not None else "open")
            return HTMLResponse(body, headers={**_UI_HEADERS, "Cache-Control": "no-store"})

        handler.__name__ = f"page_{page_id}_{len(path)}"
        return handler

    for path in PAGES:
        router.add_api_route(path, page(path), methods=["GET"], response_class=HTMLResponse, include_in_schema=False)

    @router.get("/static/{name}", include_in_schema=False)
    def static_file(name: str) -> Response:
        if name not in static:
            raise NotFoundError(f"no static file {name!r}")
        body, media_type = static[name]
        return Response(body, media_type=media_type, headers={**_UI_HEADERS, "Cache-Control": "no-cache"})

    @router.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        body, media_type = static["favicon.svg"]
        return Response(body, media_type=media_type, headers=_UI_HEADERS)

    # ------------------------------------------------------------------ /v1 reads the pages need
    @router.get("/v1/table", response_model=browse.ModelTable, responses=_ERRORS, tags=["models"])
    def table(where: str | None = Query(default=None, max_length=limits.max_where_chars),
              q: str | None = Query(default=None, max_length=limits.max_name_chars,
                                    description="part of a model's name"),
              sort: str = Query(default="name", max_length=300,
                                description="name, version, n_evals, accuracy, a metadata field, or task:NAME"),
              order: str = Query(default="asc", pattern="^(asc|desc)$"),
              offset: int = Query(default=0, ge=0, le=10**9),
              limit: int = Query(default=50, ge=1, le=browse.MAX_PAGE)):
        """A page of the model table: records, version, evaluations and accuracy per task (low-evidence
        tasks marked), filtered by `where`, searched by `q`, sorted server-side."""
        return browse.model_table(data(), where=where or None, q=q or None, sort=sort,
                                  descending=order == "desc", offset=offset, limit=limit)

    @router.get("/v1/models/{name}/accuracy", response_model=browse.ModelRow, responses=_ERRORS, tags=["models"])
    def accuracy(name: Name):
        """A model's stored evaluations and measured accuracy per task."""
        return browse.model_row(data(), reader.resolve(name))

    @router.get("/v1/map", response_model=browse.MapView, responses=_ERRORS, tags=["analytics"])
    def map_points(color_by: str | None = Query(default=None, max_length=limits.max_name_chars),
                   where: str | None = Query(default=None, max_length=limits.max_where_chars),
                   by: str | None = Query(default=None, pattern=BY_PATTERN)):
        """Every embedded model as a point of `registry map`'s projection, with its colour field's value."""
        return cached(("map", color_by or None, where or None, by),
                      lambda: browse.map_view(reader.store, color_by=color_by or None, where=where or None, by=by))

    @router.get("/v1/clusters", response_model=ClustersResult, responses=_ERRORS, tags=["analytics"])
    def clusters(where: str | None = Query(default=None, max_length=limits.max_where_chars),
                 linkage: str = Query(default=CLUSTER_LINKAGE, pattern="^(average|complete|single|ward)$"),
                 k: int | None = Query(default=None, ge=1, le=limits.max_k,
                                       description="cut into this many clusters (default: the mean-silhouette maximum)"),
                 by: str | None = Query(default=None, pattern=BY_PATTERN),
                 min_evals: int = Query(default=MIN_EVALS, ge=0, le=2**31 - 1,
                                        description="models embedded from fewer evaluations are left out (0: none)")):
        """Model families: hierarchical clusters of the models (`registry clusters`, without the figure)."""
        return cached(("clusters", where or None, linkage, k, by, min_evals),
                      lambda: reader.clusters(where=where or None, linkage=linkage, k=k, by=by, min_evals=min_evals))

    @router.get("/v1/compare", response_model=Comparison, responses=_ERRORS, tags=["analytics"])
    def compare(a: str = Query(min_length=1, max_length=limits.max_name_chars),
                b: str = Query(min_length=1, max_length=limits.max_name_chars),
                by: str | None = Query(default=None, pattern=BY_PATTERN)):
        """Two models task by task with the paired tests, as `registry compare`."""
        return cached(("compare", reader.resolve(a), reader.resolve(b), by), lambda: reader.compare(a, b, by=by))

    @router.get("/v1/aliases", response_model=list[Alias], tags=["aliases"])
    def aliases():
        return reader.aliases()

    @router.put("/v1/aliases/{alias}", dependencies=write, response_model=Alias, responses={200: {"links": {
        "delete": {"operationId": "delete_alias_v1_aliases__alias__delete",
                   "parameters": {"alias": "$response.body#/alias"}},
        "show": {"operationId": "show_v1_models__name__get", "parameters": {"name": "$response.body#/alias"}}}},
        **_ERRORS}, tags=["aliases"])
    def set_alias(alias: AliasName, body: AliasTarget):
        """Point an alias at NAME (whatever version is live) or NAME@VERSION."""
        pointed = Registry.open(settings.home, create=False).set_alias(alias, body.target)
        state.note_written()
        return pointed

    @router.delete("/v1/aliases/{alias}", dependencies=write, response_model=Alias, responses=_ERRORS,
                   tags=["aliases"])
    def delete_alias(alias: AliasName):
        deleted = Registry.open(settings.home, create=False).delete_alias(alias)
        state.note_written()
        return deleted

    return router
