"""Generations: every finished transaction has a number that only grows; the service's answers carry the
generation they read or wrote (X-Locus-Generation), a read may ask for a state at least that new
(`X-Locus-Read: N`; `RegistryClient(read="session")`), and a default read that arrives while a write is
under way waits for the state after it when the loaded one lacks a write that had landed."""
from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from helpers import SMALL_TRAINED, stored_texts
from service_harness import TOKEN, copy_home, held_reload

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def base_home(synthetic_home) -> Path:
    return synthetic_home("read-after", **SMALL_TRAINED)


def test_generation_numbers_only_grow_and_old_tokens_count_as_none(tmp_path):
    from indexing.home import generation, generation_number
    from registry import Registry

    assert generation_number(None) == 0
    assert generation_number("2026-12-06T10:00:00+00:00 123 456") == 0  # a token of before the count
    assert generation_number("17 2026-12-06T10:00:00+00:00 123 456") == 17
    reg = Registry.open(tmp_path / "home")
    first = generation_number(generation(reg.home))
    with reg.store.transaction():
        pass
    with pytest.raises(RuntimeError), reg.store.transaction():  # refused before it wrote: nothing to disown
        raise RuntimeError("rolled back")
    assert generation_number(generation(reg.home)) == first + 1  # (one that wrote counts: tests/test_store.py)


