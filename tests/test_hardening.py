"""Issue 23: what a fuzzer, a race and a hostile web page do to `registry serve` and the store.

One small trained registry (helpers.SMALL_TRAINED) serves the module; each server test works on its own
copy. Everything here is bounded (few examples, few restarts, a soak of ~15 s unless $LOCUS_SOAK_SECONDS
says more: the soak asserts that no acknowledged write is lost or numbered twice across kills, which a few
kills show as well as many; set it to 600 for a longer hunt), and two restarts with a pending job unless
$LOCUS_RESTARTS says more (each loads the query encoder twice, ~20 s).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from helpers import SMALL_TRAINED, stored_texts
from service_harness import ROOT, TOKEN, Server, copy_home, serving_copy


@pytest.fixture(scope="module")
def base_home(synthetic_home) -> Path:
    return synthetic_home("hardening", **SMALL_TRAINED)


@pytest.fixture(scope="module")
def texts(base_home) -> list[tuple[str, str]]:
    return stored_texts(base_home)


@pytest.fixture(scope="module")
def server(base_home, tmp_path_factory):
    """A server with a token (1 MiB body limit), shared by the tests that only add their own models."""
    with serving_copy(base_home, tmp_path_factory.mktemp("srv"), extra=("--max-body-mb", "1")) as srv:
        yield srv


@pytest.fixture(scope="module")
def open_server(base_home, tmp_path_factory):
    """A server without a token: loopback only, writes only from non-browser clients."""
    with serving_copy(base_home, tmp_path_factory.mktemp("open"), token=None, extra=("--max-body-mb", "1")) as srv:
        yield srv


def _evals(texts, n: int, offset: int = 0) -> list[dict]:
    return [{"query": t, "task": task, "score": i % 2} for i, (t, task) in enumerate(texts[offset:offset + n])]


def _cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("LOCUS_SERVER", None)
    return subprocess.run([sys.executable, "-m", "cli.main", "--home", str(home), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ 1. version numbers never reused
def test_version_numbers_are_never_reused(base_home, texts, tmp_path):
    from registry import Registry

    home = copy_home(base_home, tmp_path / "home")
    reg = Registry.open(home)
    rows = [(t, i % 2, task) for i, (t, task) in enumerate(texts)]
    assert reg.add_model("x", rows[:20]).version == 1
    assert reg.refine("x", rows[20:24]).version == 2
    reg.set_alias("pinned", "x@1")
    assert reg.remove("x").version == 2
    readded = reg.add_model("x", rows[:3])  # was version 1 again: the original became unreachable
    assert (readded.event, readded.version) == ("add", 3)
    assert reg.add_model("x", rows[:5], replace=True).version == 4
    back = reg.restore("x", version=1)
    assert (back.restored_version, back.version) == (1, 5)
    assert reg.show("x").n_evals == 20  # the 20-evaluation original, reachable from history
    assert reg.resolve("pinned") == "x"  # a restore of version 1 holds what the pin promises
    history = [(v.version, v.event) for v in reg.history("x").versions]
    assert history == [(1, "add"), (2, "refine"), (2, "remove"), (3, "add"), (4, "replace"), (5, "restore")]
    again = reg.restore("x", version=1)  # version 5 is a restore of 1 already: no identical version 6
    assert (again.restored, again.version) == (False, 5)
    for number, (version, n_evals) in enumerate(((2, 24), (3, 3), (4, 5), (1, 20)), start=6):
        assert reg.restore("x", version=version).version == number
        assert reg.show("x").n_evals == n_evals


def test_cli_and_service_racing_never_share_a_version(server, texts, tmp_path):
    with server.client() as c:
        assert c.post("/v1/models", json={"name": "race", "evaluations": _evals(texts, 12)}).status_code == 201
    files = [tmp_path / f"more{i}.jsonl" for i in range(2)]  # each brings new evaluations: a refine of
    for i, evals in enumerate(files):                         # nothing new makes no version
        evals.write_text("".join(json.dumps(e) + "\n" for e in _evals(texts, 2, offset=12 + 2 * i)))
    errors: list[str] = []

    def http() -> None:
        with server.client() as c:
            for i in range(3):
                r = c.post("/v1/models/race/refine", json={"evaluations": _evals(texts, 2, offset=16 + i)})
                if r.status_code != 201:
                    errors.append(r.text)

    thread = threading.Thread(target=http)
    thread.start()
    for evals in files:
        out = _cli(server.home, "refine", "race", "--evals", str(evals))
        if out.returncode != 0:
            errors.append(out.stderr[-500:])
    thread.join(timeout=300)
    assert errors == []
    with server.client() as c:
        history = c.get("/v1/models/race/history").json()["versions"]
    numbers = [h["version"] for h in history]
    assert numbers == list(range(1, 7))  # add + 5 refines: one number each, in order


# ------------------------------------------------------------------ 2. every accepted name on every path
NAMES = ("org/model", "with space", "ünï cødé/β", "50% off", "a?b#c")


def test_any_accepted_name_works_on_every_path_and_in_the_client(server, texts, tmp_path):
    from registry.client import RegistryClient

    upload = tmp_path / "evals.csv"
    upload.write_text("query,score\n" + "".join(f'"{t}",{(i + 1) % 2}\n' for i, (t, _) in enumerate(texts[:6])))
    with RegistryClient(server.url, token=TOKEN) as reg:
        for name in NAMES:
            assert reg.add_model(name, [(t, i % 2) for i, (t, _) in enumerate(texts[:8])]).version == 1
            assert reg.show(name).record.name == name
            assert reg.refine(name, [(texts[9][0], 1)]).version == 2
            assert reg.refine(name, upload).version == 3
            assert reg.remove(name).removed
            assert reg.restore(name, version=1).version == 4
            assert [v.event for v in reg.history(name).versions] == ["add", "refine", "refine", "remove", "restore"]
            assert reg.add_model(name, upload, replace=True).version == 5  # the multipart upload path
            assert name in {m.name for m in reg.list()}


BAD_NAMES = (" padded", "tab\there", "nul\x00", "escape\x1b[31m", "del\x7f", "c1\x85")


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_a_refused_name_is_refused_the_same_way_on_every_path(server, texts, bad):
    from urllib.parse import quote

    with server.client() as c:
        body = c.post("/v1/models", json={"name": bad, "evaluations": _evals(texts, 2)})
        assert body.status_code == 422, body.text
        refusal = body.json()["error"]
        assert refusal["field"] == "name"
        path = "/v1/models/" + quote(bad, safe="")
        for method, suffix, kwargs in (("GET", "", {}), ("DELETE", "", {}), ("GET", "/history", {}),
                                       ("POST", "/restore", {}),
                                       ("POST", "/refine", {"json": {"evaluations": _evals(texts, 1)}}),
                                       ("POST", "/file", {"files": {"file": ("e.csv", b"query,score\na,1\n")}}),
                                       ("POST", "/refine/file", {"files": {"file": ("e.csv", b"query,score\na,1\n")}})):
            r = c.request(method, path + suffix, **kwargs)
            assert r.status_code == 422, (method, suffix, r.text)
            assert r.json()["error"] == refusal, (method, suffix)


# ------------------------------------------------------------------ 3. no token: no writes from web pages
def test_without_a_token_a_web_page_cannot_write(open_server, texts):
    from registry.client import RegistryClient

    csv = "query,score\n" + "".join(f'"{t}",{i % 2}\n' for i, (t, _) in enumerate(texts[:5]))
    with RegistryClient(open_server.url) as reg:  # no token: the client still writes (it says it is one)
        assert reg.add_model("web-target", [(t, 1) for t, _ in texts[:5]]).version == 1
    with httpx.Client(base_url=open_server.url, timeout=120) as c:
        before = c.get("/v1/stats").json()
        evil = {"Origin": "http://evil.example"}
        refused = [
            c.post("/v1/models/web-evil/file", files={"file": ("e.csv", csv.encode())}, headers=evil),
            c.post("/v1/models/web-evil/file", files={"file": ("e.csv", csv.encode())}),  # no Origin, no header
            c.post("/v1/models/web-target/restore", content=b"x", headers={"Content-Type": "text/plain"}),
            c.post("/v1/models/web-target/restore"),
            c.post("/v1/models/web-target/refine", data={"evaluations": "x"}),
            c.post("/v1/models", json={"name": "web-json", "evaluations": _evals(texts, 2)}, headers=evil),
            c.post("/v1/models", json={"name": "web-json", "evaluations": _evals(texts, 2)},
                   headers={"Sec-Fetch-Site": "cross-site"}),
            c.delete("/v1/models/web-target", headers=evil),
        ]
        for r in refused:
            assert r.status_code == 403, r.text
            assert r.json()["error"]["field"] in ("Origin", "Sec-Fetch-Site", "X-Locus-Client")
        # DNS rebinding: the page's own host name reaches the loopback server; reads are refused too
        for host in ("evil.example", f"evil.example:{open_server.port}", "127.0.0.1:1"):
            r = c.get("/v1/stats", headers={"Host": host})
            assert r.status_code == 403 and r.json()["error"]["field"] == "Host"
        assert c.get("/v1/stats").json() == before
        assert c.get("/v1/models/web-evil").status_code == 404
        # the program's ways in: JSON, or the client header on an upload or a bodiless POST
        assert c.post("/v1/models", json={"name": "web-json", "evaluations": _evals(texts, 2)}).status_code == 201
        assert c.post("/v1/models/web-evil/file", files={"file": ("e.csv", csv.encode())},
                      headers={"X-Locus-Client": "test"}).status_code == 201
        assert c.delete("/v1/models/web-evil").status_code == 200
        assert c.post("/v1/models/web-evil/restore", headers={"X-Locus-Client": "test"}).status_code == 200
        same = {"Origin": f"http://127.0.0.1:{open_server.port}", "Sec-Fetch-Site": "same-origin"}  # /docs
        assert c.delete("/v1/models/web-evil", headers=same).status_code == 200


def test_with_a_token_nothing_changes_for_clients(server, texts):
    with server.client() as c:
        r = c.post("/v1/models/tok-file/file", headers={"Origin": "http://elsewhere.example"},
                   files={"file": ("e.csv", ("query,score\n" + f'"{texts[0][0]}",1\n').encode())})
        assert r.status_code == 201, r.text
        assert c.delete("/v1/models/tok-file", headers={"Host": "registry.internal"}).status_code == 200
        assert c.post("/v1/models/tok-file/restore", headers={"Host": "registry.internal"}).status_code == 200


# ------------------------------------------------------------------ 4. no input reaches a 500
def test_a_deeply_nested_filter_is_refused_naming_the_field_and_the_connection_stays(server):
    deep = "(" * 400 + "family == x" + ")" * 400  # 822 characters, under the 2,000 limit
    nots = "not " * 300 + "family == x"
    with server.client() as c:
        for where in (deep, nots):
            answers = [
                c.get("/v1/models", params={"where": where}),
                c.get("/v1/similar", params={"name": "syn-synfam0-1b", "k": 2, "where": where}),
                c.get("/v1/portfolio", params={"k": 2, "where": where}),
                c.post("/v1/route", json={"query": "What is 2 + 2?", "where": where}),
                c.post("/v1/profile", json={"targets": {"math": 0.5}, "k": 2, "where": where}),
            ]
            for r in answers:
                assert r.status_code == 422, r.text
                assert r.json()["error"]["field"] == "where" and "deep" in r.json()["error"]["message"], r.url
        ok = "(" * 8 + "family == x" + ")" * 8
        assert c.get("/v1/models", params={"where": ok}).status_code == 200  # same connection, still open


def test_a_chunked_body_over_the_limit_is_413(server):
    def chunks():
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="e.csv"\r\n\r\n'
        for _ in range(40):
            yield b"x" * 65536  # 2.5 MiB in all, no Content-Length

    with server.client() as c:
        for path, kind in (("/v1/models", "application/json"), ("/v1/route", "application/json"),
                           ("/v1/models/chunked/file", "multipart/form-data; boundary=b")):
            r = c.post(path, content=chunks(), headers={"Content-Type": kind})
            assert r.status_code == 413, (path, r.text)
            assert r.json()["error"]["field"] == "body"
        for junk in (b"--b\r\nnonsense", b'--b\r\nContent-Disposition: form-data; name="file"\r\n\r\nx'):
            malformed = c.post("/v1/models/chunked/file", content=junk, headers={
                "Content-Type": "multipart/form-data; boundary=b"})
            assert malformed.status_code == 422, malformed.text  # not an undocumented 400
        r = c.post("/v1/models", content=b'{"name": ', headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["error"]["field"], r.text


def test_an_unexpected_error_answers_json_and_does_not_escape_the_app(base_home, tmp_path):
    from fastapi.testclient import TestClient

    from registry.service.app import create_app
    from registry.service.settings import ServiceSettings

    app = create_app(ServiceSettings(home=copy_home(base_home, tmp_path / "home"), token="t" * 24,
                                     query_backend="fp32"))

    @app.get("/v1/boom")
    def boom():
        raise RecursionError("maximum recursion depth exceeded")

    with TestClient(app) as client:  # raises in the test if the error leaves the app (uvicorn would drop the connection)
        r = client.get("/v1/boom")
        assert r.status_code == 500
        assert r.json()["error"]["type"] == "InternalError" and "Recursion" not in r.text
        assert client.get("/v1/health").status_code == 200


# ------------------------------------------------------------------ 5. one thread at a time in an encoder
def test_a_query_encoder_is_never_entered_by_two_threads_at_once():
    import time

    import numpy as np

    from encoder.query_encoder import QueryEncoder

    inside, most = 0, 0
    guard = threading.Lock()

    class Engine:  # stands for OpenVINO's compiled model: counts callers inside it
        def encode(self, texts, *, batch_size, progress):
            nonlocal inside, most
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.02)
            with guard:
                inside -= 1
            return np.ones((len(texts), 3), dtype=np.float32)

    class Model:
        def get_embedding_dimension(self):
            return 3

    encoder = QueryEncoder("fake", Model(), "openvino", Engine())
    threads = [threading.Thread(target=lambda: [encoder.encode(["a", "b"]) for _ in range(5)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1


def test_a_restart_with_a_pending_job_always_comes_up(base_home, texts, tmp_path):
    """The recovered job's writer and the warm-up both encode at start (with the default engine,
    OpenVINO where installed): each restart must come up and land the job."""
    import time
    import uuid
    from dataclasses import asdict

    from registry.service.writer import JobSpec

    home = copy_home(base_home, tmp_path / "home")
    jobs = home / "service" / "jobs"
    restarts = int(os.environ.get("LOCUS_RESTARTS", "2"))
    srv = None
    try:
        for i in range(restarts):
            jobs.mkdir(parents=True, exist_ok=True)
            job_id = uuid.uuid4().hex
            new_texts = [f"Restart {i}, question {j}: what is {i} times {j}?" for j in range(6)]
            spec = JobSpec(id=job_id, kind="add", name=f"pending-{i}",
                           evaluations=[{"query": t, "score": j % 2} for j, t in enumerate(new_texts)])
            (jobs / f"{job_id}.json").write_text(json.dumps(
                {"spec": asdict(spec), "state": "queued", "created": time.time(), "finished": None,
                 "result": None, "error": None}))
            if srv is None:
                srv = Server(home, extra=("--query-backend", "auto"))
            else:
                srv.restart()  # the harness fails after 120 s without an answer: a hang is a failure
            with srv.client() as c:
                deadline = time.monotonic() + 120
                while c.get(f"/v1/jobs/{job_id}").json()["state"] not in ("done", "failed"):
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
                assert c.get(f"/v1/jobs/{job_id}").json()["state"] == "done"
                assert c.get(f"/v1/models/pending-{i}").json()["version"] == 1
            srv.kill()
    finally:
        if srv is not None:
            srv.kill()


# ------------------------------------------------------------------ 6. the schema states what is enforced
# Not run: positive_data_acceptance (ST202). The server refuses some schema-valid requests for what they
# refer to, which a static schema cannot say: a `where` naming a field no model has or not parsing, a
# profile task the registry lacks, evaluations naming a query id it does not store, an upload that is
# not CSV/JSONL/Parquet, portfolio's k together with budget_b. Each is a 422 naming the field.
# Nor use_after_free (ST301): a removed model's history stays readable on purpose (restore reads it).
SCHEMATHESIS_EXCLUDED = "positive_data_acceptance,use_after_free"


@pytest.mark.parametrize("auth", [True, False], ids=["token", "no-token"])
def test_schemathesis_finds_nothing(server, open_server, auth):
    srv = server if auth else open_server
    args = [sys.executable, "-m", "schemathesis.cli", "run", f"{srv.url}/openapi.json", "--checks", "all",
            "--exclude-checks", SCHEMATHESIS_EXCLUDED, "--max-examples", os.environ.get("LOCUS_FUZZ_EXAMPLES", "4"),
            "--generation-deterministic", "--no-color", "--max-failures", "20"]
    if auth:
        args += ["--header", f"Authorization: Bearer {TOKEN}"]
    else:  # reads are open on both servers, the same handlers: the run with the token covers them. So does it
        # the coverage phase's boundary values of every write's fields (~1,900 cases, ~50 s of each run): here
        # the writes are sent by the examples, fuzzing and stateful phases, for the checks without a token
        args += ["--exclude-method", "GET", "--phases", "examples,fuzzing,stateful"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=240, cwd=srv.home.parent)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    with srv.client() as c:
        assert c.get("/v1/health").json()["status"] == "ok"


# ------------------------------------------------------------------ 7. refuse or define
def test_questionable_input_is_refused_naming_the_field(server, texts):
    q = texts[0][0]
    with server.client() as c:
        before = c.get("/v1/stats").json()
        dim = c.get("/v1/health").json()["dimension"]
        for vector, field in (([1e39] + [0.0] * (dim - 1), "vector.0"), ([0.0] * dim, "vector"),
                              ([0.1] * (dim + 1), "vector")):
            r = c.post("/v1/similar", json={"vector": vector})
            assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
        assert c.post("/v1/similar", json={"vector": [0.1] * dim, "k": 2}).status_code == 200
        r = c.post("/v1/models", json={"name": "bool-score", "evaluations": [{"query": q, "score": True}]})
        assert r.status_code == 422 and r.json()["error"]["field"] == "evaluations.0.score"
        r = c.post("/v1/models", json={"name": "huge", "metadata": {"params_b": 1e308},
                                       "evaluations": [{"query": q, "score": 1}]})
        assert r.status_code == 422 and r.json()["error"]["field"] == "metadata", r.text
        r = c.post("/v1/models", json={"name": "twice", "evaluations": [
            {"query": q, "score": 1}, {"query": texts[1][0], "score": 0}, {"query": q, "score": 0}]})
        error = r.json()["error"]
        assert r.status_code == 422 and (error["line"], error["field"]) == (3, "score")
        assert "line 1 (1) and line 3 (0)" in error["message"]
        conflicting = f'query,score\n"{q}",1\n"{texts[1][0]}",0\n"{q}",0\n'.encode()
        r = c.post("/v1/models/twice/file", files={"file": ("mine.csv", conflicting)})
        error = r.json()["error"]
        assert r.status_code == 422 and (error["file"], error["line"]) == ("mine.csv", 4), r.text
        assert "line 2 (1) and line 4 (0)" in error["message"]
        assert c.get("/v1/stats").json() == before
        repeated = f'query,score\n"{q}",1\n"{texts[1][0]}",0\n"{q}",1\n'.encode()  # the same score: a repeat
        r = c.post("/v1/models/twice/file", files={"file": ("mine.csv", repeated)})
        assert r.status_code == 201 and r.json()["n_evals"] == 2
        assert r.json()["warnings"] and all("uploads" not in w and str(server.home) not in w
                                            for w in r.json()["warnings"])
        assert "mine.csv" in r.json()["warnings"][0]


def test_a_repeated_query_parameter_or_form_field_is_refused_naming_it(server, texts):
    """FastAPI keeps the last of a repeated scalar parameter or form field and drops the rest unsaid
    (schemathesis sent `/v1/table?offset=true&offset=null&offset=0.0` and got a 200; an upload with two
    `metadata` fields landed the second): refused naming it, and a write without its token is still told
    about the token first."""
    with server.client() as c:
        r = c.get("/v1/table?offset=1&offset=0&limit=5")
        assert r.status_code == 422 and r.json()["error"]["field"] == "offset", r.text
        assert "2 times" in r.json()["error"]["message"]
        assert c.get("/v1/table?offset=1&limit=5").status_code == 200
        before = c.get("/v1/stats").json()
        upload = ("e.csv", f'query,score\n"{texts[0][0]}",1\n'.encode())
        r = c.post("/v1/models/form-twice/file", files=[("file", upload)],
                   data={"metadata": ['{"family": "a"}', '{"family": "b"}']})
        assert r.status_code == 422 and r.json()["error"]["field"] == "metadata", r.text
        r = c.post("/v1/models/form-twice/file", files=[("file", upload), ("file", upload)])
        assert r.status_code == 422 and r.json()["error"]["field"] == "file", r.text
        assert c.get("/v1/stats").json() == before
        assert c.post("/v1/models/form-twice/file", files=[("file", upload)]).status_code == 201
    with server.client(auth=False) as anonymous:
        r = anonymous.delete("/v1/aliases/some-alias?x=1&x=2")
        assert r.status_code == 401, r.text


def test_a_json_key_given_twice_in_one_object_is_refused_naming_it(server, texts):
    """Python's JSON parser keeps the last of a repeated key: `"score": 1, "score": 0` landed as 0."""
    body = '{"name": "twice-keyed", "evaluations": [{"query": %s, "score": 1, "score": 0}]}' % json.dumps(texts[0][0])
    headers = {"content-type": "application/json"}
    with server.client() as c:
        before = c.get("/v1/stats").json()
        r = c.post("/v1/models", content=body, headers=headers)
        assert r.status_code == 422 and r.json()["error"]["field"] == "body", r.text
        assert "'score' appears more than once" in r.json()["error"]["message"]
        r = c.post("/v1/route", content='{"query": "What is 2+2?", "k": 3, "k": 4}', headers=headers)
        assert r.status_code == 422 and "'k' appears more than once" in r.json()["error"]["message"], r.text
        assert c.post("/v1/route", content='{"query": "What is 2+2?", "k": 3}', headers=headers).status_code == 200
        upload = f'query,score\n"{texts[0][0]}",1\n'.encode()
        r = c.post("/v1/models/twice-keyed/file", files={"file": ("e.csv", upload)},
                   data={"metadata": '{"family": "a", "family": "b"}'})
        assert r.status_code == 422 and r.json()["error"]["field"] == "metadata", r.text
        assert c.get("/v1/stats").json() == before
    with server.client(auth=False) as anonymous:  # the token is checked first, as for any bad body
        assert anonymous.post("/v1/models", content=body, headers=headers).status_code == 401


