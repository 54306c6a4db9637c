"""`AsyncRegistryClient`: the same operations as `RegistryClient` (one implementation, `_BaseClient`),
awaited; the same answers from one server, the same errors, and many routes in flight at once."""
from __future__ import annotations

import asyncio
import inspect
import json

import pytest

from registry import InputError, NotFoundError, RegistryError
from registry.client import AsyncRegistryClient, RegistryClient

from helpers import stored_texts, synthetic_registry
from service_harness import TOKEN, Server


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    home = tmp_path_factory.mktemp("async-client") / "home"
    synthetic_registry(home, train_epochs=6, n_families=3, models_per_family=2, queries_per_task=24,
                       tasks=("math", "law", "biology"), n_duplicates=1, seed=5)
    server = Server(home)
    yield server, stored_texts(home)
    server.stop()


def _run(coroutine):
    return asyncio.run(coroutine)


def _public(cls) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")}


def test_both_clients_have_the_operations_and_only_the_closing_differs():
    ops = _public(RegistryClient) - {"close"}
    assert ops == _public(AsyncRegistryClient) - {"aclose"}
    assert {"add_model", "refine", "remove", "restore", "route", "similar", "audit", "drift", "profile", "portfolio",
            "clusters", "suggest_queries", "stats", "show", "history"} <= ops
    for name in ops:  # one implementation: the faces add only how a request is sent
        assert getattr(RegistryClient, name) is getattr(AsyncRegistryClient, name), name
    assert inspect.iscoroutinefunction(AsyncRegistryClient._send)
    assert not inspect.iscoroutinefunction(RegistryClient._send)


def test_reads_answer_as_the_blocking_client_does(served):
    server, texts = served
    with RegistryClient(server.url, token=TOKEN) as blocking:
        first = blocking.models()[0].name
        calls = [
            lambda c: c.stats(),
            lambda c: c.show(first),
            lambda c: c.get(first),
            lambda c: c.history(first),
            lambda c: c.list(where="params_b >= 0"),
            lambda c: c.similar(first, k=3),
            lambda c: c.route(texts[0][0], k=2),
            lambda c: c.route([texts[1][0], "What is the capital of Peru?"], k=2, by="locus"),
            lambda c: c.audit(model=first),
            lambda c: c.clusters(),
            lambda c: c.suggest_queries(n=4, from_pool=True),
        ]
        want = [call(blocking) for call in calls]

    async def main():
        async with AsyncRegistryClient(server.url, token=TOKEN) as reg:
            return [await call(reg) for call in calls]

    got = _run(main())
    for a, b in zip(want, got):
        assert type(a) is type(b) and _dump(a) == _dump(b)


def _dump(result):
    """JSON of a result without what differs between two calls: how long each took, and whether the
    audit's calibration was computed or reused from the first."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("seconds", "cached")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip([x.model_dump(mode="json") for x in result] if isinstance(result, list)
                 else result.model_dump(mode="json"))


def test_writes_rows_and_files_and_their_errors(served, tmp_path):
    server, texts = served
    evals = tmp_path / "evals.csv"
    evals.write_text("query,score\n" + "".join(f'"{t}",{i % 2}\n' for i, (t, _) in enumerate(texts[:30])))
    more = tmp_path / "more.jsonl"
    more.write_text("".join(f'{{"query": {json.dumps(t)}, "score": 1}}\n' for t, _ in texts[30:50]))

    async def main():
        async with AsyncRegistryClient(server.url, token=TOKEN) as reg:
            added = await reg.add_model("async-rows", [(t, i % 2) for i, (t, _) in enumerate(texts[:70])],
                                        {"provider": "me"})
            with pytest.warns(UserWarning, match="fewer than the documented minimum") as said:
                uploaded = await reg.add_model("async-file", evals)
                refined = await reg.refine("async-file", more)
                again = await reg.refine("async-file", more)  # nothing new: no new version
            assert {w.filename for w in said} == {__file__}  # the line that awaited, as a library's warning
            removed = await reg.remove("async-rows")
            restored = await reg.restore("async-rows")
            return added, uploaded, refined, again, removed, restored, await reg.show("async-rows")

    added, uploaded, refined, again, removed, restored, shown = _run(main())
    assert (added.name, added.version, added.n_evals) == ("async-rows", 1, 70)
    assert (uploaded.version, uploaded.n_evals) == (1, 30) and uploaded.low_evidence  # 30 < the minimum
    assert (refined.version, refined.n_evals) == (2, 50) and (again.version, again.event) == (2, "unchanged")
    assert removed.name == restored.name == "async-rows"
    assert shown.record.provider == "me"


def test_the_blocking_client_warns_at_the_caller_line_too(served, tmp_path):
    server, texts = served
    with RegistryClient(server.url, token=TOKEN) as reg, pytest.warns(UserWarning, match="documented minimum") as said:
        reg.add_model("blocking-thin", [(t, 1) for t, _ in texts[:10]])
    assert [w.filename for w in said] == [__file__]


def test_errors_are_the_registry_own(served, tmp_path):
    server, texts = served
    with RegistryClient(server.url, token=TOKEN) as blocking:
        for call in (lambda: blocking.add_model("x", tmp_path / "missing.csv"),
                     lambda: blocking.refine("x", tmp_path / "missing.csv")):
            with pytest.raises(InputError, match="no such file") as missing:
                call()
            assert missing.value.file == str(tmp_path / "missing.csv")

    async def main():
        async with AsyncRegistryClient(server.url, token=TOKEN) as reg:
            with pytest.raises(NotFoundError, match="nobody-here"):
                await reg.show("nobody-here")
            with pytest.raises(InputError) as refused:
                await reg.route(texts[0][0], k=0)
            assert refused.value.field == "k"
            with pytest.raises(InputError):  # refused by the client itself, before a request
                reg.suggest_queries(n=0)
        async with AsyncRegistryClient(server.url, token="") as anonymous:
            with pytest.raises(RegistryError, match="token"):
                await anonymous.remove("async-anything")
        async with AsyncRegistryClient("http://127.0.0.1:9", timeout=5) as nowhere:
            with pytest.raises(RegistryError, match="cannot reach"):
                await nowhere.stats()

    _run(main())


def test_many_routes_in_flight_at_once(served):
    server, texts = served
    questions = [t for t, _ in texts[:16]]
    with RegistryClient(server.url) as blocking:
        want = [d.ranking[0].name for d in blocking.route(questions, k=1)]

    async def main():
        async with AsyncRegistryClient(server.url) as reg:
            return await asyncio.gather(*(reg.route(q, k=1) for q in questions))

    assert [d.ranking[0].name for d in _run(main())] == want
