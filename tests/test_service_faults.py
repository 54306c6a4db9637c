"""What an HTTP fuzz campaign and hand probing found in `registry serve`, each pinned: input that used to
reach the writer as an exception (a deeply nested or half-surrogate JSON value, a 400-digit integer) is a
422 naming its field; one bad job fails alone, never its batch; an upload refused against the store names
the client's file, not the spool path; every model path reads names that need percent-encoding; a
malformed body is the body's error; a tiny search vector keeps its direction."""
from __future__ import annotations

import time
import types
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from helpers import SMALL_TRAINED, stored_texts
from service_harness import TOKEN, copy_home

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def base_home(synthetic_home) -> Path:
    return synthetic_home("service-faults", **SMALL_TRAINED)


@pytest.fixture
def client(base_home, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from registry.service.app import create_app
    from registry.service.settings import ServiceSettings

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    home = copy_home(base_home, tmp_path / "home")
    with TestClient(create_app(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))) as c:
        c.home = home
        yield c


def _ids(client) -> list[str]:
    from registry import Registry

    return Registry.open(client.home).store.read("queries", ["query_id"]).column("query_id").to_pylist()


def _names(client) -> list[str]:
    return sorted(m["name"] for m in client.get("/v1/models").json())


def test_the_router_knn_is_built_once_per_state_of_the_store(client, monkeypatch):
    """Routes read the router's kNN (every stored evaluation) from the loaded snapshot: a route of a text
    in memory answers on the event loop without reading the store; after an add-model the last one goes on
    with the new model's rows, after a removal without the model, after a refine that replaces scores with
    that model's rows read anew, after a compaction the same: built once."""
    from registry.operations import StoreView

    built = []
    real = StoreView.build_router_knn
    monkeypatch.setattr(StoreView, "build_router_knn", lambda self, *a, **kw: built.append(1) or real(self, *a, **kw))
    text = "Which planet is known as the red planet?"
    for _ in range(3):
        r = client.post("/v1/route", json={"query": text, "k": 2})
        assert r.status_code == 200 and r.json()["results"][0]["predictor"] == "locus+item+knn", r.text
    assert len(built) == 1
    r = client.post("/v1/models", headers=AUTH, json={"name": "newcomer", "evaluations": [
        {"query_id": q, "score": 1} for q in _ids(client)[:8]]})
    assert r.status_code == 201, r.text
    again = client.post("/v1/route", json={"query": text, "k": 2}).json()["results"][0]
    assert again["predictor"] == "locus+item+knn"
    state = client.app.state.warm
    assert len(built) == 1 and state.knn_builds == {"built": 1, "extended": 1}
    assert client.delete("/v1/models/newcomer", headers=AUTH).status_code == 200
    for _ in range(2):
        client.post("/v1/route", json={"query": text, "k": 2})
    assert len(built) == 1 and state.knn_builds == {"built": 1, "extended": 2}
    some = _names(client)[0]
    r = client.post(f"/v1/models/{some}/refine", headers=AUTH, json={"evaluations": [  # replaces its scores
        {"query_id": q, "score": 0} for q in _ids(client)[:3]]})
    assert r.status_code == 201, r.text
    for _ in range(2):
        client.post("/v1/route", json={"query": text, "k": 2})
    assert len(built) == 1 and state.knn_builds == {"built": 1, "extended": 3}  # its rows read anew
    from datetime import timedelta

    from registry import Registry

    Registry.open(client.home).store.compact(keep_versions_for=timedelta(hours=1))  # as the writer does
    for _ in range(2):
        client.post("/v1/route", json={"query": text, "k": 2})
    assert len(built) == 1 and state.knn_builds == {"built": 1, "extended": 4}  # across the compaction


def _knn_view(home):
    """A fresh view of the home and the arguments a service builds its router's kNN with."""
    from registry.operations import StoreView, router_knn_args

    def args():
        view = StoreView(home)
        return view, router_knn_args(view.predictor(), view.index("locus"))
    return args


def _same_router(registry):
    """Whether two routers' kNNs are the same: models, queries, scores, priors and predictions."""
    phi = np.random.default_rng(0).normal(size=(6, registry.store.vector_dim(
        registry.store.config["query_encoder"]))).astype(np.float32)

    def same(a, b) -> bool:
        return (a._data.models == b._data.models and a._data.query_ids == b._data.query_ids
                and np.array_equal(a.predict_vectors(phi), b.predict_vectors(phi))
                and np.array_equal(a._Y, b._Y) and np.array_equal(a._O, b._O) and np.array_equal(a._prior, b._prior))
    return same


