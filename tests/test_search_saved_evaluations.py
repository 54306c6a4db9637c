"""A fingerprint search from a model name re-ranks by the model's recorded answers: it reads the
evaluations saved beside the index (indexing.model_index.SavedEvaluations) when they are of the store's
current generation, with the same results as reading the store, and without importing LanceDB."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import FINGERPRINT_INDEXED

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def reg(synthetic_home):
    from registry import Registry

    return Registry.open(synthetic_home("saved-evals", **{**FINGERPRINT_INDEXED, "seed": 6}))


def _from_store(monkeypatch):
    """Searches read the store, as before the saved evaluations."""
    from indexing.model_index import SavedEvaluations

    monkeypatch.setattr(SavedEvaluations, "load", classmethod(lambda cls, home: None))
    monkeypatch.setattr(SavedEvaluations, "from_store", classmethod(lambda cls, store: None))


def _dump(result) -> list[dict]:
    return [hit.model_dump() for hit in result.neighbours]


def test_saved_evaluations_give_the_store_results(reg, monkeypatch):
    from indexing.model_index import SavedEvaluations

    names = [m.name for m in reg.models()]
    saved = {n: _dump(reg.similar(n, k=5, min_evals=0)) for n in names}
    assert SavedEvaluations.load(reg.home) is not None  # the first search wrote them
    assert all(hit["shared_queries"] and hit["vector"] == "fingerprint" for hits in saved.values() for hit in hits)
    with monkeypatch.context() as mp:
        _from_store(mp)
        assert {n: _dump(reg.similar(n, k=5, min_evals=0)) for n in names} == saved
    # and the rows read back are the table's, model by model, in table order
    from registry.catalog.rows import read_evaluations

    a, b = SavedEvaluations.load(reg.home).read(names[:3]), read_evaluations(reg.store, names[:3])
    for name in names[:3]:
        assert a[1][a[0] == name].tolist() == b[1][b[0] == name].tolist()
        assert a[2][a[0] == name].tolist() == b[2][b[0] == name].tolist()
    # and so are the tasks each model was evaluated on (what the answer distance covers)
    from registry.analytics.search import _StoreEvaluations

    tasks = SavedEvaluations.load(reg.home).task_sets(names)
    assert tasks == _StoreEvaluations(reg.store).task_sets(names) and all(tasks[n] for n in names)


def test_a_write_makes_them_stale(reg, monkeypatch):
    from indexing.model_index import SavedEvaluations
    from tests.helpers import own_evaluations

    name = sorted(m.name for m in reg.models())[0]
    reg.similar(name, k=3)
    assert SavedEvaluations.load(reg.home) is not None
    reg.add_model("copy-endpoint", own_evaluations(reg, name))
    assert SavedEvaluations.load(reg.home) is None  # another generation: never read
    after = _dump(reg.similar(name, k=3, min_evals=0))
    assert "copy-endpoint" in [hit["name"] for hit in after]
    saved = SavedEvaluations.load(reg.home)
    assert saved is not None and len(saved.read(["copy-endpoint"])[0]) > 0  # written again, with the new model
    assert len(list((reg.home / "index").glob("evaluations-*.npy"))) == 2  # the old generation's removed
    with monkeypatch.context() as mp:
        _from_store(mp)
        assert _dump(reg.similar(name, k=3, min_evals=0)) == after


def test_damaged_files_are_not_read(reg):
    from indexing.model_index import SavedEvaluations

    name = sorted(m.name for m in reg.models())[0]
    expected = _dump(reg.similar(name, k=3))
    codes = next((reg.home / "index").glob("evaluations-*.codes.npy"))
    codes.write_bytes(codes.read_bytes()[:-8])  # cut short
    assert SavedEvaluations.load(reg.home) is None
    assert _dump(reg.similar(name, k=3)) == expected  # read from the store, and saved again
    assert SavedEvaluations.load(reg.home) is not None


def test_search_by_name_imports_no_lance(reg):
    name = sorted(m.name for m in reg.models())[0]
    code = ("import sys, json\nfrom registry import Registry\n"
            "r = Registry.open(sys.argv[1], create=False).similar(sys.argv[2], k=4)\n"
            "print(json.dumps({'heavy': [m for m in ('lance', 'lancedb', 'pyarrow', 'torch') if m in sys.modules],"
            " 'by': r.by, 'names': [h.name for h in r.neighbours]}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", code, str(reg.home), name], capture_output=True, text=True,
                              env=env, cwd=ROOT, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run()  # brings the saved index and evaluations up to date (reads the store)
    second = run()
    assert second == {"heavy": [], "by": "fingerprint", "names": first["names"]}
    assert first["names"] == [h.name for h in reg.similar(name, k=4).neighbours]


def test_evaluations_read_while_a_write_lands_are_not_saved(reg, monkeypatch):
    """Saved under the generation they were read in, they must be of that generation: a write that lands
    while they are read (another process; here one from inside the read) leaves nothing saved."""
    from indexing.model_index import SavedEvaluations
    from indexing.store import Store
    from registry import Registry
    from tests.helpers import own_evaluations

    name = sorted(m.name for m in reg.models())[0]
    rows = own_evaluations(reg, name)
    real_read, landed = Store.read, []

    def read(self, table_name, *args, **kwargs):
        out = real_read(self, table_name, *args, **kwargs)
        if table_name == "evaluations" and not landed:
            landed.append(None)  # first: the write's own reads come back through here
            landed[0] = Registry.open(reg.home).add_model("copy-endpoint", rows).version
        return out

    monkeypatch.setattr(Store, "read", read)
    assert SavedEvaluations.from_store(Store(reg.home, create=False)) is None
    monkeypatch.undo()
    assert landed == [1] and SavedEvaluations.load(reg.home) is None
