"""Reads after a write: by default a read waits for the service to load the state a write landed (each client
reads its own writes); with `X-Locus-Read: loaded` (`RegistryClient(read="loaded")`) it is answered from the
state already loaded while the reload goes on in a thread of its own."""
from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from helpers import SMALL_TRAINED, stored_texts
from registry.errors import InputError
from service_harness import TOKEN, copy_home, held_reload


@pytest.fixture(scope="module")
def base_home(synthetic_home) -> Path:
    return synthetic_home("read-loaded", **SMALL_TRAINED)


def test_a_read_that_takes_the_loaded_state_never_waits_for_a_reload(base_home, tmp_path):
    from fastapi.testclient import TestClient

    from registry import Registry
    from registry.service.app import create_app
    from registry.service.settings import ServiceSettings

    home = copy_home(base_home, tmp_path / "home")
    app = create_app(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))
    state = app.state.warm
    loaded = {"X-Locus-Read": "loaded"}
    text = stored_texts(home)[0][0]
    with TestClient(app) as client:
        n = client.get("/v1/health").json()["embedded"]
        route = {"query": text, "k": n, "fallback": 0, "min_evals": 0}
        ranked = [m["name"] for m in client.post("/v1/route", json=route).json()["results"][0]["ranking"]]
        victim = ranked[0]
        Registry.open(home).remove(victim)  # a write from another process: the loaded state is one behind now
        reloading, release = held_reload(state)
        waited = []
        fresh = threading.Thread(target=lambda: waited.append(client.get("/v1/health").json()["embedded"]))
        fresh.start()
        try:
            assert reloading.wait(120)
            # while the reload is under way, a read that takes the loaded state answers from it, at once: on
            # the thread pool (health) and on the event loop (a route of a text in memory)
            assert client.get("/v1/health", headers=loaded).json()["embedded"] == n
            stale = client.post("/v1/route", json=route, headers=loaded).json()["results"][0]["ranking"]
            assert victim in [m["name"] for m in stale]
            fresh.join(0.5)
            assert fresh.is_alive() and not waited  # the default read waits for the state the write landed
        finally:
            release.set()
            fresh.join(120)
        assert waited == [n - 1]
        after = client.post("/v1/route", json=route, headers=loaded).json()["results"][0]["ranking"]
        assert victim not in [m["name"] for m in after]  # loaded now: every read sees the write
        refused = client.get("/v1/health", headers={"X-Locus-Read": "stale"})
        assert refused.status_code == 422 and "X-Locus-Read" in refused.text


def test_a_stale_loaded_state_is_reloaded_in_the_background(base_home, tmp_path):
    """No reader waits, yet the service catches up: the first read that takes the loaded state starts the
    reload, and a later one sees the write."""
    from registry import Registry
    from registry.service.settings import ServiceSettings
    from registry.service.state import READ, ReadRequest, WarmState

    home = copy_home(base_home, tmp_path / "home")
    state = WarmState(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))
    before = state.snapshot()
    victim = before.models.index.names[0]
    Registry.open(home).remove(victim)
    token = READ.set(ReadRequest(loaded=True))
    try:
        assert state.snapshot() is before  # answered at once from what is loaded
        state._behind.join(120)  # the reload it started
        assert victim not in state.snapshot().models.index.names
    finally:
        READ.reset(token)


def test_the_client_sends_the_read_mode_and_checks_it():
    from registry.client import RegistryClient

    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("X-Locus-Read"))
        return httpx.Response(200, json={"id": "j1", "state": "done"})

    for read, header in (("loaded", "loaded"), ("fresh", None)):
        with RegistryClient("http://registry.test", read=read, transport=httpx.MockTransport(answer)) as client:
            client.job("j1")
        assert seen.pop() == header
    with pytest.raises(InputError, match="read must be one of fresh, session, loaded, not 'stale'") as refused:
        RegistryClient("http://registry.test", read="stale")
    assert refused.value.field == "read"
