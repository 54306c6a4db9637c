"""`RegistryClient` / `AsyncRegistryClient` against answers a live router meets: a write queued past the
service's wait (202), a connection dropped after a write was sent, a token with a newline, a redirect or a
proxy's page at the URL, a path no endpoint answers, names no model has, a closed client; and the service
taking the library's `by` values, metadata limit and drift options everywhere. Most answers are made by
httpx.MockTransport; the rest come from the app itself, in process (the client's requests handed to a
TestClient), so nothing listens on a port."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from registry import InputError, NotFoundError, Registry, RegistryError
from registry.client import AsyncRegistryClient, RegistryClient

from helpers import SMALL_TRAINED, stored_texts
from service_harness import TOKEN

URL = "http://registry.test"
CHANGE = {"name": "queued", "version": 1, "event": "add", "encoder_id": "enc", "n_evals": 40, "new_evaluations": 40,
          "encoded_texts": 0, "low_evidence": False, "warnings": [], "generation": 7}


def _job(state: str, **more) -> dict:
    return {"id": "j" * 32, "kind": "add", "name": "queued", "state": state, "created": 1.0, "started": None,
            "finished": None, "result": None, "error": None, "error_status": None, **more}


def _mock(answer, sent: list | None = None, *, token: str | None = TOKEN, **options) -> RegistryClient:
    def handle(request):
        if sent is not None:
            sent.append(request)
        return answer(request)

    return RegistryClient(URL, token=token, transport=httpx.MockTransport(handle), **options)


def _rows(n: int = 40) -> list[tuple[str, int]]:
    return [(f"What is {i} plus {i}?", i % 2) for i in range(n)]


# ---------------------------------------------------------------- 1. a write queued past the service's wait
def _queued_then(states: list[dict], *, headers=None):
    """A service that answers the add 202 (the job queued) and each poll of the job with the next state."""
    polls = iter(states)

    def answer(request):
        if request.method == "POST":
            return httpx.Response(202, json=_job("queued"), headers=headers if headers is not None else {
                "X-Job-Id": "j" * 32, "Location": f"/v1/jobs/{'j' * 32}"})
        assert request.url.path == f"/v1/jobs/{'j' * 32}", request.url
        return httpx.Response(200, json=next(polls), headers={"X-Locus-Generation": "7"})

    return answer


@pytest.mark.parametrize("headers", [None, {"Location": f"/v1/jobs/{'j' * 32}"}, {}],
                         ids=["x-job-id", "location", "body-id"])
def test_a_queued_write_is_polled_until_its_job_is_done(headers):
    sent = []
    reg = _mock(_queued_then([_job("running"), _job("done", result=CHANGE)], headers=headers), sent)
    change = reg.add_model("queued", _rows())
    assert change.model_dump() == {**CHANGE, "low_evidence": change.low_evidence}
    assert [r.method for r in sent] == ["POST", "GET", "GET"]
    assert reg.generation == 7  # the poll's answer carries the landed write's generation


def test_a_queued_write_whose_job_fails_raises_the_job_error():
    failed = _job("failed", error={"type": "InputError", "message": "evaluations, line 2, field 'score': score 'x' is not a number",
                                   "field": "score", "file": "evaluations", "line": 2}, error_status=422)
    with pytest.raises(InputError) as caught:
        _mock(_queued_then([failed])).add_model("queued", _rows())
    assert (caught.value.field, caught.value.file, caught.value.line) == ("score", "evaluations", 2)
    assert str(caught.value) == "evaluations, line 2, field 'score': score 'x' is not a number"
    clash = _job("failed", error={"type": "RegistryError", "message": "model 'queued' exists"}, error_status=409)
    with pytest.raises(RegistryError, match="model 'queued' exists"):
        _mock(_queued_then([clash])).add_model("queued", _rows())


def test_a_queued_write_past_the_client_timeout_names_its_job_and_how_to_check():
    reg = _mock(_queued_then([_job("running")] * 100), timeout=0.5)
    with pytest.raises(RegistryError) as caught:
        reg.add_model("queued", _rows())
    said = str(caught.value)
    assert "j" * 32 in said and "may still land" in said and f"client.job('{'j' * 32}')" in said


def test_the_async_client_polls_a_queued_write_too():
    async def main():
        transport = httpx.MockTransport(_queued_then([_job("queued"), _job("running"), _job("done", result=CHANGE)]))
        async with AsyncRegistryClient(URL, token=TOKEN, transport=transport) as reg:
            return await reg.add_model("queued", _rows())

    assert asyncio.run(main()).version == 1


# ---------------------------------------------------------------- 2. transport errors: sent or not
@pytest.mark.parametrize("error", [httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError])
def test_a_write_whose_connection_broke_after_sending_may_still_land(error):
    def broken(request):
        raise error("Server disconnected without sending a response.", request=request)

    reg = _mock(broken)
    with pytest.raises(RegistryError) as caught:
        reg.add_model("x", _rows())
    assert "a write may still land" in str(caught.value) and "cannot reach" not in str(caught.value)
    with pytest.raises(RegistryError) as read:  # a read can be sent again: no such note
        reg.stats()
    assert "may still land" not in str(read.value) and "broke before its answer" in str(read.value)


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout])
def test_an_error_before_sending_says_the_service_cannot_be_reached(error):
    def refused(request):
        raise error("Connection refused", request=request)

    with pytest.raises(RegistryError) as caught:
        _mock(refused).remove("x")
    assert "cannot reach the registry service" in str(caught.value) and "may still land" not in str(caught.value)


# ---------------------------------------------------------------- 3. the token
def test_the_token_is_stripped_as_the_server_strips_its_own(monkeypatch):
    sent = []
    _mock(lambda r: httpx.Response(200, json={"status": "ok"}), sent, token=f" {TOKEN}\n").health()
    monkeypatch.setenv("LOCUS_TOKEN", f"{TOKEN}  \n")
    _mock(lambda r: httpx.Response(200, json={"status": "ok"}), sent, token=None).health()
    assert [r.headers["authorization"] for r in sent] == [f"Bearer {TOKEN}"] * 2
    monkeypatch.setenv("LOCUS_TOKEN", " \n")  # blank: no token, as for the server
    _mock(lambda r: httpx.Response(200, json={"status": "ok"}), sent, token=None).health()
    assert "authorization" not in sent[-1].headers


@pytest.mark.parametrize("token", ["é" * 20, "secret-part\x00-0123456789", "secret\nother-0123456789"])
def test_a_token_no_header_can_carry_is_refused_without_showing_it(token, monkeypatch):
    with pytest.raises(InputError) as caught:
        RegistryClient(URL, token=token)
    assert caught.value.field == "token" and token not in str(caught.value)
    assert "secret" not in str(caught.value) and "token=" in str(caught.value)
    if "\x00" in token:
        return  # an environment variable cannot hold NUL
    monkeypatch.setenv("LOCUS_TOKEN", token)
    with pytest.raises(InputError, match=r"\$LOCUS_TOKEN") as from_env:
        AsyncRegistryClient(URL)
    assert from_env.value.field == "token" and "secret" not in str(from_env.value)


def test_no_message_shows_the_url_credentials():
    def refused(request):
        raise httpx.ConnectError("Connection refused", request=request)

    reg = RegistryClient("http://alice:hunter2@registry.test", transport=httpx.MockTransport(refused))
    with pytest.raises(RegistryError) as caught:
        reg.stats()
    assert "hunter2" not in str(caught.value) and "registry.test" in str(caught.value)
    with pytest.raises(InputError) as bad:
        RegistryClient("ftp://alice:hunter2@registry.test")
    assert "hunter2" not in str(bad.value)


# ---------------------------------------------------------------- 4, 5, 7. answers that are not the registry's
@pytest.mark.parametrize("status", [301, 307, 308])
def test_a_redirect_is_reported_with_where_it_points(status):
    reg = _mock(lambda r: httpx.Response(status, headers={"Location": "https://elsewhere.test" + r.url.path}))
    with pytest.raises(RegistryError) as caught:
        reg.stats()
    said = str(caught.value)
    assert f"HTTP {status}" in said and "https://elsewhere.test/v1/stats" in said and "own URL" in said


@pytest.mark.parametrize("answer", [
    httpx.Response(200, html="<html><body>Log in to the proxy</body></html>"),
    httpx.Response(200, json={"ok": True}),  # another JSON API: pydantic's error, or a KeyError in route
    httpx.Response(200, content=b"null", headers={"Content-Type": "application/json"}),  # a TypeError in route
    httpx.Response(204),
], ids=["html", "other-json", "null", "empty"])
def test_a_success_that_is_not_the_registrys_json_says_so(answer):
    reg = _mock(lambda r: answer)
    for call in (reg.stats, lambda: reg.route("What is 2 + 2?"), reg.models):
        with pytest.raises(RegistryError) as caught:
            call()
        said = str(caught.value)
        assert type(caught.value) is RegistryError and "not as a registry service of this version does" in said
        assert f"HTTP {answer.status_code}" in said and "version" in said


def test_an_error_page_that_is_not_the_registrys_json_is_said_briefly():
    page = "<!DOCTYPE HTML>\n<html lang='en'><head><title>Error response</title></head>" + "x" * 500
    with pytest.raises(RegistryError) as caught:
        _mock(lambda r: httpx.Response(404, html=page)).stats()
    said = str(caught.value)
    assert type(caught.value) is RegistryError and "HTTP 404 (text/html)" in said and "<" not in said


def test_a_path_no_endpoint_answers_is_no_missing_model():
    no_endpoint = {"error": {"type": "HTTPError", "message": "no endpoint GET /registry/v1/models/m: the endpoints "
                                                             "are listed at /openapi.json", "field": None}}
    with pytest.raises(RegistryError) as caught:
        _mock(lambda r: httpx.Response(404, json=no_endpoint)).show("m")
    assert type(caught.value) is RegistryError and "service's root" in str(caught.value)
    missing = {"error": {"type": "NotFoundError", "message": "no model named 'm' in the registry", "field": None}}
    with pytest.raises(NotFoundError):
        _mock(lambda r: httpx.Response(404, json=missing)).show("m")


# ---------------------------------------------------------------- 13. 401 and 403
def test_only_a_401_says_to_set_the_token():
    def refusal(status):
        return lambda r: httpx.Response(status, json={"error": {"type": "Forbidden", "message": "refused"}})

    with pytest.raises(RegistryError) as forbidden:
        _mock(refusal(403)).remove("x")
    assert "LOCUS_TOKEN" not in str(forbidden.value)
    with pytest.raises(RegistryError, match=r"set \$LOCUS_TOKEN"):
        _mock(refusal(401)).remove("x")


# ---------------------------------------------------------------- 6. names and arguments, checked before sending
def test_names_no_model_has_are_not_found_before_anything_is_sent():
    sent = []
    reg = _mock(lambda r: httpx.Response(500), sent)
    for call in (lambda: reg.show(""), lambda: reg.get("."), lambda: reg.history(".."), lambda: reg.drift("."),
                 lambda: reg.remove("."), lambda: reg.restore(".."), lambda: reg.refine(".", _rows()),
                 lambda: reg.compare("", "b"), lambda: reg.similar("."), lambda: reg.audit(model="..")):
        with pytest.raises(NotFoundError, match="no model named"):
            call()
    with pytest.raises(NotFoundError, match="no alias named ''") as alias:
        reg.delete_alias("")
    assert alias.value.field == "alias"
    with pytest.raises(NotFoundError, match="no job"):
        reg.job(".")
    assert sent == []


def test_arguments_that_are_not_text_are_refused_naming_them():
    sent = []
    reg = _mock(lambda r: httpx.Response(500), sent)
    for call, field in ((lambda: reg.show(5), "name"), (lambda: reg.remove(None), "name"),
                        (lambda: reg.delete_alias(5), "alias"), (lambda: reg.set_alias(5, "m"), "alias"),
                        (lambda: reg.set_alias("prod", 5), "target"), (lambda: reg.compare("a", 5), "b"),
                        (lambda: reg.audit(model=3), "model"), (lambda: reg.route(5), "query"),
                        (lambda: reg.route([]), "query"), (lambda: reg.route("hi", exclude=5), "exclude"),
                        (lambda: reg.similar(None), "query"), (lambda: reg.add_model(".", _rows()), "name"),
                        (lambda: reg.add_model("m", _rows(), ["family"]), "metadata")):
        with pytest.raises(InputError) as caught:
            call()
        assert caught.value.field == field, (field, caught.value)
    assert sent == []


def test_route_takes_exclude_none_as_the_library_does():
    sent = []
    answer = {"results": [], "encoded_texts": 0}
    _mock(lambda r: httpx.Response(200, json=answer), sent).route(["a question"], exclude=None)
    assert json.loads(sent[0].content)["exclude"] == []


# ---------------------------------------------------------------- 11. drift_refined's options
def test_drift_refined_sends_permutations_and_seed():
    sent = []
    reg = _mock(lambda r: httpx.Response(200, json={}), sent)
    with pytest.raises(RegistryError):  # the empty answer is not a DriftRun: only what was sent matters here
        reg.drift_refined(permutations=199, seed=4)
    assert {k: sent[0].url.params[k] for k in ("permutations", "seed")} == {"permutations": "199", "seed": "4"}


# ---------------------------------------------------------------- 15. an upload's file, as the caller named it
def test_an_upload_error_names_the_path_passed(tmp_path):
    evals = tmp_path / "bad_qid.csv"
    evals.write_text("query_id,score\nq1,1\n")
    refused = {"error": {"type": "InputError", "message": "bad_qid.csv, line 2, field 'query_id': no query 'q1'",
                         "field": "query_id", "file": "bad_qid.csv", "line": 2}}
    with pytest.raises(InputError) as caught:
        _mock(lambda r: httpx.Response(422, json=refused)).add_model("m", evals)
    assert caught.value.file == str(evals) and str(caught.value).startswith(f"{evals}, line 2, field 'query_id'")


# ---------------------------------------------------------------- 16. a closed client, a bad timeout
def test_a_closed_client_says_so():
    reg = _mock(lambda r: httpx.Response(200, json={"status": "ok"}))
    reg.close()
    with pytest.raises(RegistryError, match="the client is closed"):
        reg.health()

    async def main():
        async with AsyncRegistryClient(URL, transport=httpx.MockTransport(lambda r: httpx.Response(200))) as areg:
            pass
        with pytest.raises(RegistryError, match="the client is closed"):
            await areg.stats()

    asyncio.run(main())


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5", None, True])
def test_a_timeout_that_is_not_a_positive_number_is_refused_at_once(timeout):
    for client in (RegistryClient, AsyncRegistryClient):
        with pytest.raises(InputError) as caught:
            client(URL, timeout=timeout)
        assert caught.value.field == "timeout"


# ---------------------------------------------------------------- the service, in process
@pytest.fixture(scope="module")
def app(synthetic_home):
    from fastapi.testclient import TestClient

    from registry.service.app import create_app
    from registry.service.settings import ServiceSettings

    home = synthetic_home("client-review", **SMALL_TRAINED)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        with TestClient(create_app(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))) as c:
            c.home = home
            yield c


def _through(app, *, edit=None) -> RegistryClient:
    """A RegistryClient whose requests the app answers (`edit(request, body)`: the JSON body as sent on)."""
    def handle(request):
        body = request.content
        if edit is not None and body and request.headers.get("content-type") == "application/json":
            body = json.dumps(edit(request, json.loads(body))).encode()
        headers = {k: v for k, v in request.headers.items() if k != "content-length"}
        answer = app.request(request.method, request.url.raw_path.decode(), content=body, headers=headers)
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    return RegistryClient(URL, token=TOKEN, transport=httpx.MockTransport(handle))


def test_a_write_the_service_queues_lands_through_the_client(app):
    """The service's own 202 and job: the add sent with "wait": false, as if it outlasted the service's wait."""
    def no_wait(request, body):
        return {**body, "wait": False} if request.url.path == "/v1/models" else body

    texts = [t for t, _ in stored_texts(app.home)]
    reg = _through(app, edit=no_wait)
    with pytest.warns(UserWarning, match="documented minimum"):
        change = reg.add_model("queued-add", [(t, i % 2) for i, t in enumerate(texts[:12])], {"family": "q"})
    assert (change.name, change.version, change.event) == ("queued-add", 1, "add")
    assert reg.show("queued-add").record.family == "q"
    with pytest.raises(RegistryError, match="exists") as clash:  # the failed job's error, as a 409 is raised
        reg.add_model("queued-add", [(t, 1) for t in texts[:12]])
    assert type(clash.value) is RegistryError


def test_models_are_the_library_records(app):
    reg = _through(app)
    assert reg.models() == Registry.open(app.home).models()
    assert all(type(m).__name__ == "ModelRecord" for m in reg.models())
    assert {"n_evals", "low_evidence"} <= set(reg.list()[0].model_dump())  # list keeps the evidence


def _by_values(schema, components) -> set[str]:
    """The values a `by` schema allows (its enum, or its pattern's alternatives), through anyOf and $ref."""
    if "$ref" in schema:
        return _by_values(components[schema["$ref"].rsplit("/", 1)[-1]], components)
    found = set(schema.get("enum", ()))
    if "pattern" in schema:
        found |= set(schema["pattern"].strip("^$()").split("|"))
    for option in schema.get("anyOf", ()):
        found |= _by_values(option, components)
    return found


def test_every_endpoint_takes_the_library_by_values(app):
    from registry.analytics.search import BY, BY_ALIASES

    library = {*BY, *BY_ALIASES}
    schema = app.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    taking = {}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", ()):
                if parameter["name"] == "by":
                    taking[f"{method} {path}"] = _by_values(parameter["schema"], components)
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None:
                properties = components[body["$ref"].rsplit("/", 1)[-1]].get("properties", {})
                if "by" in properties:
                    taking[f"{method} {path}"] = _by_values(properties["by"], components)
    assert {"get /v1/similar", "post /v1/route", "get /v1/audit", "get /v1/compare", "post /v1/profile",
            "get /v1/portfolio", "get /v1/clusters", "get /v1/map"} <= set(taking)
    assert all(values == library for values in taking.values()), taking
    names = sorted(m.name for m in Registry.open(app.home).models() if m.name.startswith("syn-"))  # not the tests'
    text = stored_texts(app.home)[0][0]
    for answer in (app.get("/v1/similar", params={"name": names[0], "by": "behavior"}),
                   app.post("/v1/route", json={"query": text, "by": "behavior"}),
                   app.get("/v1/compare", params={"a": names[0], "b": names[1], "by": "behavior"})):
        assert answer.status_code == 200, answer.text
    refused = app.get("/v1/audit", params={"by": "nonsense"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "by"


def test_a_65th_metadata_key_is_refused_on_every_write_path(app, tmp_path):
    from registry.catalog.models import record_from_metadata
    from registry.records import MAX_METADATA_KEYS

    meta = {f"k{i}": i for i in range(MAX_METADATA_KEYS + 1)}
    texts = [t for t, _ in stored_texts(app.home)]
    evals = tmp_path / "evals.csv"
    evals.write_text("query,score\n" + "".join(f'"{t}",1\n' for t in texts[:5]))
    with pytest.raises(InputError, match="metadata of 65 keys; the limit is 64") as library:
        record_from_metadata("m", meta)  # the library's one check: Registry.add_model and the CLI's --meta
    assert library.value.field == "metadata"
    with pytest.raises(InputError, match="metadata of 65 keys") as added:  # the library's add (the CLI's too)
        Registry.open(app.home).add_model("too-many-keys", [(t, 1) for t in texts[:5]], meta)
    assert added.value.field == "metadata"
    reg = _through(app)
    for evaluations in ([(t, 1) for t in texts[:5]], evals):  # inline, and an upload
        with pytest.raises(InputError, match="metadata of 65 keys") as caught:
            reg.add_model("too-many-keys", evaluations, meta)
        assert caught.value.field == "metadata"
    fits = dict(list(meta.items())[:MAX_METADATA_KEYS])
    assert len(record_from_metadata("m", {**fits, "family": "", "tags": []}).extra) == MAX_METADATA_KEYS
    assert "too-many-keys" not in {m.name for m in reg.models()}


def test_drift_run_takes_and_checks_permutations_and_seed(app, monkeypatch):
    from registry.defaults import AUDIT_ALPHA, AUDIT_MAX_NOISE

    auth = {"Authorization": f"Bearer {TOKEN}"}
    for params, field in (({"permutations": 5}, "permutations"), ({"seed": -1}, "seed")):
        refused = app.post("/v1/drift/run", params=params, headers=auth)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == field, refused.text
    reader, asked = app.app.state.reader, []
    real = reader.drift_refined
    monkeypatch.setattr(reader, "drift_refined", lambda **options: asked.append(options) or real(**options))
    run = _through(app).drift_refined(permutations=19, seed=3)
    assert asked == [{"alpha": AUDIT_ALPHA, "max_noise": AUDIT_MAX_NOISE, "permutations": 19, "seed": 3}]
    assert type(run).__name__ == "DriftRun"


# ---------------------------------------------------------------- 17. route --exclude ALIAS asks the running service
def test_route_with_an_alias_excluded_may_go_to_the_running_service(tmp_path, monkeypatch):
    import click

    from cli import _common

    import os

    home = tmp_path / "home"
    (home / "service").mkdir(parents=True)
    (home / "config.json").write_text(json.dumps({"aliases": {"prod": {"target": "m"}}}))
    (home / "service" / "endpoint.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": os.getpid()}))
    monkeypatch.setattr(httpx, "get", lambda url, **kw: httpx.Response(200, json={"home": str(home)}))
    ctx = click.Context(click.Command("route"), obj={"home": home, "server": None})
    backend = _common._backend(ctx, names=("prod",))
    assert isinstance(backend, RegistryClient) and backend.url == "http://127.0.0.1:9"


@pytest.mark.parametrize("status, kind, headers, raised", [
    (503, "StateBehind", {"Retry-After": "1"}, RegistryError),
    (409, "RegistryError", {}, RegistryError),
    (404, "NotFoundError", {}, NotFoundError),
    (422, "InputError", {}, InputError),
])
def test_an_error_the_service_answered_carries_its_status_type_and_retry_after(status, kind, headers, raised):
    """A router retries a 503 StateBehind (Retry-After: 1) and not a 409 clash: both were a bare RegistryError."""
    client = _mock(lambda request: httpx.Response(status, json={"error": {"type": kind, "message": "no"}},
                                                  headers=headers))
    with pytest.raises(raised) as caught:
        client.stats()
    assert (caught.value.status, caught.value.error_type) == (status, kind)
    assert caught.value.retry_after == (1.0 if headers else None)
    assert RegistryError("raised here").status is None  # an error not answered by a service carries none