def test_the_router_knn_goes_on_from_the_last_when_evaluations_were_only_appended(base_home, tmp_path, monkeypatch):
    """After an add-model, or a refine with queries the model had no score for, the router's kNN is the last
    one with the new rows (reading only those), after a removal the last one without the model, after a refine
    that replaces scores, a model back with rows from before, or a compaction, the last one with those models'
    rows read anew: the same as a build over every evaluation; after a model evaluated on a query no model
    had, or a compaction that removed the versions before it, it is built again."""
    from datetime import timedelta

    from indexing.store import EVALUATION_SCHEMA, EVALUATIONS, QUERIES, QUERY_SCHEMA, now_utc
    from registry import Registry

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    home = copy_home(base_home, tmp_path / "home")
    registry = Registry.open(home)
    ids = registry.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    args, same = _knn_view(home), _same_router(registry)

    view, (encoder, names, settings, pool) = args()
    last = view.build_router_knn(encoder, names, settings, pool)
    for i, name in enumerate(["newcomer", "another"]):
        registry.add_model(name, [{"query_id": q, "score": int((j + i) % 3 == 0)} for j, q in enumerate(ids[5:])])
        view, (encoder, names, settings, pool) = args()
        grown = view.extend_router_knn(last, encoder, names, pool)
        assert grown is not None and name in grown._data.models
        assert same(grown, view.build_router_knn(encoder, names, settings, pool))
        last = grown
    registry.refine("newcomer", [{"query_id": q, "score": 1} for q in ids[:5]])  # queries it had no score for
    view, (encoder, names, settings, pool) = args()
    grown = view.extend_router_knn(last, encoder, names, pool)
    assert grown is not None and same(grown, view.build_router_knn(encoder, names, settings, pool))
    last = grown
    registry.refine("newcomer", [{"query_id": q, "score": 0} for q in ids[:3]])  # new scores replace rows
    view, (encoder, names, settings, pool) = args()
    grown = view.extend_router_knn(last, encoder, names, pool)  # its rows read anew
    assert grown is not None and same(grown, view.build_router_knn(encoder, names, settings, pool))
    assert grown._Y[grown._data.models.index("newcomer")].sum() < last._Y[last._data.models.index("newcomer")].sum()
    last = grown
    registry.remove("another")  # left out, with its rows (kept in the table for a restore)
    view, (encoder, names, settings, pool) = args()
    grown = view.extend_router_knn(last, encoder, names, pool)
    assert grown is not None and "another" not in grown._data.models
    assert same(grown, view.build_router_knn(encoder, names, settings, pool))
    last = grown
    registry.restore("another")  # back, with the rows it kept
    view, (encoder, names, settings, pool) = args()
    grown = view.extend_router_knn(last, encoder, names, pool)
    assert grown is not None and "another" in grown._data.models
    assert same(grown, view.build_router_knn(encoder, names, settings, pool))
    last = grown
    # a model that had evaluations before it joined the index (imported, then added): all its rows read
    with registry.store.transaction():
        registry.store.append(EVALUATIONS, [{"model": "imported-earlier", "query_id": q, "score": 0.0,
                                             "source": "test", "time": now_utc()} for q in ids[40:]],
                              EVALUATION_SCHEMA)
    view, (encoder, names, settings, pool) = args()
    last = view.extend_router_knn(last, encoder, names, pool)
    assert last is not None and "imported-earlier" in last.stored_from.evaluated_models
    registry.add_model("imported-earlier", [{"query_id": q, "score": 1} for q in ids[:40]])
    view, (encoder, names, settings, pool) = args()
    grown = view.extend_router_knn(last, encoder, names, pool)
    stored = registry.store.read(EVALUATIONS, ["model"]).column("model").to_pylist().count("imported-earlier")
    assert grown is not None and grown._O[grown._data.models.index("imported-earlier")].sum() == stored
    assert same(grown, view.build_router_knn(encoder, names, settings, pool))
    last = grown
    # a compaction between (the versions before it kept): what changed before it and after it
    registry.refine("newcomer", [{"query_id": q, "score": 1} for q in ids[:2]])
    registry.store.compact(keep_versions_for=timedelta(days=1))
    registry.add_model("after-compaction", [{"query_id": q, "score": 1} for q in ids[10:40]])
    view, (encoder, names, settings, pool) = args()
    grown = view.extend_router_knn(last, encoder, names, pool)
    assert grown is not None and grown.stored_from.version == registry.store.version(EVALUATIONS)
    assert same(grown, view.build_router_knn(encoder, names, settings, pool))
    registry.add_model("after-cleanup", [{"query_id": q, "score": 0} for q in ids[10:40]])
    registry.store.compact(keep_versions_for=timedelta(0))  # the versions between removed: built again
    view, (encoder, names, settings, pool) = args()
    assert view.extend_router_knn(grown, encoder, names, pool) is None
    last = view.build_router_knn(encoder, names, settings, pool)
    registry.add_model("asked-anew", [{"query_id": q, "score": 1} for q in ids]
                       + [{"query": "A question no model was asked before?", "score": 1, "task": "math"}])
    view, (encoder, names, settings, pool) = args()
    assert view.extend_router_knn(last, encoder, names, pool) is None  # a new query with a vector: a new column
    # a stored evaluation on a query without a vector is left out, until the query gets one
    store = registry.store
    with store.transaction():
        store.append(QUERIES, [{"query_id": "later", "text": "Asked before it had a vector?", "task": "math",
                                "text_hash": "ab" * 16}], QUERY_SCHEMA)
        store.append(EVALUATIONS, [{"model": names[0], "query_id": "later", "score": 1.0, "source": "test",
                                    "time": now_utc()}], EVALUATION_SCHEMA)
    view, (encoder, names, settings, pool) = args()
    last = view.build_router_knn(encoder, names, settings, pool)
    assert "later" not in last._data.query_ids
    with store.transaction():
        store.add_vectors(encoder, ["ab" * 16], np.ones((1, store.vector_dim(encoder)), np.float32))
    view, (encoder, names, settings, pool) = args()
    assert view.extend_router_knn(last, encoder, names, pool) is None
    assert "later" in view.build_router_knn(encoder, names, settings, pool)._data.query_ids


