"""What an endpoint may ask for (FastAPI dependencies): the app's shared objects, read from
`request.app.state` where `create_app` put them, a checked model name, and the write check.

    def similar(state: State, name: str = Query(...)): ...
    @router.post("/v1/models", dependencies=WRITE)

The shared-object getters are `async` so that FastAPI calls them on the event loop: a sync one
would be a hop to the thread pool on every request, which costs more than a cached route.
"""
from __future__ import annotations

import hmac
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Header, Path as PathParam, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from registry.api import Registry
from registry.errors import InputError
from registry.importers._common import repeated_key
from registry.limits import check_model_name
from registry.service.errors import HTTPError
from registry.service.jobs import JobQueue
from registry.service.metrics import ServiceMetrics
from registry.service.settings import CLIENT_HEADER, READ_HEADER, READ_PATTERN, ServiceSettings, loopback_host
from registry.service.state import READ, WarmState

__all__ = ["single_valued_parameters", "read_mode", "get_settings", "get_state", "get_queue", "get_reader",
           "get_metrics", "get_uploads", "require_token", "check_write_before_body", "Settings", "State", "Queue",
           "Reader", "Metrics", "Uploads", "Name", "AliasName", "WRITE"]


async def single_valued_parameters(request: Request) -> None:
    """Every query parameter and form field of this API takes one value: a repeated one (`?offset=1&offset=5`,
    two `metadata` fields in an upload) is refused naming it, where FastAPI would keep the last and drop the
    others unsaid. An app-wide dependency that raises a validation error, so that a write without its token
    is still answered 401 first. (A form is parsed before dependencies run: `request.form()` is its cache.)"""
    if request.scope.get("query_string"):
        _refuse_repeated(request.query_params, "query")
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        _refuse_repeated(await request.form(), "form")


async def read_mode(read: str | None = Header(
        default=None, alias=READ_HEADER, pattern=READ_PATTERN,
        description="Which state a read takes. fresh (the default): one holding every write landed when the read "
                    "arrived, waiting for the service to load it (and, while another write is under way, for the "
                    "state after it). A generation number N: a state of N or newer, the X-Locus-Generation your "
                    "own last write answered with (read-your-writes without waiting for other clients' writes). "
                    "loaded: the state already loaded, never waiting for a reload (which goes on meanwhile). "
                    "Reads only: a write always lands on the newest state.")) -> None:
    """Which state this request's reads take (`registry.service.state.READ`, made by the middleware). App-wide
    and async: it runs on the request's own context, which the endpoint (in the thread pool or not) runs in a
    copy of, sharing the one `ReadRequest`."""
    request = READ.get()
    request.loaded = read == "loaded"
    request.after = int(read) if read is not None and read.isdigit() else None


def _refuse_repeated(params, where: str) -> None:
    items = params.multi_items()
    if len(items) > len(params) and (found := repeated_key(items)) is not None:
        key, times = found
        raise RequestValidationError([{"loc": (where, key), "type": "value_error",
                                       "msg": f"given {times} times; it takes one value"}])


async def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


async def get_state(request: Request) -> WarmState:
    return request.app.state.warm


async def get_queue(request: Request) -> JobQueue:
    return request.app.state.jobs


async def get_reader(request: Request) -> Registry:
    """The app's reading Registry: its own Store, never inside the writer's transaction."""
    return request.app.state.reader


async def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


async def get_uploads(request: Request) -> Path:
    """Where an uploaded file waits for the writer (`routes.models.uploads_dir`)."""
    return request.app.state.uploads


Settings = Annotated[ServiceSettings, Depends(get_settings)]
State = Annotated[WarmState, Depends(get_state)]
Queue = Annotated[JobQueue, Depends(get_queue)]
Reader = Annotated[Registry, Depends(get_reader)]
Metrics = Annotated[ServiceMetrics, Depends(get_metrics)]
Uploads = Annotated[Path, Depends(get_uploads)]


