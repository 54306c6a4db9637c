"""The library and the service answer alike: every operation run both ways, on two copies of one home.

One copy is driven through `Registry` (the Python API the CLI uses), the other through `registry serve`
and `RegistryClient`; both run `registry.operations` underneath, so the same calls must give the same
results (names, versions, counts, warnings, errors; floats to 1e-5, since the two processes may split
matrix products over different thread counts). Aliases included: an alias names the same model on both.
"""
from __future__ import annotations

import math

import pytest

from registry import InputError, NotFoundError, Registry, RegistryError

from helpers import stored_texts, synthetic_registry
from service_harness import TOKEN, Server, copy_home


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    base = tmp_path_factory.mktemp("parity") / "base"
    synthetic_registry(base, train_epochs=6, n_families=3, models_per_family=2, queries_per_task=24,
                       tasks=("math", "law", "biology"), n_duplicates=1, seed=5)
    first = sorted(r.name for r in Registry.open(base).models())[0]
    Registry.open(base).set_alias("prod", first)
    served = copy_home(base, tmp_path_factory.mktemp("parity-served") / "home")
    local = copy_home(base, tmp_path_factory.mktemp("parity-local") / "home")
    server = Server(served)
    from registry.client import RegistryClient

    client = RegistryClient(server.url, token=TOKEN)
    yield Registry.open(local), client, stored_texts(base), first
    client.close()
    server.stop()


# when each copy wrote (the two homes are written seconds apart), and how many writes each home had seen
_WHEN = {"added", "embedded_at", "time", "generation"}