def test_after_a_landing_routes_find_the_new_state_ready_and_never_an_older_one(client, monkeypatch):
    """The writer answers its client, then loads the state it landed and builds the router's kNN; a route
    arriving meanwhile waits for that work (it never answers from the state before the write), and the
    routes after it find both ready."""
    import threading

    from registry.operations import StoreView

    text = "Which planet is known as the red planet?"
    client.post("/v1/route", json={"query": text, "k": 50})
    entered, release, built = threading.Event(), threading.Event(), []
    real = StoreView.extend_router_knn  # an add-model: the last kNN goes on with the new model's rows

    def held(self, *a, **kw):
        built.append(threading.current_thread().name)
        entered.set()
        assert release.wait(60)
        return real(self, *a, **kw)

    monkeypatch.setattr(StoreView, "extend_router_knn", held)
    rows = [{"query_id": q, "score": 1} for q in _ids(client)[:80]]
    r = client.post("/v1/models", headers=AUTH, json={"name": "newcomer", "evaluations": rows})
    assert r.status_code == 201, r.text  # answered before the kNN is built
    assert entered.wait(60) and built == ["locus-writer"]
    during = []
    reader = threading.Thread(target=lambda: during.append(client.post("/v1/route", json={"query": text, "k": 50})))
    reader.start()
    reader.join(1.0)
    assert reader.is_alive() and not during  # waits for the kNN of the new state ...
    release.set()
    reader.join(60)
    ranking = [m["name"] for m in during[0].json()["results"][0]["ranking"]]
    assert during[0].status_code == 200 and "newcomer" in ranking  # ... and reads the writer's model
    assert built == ["locus-writer"]  # built once, by the writer


def test_the_writer_warms_the_state_once_its_queue_is_empty(tmp_path, monkeypatch):
    """Warming after a batch is wasted while more jobs wait (their batch changes the state again): the
    writer warms after the last one, and not after a batch of which nothing landed."""
    import threading

    from registry.service import jobs
    from registry.service.writer import JobSpec

    first_landing, go_on, events = threading.Event(), threading.Event(), []

    def land(state, specs):
        events.append(("land", [s.name for s in specs]))
        if specs[0].name == "a":
            first_landing.set()
            assert go_on.wait(30)
        return {s.id: ({"name": s.name} if s.name != "bad" else RuntimeError("no")) for s in specs}

    monkeypatch.setattr(jobs, "land_jobs", land)
    queue = jobs.JobQueue(types.SimpleNamespace(home=tmp_path, warm=lambda: events.append(("warm",)),
                                                readers_waiting=lambda: False))
    try:
        first = queue.submit(JobSpec(id=queue.new_id(), kind="add", name="a"))
        assert first_landing.wait(30)
        later = queue.submit(JobSpec(id=queue.new_id(), kind="add", name="b"))  # waits while "a" lands
        go_on.set()
        assert first.event.wait(30) and later.event.wait(30)
        deadline = time.monotonic() + 30
        while ("warm",) not in events and time.monotonic() < deadline:
            time.sleep(0.01)
        bad = queue.submit(JobSpec(id=queue.new_id(), kind="add", name="bad"))
        assert bad.event.wait(30) and bad.state == "failed"
        time.sleep(0.2)
    finally:
        queue.stop()
    assert events == [("land", ["a"]), ("land", ["b"]), ("warm",), ("land", ["bad"])]


def test_max_evals_travels_inline_and_with_a_file_and_is_checked(client):
    ids = _ids(client)[:6]
    rows = [{"query_id": q, "score": i % 2} for i, q in enumerate(ids)]
    r = client.post("/v1/models", headers=AUTH, json={"name": "capped", "evaluations": rows, "max_evals": 2})
    assert r.status_code == 201 and r.json()["n_evals"] == 2, r.text
    r = client.post("/v1/models/capped/refine", headers=AUTH, json={"evaluations": rows[:1], "max_evals": 4})
    assert r.status_code == 201 and r.json()["n_evals"] == 4 and r.json()["version"] == 2, r.text
    body = "query_id,score\n" + "".join(f"{q},{i % 2}\n" for i, q in enumerate(ids))
    r = client.post("/v1/models/capped-file/file", headers=AUTH, files={"file": ("e.csv", body.encode())},
                    data={"max_evals": "5"})
    assert r.status_code == 201 and r.json()["n_evals"] == 5, r.text
    for bad in (0, -3, "all", 1.5):
        r = client.post("/v1/models", headers=AUTH, json={"name": "bad", "evaluations": rows, "max_evals": bad})
        assert r.status_code == 422 and r.json()["error"]["field"] == "max_evals", r.text
    r = client.post("/v1/models/bad/file", headers=AUTH, files={"file": ("e.csv", body.encode())},
                    data={"max_evals": "0"})
    assert r.status_code == 422 and "max_evals" in r.text, r.text
    assert "bad" not in _names(client)