def _model_name(name: str = PathParam(description="the model name, percent-encoded (`org%2Fmodel`)")) -> str:
    """The model name of a `/v1/models/{name}...` path: the segment as sent, decoded once (the edge
    keeps a `%2F` in it from becoming a path separator), checked as every name is."""
    try:
        return check_model_name(_decoded(name, "name", "the model name"))
    except InputError as err:
        raise HTTPError(422, f"name: {err.problem}", field="name", type_="ValidationError") from None


Name = Annotated[str, Depends(_model_name)]


def _alias_segment(alias: str = PathParam(description="the alias (letters, digits, '-', '_', '.')")) -> str:
    """The alias of a `/v1/aliases/{alias}` path, decoded once (the edge keeps a `%2F` in it, so that
    `a%2Fb` is refused as the alias 'a/b' rather than answered with a bare 404); the registry checks it."""
    return _decoded(alias, "alias", "the alias")


def _decoded(segment: str, field: str, what: str) -> str:
    """A path segment the edge kept percent-encoded (edge._name_kept_encoded), decoded once."""
    from urllib.parse import unquote

    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise HTTPError(422, f"{field}: {what} is not UTF-8", field=field, type_="ValidationError") from None


AliasName = Annotated[str, Depends(_alias_segment)]

# ------------------------------------------------------------------ auth
bearer = HTTPBearer(auto_error=False)


def require_token(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
                  client: str | None = Header(default=None, alias=CLIENT_HEADER, max_length=200,
                                              description="needed on a write without a token unless "
                                                          "the body is JSON (see the README, Security)"),
                  settings: ServiceSettings = Depends(get_settings)) -> None:
    """A write's check: the bearer token when the server has one, else not from a web page."""
    if settings.token is None:  # loopback only (refused otherwise at start); not from a web page
        _not_from_a_web_page(request, client, settings.port)
        return
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode("utf-8"), settings.token.encode("utf-8")):
        raise HTTPError(401, "a valid bearer token is required for this endpoint", field="Authorization",
                        type_="Unauthorized", headers={"WWW-Authenticate": "Bearer"})


def _not_from_a_web_page(request: Request, client: str | None, port: int | None) -> None:
    headers = request.headers
    origin = headers.get("origin")
    if origin is not None and not _same_origin(origin, port):
        raise HTTPError(403, f"a write from the web page at {origin[:100]!r} is refused: without a token "
                        "this server takes writes from local programs only", field="Origin", type_="Forbidden")
    if headers.get("sec-fetch-site", "none") not in ("none", "same-origin"):
        raise HTTPError(403, "a cross-site write is refused (Sec-Fetch-Site)", field="Sec-Fetch-Site",
                        type_="Forbidden")
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    # Only a POST can be "simple" (no preflight); DELETE always asks the browser's CORS check first.
    if request.method == "POST" and kind != "application/json" and not client:
        raise HTTPError(403, f"without a token a write must be JSON or carry the {CLIENT_HEADER} header "
                        f"(a web page can send {kind or 'a bodiless request'} to any local server)",
                        field=CLIENT_HEADER, type_="Forbidden")


def _same_origin(origin: str, port: int | None) -> bool:
    scheme, _, host = origin.partition("://")
    return scheme == "http" and loopback_host(host, port)


WRITE = [Depends(require_token)]  # a route's `dependencies=`: every write asks for it


async def check_write_before_body(request: Request) -> None:
    """The write check for a request whose body FastAPI refused before the route's dependencies ran
    (it reads the body first): a write without the token is answered 401 (or 403), not 422, so a
    client learns it is not allowed before it learns what was wrong with its body."""
    route = request.scope.get("route")
    if request.method not in (getattr(route, "methods", None) or ()):
        return  # a method the path does not answer (405): the route Starlette names is another method's
    if not any(getattr(d, "dependency", None) is require_token for d in getattr(route, "dependencies", ())):
        return
    require_token(request, await bearer(request), request.headers.get(CLIENT_HEADER), request.app.state.settings)