def test_coverage_counts_live_models_only(base_home, tmp_path):
    from registry import Registry

    reg = Registry.open(copy_home(base_home, tmp_path / "home"))
    full = reg.stats()
    for record in reg.models()[:2]:
        reg.remove(record.name)
    after = reg.stats()
    assert after.n_models == full.n_models - 2  # the removed models' evaluations are kept for restore, apart
    assert after.n_evaluations + after.n_removed_evaluations == full.n_evaluations and after.n_removed_evaluations > 0
    assert after.coverage == pytest.approx(full.coverage, abs=1e-6)  # every model answers every query here
    assert 0 < after.coverage <= 1


# ------------------------------------------------------------------ 8. soak: writers, readers, kills
_CLI_LOOP = """
import json, sys, time
from pathlib import Path
from click.testing import CliRunner
from cli.main import cli

home, evals, more, stop = sys.argv[1:5]
run = CliRunner().invoke
i = 0
while not Path(stop).exists():
    name = f"soak-c-{i}"
    out = run(cli, ["--home", home, "add-model", name, "--evals", evals, "--json"], env={"LOCUS_SERVER": ""})
    if out.exit_code == 0:
        print("ACK add", name, json.loads(out.stdout)["version"], flush=True)
    out = run(cli, ["--home", home, "refine", "soak-r", "--evals", more, "--json"], env={"LOCUS_SERVER": ""})
    if out.exit_code == 0:
        print("ACK refine soak-r", json.loads(out.stdout)["version"], flush=True)
    out = run(cli, ["--home", home, "show", "soak-r", "--json"], env={"LOCUS_SERVER": ""})
    print("READ", out.exit_code, flush=True)
    i += 1
"""