def test_values_that_broke_the_writer_are_422s_naming_their_field(client):
    q = _ids(client)[0]
    before = _names(client)
    deep = '{"query_id": "%s", "score": 1, "task": %s}\n' % (q, "[" * 50_000 + "]" * 50_000)
    r = client.post("/v1/models/deep/file", headers=AUTH, files={"file": ("deep.jsonl", deep.encode())})
    assert r.status_code == 422 and r.json()["error"]["line"] == 1 and "nested too deeply" in r.text, r.text
    half = b'{"query": "lone \\udfff text", "score": 1}\n'  # a JSON escape of half a UTF-16 pair
    r = client.post("/v1/models/half/file", headers=AUTH, files={"file": ("half.jsonl", half)})
    assert r.status_code == 422 and "lone surrogate" in r.text and r.json()["error"]["line"] == 1, r.text
    r = client.post(
        "/v1/models", headers={**AUTH, "Content-Type": "application/json"},
        content=b'{"name": "m", "evaluations": [{"query_id": "%s", "score": 1}], "metadata": {"k": "v\\udfff"}}'
        % q.encode())
    assert r.status_code == 422 and r.json()["error"]["field"] == "metadata", r.text
    r = client.post(
        "/v1/models", headers={**AUTH, "Content-Type": "application/json"},
        content=b'{"name": "m", "evaluations": [{"query_id": "%s", "score": 1}], "metadata": {"family": "x\\udfff"}}'
        % q.encode())
    assert r.status_code == 422 and r.json()["error"]["field"] == "metadata" and "surrogate" in r.text, r.text
    r = client.post("/v1/models/m/file", headers=AUTH, files={"file": ("e.csv", f"query_id,score\n{q},1\n".encode())},
                    data={"metadata": "[" * 100_000 + "]" * 100_000})
    assert r.status_code == 422 and r.json()["error"]["field"] == "metadata", r.text
    r = client.post("/v1/models", headers={**AUTH, "Content-Type": "application/json"},
                    content=('{"name": "big", "evaluations": [{"query_id": "%s", "score": 1}], "metadata": '
                             '{"big": %s}}' % (q, 10 ** 400)).encode())
    assert r.status_code == 422 and r.json()["error"]["field"] == "metadata" and "401 digits" in r.text, r.text
    assert _names(client) == before  # nothing of any of them was stored


def test_an_upload_refused_against_the_store_names_the_client_s_file(client):
    r = client.post("/v1/models/up/file", headers=AUTH, files={"file": ("unknown.csv", b"query_id,score\nnope-1,1\n")})
    error = r.json()["error"]
    assert r.status_code == 422 and error["file"] == "unknown.csv" and error["line"] == 2, r.text
    assert "uploads" not in r.text and str(client.home) not in r.text


def test_the_accuracy_path_reads_a_name_that_needs_encoding(client):
    name = "org/my model+1"
    r = client.post("/v1/models", headers=AUTH, json={"name": name, "evaluations": [
        {"query_id": q, "score": i % 2} for i, q in enumerate(_ids(client)[:4])]})
    assert r.status_code == 201, r.text
    row = client.get(f"/v1/models/{quote(name, safe='')}/accuracy")
    assert row.status_code == 200 and row.json()["name"] == name, row.text


def test_a_malformed_json_body_is_the_body_s_error(client):
    r = client.post("/v1/route", headers={"Content-Type": "application/json"}, content=b'{"query": "a",}')
    error = r.json()["error"]
    assert r.status_code == 422 and error["field"] == "body" and "not JSON" in error["message"], r.text


def test_a_tiny_search_vector_keeps_its_direction(client):
    from registry import Registry

    reg = Registry.open(client.home)
    vector = np.asarray(reg.store.read("models", ["name", "vector"]).to_pylist()[0]["vector"], np.float64)
    name = reg.store.read("models", ["name"]).column("name")[0].as_py()
    plain = client.post("/v1/similar", json={"vector": vector.tolist(), "k": 3}).json()["neighbours"]
    tiny = client.post("/v1/similar", json={"vector": (vector * 1e-18).tolist(), "k": 3}).json()["neighbours"]
    assert [n["name"] for n in tiny] == [n["name"] for n in plain] and plain[0]["name"] == name
    assert [n["distance"] for n in tiny] == pytest.approx([n["distance"] for n in plain], abs=1e-5)
    assert tiny[0]["distance"] == pytest.approx(0.0, abs=1e-5)