def _same(a, b, where="result"):
    """Equal, floats to 1e-5 (relative or absolute); timestamps only present on both."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5), f"{where}: {a} != {b}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            if key in _WHEN:
                assert (a[key] is None) == (b[key] is None), f"{where}.{key}: {a[key]!r} vs {b[key]!r}"
            else:
                _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert len(a) == len(b), f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _both(both, call, *, message: bool = True):
    """Run `call(api)` on the library and on the client: equal results, or the same error type (and
    message, unless `message=False`: input the HTTP contract refuses before any operation runs, with
    pydantic's field path)."""
    local, client = both[0], both[1]
    outcomes = []
    for api in (local, client):
        try:
            outcomes.append(("ok", call(api)))
        except RegistryError as err:
            outcomes.append(("error", err))
    (kind_a, a), (kind_b, b) = outcomes
    assert kind_a == kind_b, f"library: {kind_a} {a!r}; service: {kind_b} {b!r}"
    if kind_a == "error":
        assert type(a) is type(b), f"library: {a!r}; service: {b!r}"
        assert not message or str(a) == str(b), f"library: {a}; service: {b}"
        return a
    dump = (lambda r: [x.model_dump(mode="json") for x in r]) if isinstance(a, list) else \
        (lambda r: r.model_dump(mode="json"))
    _same(dump(a), dump(b))
    return a


def test_every_operation_gives_the_same_answer_through_the_library_and_the_service(both):
    local, client, texts, first = both
    evals = [(t, i % 2, task) for i, (t, task) in enumerate(texts[:70])]
    # writes: add (stored texts and a new one), a name clash, refine through an alias
    added = _both(both, lambda api: api.add_model("parity-a", evals + [("A question nobody stored?", 1)],
                                                  {"family": "parity", "params_b": 2}))
    assert added.event == "add" and added.n_evals == 71 and added.encoded_texts == 1
    _both(both, lambda api: api.add_model("parity-a", evals))  # exists: the same error both ways
    more = [(t, 1 - i % 2, task) for i, (t, task) in enumerate(texts[70:80])]
    refined = _both(both, lambda api: api.refine("prod", more))
    assert refined.name == first and refined.event == "refine"
    _both(both, lambda api: api.refine("no-such-model", more))
    _both(both, lambda api: api.add_model("thin-b", evals[:20]))  # the thin-evidence warning both ways

    # reads: search by name, by alias, by vector, both vectors; route with an alias excluded
    for by in (None, "locus", "fingerprint"):
        _both(both, lambda api: api.similar("parity-a", k=4, by=by))
        _both(both, lambda api: api.similar("prod", k=3, by=by, min_evals=0))
    vector = local.store.read("models", ["name", "vector"]).to_pylist()[0]["vector"]
    _both(both, lambda api: api.similar(vector, k=3))
    _both(both, lambda api: api.similar("parity-a", k=3, where="family != parity"))
    queries = [texts[3][0], "Which model answers a question never seen?"]
    decisions = _both(both, lambda api: api.route(queries, k=3, exclude=["prod"], fallback=2))
    assert all(first not in [r.name for r in d.ranking] for d in decisions)
    _both(both, lambda api: api.route(texts[5][0], k=2, by="locus", min_evals=0))
    _both(both, lambda api: api.route(texts[5][0], exclude=["no-such-model"]))
    _both(both, lambda api: api.show("prod"))
    _both(both, lambda api: api.history("prod"))
    _both(both, lambda api: api.list("family == parity"))
    _both(both, lambda api: api.queries())
    _both(both, lambda api: api.compare("prod", "parity-a"))
    _both(both, lambda api: api.portfolio(k=2, random_draws=20, seed=3))
    _both(both, lambda api: api.compare("prod", "parity-a", by="locus"))
    # aliases: set (a pinned version too), list, delete; refusals alike
    _both(both, lambda api: api.set_alias("staging", "parity-a@1"))
    _both(both, lambda api: api.set_alias("latest-a", "parity-a"))
    _both(both, lambda api: api.aliases())
    _both(both, lambda api: api.delete_alias("latest-a"))
    _both(both, lambda api: api.delete_alias("latest-a"))
    _both(both, lambda api: api.set_alias("parity-a", first))  # would hide a model
    _both(both, lambda api: api.set_alias("dangling", "parity-a@9"))
    _both(both, lambda api: api.queries(task=texts[0][1], limit=3, offset=2))
    # families: the same clusters (and the same figures) both ways, whichever vector and cut
    for by in (None, "locus"):
        _both(both, lambda api: api.clusters(by=by))
    _both(both, lambda api: api.clusters(linkage="average", k=3, where="family != parity", min_evals=0))

    # remove and restore through the alias; then the alias points at a model that is not there
    _both(both, lambda api: api.remove("parity-a"))
    _both(both, lambda api: api.similar("parity-a", k=3))
    _both(both, lambda api: api.restore("parity-a", 1))
    _both(both, lambda api: api.remove("prod"))
    with pytest.raises(NotFoundError):
        local.show("prod")
    _both(both, lambda api: api.restore(first))
    _both(both, lambda api: api.show("prod"))


def test_bad_input_is_refused_alike(both):
    _both(both, lambda api: api.add_model("bad", [("a question?", 2.0)]), message=False)
    _both(both, lambda api: api.route("", k=2), message=False)
    _both(both, lambda api: api.route("a question?", k=0), message=False)
    _both(both, lambda api: api.similar("parity-missing", k=2))
    _both(both, lambda api: api.restore("prod", 0), message=False)  # a version is an integer of at least 1
    _both(both, lambda api: api.clusters(linkage="median"), message=False)
    _both(both, lambda api: api.clusters(k=0), message=False)
    _both(both, lambda api: api.clusters(where="colour == red"))  # the filter's own message, both ways
    _both(both, lambda api: api.queries(task="no-such-task"))
    _both(both, lambda api: api.queries(offset=-1), message=False)
    with pytest.raises(InputError, match="version"):
        both[0].restore("prod", True)
    with pytest.raises(InputError):
        both[0].add_model("bad", [("a question?", 2.0)])
    assert "bad" not in {r.name for r in both[0].models()} | {r.name for r in both[1].models()}