def test_soak_writers_readers_and_kills(base_home, texts, tmp_path):
    import random
    import time

    from registry import Registry

    seconds = float(os.environ.get("LOCUS_SOAK_SECONDS", "15"))
    home = copy_home(base_home, tmp_path / "home")
    reg = Registry.open(home)
    rows = [(t, i % 2, task) for i, (t, task) in enumerate(texts)]
    reg.add_model("soak-r", rows[:10])
    evals, more, stop = tmp_path / "e.jsonl", tmp_path / "more.jsonl", tmp_path / "stop"
    evals.write_text("".join(json.dumps({"query": t, "score": s}) + "\n" for t, s, _ in rows[:8]))
    more.write_text("".join(json.dumps({"query": t, "score": s}) + "\n" for t, s, _ in rows[10:13]))
    srv = Server(home)
    acked: list[tuple[str, str, int]] = []  # (event, name, version) of every acknowledged write
    reads, problems = [0], []
    done = threading.Event()

    def http_writer() -> None:
        i = 0
        while not done.is_set():
            try:
                with srv.client(timeout=30) as c:
                    r = c.post("/v1/models", json={"name": f"soak-h-{i}", "evaluations": _evals(texts, 6, offset=i % 5)})
                    if r.status_code == 201:
                        acked.append(("add", f"soak-h-{i}", r.json()["version"]))
                    elif r.status_code < 500 and r.status_code != 409:
                        problems.append(r.text)
                    r = c.post("/v1/models/soak-r/refine", json={"evaluations": _evals(texts, 2, offset=14 + i % 4)})
                    if r.status_code == 201:
                        acked.append(("refine", "soak-r", r.json()["version"]))
            except httpx.HTTPError:
                time.sleep(0.5)  # the server is down: it comes back
            i += 1

    def http_reader() -> None:
        while not done.is_set():
            try:
                with srv.client(timeout=30) as c:
                    assert c.post("/v1/route", json={"query": texts[reads[0] % len(texts)][0], "k": 2}).status_code == 200
                    assert c.get("/v1/models").status_code == 200
                    reads[0] += 1
            except httpx.HTTPError:
                time.sleep(0.5)
            except AssertionError as err:
                problems.append(repr(err))

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("LOCUS_SERVER", None)
    child = subprocess.Popen([sys.executable, "-c", _CLI_LOOP, str(home), str(evals), str(more), str(stop)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    threads = [threading.Thread(target=f) for f in (http_writer, http_reader)]
    for t in threads:
        t.start()
    rng = random.Random(23)
    kills = 0
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(rng.uniform(2, 6))  # writes are in flight within a second of a restart
            srv.kill()  # SIGKILL, wherever the writer is
            kills += 1
            srv.restart()
    finally:
        done.set()
        stop.write_text("stop")
        for t in threads:
            t.join(timeout=120)
        out, err = child.communicate(timeout=300)
        srv.stop()
    assert problems == []
    for line in out.splitlines():
        if line.startswith("ACK"):
            _, event, name, version = line.split()
            acked.append((event, name, int(version)))
    assert kills >= 1 and reads[0] > 0 and any(e == "add" for e, _, _ in acked), (kills, reads, acked, err[-2000:])

    check = _cli(home, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    reg = Registry.open(home)
    assert reg.check().ok
    for event, name, version in acked:  # every acknowledged write is there, exactly once
        rows = [(v.version, v.event) for v in reg.history(name).versions]
        assert rows.count((version, event)) == 1, (event, name, version, rows)
    for name in {n for _, n, _ in acked}:  # numbers only grow, none given twice
        numbers = [v.version for v in reg.history(name).versions if v.event not in ("remove", "embed")]
        assert numbers == sorted(set(numbers)), (name, numbers)


# ------------------------------------------------------------------ 6. a write's critical path
def test_a_write_does_not_reload_the_indexes_it_made_stale_and_the_next_read_does(base_home, tmp_path, texts):
    """The writer needs only the encoder: reloading the indexes before each landing cost an add-model
    ~110 ms. Readers still see every write: the next read reloads, and finds the new model."""
    from fastapi.testclient import TestClient

    from registry.service.app import create_app
    from registry.service.settings import ServiceSettings

    app = create_app(ServiceSettings(home=copy_home(base_home, tmp_path / "home"), token=TOKEN,
                                     query_backend="fp32"))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    evaluations = [{"query": text, "score": i % 2} for i, (text, _) in enumerate(texts[:80])]
    with TestClient(app) as client:
        state = app.state.warm
        assert client.get("/v1/models").status_code == 200
        encoder = state.active()
        for i in range(3):
            before = state.reloads
            r = client.post("/v1/models", json={"name": f"quick-{i}", "evaluations": evaluations}, headers=auth)
            assert r.status_code == 201, r.text
            assert state.reloads == before  # the landing reused the loaded encoder
            assert state.active() is encoder
            found = client.get("/v1/similar", params={"name": f"quick-{i}", "k": 1})
            assert found.status_code == 200, found.text  # the read reloaded: the new model is in its index
            assert state.reloads == before + 1
        r = client.post("/v1/models", json={"name": "quick-0", "evaluations": evaluations}, headers=auth)
        assert r.status_code == 409 and "exists" in r.text  # the writer read the store, not a stale index


def test_a_job_answered_before_its_file_says_done_is_done_after_a_restart(base_home, tmp_path, texts):
    """A landed job is answered before its file is rewritten (that write is off the add's path): the
    completion row landed with the model, so a service that dies in between finds the job done in the
    store on restart and does not land it again."""
    from registry import Registry
    from registry.service.jobs import JobQueue
    from registry.service.settings import ServiceSettings
    from registry.service.state import WarmState
    from registry.service.writer import JobSpec

    home = copy_home(base_home, tmp_path / "home")
    settings = ServiceSettings(home=home, token=TOKEN, query_backend="fp32")
    queue = JobQueue(WarmState(settings))
    persist = queue._persist
    queue._persist = lambda job: None if job.state == "done" else persist(job)  # dies right after answering
    evaluations = [{"query": text, "score": i % 2} for i, (text, _) in enumerate(texts[:80])]
    job = queue.submit(JobSpec(id=queue.new_id(), kind="add", name="answered", evaluations=evaluations))
    try:
        assert job.event.wait(120) and job.state == "done", job.error
    finally:
        queue.stop()
    assert json.loads((queue.directory / f"{job.spec.id}.json").read_text("utf-8"))["state"] == "queued"
    again = JobQueue(WarmState(settings))
    try:
        recovered = again.get(job.spec.id)
        assert recovered.state == "done" and recovered.result["version"] == 1 and again.depth() == 0
    finally:
        again.stop()
    assert [v.version for v in Registry.open(home).history("answered").versions] == [1]


def test_a_routed_text_is_offered_to_writes_until_one_stores_its_vector(base_home, tmp_path, texts):
    """The service remembers which texts a route encoded (their vectors are in memory, not in the store) so
    that a write landing one stores its vector; once a write has committed it, the text is no longer
    offered (each later write would look it up in the store again)."""
    from registry import Registry
    from registry.importers._common import text_hash
    from registry.service.jobs import JobQueue
    from registry.service.settings import ServiceSettings
    from registry.service.state import WarmState
    from registry.service.writer import JobSpec

    home = copy_home(base_home, tmp_path / "home")
    state = WarmState(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))
    fresh = "Routed first, then evaluated: how many strings does a violin have?"
    encoder = state.active().query_encoder
    _, encoded = state.route([fresh], k=1, exclude=[], where=None, fallback=0)
    assert encoded == 1
    assert state.unstored_vectors(encoder, [text_hash(fresh)]) == {text_hash(fresh)}
    queue = JobQueue(state)
    evaluations = [{"query": fresh, "score": 1}] + [{"query": t, "score": i % 2} for i, (t, _) in enumerate(texts[:70])]
    job = queue.submit(JobSpec(id=queue.new_id(), kind="add", name="routed-first", evaluations=evaluations))
    try:
        assert job.event.wait(120) and job.state == "done", job.error
    finally:
        queue.stop()
    assert Registry.open(home).store.cached_vectors(encoder, [text_hash(fresh)])
    assert state.unstored_vectors(encoder, [text_hash(fresh)]) == set()


def test_the_service_imports_lancedb_and_torch_beside_its_first_requests(base_home, tmp_path, texts):
    """Reads never need LanceDB, and on the CPU routes read G in numpy, without torch; the first write needs
    both, and importing them then cost that add-model seconds (LanceDB 1.6 s, bench_service's p99): a fresh
    service process imports them, and loads the torch LOCUS, in background threads at start-up."""
    home = copy_home(base_home, tmp_path / "home")
    code = ("import json, sys, threading\n"
            "from registry.service.app import LANCEDB_IMPORT, TORCH_IMPORT, create_app\n"
            "from registry.service.settings import ServiceSettings\n"
            "from registry.service.state import WarmState\n"
            "settings = ServiceSettings(home=sys.argv[1], query_backend='fp32')\n"
            "state = WarmState(settings)\n"
            "state.route([sys.argv[2]], k=1, exclude=[], where=None, fallback=0)\n"
            "routed = 'torch' in sys.modules or 'lancedb' in sys.modules\n"
            "app = create_app(settings, state=state)\n"
            "[t.join(120) for t in threading.enumerate() if t.name in (LANCEDB_IMPORT, TORCH_IMPORT)]\n"
            "print(json.dumps([routed, 'lancedb' in sys.modules, state._locus is not None]))\n"
            "app.state.jobs.stop()\n")
    done = subprocess.run([sys.executable, "-c", code, str(home), texts[0][0]], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, True, True], done.stdout + done.stderr


def test_auto_device_without_an_nvidia_driver_is_the_cpu_without_importing_torch():
    from registry.service.settings import _may_have_cuda

    if _may_have_cuda():
        pytest.skip("this machine may have a CUDA device: torch is asked, as it should be")
    code = ("import sys\nfrom registry.service.settings import resolve_device\n"
            "print(resolve_device('auto'), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["cpu", "False"]


def test_families_are_computed_once_per_generation_of_the_store(base_home, tmp_path, texts):
    """GET /v1/clusters (the Families page) is kept with the web UI's other reads until a write."""
    from fastapi.testclient import TestClient

    from registry.service.app import create_app
    from registry.service.settings import ServiceSettings

    app = create_app(ServiceSettings(home=copy_home(base_home, tmp_path / "home"), token=TOKEN,
                                     query_backend="fp32"))
    reader = app.state.reader
    calls = []
    real = reader.clusters
    reader.clusters = lambda **kw: (calls.append(kw), real(**kw))[1]
    with TestClient(app) as client:
        first = client.get("/v1/clusters", params={"linkage": "average"})
        assert first.status_code == 200, first.text
        assert client.get("/v1/clusters", params={"linkage": "average"}).json() == first.json()
        assert len(calls) == 1
        client.get("/v1/clusters")  # another question: computed
        assert len(calls) == 2
        evaluations = [{"query": text, "score": i % 2} for i, (text, _) in enumerate(texts[:80])]
        r = client.post("/v1/models", json={"name": "newcomer", "evaluations": evaluations},
                        headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 201, r.text
        after = client.get("/v1/clusters", params={"linkage": "average"}).json()
        assert len(calls) == 3 and "newcomer" in after["order"]  # a write: computed afresh