def test_writes_say_the_generation_they_landed_at(base_home, tmp_path):
    """The library's and the CLI's write results carry the home's generation once they landed: a script that
    writes with the CLI reads after it over HTTP with `X-Locus-Read: N`."""
    import json

    from click.testing import CliRunner

    from cli.main import cli
    from indexing.home import generation, generation_number
    from registry import Registry

    home = copy_home(base_home, tmp_path / "home")
    reg = Registry.open(home)
    rows = [(t, i % 2) for i, (t, _) in enumerate(stored_texts(home)[:20])]
    added = reg.add_model("g-one", rows)
    assert added.generation == generation_number(generation(home)) > 0
    removed = reg.remove("g-one")
    assert removed.generation == added.generation + 1
    assert reg.restore("g-one").generation == removed.generation + 1
    printed = CliRunner().invoke(cli, ["--home", str(home), "remove", "g-one", "--json"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output)["generation"] == generation_number(generation(home)) == removed.generation + 2


def _app(home, **limits):
    from registry.service.app import create_app
    from registry.service.settings import Limits, ServiceSettings

    return create_app(ServiceSettings(home=home, token=TOKEN, query_backend="fp32", limits=Limits(**limits)))


def _snapshot_as(state, request):
    """`state.snapshot()` for a request that asked for `request` (what the app's dependency sets)."""
    from registry.service.state import READ

    token = READ.set(request)
    try:
        return state.snapshot()
    finally:
        READ.reset(token)


def _reading(state) -> tuple[threading.Thread, list]:
    """A default read of `state` in a thread of its own, started: the thread, and its answer once it has one."""
    from registry.service.state import ReadRequest

    answers: list = []
    thread = threading.Thread(target=lambda: answers.append(_snapshot_as(state, ReadRequest())))
    thread.start()
    return thread, answers


def test_answers_carry_their_generation_and_a_read_after_it_sees_the_write(base_home, tmp_path):
    from fastapi.testclient import TestClient

    from indexing.home import generation, generation_number
    from registry import Registry

    home = copy_home(base_home, tmp_path / "home")
    app = _app(home)
    texts = [t for t, _ in stored_texts(home)]
    with TestClient(app) as client:
        health = client.get("/v1/health")
        n, seen = health.json()["embedded"], int(health.headers["x-locus-generation"])
        assert seen == generation_number(generation(home))
        added = client.post("/v1/models", headers=AUTH, json={
            "name": "mine", "evaluations": [{"query": t, "score": i % 2} for i, t in enumerate(texts[:20])]})
        assert added.status_code == 201, added.text
        mine = int(added.headers["x-locus-generation"])
        assert mine > seen and added.json()["generation"] == mine
        job = client.get(f"/v1/jobs/{added.headers['x-job-id']}")
        assert int(job.headers["x-locus-generation"]) == mine

        # another client's write; its reload held open: a read after my write answers at once from the
        # loaded state (which holds it), a default read waits for the other write
        other = Registry.open(home)
        other.remove([m for m in other.models() if m.name != "mine"][0].name)
        reloading, release = held_reload(app.state.warm)
        waited = []
        fresh = threading.Thread(target=lambda: waited.append(client.get("/v1/health")))
        fresh.start()
        try:
            assert reloading.wait(120)
            after = client.get("/v1/health", headers={"X-Locus-Read": str(mine)})
            assert after.json()["embedded"] == n + 1 and int(after.headers["x-locus-generation"]) == mine
            route = {"query": texts[0], "k": n + 1, "fallback": 0, "min_evals": 0}
            ranked = client.post("/v1/route", json=route, headers={"X-Locus-Read": str(mine)})
            assert "mine" in [m["name"] for m in ranked.json()["results"][0]["ranking"]]
            assert int(ranked.headers["x-locus-generation"]) == mine
            fresh.join(0.5)
            assert fresh.is_alive() and not waited
            metrics = client.get("/metrics").text  # how far the loaded state is behind the home
            assert f"locus_home_generation {mine + 1}.0" in metrics and f"locus_state_generation {mine}.0" in metrics
        finally:
            release.set()
            fresh.join(120)
        assert waited[0].json()["embedded"] == n and int(waited[0].headers["x-locus-generation"]) == mine + 1
        # a number beyond the home's own asks for no more than the newest state
        beyond = client.get("/v1/health", headers={"X-Locus-Read": str(10**18 - 1)})
        assert beyond.status_code == 200 and int(beyond.headers["x-locus-generation"]) == mine + 1

        for value in ("-1", "soon", "07", str(10**18), "stale"):
            refused = client.get("/v1/health", headers={"X-Locus-Read": value})
            assert refused.status_code == 422 and refused.json()["error"]["field"] == "X-Locus-Read", value
            assert "should match pattern" in refused.json()["error"]["message"]
            assert "x-locus-generation" not in refused.headers
        removed = client.delete("/v1/models/mine", headers=AUTH)  # a write answered at once carries its number
        assert int(removed.headers["x-locus-generation"]) == removed.json()["generation"] == mine + 2


def test_a_default_read_during_a_write_waits_for_a_landed_write_the_loaded_state_lacks(base_home, tmp_path):
    """A write landed, and another began before the service loaded the first: the tables are half-way through
    the second, so the state of before the first answered (a client did not read its own write). Now a default
    read waits for the state after the second; a loaded read still answers at once; past the wait, 503."""
    from registry import Registry
    from registry.service.settings import ServiceSettings
    from registry.service.state import ReadRequest, WarmState

    home = copy_home(base_home, tmp_path / "home")
    state = WarmState(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))
    before = state.snapshot()
    names = list(before.models.index.names)
    writer = Registry.open(home)
    writer.remove(names[0])  # landed: the loaded state lacks it

    opened, finish = threading.Event(), threading.Event()

    def second_write():
        with writer.store.transaction():  # under way (this process: a live writer)
            opened.set()
            assert finish.wait(120)
        writer.remove(names[1])

    thread = threading.Thread(target=second_write)
    thread.start()
    try:
        assert opened.wait(120)
        assert _snapshot_as(state, ReadRequest(loaded=True)) is before
        reader, answers = _reading(state)
        reader.join(0.5)
        assert reader.is_alive() and not answers and state.readers_waiting()
        finish.set()
        reader.join(120)
        thread.join(120)
    finally:
        finish.set()
    assert names[0] not in answers[0].models.index.names
    assert not state.readers_waiting()

    # a write that stays under way past the wait: 503 with Retry-After, never the older state
    from fastapi.testclient import TestClient

    with TestClient(_app(home, max_wait_s=0.3)) as client:
        n = client.get("/v1/health").json()["embedded"]
        writer.remove(names[2])
        with writer.store.transaction():
            behind = client.get("/v1/health")
            assert behind.status_code == 503 and behind.headers["retry-after"] == "1", behind.text
            error = behind.json()["error"]
            assert error["type"] == "StateBehind" and "not loaded within 0.3 s" in error["message"]
            assert client.get("/v1/health", headers={"X-Locus-Read": "loaded"}).json()["embedded"] == n
        assert client.get("/v1/health").json()["embedded"] == n - 1


