"""The middleware every request passes first (`Edge`): body limit, Host check, OPTIONS, a JSON 500
for a bug, a model name kept encoded in `/v1/models/{name}` paths, and the numbers for /metrics."""
from __future__ import annotations

import logging
import time

from fastapi.responses import PlainTextResponse

from registry.service.errors import error_response
from registry.service.settings import GENERATION_HEADER
from registry.service.state import READ, ReadRequest

__all__ = ["Edge", "allowed_methods"]

log = logging.getLogger("locus.service")


class Edge:
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
        request = ReadRequest()  # the state its reads take (deps.read_mode), the generation it read or wrote
        reading = READ.set(request)

        async def tracking_send(message):
            nonlocal started, status
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
                if request.generation is not None and status < 400:
                    message = {**message, "headers": [*message.get("headers", ()),
                                                      (_GENERATION, str(request.generation).encode())]}
            await send(message)

        scope = _name_kept_encoded(scope)
        try:
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if self.host_ok is not None and not self.host_ok(host):
                await error_response(403, "Forbidden", f"Host {host[:100]!r} is not this server: without a token "
                                     "only localhost, 127.0.0.1 or [::1] with its port is served", field="Host")(
                    scope, receive, tracking_send)
                return
            if scope["method"] == "OPTIONS" and self.allowed is not None:
                methods = self.allowed(scope["path"])
                if methods:  # every method of the resource, not one of them (no CORS: nothing more)
                    allow = ", ".join(sorted(methods | {"OPTIONS"}))
                    await PlainTextResponse("", status_code=204, headers={"Allow": allow})(
                        scope, receive, tracking_send)
                    return
            if scope["method"] == "HEAD" and self.allowed is not None and "GET" in self.allowed(scope["path"]):
                # HEAD is GET without the body (RFC 9110): FastAPI's routes answer GET only, so a HEAD from a
                # link checker or a load balancer's probe was a 405
                await self._limited({**scope, "method": "GET"}, receive, _bodiless(tracking_send), lambda: started)
                return
            await self._limited(scope, receive, tracking_send, lambda: started)
        except Exception:  # noqa: BLE001 - a bug answers JSON and the connection stays open
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await error_response(500, "InternalError", "the server failed; see its log")(
                    scope, receive, tracking_send)
        finally:
            READ.reset(reading)
            route = scope.get("route")
            self.observe(scope["method"], getattr(route, "path", "unmatched"), status,
                         time.perf_counter() - start)

    def _too_big(self, scope, receive, send):
        return error_response(413, "PayloadTooLarge", f"the request body is over {self.max_bytes} bytes",
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


def _bodiless(send):
    """`send` with every response body emptied: the headers (Content-Length included) stay the GET's."""
    async def headers_only(message):
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)
    return headers_only


# The paths whose next segment is a name: a model's, or an alias's (which holds no '/', and is told so)
_NAME_PREFIXES = (b"/v1/models/", b"/v1/aliases/")
_GENERATION = GENERATION_HEADER.lower().encode()


def _name_kept_encoded(scope):
    """`/v1/models/{name}/...` (and `/v1/aliases/{alias}`) with the name segment as the client encoded it
    (normalised to percent-encoded UTF-8), the rest decoded. The server decodes the whole path before
    routing, which turned `org%2Fmodel` into two segments: a name holding '/' could be added but never
    reached, and an alias `a%2Fb` was a bare 404 instead of its refusal. The route decodes the segment once."""
    from urllib.parse import quote, unquote, unquote_to_bytes

    raw = scope.get("raw_path")
    prefix = next((p for p in _NAME_PREFIXES if raw and raw.startswith(p)), None)
    if prefix is None:
        return scope
    segment, sep, rest = raw[len(prefix):].split(b"?", 1)[0].partition(b"/")
    path = prefix.decode() + quote(unquote_to_bytes(segment), safe="") + sep.decode() + \
        unquote(rest.decode("latin-1"), encoding="utf-8", errors="replace")
    return {**scope, "path": path}


def _routes(routes):
    # FastAPI >= 0.16x keeps an included router whole: its routes are inside it (no prefixes here)
    for route in routes:
        inner = getattr(route, "original_router", None)
        yield from (_routes(inner.routes) if inner is not None else (route,))


def allowed_methods(routes, path: str) -> set[str]:
    """The methods the routes answer on `path` (every router included, however deep)."""
    return {m for route in _routes(routes) if getattr(route, "methods", None) and route.path_regex.match(path)
            for m in route.methods}
