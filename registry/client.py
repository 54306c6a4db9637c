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

Errors come back as the registry's own types (`InputError` with file/line/field, `NotFoundError`,
`RegistryError`; docs/service.md, "Errors", says what else is the same and what differs), never httpx's
or pydantic's: an answer that is not the registry's JSON (a redirect, a proxy's page, another API, a
service of another version) is a `RegistryError` saying so. A write the service accepted but had not
landed within its wait (202) is waited for here, polling its job, for up to `timeout` seconds more. As
httpx does, one implementation with two faces: `_BaseClient` turns each operation into a request and
its answer into a result; the two clients only send (and sleep between polls). A bad argument the
client itself refuses raises at the call, before anything is sent, on both.
"""
from __future__ import annotations

import asyncio
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from functools import partial
from numbers import Real
from pathlib import Path
from typing import Any, Callable, NamedTuple

import httpx

from registry.checks import check_count, check_mapping, check_text
from registry.defaults import AUDIT_ALPHA, AUDIT_MAX_NOISE, CLUSTER_LINKAGE, DRIFT_PERMUTATIONS
from registry.errors import InputError, NotFoundError, RegistryError
from registry.limits import check_evaluations_file, check_model_name
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
# A queued write's job is asked after at these pauses, growing: a job that lands a moment after the service's
# wait is seen soon, a long one is not asked after five times a second
POLL_FIRST_S, POLL_GROWTH, POLL_MAX_S = 0.2, 1.5, 2.0
# httpx's errors raised before any byte of the request went out: nothing was sent, so nothing can land
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError, httpx.UnsupportedProtocol)


class _Call(NamedTuple):
    """One operation over HTTP: what to send, and how its JSON answer becomes the result."""

    method: str
    path: str
    parse: Callable[[Any], Any]
    params: dict[str, Any] | None = None
    json: Any = None
    upload: Path | None = None  # sent as the multipart field `file`, with `form` beside it
    form: dict[str, str] | None = None
    job: str | None = None  # a poll of this job: the write it stands for was accepted and may still land


class _Queued(NamedTuple):
    """A write the service accepted but had not landed within its wait (a 202): its job, asked after
    until it is done, failed, or `deadline` (time.monotonic()) has passed."""

    job_id: str
    call: _Call  # the write: its `parse` reads the job's result
    deadline: float
    polls: int = 0


class _BaseClient:
    """What both clients share: the server, the token, and every operation as a `_Call`."""

    def __init__(self, url: str | None, token: str | None, read: str = "fresh", timeout: float = 300.0) -> None:
        url = url or os.environ.get(SERVER_ENV)
        if not url:
            raise RegistryError(f"no server URL: pass one or set ${SERVER_ENV}")
        if read not in READS:
            raise InputError(f"read must be one of {', '.join(READS)}, not {read!r}", field="read")
        if isinstance(timeout, bool) or not isinstance(timeout, Real) or not (0 < timeout < math.inf):
            raise InputError(f"timeout must be a positive number of seconds, not {timeout!r}", field="timeout")
        self.timeout = float(timeout)  # each request's (httpx), and how long a queued write is waited for
        self._token = _bearer(token)
        self._headers = {CLIENT_HEADER: "registry-client"}  # a program, not a web page (README, Security)
        if self._token:
            self._headers["Authorization"] = f"Bearer {self._token}"
        if read == "loaded":  # docs/service.md, "Reads after a write"
            self._headers[READ_HEADER] = read
        self.read = read
        self._seen = 0  # session: the newest generation an answer carried
        self._seen_lock = threading.Lock()
        self.url = url.rstrip("/")
        self._where = _without_credentials(self.url)  # the URL as messages show it
        try:
            scheme = httpx.URL(self.url).scheme
        except httpx.InvalidURL as err:
            raise InputError(f"server URL {_without_credentials(url)!r} is not a URL: {err}", field="url") from None
        if scheme not in ("http", "https"):
            raise InputError(f"server URL {_without_credentials(url)!r}: give http://HOST:PORT or https://HOST:PORT",
                             field="url")

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
        """What a transport error means for `call`: nothing sent (the service cannot be reached), or sent
        and unanswered, when a write may have landed all the same."""
        detail = self._scrubbed(str(err)) or type(err).__name__
        if isinstance(err, _NOT_SENT):
            return RegistryError(f"cannot reach the registry service at {self._where}: {detail}")
        landing = ""
        if call.job is not None:
            landing = (f" (the write was accepted as job {call.job} and may still land: `client.job({call.job!r})` "
                       "says whether it did)")
        elif call.method != "GET":
            landing = " (a write may still land: read it back before sending it again)"
        if isinstance(err, httpx.TimeoutException):
            return RegistryError(f"{call.method} {call.path}: the registry service at {self._where} did not answer "
                                 f"within the client's timeout ({type(err).__name__}; `timeout=` sets it){landing}")
        return RegistryError(f"{call.method} {call.path}: the connection to the registry service at {self._where} "
                             f"broke before its answer ({type(err).__name__}: {detail}){landing}")

    def _scrubbed(self, text: str) -> str:
        """`text` without the token or the URL's credentials (an error message goes to logs and stderr)."""
        if self._token:
            text = text.replace(self._token, "***")
        return _without_credentials(text)

    def _closed(self) -> RegistryError:
        return RegistryError("the client is closed (close() or the end of its `with` block): make a new one")

    @staticmethod
    def _unsendable(err: ValueError, call: _Call) -> InputError:
        """A body JSON cannot carry (httpx refuses NaN and infinity, as the service would)."""
        return InputError(f"{call.method} {call.path}: the request holds a number JSON cannot carry (NaN or "
                          f"infinity): {err}", field="body")

    def _result(self, call: _Call, response: httpx.Response):
        """The result of `call` (a `_Queued` for a write the service had not landed within its wait), or the
        registry's error for what the service answered."""
        seen = response.headers.get(GENERATION_HEADER, "")
        if seen.isdigit():
            with self._seen_lock:
                self._seen = max(self._seen, int(seen))
        status = response.status_code
        if 300 <= status < 400:  # not followed: a write must not be sent on to wherever a server points
            location = self._scrubbed(response.headers.get("location", "(no Location)"))
            raise RegistryError(f"{call.method} {call.path}: the server at {self._where} answered HTTP {status}, "
                                f"a redirect to {location}: give the service's own URL")
        if status < 400:
            try:
                data = response.json()
                return self._queued(call, response, data) if status == 202 else call.parse(data)
            except RegistryError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError, IndexError):  # ValueError: JSON's, pydantic's
                raise self._foreign(call, response) from None
        try:
            error = response.json()["error"]
            if not isinstance(error, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise self._foreign(call, response) from None
        refused = self._refusal(call, status, error)
        wait = response.headers.get("retry-after", "")
        refused.retry_after = float(wait) if wait.replace(".", "", 1).isdigit() else None
        raise refused

    def _foreign(self, call: _Call, response: httpx.Response) -> RegistryError:
        """An answer that is not the registry's JSON: another server at the URL, a proxy's page, or a service
        whose answers this client cannot read (another version)."""
        kind = response.headers.get("content-type", "no content type").split(";")[0].strip()
        if response.status_code >= 400:
            return RegistryError(f"{call.method} {call.path}: the server at {self._where} answered HTTP "
                                 f"{response.status_code} ({kind}), not as a registry service does: is the URL "
                                 "the service's root?")
        return RegistryError(f"{call.method} {call.path}: the server at {self._where} answered HTTP "
                             f"{response.status_code} ({kind}) but not as a registry service of this version does: "
                             "is the URL the service's root, and are the client and the service the same version "
                             "of locus-registry?")

    def _refusal(self, call: _Call, status: int, error: dict[str, Any]) -> RegistryError:
        """The registry's error for an error answer's {"error": ...} (or a failed job's error and status), with
        the answer's `status` and `error_type` on it (a router retries a 503 StateBehind, not a 409 clash)."""
        refused = self._refused(call, status, error)
        refused.status, refused.error_type = status, error.get("type")
        return refused

    def _refused(self, call: _Call, status: int, error: dict[str, Any]) -> RegistryError:
        message = error.get("message") or f"HTTP {status}"
        kind = error.get("type")
        if kind == "NotFoundError":
            return NotFoundError(message, field=error.get("field"))
        if status == 404:  # the service's "no endpoint" answer: a wrong URL, or an older service, not a missing model
            return RegistryError(f"{message} (is {self._where} the registry service's root, not a path under it, "
                                 "and is the service as new as this client?)")
        if status == 401:  # 403 is a server without a token refusing a web page or a foreign host: no token helps
            return RegistryError(f"{message} (set ${TOKEN_ENV} to the server's token)")
        if status in (413, 422) or kind in ("InputError", "ValidationError", "LimitExceeded", "PayloadTooLarge"):
            file = error.get("file")
            if call.upload is not None and file == call.upload.name:
                file = str(call.upload)  # the service names an upload by its basename: the path as passed here
            return InputError(_problem(error), file=file, line=error.get("line"), field=error.get("field"))
        return RegistryError(message)

    # ---------------------------------------------------------- queued writes
    def _queued(self, call: _Call, response: httpx.Response, view: dict[str, Any]):
        """A 202's job (X-Job-Id, else the Location /v1/jobs/ID, else the body's id), read as a poll's answer."""
        location = response.headers.get("location", "")
        job_id = response.headers.get("x-job-id") or (
            location.rsplit("/", 1)[-1] if location.startswith("/v1/jobs/") else None) or view["id"]
        if not isinstance(job_id, str) or not job_id:
            raise TypeError("no job id")
        return self._job_answer(_Queued(job_id, call, time.monotonic() + self.timeout), view)

    def _job_answer(self, queued: _Queued, view: dict[str, Any]):
        """The write's result once its job is done, its error once failed, else the job to ask after again."""
        state = view["state"]
        if state == "done":
            return queued.call.parse(view["result"])
        if state == "failed":
            raise self._refusal(queued.call, int(view.get("error_status") or 409),
                                view.get("error") or {"message": f"job {queued.job_id} failed"})
        if state not in ("queued", "running"):
            raise ValueError(f"job state {state!r}")
        return queued

    def _pause(self, queued: _Queued) -> float:
        """Seconds to wait before asking after `queued` again, or RegistryError once the client's timeout passed."""
        left = queued.deadline - time.monotonic()
        if left <= 0:
            call, job = queued.call, queued.job_id
            raise RegistryError(f"{call.method} {call.path}: the service accepted the write as job {job} but had not "
                                f"landed it within the client's timeout ({self.timeout:g} s; `timeout=` sets it): it "
                                f"may still land; `client.job({job!r})` says whether it did (its state, then its "
                                "result or error)")
        return min(POLL_FIRST_S * POLL_GROWTH ** queued.polls, POLL_MAX_S, left)

    def _poll(self, queued: _Queued) -> _Call:
        """The request that asks after `queued`'s job; its answer is `_job_answer`'s (with one more poll counted)."""
        again = queued._replace(polls=queued.polls + 1)
        return _Call("GET", f"/v1/jobs/{_quote(queued.job_id)}", partial(self._job_answer, again), job=queued.job_id)

    # -------------------------------------------------------------------- writes
    def add_model(self, name: str, evaluations, metadata: Mapping[str, Any] | None = None, *,
                  replace: bool = False, max_evals: int | None = None) -> ModelChange:
        """Onboard a model from a CSV/JSONL/Parquet path (uploaded) or an iterable of (query, score[,
        task]) tuples / mappings with query and/or query_id, score, task. `max_evals`: embed from a seeded
        sample of that many evaluations (None: all)."""
        import json

        check_model_name(name)  # the library's check at add: '.', '..' and '' would reach other endpoints
        metadata = dict(check_mapping(metadata, "metadata") or {})
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
        model = _segment(name)
        cap = {} if max_evals is None else {"max_evals": max_evals}
        if isinstance(more_evaluations, (str, Path)):
            path = Path(more_evaluations)
            check_evaluations_file(path)
            return self._send(_Call("POST", f"/v1/models/{model}/refine/file", _change, upload=path,
                                    form={k: str(v) for k, v in cap.items()}))
        return self._send(_Call("POST", f"/v1/models/{model}/refine", _change,
                                json={"evaluations": _rows(more_evaluations), **cap}))

    def remove(self, name: str) -> RemoveResult:
        return self._send(_Call("DELETE", f"/v1/models/{_segment(name)}", RemoveResult.model_validate))

    def restore(self, name: str, version: int | None = None) -> RestoreResult:
        params = {"version": version} if version is not None else {}
        return self._send(_Call("POST", f"/v1/models/{_segment(name)}/restore", RestoreResult.model_validate,
                                params=params))

    # --------------------------------------------------------------------- reads
    def list(self, where: str | None = None) -> list[ListedModel]:  # noqa: A003
        params = {"where": where} if where is not None else {}
        return self._send(_Call("GET", "/v1/models", _listed, params=params))

    def models(self) -> list[ModelRecord]:
        """Every model record, by name: `Registry.models()`'s records (`list` adds the evidence of each)."""
        return self._send(_Call("GET", "/v1/models", _records))

    def show(self, name: str) -> ModelInfo:
        return self._send(_Call("GET", f"/v1/models/{_segment(name)}", ModelInfo.model_validate))

    def get(self, name: str) -> ModelRecord:
        return self._send(_Call("GET", f"/v1/models/{_segment(name)}", lambda data: ModelInfo.model_validate(data).record))

    def history(self, name: str) -> ModelHistory:
        return self._send(_Call("GET", f"/v1/models/{_segment(name)}/history", ModelHistory.model_validate))

    def compare(self, a: str, b: str, *, by: str | None = None) -> Comparison:
        params = {k: v for k, v in {"a": _named(a, "a"), "b": _named(b, "b"), "by": by}.items() if v is not None}
        return self._send(_Call("GET", "/v1/compare", Comparison.model_validate, params=params))

    def aliases(self) -> list[Alias]:
        return self._send(_Call("GET", "/v1/aliases", lambda data: [Alias.model_validate(a) for a in data]))

    def set_alias(self, alias: str, target: str) -> Alias:
        from registry.catalog.aliases import check_alias_name

        path = f"/v1/aliases/{_quote(check_alias_name(alias))}"  # the library's check, before the path is built
        return self._send(_Call("PUT", path, Alias.model_validate, json={"target": check_text(target, "target")}))

    def delete_alias(self, alias: str) -> Alias:
        return self._send(_Call("DELETE", f"/v1/aliases/{_segment(alias, 'alias', 'no alias named {!r}')}",
                                Alias.model_validate))

    def similar(self, name_or_vector, k: int = 5, *, metric: str | None = None, where: str | None = None,
                by: str | None = None, min_evals: int | None = None) -> SearchResult:
        from registry.evidence import MIN_EVALS, check_min_evals

        min_evals = check_min_evals(MIN_EVALS if min_evals is None else min_evals)
        if isinstance(name_or_vector, str):
            params = {"name": _named(name_or_vector, "name"), "k": k, "min_evals": min_evals}
            for key, value in (("metric", metric), ("by", by), ("where", where)):
                if value is not None:
                    params[key] = value
            return self._send(_Call("GET", "/v1/similar", SearchResult.model_validate, params=params))
        if by not in (None, "locus", "embedding"):
            raise InputError("a vector is searched in the LOCUS index (by='locus')", field="by")
        try:
            vector = [float(x) for x in name_or_vector]
        except (TypeError, ValueError):  # None, a number, a list of names: neither a name nor a vector
            raise InputError(f"search from a model name or a vector of numbers, not {type(name_or_vector).__name__}",
                             field="query") from None
        return self._send(_Call("POST", "/v1/similar", SearchResult.model_validate, json={
            "vector": vector, "k": k, "metric": metric or "cosine", "where": where, "min_evals": min_evals}))

    def route(self, queries, *, k: int = 3, exclude=(), where: str | None = None,
              fallback: int = 3, by: str | None = None, min_evals: int | None = None,
              max_cost: float | None = None, willingness_to_pay: float | None = None,
              unpriced: str = "error") -> RouteDecision | list[RouteDecision]:
        from registry.analytics.routing import query_texts
        from registry.evidence import MIN_EVALS, check_min_evals

        texts, single = query_texts(queries)  # the library's check of the texts: its field, its words
        # exclude as registry.operations.route takes it: a name, a collection of names, or None (none)
        if exclude is not None and not isinstance(exclude, (str, list, tuple, set, frozenset)):
            raise InputError(f"exclude must be a model name or a list of them, not {type(exclude).__name__}",
                             field="exclude")
        excluded = [exclude] if isinstance(exclude, str) else [check_text(n, "exclude") for n in exclude or ()]
        body = {"k": k, "exclude": excluded, "where": where,
                "fallback": fallback, "min_evals": check_min_evals(MIN_EVALS if min_evals is None else min_evals),
                **({"query": texts[0]} if single else {"queries": texts})}
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
            params["model"] = _named(model, "model")
        if by is not None:
            params["by"] = by
        return self._send(_Call("GET", "/v1/audit", AuditReport.model_validate, params=params))

    def drift(self, name: str, *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE,
              permutations: int = DRIFT_PERMUTATIONS, seed: int = 0) -> DriftReport:
        params = {"alpha": alpha, "max_noise": max_noise, "permutations": permutations, "seed": seed}
        return self._send(_Call("GET", f"/v1/models/{_segment(name)}/drift", DriftReport.model_validate, params=params))

    def drift_refined(self, *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE,
                      permutations: int = DRIFT_PERMUTATIONS, seed: int = 0) -> DriftRun:
        params = {"alpha": alpha, "max_noise": max_noise, "permutations": permutations, "seed": seed}
        return self._send(_Call("POST", "/v1/drift/run", DriftRun.model_validate, params=params))

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
        """An embedding job's state (GET /v1/jobs/ID): `result` once done, `error` once failed; the ID is in
        the error of a write the client stopped waiting for."""
        return self._send(_Call("GET", f"/v1/jobs/{_segment(job_id, 'job_id', 'no job {!r}')}", dict))


class RegistryClient(_BaseClient):
    """The registry over HTTP, blocking: each method returns what `Registry`'s does."""

    def __init__(self, url: str | None = None, *, token: str | None = None, timeout: float = 300.0,
                 read: str = "fresh", transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(url, token, read, timeout)
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=self.timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, call: _Call):
        answer = self._exchange(call)
        while isinstance(answer, _Queued):  # accepted, not landed within the service's wait: ask after its job
            time.sleep(self._pause(answer))
            answer = self._exchange(self._poll(answer))
        return answer

    def _exchange(self, call: _Call):
        if self._http.is_closed:
            raise self._closed()
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
        super().__init__(url, token, read, timeout)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self.timeout,
                                       transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncRegistryClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _send(self, call: _Call):
        answer = await self._exchange(call)
        while isinstance(answer, _Queued):  # accepted, not landed within the service's wait: ask after its job
            await asyncio.sleep(self._pause(answer))
            answer = await self._exchange(self._poll(answer))
        return answer

    async def _exchange(self, call: _Call):
        if self._http.is_closed:
            raise self._closed()
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


def _records(data) -> list[ModelRecord]:
    """The list endpoint's models as `Registry.models()` gives them: the records, without the evidence."""
    return [ModelRecord.model_validate({k: v for k, v in r.items() if k in ModelRecord.model_fields}) for r in data]


def _quote(part: str) -> str:
    from urllib.parse import quote

    return quote(part, safe="")


def _named(name: Any, field: str, missing: str | None = None) -> str:
    """A name argument, checked before it is sent: not text is an InputError naming `field`; '', '.' and '..'
    are a NotFoundError (the library's "no model named", else `missing` formatted with the name), as from the
    library: nothing is ever given such a name (registry.limits.check_model_name), and in a path httpx drops a
    dot segment and '' empties it, so the request would reach another endpoint."""
    check_text(name, field)
    if name in ("", ".", ".."):
        raise NotFoundError.model(name, [], field=field) if missing is None else \
            NotFoundError(missing.format(name), field=field)
    return name


def _segment(name: Any, field: str = "name", missing: str | None = None) -> str:
    """`name` checked (`_named`) and percent-encoded as one path segment."""
    return _quote(_named(name, field, missing))


def _bearer(token: str | None) -> str | None:
    """The token to send: `token=`, else $LOCUS_TOKEN, stripped as `registry serve` strips its own (cli/serve.py,
    _read_token: a file's newline, a pasted space), None when empty. One an HTTP header cannot carry is refused
    here, without showing it (httpx's own error printed the whole header, on every call)."""
    source = "token="
    if token is None:
        token, source = os.environ.get(TOKEN_ENV), f"${TOKEN_ENV}"
        if token is None:
            return None
    if not isinstance(token, str):
        raise InputError(f"the token must be text (str), not {type(token).__name__}", field="token")
    token = token.strip()
    bad = next((i for i, c in enumerate(token) if not " " <= c <= "~"), None)
    if bad is not None:
        raise InputError(f"the token ({source}) holds a character an HTTP header cannot carry at position {bad + 1} "
                         "(a non-ASCII or control character): a token is printable ASCII", field="token")
    return token or None


def _without_credentials(text: str) -> str:
    """`text` with any URL's user:password@ replaced by ***@ (messages are logged and printed)."""
    return re.sub(r"(?<=//)[^/@\s]*@", "***@", text)


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