def test_a_bug_in_one_job_fails_that_job_alone_not_its_batch(monkeypatch, tmp_path):
    """The writer lands a batch in one transaction; when it fails for a reason that is not the registry's
    (a bug), each job is tried alone, so only the bad one fails, with a generic message (its text is for the
    log), and the others land."""
    from registry.service import jobs
    from registry.service.writer import JobSpec

    calls = []

    def land(state, specs):
        calls.append([s.name for s in specs])
        if any(s.name == "bad" for s in specs):
            raise RuntimeError("secret internals")
        return {s.id: {"name": s.name} for s in specs}

    monkeypatch.setattr(jobs, "land_jobs", land)
    queue = jobs.JobQueue(types.SimpleNamespace(home=tmp_path, warm=lambda: None,
                                                readers_waiting=lambda: False))
    try:
        with queue._cond:  # all three wait before the writer takes any: one batch
            records = [queue.submit(JobSpec(id=queue.new_id(), kind="add", name=n)) for n in ("a", "bad", "c")]
        for record in records:
            assert record.event.wait(30)
    finally:
        queue.stop()
    assert calls[0] == ["a", "bad", "c"] and sorted(calls[1:]) == [["a"], ["bad"], ["c"]]
    good, bad, other = records
    assert (good.state, other.state, bad.state) == ("done", "done", "failed")
    assert bad.error["type"] == "InternalError" and "secret" not in bad.error["message"] and bad.error["status"] == 500
    # read back after a restart (from the job's file): the same times, `started` included
    restarted = jobs.JobQueue(types.SimpleNamespace(home=tmp_path, warm=lambda: None,
                                                readers_waiting=lambda: False))
    try:
        for record in records:
            again = restarted.get(record.spec.id)
            assert again is not record and again.state == record.state
            assert (again.created, again.started, again.finished) == (record.created, record.started, record.finished)
            assert again.started is not None and again.started <= again.finished
    finally:
        restarted.stop()


def test_the_schema_lists_the_403_and_413_every_route_can_answer(client):
    schema = client.get("/openapi.json").json()
    operations = [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]
    assert len(operations) > 20
    missing = [(path, method) for path, method, op in operations if not {"403", "413"} <= set(op["responses"])]
    assert missing == []
    big = client.put("/v1/aliases/foo", headers={**AUTH, "Content-Type": "application/json"},
                     content=b'{"target": "' + b"x" * (70 * 1024 * 1024) + b'"}')
    assert big.status_code == 413


