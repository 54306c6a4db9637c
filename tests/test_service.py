"""The HTTP service, driven over HTTP: a real uvicorn server in a subprocess on a free loopback port."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from registry.limits import MAX_QUERY_CHARS

from helpers import SMALL_TRAINED, stored_texts
from service_harness import TOKEN, Server, copy_home, serving_copy


@pytest.fixture(scope="module")
def base_home(synthetic_home) -> Path:
    """A small synthetic registry, trained briefly, every model embedded (copied by each server)."""
    return synthetic_home("service", **SMALL_TRAINED)


@pytest.fixture(scope="module")
def texts(base_home) -> list[tuple[str, str]]:
    return stored_texts(base_home)


@pytest.fixture(scope="module")
def server(base_home, tmp_path_factory):
    with serving_copy(base_home, tmp_path_factory.mktemp("shared-server"), extra=("--max-body-mb", "1")) as srv:
        yield srv


def _evals(texts, n: int, offset: int = 0, score=lambda i: i % 2) -> list[dict]:
    return [{"query": t, "task": task, "score": score(i)} for i, (t, task) in enumerate(texts[offset:offset + n])]


def _stats(c: httpx.Client) -> dict:
    return c.get("/v1/stats").json()


def test_add_refine_search_route_audit(server, texts):
    with server.client() as c:
        r = c.post("/v1/models", json={"name": "svc-a", "metadata": {"family": "svc", "params_b": 3},
                                       "evaluations": _evals(texts, 30)})
        assert r.status_code == 201, r.text
        added = r.json()
        assert added["event"] == "add" and added["version"] == 1 and added["n_evals"] == 30
        assert c.get(f"/v1/jobs/{r.headers['x-job-id']}").json()["state"] == "done"

        shown = c.get("/v1/models/svc-a").json()
        assert shown["record"]["family"] == "svc" and shown["record"]["params_b"] == 3.0
        assert shown["embedded"] and shown["n_evals"] == 30 and shown["version"] == 1
        # A new text, encoded by the service, then refine re-embeds as version 2.
        r = c.post("/v1/models/svc-a/refine", json={"evaluations": [{"query": "A brand new question?", "score": 1}]
                                                    + _evals(texts, 5, offset=30)})
        assert r.status_code == 201, r.text
        refined = r.json()
        assert refined["event"] == "refine" and refined["version"] == 2 and refined["n_evals"] == 36
        assert refined["encoded_texts"] == 1
        assert [h["event"] for h in c.get("/v1/models/svc-a/history").json()["versions"]] == ["add", "refine"]

        near = c.get("/v1/similar", params={"name": "svc-a", "k": 3, "by": "locus"}).json()["neighbours"]
        assert len(near) == 3 and all(n["name"] != "svc-a" for n in near)
        assert [n["distance"] for n in near] == sorted(n["distance"] for n in near)
        behaviour = c.get("/v1/similar", params={"name": "svc-a", "k": 3, "by": "behaviour"}).json()
        assert behaviour["by"] == "fingerprint" and all(n["shared_queries"] is not None for n in behaviour["neighbours"])
        default = c.get("/v1/similar", params={"name": "svc-a", "k": 3}).json()
        assert default["by"] == "fingerprint" and [n["name"] for n in default["neighbours"]] == \
            [n["name"] for n in behaviour["neighbours"]]
        assert c.get("/v1/similar", params={"name": "svc-a", "by": "ability"}).status_code == 422

        routed = c.post("/v1/route", json={"queries": [texts[0][0], "Something never seen before?"], "k": 2,
                                           "exclude": ["svc-a"], "fallback": 2}).json()
        assert routed["encoded_texts"] == 1  # the stored text came from the store's vectors
        for result in routed["results"]:
            assert len(result["ranking"]) == 2 and all(r["name"] != "svc-a" for r in result["ranking"])
            assert result["ranking"][0]["p_correct"] >= result["ranking"][1]["p_correct"]
            assert all(f["name"] != result["ranking"][0]["name"] for f in result["fallbacks"])
        again = c.post("/v1/route", json={"query": "Something never seen before?", "k": 2, "exclude": ["svc-a"],
                                          "fallback": 2}).json()
        assert again["encoded_texts"] == 0 and again["results"][0] == routed["results"][1]

        one = c.get("/v1/audit", params={"model": "svc-a"}).json()
        assert all("svc-a" in (f["a"], f["b"]) for f in one["flags"])
        pool = c.get("/v1/audit").json()
        assert pool["models"] >= 7

        assert c.get("/v1/models", params={"where": "family == svc"}).json()[0]["name"] == "svc-a"
        assert c.delete("/v1/models/svc-a").status_code == 200
        assert c.get("/v1/models/svc-a").status_code == 404
        assert c.post("/v1/models/svc-a/restore").json()["restored_version"] == 2
        assert c.get("/v1/models/svc-a").json()["embedded"]
        assert [h["event"] for h in c.get("/v1/models/svc-a/history").json()["versions"]] == \
            ["add", "refine", "remove", "restore"]
        metrics = c.get("/metrics").text
        assert "locus_http_requests_total" in metrics and "locus_jobs_landed 2.0" in metrics


def test_serve_says_its_start_up_stages(server):
    log = server.log.read_text()
    stages = ["loading the registry at ", "warming the query encoder all-MiniLM-L6-v2", "starting the HTTP app",
              f"listening on {server.url} "]
    assert all(stage in log for stage in stages), log
    assert [log.index(stage) for stage in stages] == sorted(log.index(stage) for stage in stages)
    # fp32 on CPU starts from the checked torch-free copy of the query encoder (no sentence-transformers import)
    assert "engine fp32, the torch-free copy" in log, log


def test_the_cli_asks_a_service_running_for_its_home_and_says_so(base_home, texts, tmp_path):
    """route on a home a `registry serve` is serving is answered by it (the same answer, said on
    stderr), an alias among the names too; `--server none`, or a stopped service: answered locally."""
    from click.testing import CliRunner

    from cli.main import cli
    from registry import Registry

    home = copy_home(base_home, tmp_path / "home")
    names = [r.name for r in Registry.open(home).models()]
    Registry.open(home).set_alias("prod", names[0])
    imported = tmp_path / "imported.jsonl"  # a model without a vector: counted in models, not in embedded
    imported.write_text(json.dumps({"model": "imported-only", "query": texts[0][0], "score": 1}) + "\n")
    Registry.open(home).import_path(imported)
    srv = Server(home, token=None, extra=("--json",))
    endpoint = home / "service" / "endpoint.json"
    try:
        assert json.loads(endpoint.read_text())["url"] == srv.url
        # --json: one JSON line on stdout once listening (the log holds stdout and stderr)
        said_json = [json.loads(line) for line in srv.log.read_text().splitlines() if line.startswith("{")]
        assert said_json == [{"url": srv.url, "home": str(home.resolve()), "device": "cpu",
                              "encoder_id": json.loads((home / "config.json").read_text())["active_encoder"],
                              "models": len(names) + 1, "embedded": len(names), "writes": "loopback"}]
        run = lambda *args: CliRunner().invoke(cli, ["--home", str(home), *args, "--json"],  # noqa: E731
                                               env={"LOCUS_SERVER": ""})
        said = f"answered by the registry service at {srv.url}"
        served = run("route", texts[0][0], "-k", "3")
        local = run("route", texts[0][0], "-k", "3", "--server", "none")
        assert served.exit_code == local.exit_code == 0, served.output + local.output
        assert said in served.stderr and said not in local.stderr
        assert json.loads(served.stdout) == json.loads(local.stdout)
        found = run("search", names[1], "-k", "2")  # the saved index answers faster than a service
        assert found.exit_code == 0 and said not in found.stderr
        by_alias = run("route", texts[0][0], "-k", "3", "--exclude", "prod")  # the service resolves aliases too
        assert by_alias.exit_code == 0 and said in by_alias.stderr, by_alias.output
        assert names[0] not in [r["name"] for r in json.loads(by_alias.stdout)["ranking"]]
    finally:
        srv.stop()
    assert not endpoint.exists()  # withdrawn when it stopped
    after = CliRunner().invoke(cli, ["--home", str(home), "route", texts[0][0]], env={"LOCUS_SERVER": ""})
    assert after.exit_code == 0 and "answered by the registry service" not in after.stderr


def test_writes_need_the_token(server, texts):
    body = {"name": "svc-noauth", "evaluations": _evals(texts, 3)}
    with server.client(auth=False) as c:
        before = _stats(c)
        refused = c.post("/v1/models", json=body)
        assert refused.status_code == 401 and refused.json()["error"]["field"] == "Authorization"
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = c.post("/v1/models", json=body, headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"})
        assert wrong.status_code == 401
        assert c.delete("/v1/models/svc-a").status_code == 401
        assert c.get("/v1/health").status_code == 200  # reads stay open
        assert _stats(c) == before


def test_serve_refuses_a_public_address_without_a_token(base_home, monkeypatch):
    from click.testing import CliRunner

    from cli.main import cli

    monkeypatch.delenv("LOCUS_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["--home", str(base_home), "serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "without a token" in result.output


def test_serve_refuses_a_busy_port_before_loading_anything(base_home):
    import socket

    from click.testing import CliRunner

    from cli.main import cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["--home", str(base_home), "serve", "--port", str(port)])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.output, result.output
    assert "loading the registry" not in result.output  # refused before the start-up stages


def test_limits_name_the_field(server, texts):
    with server.client() as c:
        before = _stats(c)
        r = c.post("/v1/models", json={"name": "x" * 201, "evaluations": _evals(texts, 2)})
        assert r.status_code == 422 and r.json()["error"]["field"] == "name"
        r = c.post("/v1/route", json={"query": "q" * (MAX_QUERY_CHARS + 1)})
        assert r.status_code == 422 and r.json()["error"]["field"] == "query"
        r = c.post("/v1/models", json={"name": "svc-big", "evaluations": [{"query_id": "x", "score": 1}] * 100_001})
        assert r.status_code == 413 and r.json()["error"]["field"] == "body"  # 1 MiB body limit comes first
        r = c.post("/v1/models", json={"name": "svc-bad", "evaluations": [{"query": "a?", "score": 1.5}]})
        assert r.status_code == 422 and r.json()["error"]["field"] == "evaluations.0.score"
        r = c.post("/v1/models", json={"name": "svc-bad", "evaluations": [{"query_id": "nope", "score": 1}]})
        assert r.status_code == 422 and r.json()["error"]["field"] == "query_id"
        assert _stats(c) == before


def test_a_bad_file_names_its_line_and_field_and_changes_nothing(server, texts, tmp_path):
    good = tmp_path / "evals.csv"
    rows = ["query,score,task"] + [f'"{t}",{i % 2},{task}' for i, (t, task) in enumerate(texts[:5])]
    bad = tmp_path / "broken.csv"
    bad.write_text("\n".join(rows[:3] + [f'"{texts[3][0]}",high,{texts[3][1]}'] + rows[4:]) + "\n")
    good.write_text("\n".join(rows) + "\n")
    with server.client() as c:
        before = _stats(c)
        r = c.post("/v1/models/svc-file/file", files={"file": ("broken.csv", bad.read_bytes(), "text/csv")})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert (error["file"], error["line"], error["field"]) == ("broken.csv", 4, "score")
        r = c.post("/v1/models/svc-file/file", files={"file": ("evals.txt", b"x", "text/plain")})
        assert r.status_code == 422 and r.json()["error"]["field"] == "file"
        assert _stats(c) == before
        assert c.get("/v1/models/svc-file").status_code == 404
        r = c.post("/v1/models/svc-file/file", files={"file": ("evals.csv", good.read_bytes(), "text/csv")},
                   data={"metadata": json.dumps({"family": "files"})})
        assert r.status_code == 201 and r.json()["n_evals"] == 5
        assert c.get("/v1/models/svc-file").json()["record"]["family"] == "files"


def test_concurrent_writers_and_readers_lose_nothing(server, texts):
    writers, per_writer, errors, routed = 4, 3, [], []

    def write(w: int) -> None:
        with server.client() as c:
            for j in range(per_writer):
                r = c.post("/v1/models", json={"name": f"conc-{w}-{j}", "evaluations": _evals(texts, 10 + j, offset=w)})
                if r.status_code != 201:
                    errors.append(r.text)

    def read() -> None:
        with server.client() as c:
            for i in range(8):
                r = c.post("/v1/route", json={"query": texts[i][0], "k": 2})
                (routed if r.status_code == 200 else errors).append(r.text)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    threads += [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == [] and len(routed) == 24
    with server.client() as c:
        for w in range(writers):
            for j in range(per_writer):
                shown = c.get(f"/v1/models/conc-{w}-{j}").json()
                assert shown["n_evals"] == 10 + j and shown["version"] == 1
    from registry import Registry

    assert Registry.open(server.home).check().ok


def test_python_client_and_cli_through_the_server(server, texts, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from cli.main import cli
    from registry import InputError, NotFoundError
    from registry.client import RegistryClient

    with RegistryClient(server.url, token=TOKEN) as reg:
        added = reg.add_model("client-a", [(t, i % 2, task) for i, (t, task) in enumerate(texts[:20])],
                              {"family": "client"})
        assert added.event == "add" and added.n_evals == 20
        assert reg.get("client-a").family == "client"
        decision = reg.route(texts[1][0], k=2, exclude=["client-a"])
        assert len(decision.ranking) == 2 and all(r.name != "client-a" for r in decision.ranking)
        assert [d.query for d in reg.route([texts[1][0], texts[2][0]], k=1)] == [texts[1][0], texts[2][0]]
        assert all(n.name != "client-a" for n in reg.similar("client-a", k=3).neighbours)
        task = texts[0][1]
        profiled = reg.profile({task: 0.8}, k=2, by="fingerprint")  # `by` travels in the request body
        assert profiled.by == "fingerprint" and {n.vector for n in profiled.neighbours} == {"fingerprint"}
        with pytest.raises(InputError) as refused:
            reg.profile({task: 0.8}, by="colour")
        assert refused.value.field == "by"
        with pytest.raises(NotFoundError):
            reg.show("no-such-model")
        with pytest.raises(InputError) as refused:
            reg.add_model("client-b", [("a question?", 2.0)])
        assert refused.value.field == "evaluations.0.score"
    with RegistryClient(server.url, token=TOKEN, read="session") as session:  # reads after its own writes
        before = session.generation
        session.add_model("client-s", [(t, int(i % 3 == 0), task) for i, (t, task) in enumerate(texts[:20])])
        added_at = session.generation
        assert added_at > before
        assert session.similar("client-s", k=1).neighbours and session.generation == added_at
    with RegistryClient(server.url) as anonymous:  # no token: reads work, writes are refused
        assert anonymous.stats().n_models >= 1
        with pytest.raises(Exception, match="bearer token"):
            anonymous.remove("client-a")

    evals = tmp_path / "cli.csv"
    evals.write_text("query,score\n" + "".join(f'"{t}",{i % 2}\n' for i, (t, _) in enumerate(texts[:12])))
    monkeypatch.setenv("LOCUS_TOKEN", TOKEN)
    monkeypatch.setenv("LOCUS_SERVER", server.url)
    run = CliRunner().invoke
    missing_home = str(tmp_path / "nowhere")  # everything goes through the server, not a local home
    out = run(cli, ["--home", missing_home, "add-model", "cli-a", "--evals", str(evals), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["n_evals"] == 12
    out = run(cli, ["--home", missing_home, "route", texts[0][0], "-k", "2", "--json"])
    assert out.exit_code == 0, out.output
    assert len(json.loads(out.stdout)["ranking"]) == 2
    out = run(cli, ["--home", missing_home, "search", "cli-a", "-k", "2", "--json"])
    assert out.exit_code == 0 and len(json.loads(out.stdout)["neighbours"]) == 2
    out = run(cli, ["--home", missing_home, "audit", "--model", "cli-a", "--json"])
    assert out.exit_code == 0, out.output
    out = run(cli, ["--home", missing_home, "add-model", "cli-a", "--evals", str(evals)])
    assert out.exit_code == 2 and "exists" in out.output
    out = run(cli, ["--home", missing_home, "queries", "--limit", "2", "--offset", "1", "--json"])
    assert out.exit_code == 0, out.output
    listed = json.loads(out.stdout)
    assert listed["offset"] == 1 and len(listed["queries"]) == 2 and listed["total"] >= len(texts)
    # every command the service serves goes through it: none of them needs the (missing) local home
    more = tmp_path / "more.csv"
    more.write_text("query,score\n" + "".join(f'"{t}",1\n' for t, _ in texts[12:16]))
    task = texts[0][1]
    for args, check in [
        (["refine", "cli-a", "--evals", str(more)], lambda r: r["event"] == "refine" and r["n_evals"] == 16),
        (["alias", "set", "cli-prod", "cli-a"], lambda r: r["alias"] == "cli-prod" and r["version"] is None),
        (["alias", "list"], lambda r: "cli-prod" in {a["alias"] for a in r}),
        (["show", "cli-prod"], lambda r: r["record"]["name"] == "cli-a"),
        (["history", "cli-a"], lambda r: [v["version"] for v in r["versions"]] == [1, 2]),
        (["stats"], lambda r: r["n_models"] >= 2),
        (["models", "list", "--where", "family == client"], lambda r: [m["name"] for m in r] == ["client-a"]),
        (["compare", "cli-a", "client-a"], lambda r: r["a"] == "cli-a" and r["b"] == "client-a"),
        (["profile", "--task", f"{task}=0.8", "-k", "2"], lambda r: len(r["neighbours"]) == 2),
        (["portfolio", "--k", "2", "--draws", "10"], lambda r: len(r["models"]) == 2),
        (["alias", "delete", "cli-prod"], lambda r: r["alias"] == "cli-prod"),
        (["remove", "cli-a"], lambda r: r["name"] == "cli-a"),
        (["restore", "cli-a"], lambda r: r["name"] == "cli-a" and r["version"] == 3),
    ]:
        out = run(cli, ["--home", missing_home, *args, "--json"])
        assert out.exit_code == 0, (args, out.output)
        assert check(json.loads(out.stdout)), (args, out.stdout)


def test_a_cached_route_sees_a_change_made_by_the_cli(server, texts):
    """Routes whose texts are in memory are answered without the thread pool; they must still see
    what another writer (here the CLI, in this process) changed since."""
    from click.testing import CliRunner

    from cli.main import cli

    query = {"query": texts[3][0], "k": 3}
    with server.client() as c:
        assert c.post("/v1/models", json={"name": "cached-a", "evaluations": _evals(texts, 24)}).status_code == 201
        first = c.post("/v1/route", json=query).json()
        again = c.post("/v1/route", json=query).json()
        assert again["encoded_texts"] == 0 and again["results"] == first["results"]
        top = first["results"][0]["ranking"][0]["name"]
        out = CliRunner().invoke(cli, ["--home", str(server.home), "remove", top], env={"LOCUS_SERVER": ""})
        assert out.exit_code == 0, out.output
        after = c.post("/v1/route", json=query).json()
        assert top not in [r["name"] for r in after["results"][0]["ranking"]]
        assert c.post(f"/v1/models/{top}/restore").status_code == 200
        assert c.post("/v1/route", json=query).json()["results"] == first["results"]
        metrics = c.get("/metrics").text
    counted = [line for line in metrics.splitlines()
               if line.startswith('locus_http_request_seconds_count{route="/v1/route"}')]
    assert counted and float(counted[0].split()[-1]) >= 4


def test_a_text_routed_before_it_is_stored_lands_with_its_vector(server, texts, tmp_path):
    """A route keeps a text's vector in the service's memory, not in the store; a write that later lands
    that text must store the vector (found by the fuzzer: the query was stored without one, so every reader
    of the store left its evaluations out): a new query, and a stored one that had none (imported with
    --no-encode by the CLI beside the service)."""
    from click.testing import CliRunner

    from cli.main import cli
    from registry import Registry
    from registry.importers._common import text_hash

    fresh = "Routed first, evaluated later: which planet has the most moons?"
    unencoded = "Imported without a vector, routed, then evaluated: what is the boiling point of water?"
    path = tmp_path / "unencoded.jsonl"
    path.write_text(json.dumps({"model": "importer", "query": unencoded, "score": 1}) + "\n")
    out = CliRunner().invoke(cli, ["--home", str(server.home), "import", str(path), "--no-encode"],
                             env={"LOCUS_SERVER": ""})
    assert out.exit_code == 0, out.output
    store = Registry.open(server.home).store
    with server.client() as c:
        encoder = c.get("/v1/health").json()["query_encoder"]
        assert not store.cached_vectors(encoder, [text_hash(unencoded)])
        assert c.post("/v1/route", json={"queries": [fresh, unencoded], "k": 2}).json()["encoded_texts"] == 2
        r = c.post("/v1/models", json={"name": "routed-then-added", "evaluations": [
            {"query": fresh, "score": 1}, {"query": unencoded, "score": 0}] + _evals(texts, 20)})
        assert r.status_code == 201, r.text
        assert r.json()["encoded_texts"] == 0  # the route encoded them: nothing encoded now
    hashes = {text_hash(fresh), text_hash(unencoded)}
    assert set(Registry.open(server.home).store.cached_vectors(encoder, sorted(hashes))) == hashes


def test_sigkill_mid_write_then_restart_loses_nothing(server, texts):
    accepted = []
    try:
        with server.client() as c:
            for i in range(6):
                r = c.post("/v1/models", json={"name": f"kill-{i}", "evaluations": _evals(texts, 12, offset=i),
                                               "wait": False})
                assert r.status_code in (201, 202), r.text
                accepted.append(r.headers["x-job-id"])
            time.sleep(0.3)  # some jobs land, the writer is inside a batch or about to be
    finally:
        server.kill()
    server.restart()
    with server.client() as c:
        deadline = time.monotonic() + 120
        states = []
        while time.monotonic() < deadline:
            states = [c.get(f"/v1/jobs/{j}").json()["state"] for j in accepted]
            if all(s in ("done", "failed") for s in states):
                break
            time.sleep(0.3)
        assert states == ["done"] * 6
        for i in range(6):
            shown = c.get(f"/v1/models/kill-{i}").json()
            assert shown["n_evals"] == 12 and shown["version"] == 1
        history = [h["event"] for i in range(6) for h in c.get(f"/v1/models/kill-{i}/history").json()["versions"]]
        assert history == ["add"] * 6  # each landed exactly once
    from registry import Registry

    reg = Registry.open(server.home)
    assert reg.check().ok and not (server.home / "journal.json").exists()
    evals = reg.store.read("evaluations", ["model"]).column("model").to_pylist()
    assert all(evals.count(f"kill-{i}") == 12 for i in range(6))


