"""`RegistryClient` and `AsyncRegistryClient`: the registry through a running `registry serve`, with
`Registry`'s method names and result types.

>>> reg = RegistryClient("http://127.0.0.1:8000", token="...")   # or RegistryClient() for $LOCUS_SERVER
>>> reg.route("What is 12 times 7?", k=3).ranking[0].name
>>> reg.add_model("my-model", "evals.csv", {"family": "llama"})   # a file is uploaded, rows sent inline

>>> async with AsyncRegistryClient("http://127.0.0.1:8000") as reg:   # in an asyncio service
...     decision = await reg.route("What is 12 times 7?", k=3)

Reads after writes (docs/service.md, "Reads after a write"), `read=` on either client: "fresh" (the default)
sees every write landed before it, waiting for the service to load it; "session" sees this client's own
writes and never goes back in time, without waiting for other clients' (it sends the newest
X-Locus-Generation it was answered with); "loaded" takes whatever state the service has loaded.

Errors come back as the registry's own (`InputError` with file/line/field, `NotFoundError`,
`RegistryError`), so code written against `Registry` handles them unchanged. As httpx does, one
implementation with two faces: `_BaseClient` turns each operation into a request and its answer into a
result; the two clients only send (a bad argument the client itself refuses raises at the call, before
anything is sent, on both).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Callable, NamedTuple

import httpx

from registry.checks import check_count
from registry.defaults import AUDIT_ALPHA, AUDIT_MAX_NOISE, CLUSTER_LINKAGE, DRIFT_PERMUTATIONS
from registry.errors import InputError, NotFoundError, RegistryError
from registry.limits import check_evaluations_file
from registry.records import ModelRecord
from registry.results import (
    ListedModel,
    Alias,
    AuditReport,
    ClustersResult,
    Comparison,
    DriftReport,
    DriftRun,
    ModelChange,
    ModelHistory,
    ModelInfo,
    PortfolioResult,
    ProfileResult,
    QueryList,
    QuerySuggestions,
    RemoveResult,
    RestoreResult,
    RouteDecision,
    SearchResult,
    Stats,
)
from registry.service.settings import CLIENT_HEADER, GENERATION_HEADER, READ_HEADER, SERVER_ENV, TOKEN_ENV

__all__ = ["RegistryClient", "AsyncRegistryClient"]

READS = ("fresh", "session", "loaded")  # what `read=` takes (session: X-Locus-Read fresh, then a generation)


class _Call(NamedTuple):
    """One operation over HTTP: what to send, and how its JSON answer becomes the result."""

    method: str
    path: str
    parse: Callable[[Any], Any]
    params: dict[str, Any] | None = None
    json: Any = None
    upload: Path | None = None  # sent as the multipart field `file`, with `form` beside it
    form: dict[str, str] | None = None


class _BaseClient:
    """What both clients share: the server, the token, and every operation as a `_Call`."""

    def __init__(self, url: str | None, token: str | None, read: str = "fresh") -> None:
        url = url or os.environ.get(SERVER_ENV)
        if not url:
            raise RegistryError(f"no server URL: pass one or set ${SERVER_ENV}")
        if read not in READS:
            raise InputError(f"read must be one of {', '.join(READS)}, not {read!r}", field="read")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self._headers = {CLIENT_HEADER: "registry-client"}  # a program, not a web page (README, Security)
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        if read == "loaded":  # docs/service.md, "Reads after a write"
            self._headers[READ_HEADER] = read
        self.read = read
        self._seen = 0  # session: the newest generation an answer carried
        self._seen_lock = threading.Lock()
        self.url = url.rstrip("/")
        try:
            scheme = httpx.URL(self.url).scheme
        except httpx.InvalidURL as err:
            raise InputError(f"server URL {url!r} is not a URL: {err}", field="url") from None
        if scheme not in ("http", "https"):
            raise InputError(f"server URL {url!r}: give http://HOST:PORT or https://HOST:PORT", field="url")

    @property
    def generation(self) -> int:
        """The newest generation an answer to this client carried (X-Locus-Generation; 0: none yet)."""
        return self._seen

    def _send(self, call: _Call):
        raise NotImplementedError

    def _request(self, call: _Call, handle=None) -> dict[str, Any]:
        """The keyword arguments of httpx's `request` for `call` (`handle`: its upload, opened)."""
        kwargs: dict[str, Any] = {"params": call.params}
        if self.read == "session" and self._seen:
            kwargs["headers"] = {READ_HEADER: str(self._seen)}
        if call.json is not None:
            kwargs["json"] = call.json
        if call.upload is not None:
            kwargs["files"] = {"file": (call.upload.name, handle)}
            kwargs["data"] = call.form or {}
        return kwargs

    def _unreachable(self, err: Exception, call: _Call) -> RegistryError:
        if isinstance(err, httpx.TimeoutException) and not isinstance(err, httpx.ConnectTimeout):
            landing = " (a write may still land: read it back before sending it again)" if call.method != "GET" else ""
            return RegistryError(f"{call.method} {call.path}: the registry service at {self.url} did not answer "
                                 f"within the client's timeout ({type(err).__name__}; `timeout=` sets it){landing}")
        return RegistryError(f"cannot reach the registry service at {self.url}: {err}")

    @staticmethod
    def _unsendable(err: ValueError, call: _Call) -> InputError:
        """A body JSON cannot carry (httpx refuses NaN and infinity, as the service would)."""
        return InputError(f"{call.method} {call.path}: the request holds a number JSON cannot carry (NaN or "
                          f"infinity): {err}", field="body")

    def _result(self, call: _Call, response: httpx.Response):
        """The result of `call`, or the registry's error for what the service answered."""
        seen = response.headers.get(GENERATION_HEADER, "")
        if seen.isdigit():
            with self._seen_lock:
                self._seen = max(self._seen, int(seen))
        if response.status_code < 400:
            return call.parse(response.json())
        method, path = call.method, call.path
        try:
            error = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            raise RegistryError(f"{method} {path}: HTTP {response.status_code}: {response.text[:200]}") from None
        message = error.get("message") or f"HTTP {response.status_code}"
        if response.status_code == 404 or error.get("type") == "NotFoundError":
            raise NotFoundError(message, field=error.get("field"))
        if response.status_code in (401, 403):
            raise RegistryError(f"{message} (set ${TOKEN_ENV} to the server's token)")
        if response.status_code in (413, 422) or error.get("type") in ("InputError", "ValidationError",
                                                                        "LimitExceeded", "PayloadTooLarge"):
            raise InputError(_problem(error), file=error.get("file"), line=error.get("line"),
                             field=error.get("field"))
        raise RegistryError(message)

    # -------------------------------------------------------------------- writes
    def add_model(self, name: str, evaluations, metadata: Mapping[str, Any] | None = None, *,
                  replace: bool = False, max_evals: int | None = None) -> ModelChange:
        """Onboard a model from a CSV/JSONL/Parquet path (uploaded) or an iterable of (query, score[,
        task]) tuples / mappings with query and/or query_id, score, task. `max_evals`: embed from a seeded
        sample of that many evaluations (None: all)."""
        import json

        metadata = dict(metadata or {})
        cap = {} if max_evals is None else {"max_evals": max_evals}
        if isinstance(evaluations, (str, Path)):
            path = Path(evaluations)
            check_evaluations_file(path)
            return self._send(_Call("POST", f"/v1/models/{_quote(name)}/file", _change, upload=path, form={
                "metadata": json.dumps(metadata), "replace": str(replace).lower(),
                **{k: str(v) for k, v in cap.items()}}))
        return self._send(_Call("POST", "/v1/models", _change, json={
            "name": name, "evaluations": _rows(evaluations), "metadata": metadata, "replace": replace, **cap}))

    def refine(self, name: str, more_evaluations, *, max_evals: int | None = None) -> ModelChange:
        cap = {} if max_evals is None else {"max_evals": max_evals}
        if isinstance(more_evaluations, (str, Path)):
            path = Path(more_evaluations)
            check_evaluations_file(path)
            return self._send(_Call("POST", f"/v1/models/{_quote(name)}/refine/file", _change, upload=path,
                                    form={k: str(v) for k, v in cap.items()}))
        return self._send(_Call("POST", f"/v1/models/{_quote(name)}/refine", _change,
                                json={"evaluations": _rows(more_evaluations), **cap}))

    def remove(self, name: str) -> RemoveResult:
        return self._send(_Call("DELETE", f"/v1/models/{_quote(name)}", RemoveResult.model_validate))

    def restore(self, name: str, version: int | None = None) -> RestoreResult:
        params = {"version": version} if version is not None else {}
        return self._send(_Call("POST", f"/v1/models/{_quote(name)}/restore", RestoreResult.model_validate,
                                params=params))

    # --------------------------------------------------------------------- reads
    def list(self, where: str | None = None) -> list[ListedModel]:  # noqa: A003
        params = {"where": where} if where is not None else {}
        return self._send(_Call("GET", "/v1/models", _listed, params=params))

    def models(self) -> list[ModelRecord]:
        return self._send(_Call("GET", "/v1/models", _listed))

    def show(self, name: str) -> ModelInfo:
        return self._send(_Call("GET", f"/v1/models/{_quote(name)}", ModelInfo.model_validate))

    def get(self, name: str) -> ModelRecord:
        return self._send(_Call("GET", f"/v1/models/{_quote(name)}", lambda data: ModelInfo.model_validate(data).record))

    def history(self, name: str) -> ModelHistory:
        return self._send(_Call("GET", f"/v1/models/{_quote(name)}/history", ModelHistory.model_validate))

    def compare(self, a: str, b: str, *, by: str | None = None) -> Comparison:
        params = {k: v for k, v in {"a": a, "b": b, "by": by}.items() if v is not None}
        return self._send(_Call("GET", "/v1/compare", Comparison.model_validate, params=params))

    def aliases(self) -> list[Alias]:
        return self._send(_Call("GET", "/v1/aliases", lambda data: [Alias.model_validate(a) for a in data]))

    def set_alias(self, alias: str, target: str) -> Alias:
        return self._send(_Call("PUT", f"/v1/aliases/{_quote(alias)}", Alias.model_validate, json={"target": target}))

    def delete_alias(self, alias: str) -> Alias:
        return self._send(_Call("DELETE", f"/v1/aliases/{_quote(alias)}", Alias.model_validate))

    def similar(self, name_or_vector, k: int = 5, *, metric: str | None = None, where: str | None = None,
                by: str | None = None, min_evals: int | None = None) -> SearchResult:
        from registry.evidence import MIN_EVALS, check_min_evals

        min_evals = check_min_evals(MIN_EVALS if min_evals is None else min_evals)
        if isinstance(name_or_vector, str):
            params = {"name": name_or_vector, "k": k, "min_evals": min_evals}
            for key, value in (("metric", metric), ("by", by), ("where", where)):
                if value is not None:
                    params[key] = value
            return self._send(_Call("GET", "/v1/similar", SearchResult.model_validate, params=params))
        if by not in (None, "locus", "embedding"):
            raise InputError("a vector is searched in the LOCUS index (by='locus')", field="by")
        vector = [float(x) for x in name_or_vector]
        return self._send(_Call("POST", "/v1/similar", SearchResult.model_validate, json={
            "vector": vector, "k": k, "metric": metric or "cosine", "where": where, "min_evals": min_evals}))

    def route(self, queries, *, k: int = 3, exclude=(), where: str | None = None,
              fallback: int = 3, by: str | None = None, min_evals: int | None = None,
              max_cost: float | None = None, willingness_to_pay: float | None = None,
              unpriced: str = "error") -> RouteDecision | list[RouteDecision]:
        from registry.evidence import MIN_EVALS, check_min_evals

        single = isinstance(queries, str)
        body = {"k": k, "exclude": [exclude] if isinstance(exclude, str) else list(exclude), "where": where,
                "fallback": fallback, "min_evals": check_min_evals(MIN_EVALS if min_evals is None else min_evals),
                **({"query": queries} if single else {"queries": list(queries)})}
        if by is not None:
            body["by"] = by
        # sent only when asked, so that a route without a trade-off still talks to an older service
        for key, value in (("max_cost", max_cost), ("willingness_to_pay", willingness_to_pay)):
            if value is not None:
                from registry.analytics.cost import check_cost_option

                body[key] = check_cost_option(value, key)
        if unpriced != "error":
            body["unpriced"] = unpriced

        def decisions(data):
            found = [RouteDecision.model_validate(d) for d in data["results"]]
            return found[0] if single else found

        return self._send(_Call("POST", "/v1/route", decisions, json=body))

    def audit(self, *, model: str | None = None, metric: str = "cosine", k: int = 10, alpha: float = AUDIT_ALPHA,
              max_noise: float = AUDIT_MAX_NOISE, by: str | None = None) -> AuditReport:
        params = {"metric": metric, "k": k, "alpha": alpha, "max_noise": max_noise}
        if model is not None:
            params["model"] = model
        if by is not None:
            params["by"] = by
        return self._send(_Call("GET", "/v1/audit", AuditReport.model_validate, params=params))

    def drift(self, name: str, *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE,
              permutations: int = DRIFT_PERMUTATIONS, seed: int = 0) -> DriftReport:
        params = {"alpha": alpha, "max_noise": max_noise, "permutations": permutations, "seed": seed}
        return self._send(_Call("GET", f"/v1/models/{_quote(name)}/drift", DriftReport.model_validate, params=params))

    def drift_refined(self, *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE) -> DriftRun:
        return self._send(_Call("POST", "/v1/drift/run", DriftRun.model_validate,
                                params={"alpha": alpha, "max_noise": max_noise}))

    def profile(self, targets: dict[str, float], *, k: int = 5, evals: int = 512, seed: int = 0,
                where: str | None = None, by: str | None = None) -> ProfileResult:
        return self._send(_Call("POST", "/v1/profile", ProfileResult.model_validate, json={
            "targets": targets, "k": k, "evals": evals, "seed": seed, "where": where, "by": by}))

    def portfolio(self, *, k: int | None = None, budget_b: float | None = None, method: str | None = None,
                  where: str | None = None, include_unknown_params: bool = False, seed: int = 0,
                  random_draws: int = 200, by: str | None = None) -> PortfolioResult:
        params = {k_: v for k_, v in {"k": k, "budget_b": budget_b, "method": method, "where": where,
                                      "include_unknown_params": include_unknown_params, "seed": seed,
                                      "random_draws": random_draws, "by": by}.items()
                  if v is not None}
        return self._send(_Call("GET", "/v1/portfolio", PortfolioResult.model_validate, params=params))

    def clusters(self, *, where: str | None = None, linkage: str = CLUSTER_LINKAGE, k: int | None = None,
                 by: str | None = None, min_evals: int | None = None) -> ClustersResult:
        """`Registry.clusters` without the figure (a plot is drawn where the registry is: `registry clusters`)."""
        params = {k_: v for k_, v in {"where": where, "linkage": linkage, "k": k, "by": by,
                                      "min_evals": min_evals}.items() if v is not None}
        return self._send(_Call("GET", "/v1/clusters", ClustersResult.model_validate, params=params))

    def suggest_queries(self, name: str | None = None, n: int = 64, *, task: str | None = None,
                        from_pool: bool = False, answered: dict[str, float] | None = None) -> QuerySuggestions:
        from registry.analytics.suggest import check_answered, check_n

        check_n(n)  # refused here as the API refuses it, before a request
        if answered:
            body = {"name": name, "n": n, "task": task, "from_pool": from_pool, "answered": check_answered(answered)}
            return self._send(_Call("POST", "/v1/suggest-queries", QuerySuggestions.model_validate, json=body))
        params = {k: v for k, v in {"name": name, "n": n, "task": task, "from_pool": from_pool}.items() if v is not None}
        return self._send(_Call("GET", "/v1/suggest-queries", QuerySuggestions.model_validate, params=params))

    def stats(self) -> Stats:
        return self._send(_Call("GET", "/v1/stats", Stats.model_validate))

    def queries(self, *, task: str | None = None, limit: int | None = None, offset: int = 0) -> QueryList:
        params = {k: v for k, v in {"task": task, "limit": check_count(limit, "limit", 0, optional=True),
                                     "offset": check_count(offset, "offset", 0)}.items() if v is not None}
        return self._send(_Call("GET", "/v1/queries", QueryList.model_validate, params=params))

    def health(self) -> dict[str, Any]:
        return self._send(_Call("GET", "/v1/health", dict))

    def job(self, job_id: str) -> dict[str, Any]:
        return self._send(_Call("GET", f"/v1/jobs/{_quote(job_id)}", dict))