@pytest.mark.parametrize("task", ["x\u001b[31mRED\nfake-line", "ends-in-nul\u0000", "zero\u200bwidth"])
def test_a_task_with_a_control_or_invisible_character_is_refused(client, tmp_path, task):
    """A task is printed in tables and compared as a key, so it follows a model name's character rules."""
    from registry import Registry
    from registry.errors import InputError

    before = _names(client)
    r = client.post("/v1/models", headers=AUTH, json={"name": "taskctl", "evaluations": [
        {"query": "A question with an odd task?", "score": 1, "task": task}]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "task", r.text
    upload = tmp_path / "e.jsonl"
    upload.write_text('{"query": "Another odd one?", "score": 1, "task": %s}\n' % __import__("json").dumps(task))
    r = client.post("/v1/models/taskctl/file", headers=AUTH, files={"file": ("e.jsonl", upload.read_bytes())})
    assert r.status_code == 422 and r.json()["error"]["field"] == "task" and r.json()["error"]["line"] == 1, r.text
    with pytest.raises(InputError) as refusal:
        Registry.open(client.home).add_model("taskctl", upload)
    assert refusal.value.field == "task" and "U+" in refusal.value.problem
    assert _names(client) == before


def test_a_write_without_the_token_is_401_even_when_its_body_is_bad(client):
    """FastAPI reads the body before a route's dependencies: the write check runs first all the same, so a
    client without the token is told that (401), not what was wrong with a body it may not send. With the
    token, the bad body is the answer (422); reads are not asked for a token."""
    bodies = [("/v1/models", b'{"name": "x", "evaluations": ['),  # not JSON
              ("/v1/models", b'{"name": "x"}'),  # JSON missing a field
              ("/v1/models/x/refine", b'[]')]
    for path, body in bodies:
        plain = {"Content-Type": "application/json"}
        r = client.post(path, headers=plain, content=body)
        assert r.status_code == 401 and r.json()["error"]["field"] == "Authorization", (path, body, r.text)
        wrong = client.post(path, headers={**plain, "Authorization": "Bearer nope"}, content=body)
        assert wrong.status_code == 401, wrong.text
        assert client.post(path, headers={**plain, **AUTH}, content=body).status_code == 422
    r = client.post("/v1/route", headers={"Content-Type": "application/json"}, content=b'{"queries": ')
    assert r.status_code == 422  # a read: its bad body is the answer


def test_a_method_a_path_does_not_answer_is_405_whatever_the_token(client):
    for headers in ({}, AUTH):
        r = client.post("/v1/models/some-model", headers=headers)  # the path answers GET and DELETE
        assert r.status_code == 405 and "DELETE" in r.headers["allow"], r.text


def test_a_failing_extension_of_the_router_knn_builds_it_instead(client, monkeypatch):
    from registry.operations import StoreView

    def broken(self, *a, **kw):
        raise RuntimeError("a shortcut that broke")

    text = "Which planet is known as the red planet?"
    assert client.post("/v1/route", json={"query": text, "k": 2}).status_code == 200
    monkeypatch.setattr(StoreView, "extend_router_knn", broken)
    r = client.post("/v1/models", headers=AUTH, json={"name": "newcomer", "evaluations": [
        {"query_id": q, "score": 1} for q in _ids(client)[:8]]})
    assert r.status_code == 201, r.text
    again = client.post("/v1/route", json={"query": text, "k": 2})
    assert again.status_code == 200 and again.json()["results"][0]["predictor"] == "locus+item+knn"
    assert client.app.state.warm.knn_builds["built"] == 2


@pytest.mark.parametrize("seed", [0, 1])
def test_after_any_sequence_of_writes_the_router_knn_gone_on_is_a_build(base_home, tmp_path, monkeypatch, seed):
    """Writes drawn at random (add, refine with new queries or replacing scores, remove, restore, a removed
    model added again, a compaction keeping the versions or not, two writes between reads): after each, the
    kNN gone on from the last equals a build over every stored evaluation, and it is built only after a
    compaction that removed the versions it was read at."""
    import random
    from datetime import timedelta

    from registry import Registry

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    home = copy_home(base_home, tmp_path / "home")
    registry = Registry.open(home)
    ids = registry.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    args, same = _knn_view(home), _same_router(registry)
    rng = random.Random(seed)

    def scores(queries):
        return [{"query_id": q, "score": rng.randint(0, 1)} for q in queries]

    view, (encoder, names, settings, pool) = args()
    last = view.build_router_knn(encoder, names, settings, pool)
    removed, went_on = [], 0
    for step in range(18):
        op = rng.choice(["add", "refine new", "refine replacing", "remove", "restore", "add again", "compact",
                         "two"])
        cleaned = False
        if op in ("add", "two"):
            registry.add_model(f"walk{step}", scores(rng.sample(ids, rng.randint(20, len(ids)))))
        if op in ("refine new", "refine replacing", "two"):
            name = rng.choice(names)
            held = set(registry.store.read_in("evaluations", ["query_id"], "model", [name])
                       .column("query_id").to_pylist())
            asked = [q for q in ids if (q in held) == (op != "refine new")]
            if asked:
                registry.refine(name, scores(rng.sample(asked, min(len(asked), rng.randint(1, 10)))))
        if op == "remove" and len(names) > 4:
            removed.append(rng.choice(names))
            registry.remove(removed[-1])
        if op == "restore" and removed:
            registry.restore(removed.pop(rng.randrange(len(removed))))
        if op == "add again" and removed:
            registry.add_model(removed.pop(rng.randrange(len(removed))), scores(rng.sample(ids, 30)))
        if op == "compact":
            cleaned = rng.random() < 0.3
            registry.store.compact(keep_versions_for=timedelta(0) if cleaned else timedelta(hours=1))
        view, (encoder, names, settings, pool) = args()
        built = view.build_router_knn(encoder, names, settings, pool)
        grown = view.extend_router_knn(last, encoder, names, pool)
        assert grown is not None or cleaned, (step, op)
        assert grown is None or same(grown, built), (step, op)
        went_on += grown is not None
        last = grown if grown is not None else built
    assert went_on >= 12


def test_the_request_examples_in_the_schema_are_answered(client):
    """/docs shows each request body's example (the schema's `examples`) to try out: each one is answered, not
    refused, on a registry with the tasks it names."""
    schema = client.get("/openapi.json").json()
    operations = {(path, method): op for path, item in schema["paths"].items() for method, op in item.items()}

    def example(path, method="post"):
        ref = operations[(path, method)]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]["examples"][0]

    added = client.post("/v1/models", headers=AUTH, json=example("/v1/models"))
    assert added.status_code == 201 and added.json()["name"] == example("/v1/models")["name"], added.text
    refined = client.post(f"/v1/models/{added.json()['name']}/refine", headers=AUTH,
                          json=example("/v1/models/{name}/refine"))
    assert refined.status_code == 201 and refined.json()["version"] == 2, refined.text
    routed = client.post("/v1/route", json=example("/v1/route"))
    assert routed.status_code == 200 and routed.json()["results"][0]["ranking"], routed.text
    tasks = set(client.get("/v1/stats").json()["queries_per_task"])
    profile = example("/v1/profile")
    profile["targets"] = {task: accuracy for task, accuracy in profile["targets"].items() if task in tasks}
    assert profile["targets"]  # the example's tasks are common ones: a registry with any of them answers it
    assert client.post("/v1/profile", json=profile).status_code == 200


def test_a_removal_during_a_landing_waits_for_it_and_both_land_whole(client, monkeypatch):
    """The service's writer thread and a request thread share one Store: a removal (request thread) arriving
    while a landing holds its transaction used to take that transaction for its own (no lock), and once the
    landing ended, its writes failed half-way: a 500 with evaluations stored and no version for them."""
    import threading

    from registry import Registry
    from registry.catalog import landing

    names = client.get("/v1/models").json()
    victim, texts = names[0]["name"], [q["text"] for q in client.get("/v1/queries", params={"limit": 12}).json()["queries"]]
    holding, release = threading.Event(), threading.Event()
    land = landing.land

    def held_land(view, changes, on_commit=None, **kw):
        def held(store, results):  # inside the landing's transaction
            holding.set()
            assert release.wait(60)
            on_commit(store, results)
        return land(view, changes, on_commit=held, **kw)

    monkeypatch.setattr(landing, "land", held_land)
    answers = {}

    def add():
        answers["add"] = client.post("/v1/models", headers=AUTH, json={
            "name": "landed-while-removing", "evaluations": [{"query": t, "score": i % 2} for i, t in enumerate(texts)]})

    def remove():
        answers["remove"] = client.delete(f"/v1/models/{quote(victim, safe='')}", headers=AUTH)

    adding = threading.Thread(target=add)
    adding.start()
    try:
        assert holding.wait(60)
        removing = threading.Thread(target=remove)
        removing.start()
        removing.join(0.5)
        assert removing.is_alive() and "remove" not in answers  # waits for the landing's transaction
    finally:
        release.set()
    adding.join(60)
    removing.join(60)
    assert answers["add"].status_code == 201, answers["add"].text
    assert answers["remove"].status_code == 200, answers["remove"].text
    reg = Registry.open(client.home)
    assert reg.show("landed-while-removing").n_evals == 12 and victim not in {m.name for m in reg.models()}
    assert reg.check().ok


def test_a_write_that_lands_again_stores_the_vectors_its_first_try_encoded(base_home, tmp_path, monkeypatch):
    """A landing that finds the tables moved by another writer lands again from what is there; the texts its
    first try encoded are then in the service's memory, and the retry used to leave their vectors out of the
    store (the queries stored without one: every reader of the store left their evaluations out)."""
    from registry import Registry
    from registry.catalog.landing import land
    from registry.importers._common import text_hash
    from registry.operations import add_change
    from registry.service.settings import ServiceSettings
    from registry.service.state import WarmState

    home = copy_home(base_home, tmp_path / "home")
    state = WarmState(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))
    other = Registry.open(home)  # another process's writer (the CLI beside the service)
    victim = other.models()[0].name
    text_vectors, calls = state.text_vectors, []

    def moved_after_encoding(encoder, wanted, *, bulk=False):
        found = text_vectors(encoder, wanted, bulk=bulk)
        calls.append(len(found[1]))
        if len(calls) == 1:
            other.remove(victim)  # lands between this try's reading and its transaction
        return found

    monkeypatch.setattr(state, "text_vectors", moved_after_encoding)
    fresh = [f"A text no one has stored yet, number {i}?" for i in range(3)]
    stored = [t for t, _ in stored_texts(home)[:9]]
    change = add_change("lands-twice", [(t, i % 2) for i, t in enumerate(fresh + stored)])
    outcome = land(state, [change])[change.id]
    assert calls == [3, 0]  # encoded on the first try, found in memory on the second
    assert outcome.encoded_texts == 3
    encoder = other.store.query_encoder
    assert set(other.store.cached_vectors(encoder, [text_hash(t) for t in fresh])) == {text_hash(t) for t in fresh}
    assert Registry.open(home).check().ok