def test_the_session_client_reads_after_its_newest_answer():
    import asyncio

    from registry.client import AsyncRegistryClient, RegistryClient

    sent, generations = [], iter([])

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("X-Locus-Read"))
        number = next(generations)
        return httpx.Response(200, json={"id": "j1", "state": "done"},
                              headers={"X-Locus-Generation": number} if number else {})

    generations = iter(["3", "7", "5", None])
    with RegistryClient("http://registry.test", read="session", transport=httpx.MockTransport(answer)) as client:
        for _ in range(4):
            client.job("j1")
        assert client.generation == 7
    assert sent == [None, "3", "7", "7"]  # never back in time: 5 came after 7

    async def asynchronously() -> int:
        async with AsyncRegistryClient("http://registry.test", read="session",
                                       transport=httpx.MockTransport(answer)) as client:
            for _ in range(3):
                await client.job("j1")
            return client.generation

    sent.clear()
    generations = iter(["4", None, "2"])
    assert asyncio.run(asynchronously()) == 4 and sent == [None, "4", "4"]
    with RegistryClient("http://registry.test", transport=httpx.MockTransport(answer)) as client:
        generations, sent[:] = iter(["9", "10"]), []
        client.job("j1")
        client.job("j1")
        assert client.generation == 10 and sent == [None, None]  # kept by every client; a session one sends it


def test_the_writer_loads_the_state_a_read_waits_for_before_its_next_batch(base_home, tmp_path, monkeypatch):
    """Batches back to back never leave the writer idle, and it used to load the state only when idle: a read
    that needs batch A's landing, arriving during batch B, is answered once B lands, while C is under way."""
    from registry.catalog import landing
    from registry.service.jobs import JobQueue
    from registry.service.settings import ServiceSettings
    from registry.service.state import WarmState
    from registry.service.writer import JobSpec

    home = copy_home(base_home, tmp_path / "home")
    state = WarmState(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))
    state.snapshot()
    rows = [{"query": t, "score": i % 2} for i, (t, _) in enumerate(stored_texts(home)[:12])]
    submitted, under_way = threading.Event(), {"b": threading.Event(), "c": threading.Event()}
    release = {"b": threading.Event(), "c": threading.Event()}
    land, calls = landing.land, iter("abc")

    def held_land(state_, changes, on_commit=None):
        name = next(calls)  # max_batch=1: one job a batch, in order
        if name == "a":
            assert submitted.wait(120)  # B and C wait behind A: the writer is not idle after it
            return land(state_, changes, on_commit=on_commit)

        def held(store, results):  # inside the batch's transaction
            under_way[name].set()
            assert release[name].wait(120)
            on_commit(store, results)
        return land(state_, changes, on_commit=held)

    monkeypatch.setattr(landing, "land", held_land)
    queue = JobQueue(state, max_batch=1)
    try:
        a = queue.submit(JobSpec(id="ja", kind="add", name="a", evaluations=rows))
        for name in "bc":
            queue.submit(JobSpec(id="j" + name, kind="add", name=name, evaluations=rows))
        submitted.set()
        assert a.event.wait(120) and a.state == "done"
        assert under_way["b"].wait(120)
        reader, answers = _reading(state)
        reader.join(0.5)
        assert reader.is_alive()  # the state of before A is loaded, and B is half-way
        release["b"].set()
        assert under_way["c"].wait(120)
        reader.join(60)
        assert answers and {"a", "b"} <= set(answers[0].models.index.names)  # answered while C is under way
        assert not state.readers_waiting()
        assert "c" not in answers[0].models.index.names
    finally:
        for event in release.values():
            event.set()
        queue.stop()