class RegistryClient(_BaseClient):
    """The registry over HTTP, blocking: each method returns what `Registry`'s does."""

    def __init__(self, url: str | None = None, *, token: str | None = None, timeout: float = 300.0,
                 read: str = "fresh", transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(url, token, read)
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, call: _Call):
        try:
            if call.upload is None:
                response = self._http.request(call.method, call.path, **self._request(call))
            else:
                with open(call.upload, "rb") as handle:
                    response = self._http.request(call.method, call.path, **self._request(call, handle))
        except httpx.HTTPError as err:
            raise self._unreachable(err, call) from None
        except ValueError as err:
            if "JSON compliant" not in str(err):
                raise
            raise self._unsendable(err, call) from None
        return self._result(call, response)


class AsyncRegistryClient(_BaseClient):
    """The registry over HTTP for asyncio code (a service routing live requests): each method returns an
    awaitable of what `Registry`'s returns."""

    def __init__(self, url: str | None = None, *, token: str | None = None, timeout: float = 300.0,
                 read: str = "fresh", transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(url, token, read)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=timeout,
                                       transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncRegistryClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _send(self, call: _Call):
        try:
            if call.upload is None:
                response = await self._http.request(call.method, call.path, **self._request(call))
            else:
                with open(call.upload, "rb") as handle:  # httpx reads a file part from a plain handle
                    response = await self._http.request(call.method, call.path, **self._request(call, handle))
        except httpx.HTTPError as err:
            raise self._unreachable(err, call) from None
        except ValueError as err:
            if "JSON compliant" not in str(err):
                raise
            raise self._unsendable(err, call) from None
        return self._result(call, response)


def _change(data) -> ModelChange:
    import sys

    from registry.evidence import warn_if_thin

    # the warning names the line of the code that called the client, sync or awaited, not this module's
    frame, inside = sys._getframe(0), 0
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, inside = frame.f_back, inside + 1
    return warn_if_thin(ModelChange.model_validate(data), stacklevel=2 + inside)


def _listed(data) -> list[ListedModel]:
    return [ListedModel.model_validate(r) for r in data]


def _quote(part: str) -> str:
    from urllib.parse import quote

    return quote(part, safe="")


def _problem(error: dict[str, Any]) -> str:
    """The message without the where-prefix the service already put in (InputError adds it again): the
    prefix as InputError spells it ("field 'where': ", "FILE, line 3: "), or a bare "where: "."""
    message = error.get("message") or ""
    field = error.get("field")
    prefix = str(InputError("", file=error.get("file"), line=error.get("line"), field=field))
    for known in (prefix, f"{field}: " if field else ""):
        if known and message.startswith(known):
            return message[len(known):]
    return message


def _rows(evaluations: Iterable[Any]) -> list[dict[str, Any]]:
    rows = []
    for i, item in enumerate(evaluations, start=1):
        if isinstance(item, Mapping):
            row = {k: item[k] for k in ("query", "query_id", "score", "task") if item.get(k) is not None}
        else:
            values = tuple(item)
            if len(values) not in (2, 3):
                raise InputError("expected (query, score) or (query, score, task)", file="evaluations", line=i)
            row = {"query": values[0], "score": values[1]}
            if len(values) == 3 and values[2] is not None:
                row["task"] = values[2]
        rows.append(row)
    return rows