def test_the_writer_reads_its_job_table_only_under_the_queue_s_lock(monkeypatch, tmp_path):
    """Request threads add jobs while the writer forgets old finished ones: the writer walked the table without
    the lock, and a job added during the walk ("dictionary changed size during iteration") killed the writer
    thread, so every later write waited and answered 202 forever."""
    from registry.service import jobs
    from registry.service.writer import JobSpec

    monkeypatch.setattr(jobs, "land_jobs", lambda state, specs: {s.id: {"name": s.name} for s in specs})
    queue = jobs.JobQueue(types.SimpleNamespace(home=tmp_path, warm=lambda: None, readers_waiting=lambda: False),
                          keep_finished=1)
    unlocked = []

    class Watched(dict):
        def values(self):
            unlocked.append(not queue._cond._is_owned())
            return super().values()

    queue._jobs = Watched(queue._jobs)
    try:
        records = [queue.submit(JobSpec(id=queue.new_id(), kind="add", name=f"m{i}")) for i in range(3)]
        for record in records:
            assert record.event.wait(30) and record.state == "done"
    finally:
        queue.stop()
    assert unlocked and not any(unlocked)
    assert len(queue._jobs) <= 2  # the old finished ones forgotten (readable from their files)


@pytest.mark.parametrize("send, field, says", [
    (dict(content=b"hello", headers={"content-type": "text/plain"}), "body", "valid dictionary"),
    (dict(content=b"null", headers={"content-type": "application/json"}), "body", "valid dictionary"),
    (dict(json=[1, 2]), "body", "valid dictionary"),
    (dict(json={"query": "hi", "queries": ["a"]}), "body", "exactly one of query"),
])
def test_a_body_that_is_wrong_as_a_whole_names_the_body(client, send, field, says):
    r = client.post("/v1/route", **send)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == field and says in error["message"] and error["message"].startswith("body: ")


