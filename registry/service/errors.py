"""Every error the service answers, as JSON: {"error": {"type", "message", "field", "file", "line"}}.

`add_error_handlers` maps the registry's errors (422 bad input, 404 not found, 409 a clash with the
registry's state), FastAPI's validation errors, Starlette's HTTP errors and the service's own
`HTTPError` onto that one shape; anything else is a 500 that names no internals.
"""
from __future__ import annotations

import logging
from typing import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from registry import results as r
from registry.errors import InputError, NotFoundError, RegistryError

__all__ = ["ERRORS", "HTTPError", "error_response", "add_error_handlers"]

log = logging.getLogger("locus.service")
# The error answers an endpoint documents (its `responses=`), all with the one error body.
ERRORS = {code: {"model": r.ErrorResponse} for code in (401, 403, 404, 409, 413, 422)}


class HTTPError(Exception):
    """An error of the HTTP layer itself (auth, a path segment), answered with its own status."""

    def __init__(self, status: int, message: str, *, field: str | None = None, type_: str = "HTTPError",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.field, self.type, self.headers = status, field, type_, headers


def error_response(status: int, type_: str, message: str, *, field=None, file=None, line=None,
                   headers=None) -> JSONResponse:
    body = {"error": {"type": type_, "message": _printable(message), "field": _printable(field),
                      "file": _printable(file), "line": line}}
    return JSONResponse(body, status_code=status, headers=headers)


def _printable(text):
    """An error may quote the input it refuses: a lone surrogate in it (no character, no UTF-8) is written
    as its escape, or the answer itself could not be sent."""
    if not isinstance(text, str):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _registry_status(err: RegistryError) -> int:
    if isinstance(err, InputError):
        return 422
    if isinstance(err, NotFoundError):
        return 404
    return 409  # the request clashes with the registry's state (name exists, no encoder, ...)


async def _registry_error(request: Request, err: RegistryError):
    return error_response(_registry_status(err), type(err).__name__, str(err), field=getattr(err, "field", None),
                          file=getattr(err, "file", None), line=getattr(err, "line", None))


async def _validation(request: Request, err: RequestValidationError):
    problems = err.errors()
    first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
    if first.get("type") == "json_invalid":  # its loc is ("body", character offset): the body is the field
        offset = first.get("loc", ("body", None))[-1]
        at = f" at character {offset}" if isinstance(offset, int) else ""
        return error_response(422, "ValidationError", f"body: not JSON ({first.get('msg', 'decode error')}{at})",
                              field="body")
    loc = [str(p) for p in first.get("loc", ())]
    whole_body = loc == ["body"]  # not an object, absent, or two fields that exclude each other: the body's own
    if loc and loc[0] in ("body", "query", "path", "form", "header"):
        loc = loc[1:]  # where the field sits (body, query string) is not part of its name
    field = ".".join(loc) or ("body" if whole_body else None)
    message = first.get("msg", "invalid request")
    message = message.removeprefix("Value error, ")  # our validators' own words, as a path refusal says them
    if field and first.get("type") in ("too_long", "string_too_long"):
        return error_response(422, "LimitExceeded", f"{field}: {message}", field=field)
    return error_response(422, "ValidationError", f"{field}: {message}" if field else message, field=field)


async def _http(request: Request, err: StarletteHTTPException):
    if err.status_code == 400:  # FastAPI's "error parsing the body": a malformed body, as documented
        return error_response(422, "ValidationError", f"body: {err.detail}", field="body")
    message = str(err.detail)
    if err.status_code == 404 and message == "Not Found":  # no route matched: say which, and where they are
        path = request.url.path if len(request.url.path) <= 200 else request.url.path[:200] + "..."
        message = (f"no endpoint {request.method} {path}: the endpoints are listed at /openapi.json "
                   "(and in the web UI at /api)")
    return error_response(err.status_code, "HTTPError", message, headers=getattr(err, "headers", None))


async def _ours(request: Request, err: HTTPError):
    return error_response(err.status, err.type, str(err), field=err.field, headers=err.headers)


async def _bug(request: Request, err: Exception):
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "InternalError", f"{type(err).__name__}: the server failed; see its log")


def add_error_handlers(app: FastAPI, *, before_body: Callable[[Request], Awaitable[None]] | None = None) -> None:
    """`before_body(request)`: a check that outranks a malformed body (the write check: a request without
    the token is told so, 401, not that its body is bad); it raises HTTPError to refuse."""

    def first(handler):
        async def checked(request: Request, err: Exception):
            if before_body is not None:
                try:
                    await before_body(request)
                except HTTPError as refused:
                    return await _ours(request, refused)
            return await handler(request, err)
        return checked

    app.add_exception_handler(RegistryError, _registry_error)
    app.add_exception_handler(RequestValidationError, first(_validation))
    app.add_exception_handler(StarletteHTTPException, first(_http))
    app.add_exception_handler(HTTPError, _ours)
    app.add_exception_handler(Exception, _bug)