@pytest.mark.parametrize("metadata, status, field, says", [
    ({"foo": {"a": 1}}, 422, "metadata.foo", "not an object"),  # was metadata.foo.str: a union branch's name
    ({"tags": [1, 2]}, 422, "metadata.tags", "not a list holding a number"),
    ({"fo\u0000o": "x"}, 422, "metadata", "U+0000"),
    ({"family": "ll\nama"}, 422, "metadata", "U+000A"),  # an identifier: printed in tables, grouped by
    ({"provider": "a\u202eb"}, 422, "metadata", "RIGHT-TO-LEFT OVERRIDE"),
    ({"notes": "line one\nline two\tand a tab"}, 201, None, None),  # free text keeps its line breaks
    # lengths: a 200,000-character family was stored and stretched the web map 1.5M px wide
    ({"family": "x" * 201}, 422, "metadata", "the limit for family is 200"),
    ({"tags": ["ok", "t" * 201]}, 422, "metadata", "the limit for tags is 200"),
    ({"notes": "n" * 10_001}, 422, "metadata", "the limit for notes is 10,000"),
    ({"k" * 201: 1}, 422, "metadata", "a metadata key of 201 characters"),
])
def test_metadata_refused_names_its_key_and_what_is_wrong(client, metadata, status, field, says):
    r = client.post("/v1/models", headers=AUTH, json={"name": "meta-probe", "metadata": metadata,
                                                      "evaluations": [{"query": "What is 2 + 2?", "score": 1}]})
    assert r.status_code == status, r.text
    if status == 201:
        assert client.get("/v1/models/meta-probe").json()["record"]["extra"]["notes"] == metadata["notes"]
        return
    error = r.json()["error"]
    assert error["field"] == field and says in error["message"], error
    assert client.get("/v1/models/meta-probe").status_code == 404  # nothing stored


def test_a_line_separator_in_a_name_is_refused_as_a_line_break(client):
    r = client.post("/v1/models", headers=AUTH, json={"name": "two\u2028lines",
                                                      "evaluations": [{"query": "What is 2 + 2?", "score": 1}]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "name", r.text


def test_an_alias_at_an_unknown_model_names_its_target_here_and_through_the_client(client):
    import httpx

    from registry.client import RegistryClient
    from registry.errors import NotFoundError

    r = client.put("/v1/aliases/pointer", headers=AUTH, json={"target": "no-such-model"})
    assert r.status_code == 404 and r.json()["error"]["field"] == "target", r.text
    # the client reading that answer (it dropped the field)
    replay = httpx.MockTransport(lambda request: httpx.Response(r.status_code, json=r.json()))
    reg = RegistryClient("http://registry.test", token=TOKEN, transport=replay)
    with pytest.raises(NotFoundError) as caught:
        reg.set_alias("pointer", "no-such-model")
    assert caught.value.field == "target" and "no-such-model" in str(caught.value)


def test_an_alias_holding_a_slash_is_refused_as_that_alias_not_a_bare_404(client):
    import httpx

    from registry.client import RegistryClient
    from registry.errors import InputError

    r = client.put("/v1/aliases/a%2Fb", headers=AUTH, json={"target": "no-such-model"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "alias", r.text
    assert "'a/b' is not a valid alias" in r.json()["error"]["message"]
    r = client.delete("/v1/aliases/a%2Fb", headers=AUTH)
    assert r.status_code in (404, 422) and r.json()["error"]["field"] == "alias", r.text
    assert all(a["alias"] != "a/b" for a in client.get("/v1/aliases").json())
    # the client sends the name percent-encoded and gets the same refusal
    def through_the_app(request):
        answer = client.request(request.method, request.url.raw_path.decode(), content=request.content,
                                headers=dict(request.headers))
        return httpx.Response(answer.status_code, json=answer.json())

    reg = RegistryClient("http://registry.test", token=TOKEN, transport=httpx.MockTransport(through_the_app))
    with pytest.raises(InputError) as caught:
        reg.set_alias("a/b", "no-such-model")
    assert caught.value.field == "alias"


def test_a_path_no_endpoint_answers_says_so_and_where_the_endpoints_are(client):
    r = client.get("/v1/modles")
    assert r.status_code == 404, r.text
    assert r.json()["error"]["message"] == ("no endpoint GET /v1/modles: the endpoints are listed at /openapi.json "
                                            "(and in the web UI at /api)")
    long = client.get("/v1/" + "x" * 5000).json()["error"]["message"]
    assert long.startswith("no endpoint GET /v1/xxx") and len(long) < 400


def test_a_body_with_a_number_too_long_to_read_says_why(client):
    body = '{"name": "digits", "evaluations": [{"query": "What is 2 + 2?", "score": ' + "1" * 5000 + '}]}'
    r = client.post("/v1/models", headers={**AUTH, "Content-Type": "application/json"}, content=body)
    assert r.status_code == 422 and r.json()["error"]["field"] == "body", r.text
    assert "integer string conversion: value has 5000 digits" in r.json()["error"]["message"], r.text
    assert client.get("/v1/models/digits").status_code == 404


def test_the_client_says_what_is_wrong_with_its_url_its_numbers_and_a_late_answer():
    import httpx

    from registry.client import RegistryClient
    from registry.errors import InputError, RegistryError

    for url in ("http://[::1", "localhost:8000"):
        with pytest.raises(InputError) as caught:
            RegistryClient(url)
        assert caught.value.field == "url" and url in str(caught.value)
    sent = []

    def late(request):
        sent.append(request)
        raise httpx.ReadTimeout("timed out", request=request)

    with RegistryClient("http://registry.test", token=TOKEN, transport=httpx.MockTransport(late)) as reg:
        with pytest.raises(InputError) as caught:
            reg.similar([float("nan")] * 4)
        assert caught.value.field == "body" and "NaN" in str(caught.value) and not sent  # refused before sending
        with pytest.raises(RegistryError, match="did not answer within the client's timeout") as caught:
            reg.show("anything")
        assert "may still land" not in str(caught.value)
        with pytest.raises(RegistryError, match="a write may still land"):
            reg.remove("anything")
