"""Concurrent writers and a writer killed mid add-model, with real processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from registry import Registry
from helpers import SMALL_TRAINED

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained_home(synthetic_home) -> Path:
    return synthetic_home("reliability", **SMALL_TRAINED)


def _evals_file(reg: Registry, model: str, path: Path) -> Path:
    texts = {r["query_id"]: r["text"] for r in reg.store.read("queries").to_pylist()}
    rows = [{"query": texts[r["query_id"]], "score": r["score"]}
            for r in reg.store.read("evaluations").to_pylist() if r["model"] == model]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _child(code: str, env_extra: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_adding_different_models_both_land(trained_home, tmp_path):
    import shutil

    home = tmp_path / "home"
    shutil.copytree(trained_home, home)
    reg = Registry.open(home)
    files = [_evals_file(reg, m, tmp_path / f"{m}.jsonl") for m in ("syn-synfam0-1b", "syn-synfam1-7b")]
    children = [_child(f"""
        from registry import Registry
        Registry.open({str(home)!r}).add_model("endpoint-{i}", {str(f)!r}, {{"provider": "p{i}"}})
    """) for i, f in enumerate(files)]
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    names = {r.name for r in Registry.open(home).models()}
    assert {"endpoint-0", "endpoint-1"} <= names
    assert Registry.open(home).check().problems == []


def test_a_process_killed_inside_add_model_loses_nothing(trained_home, tmp_path):
    import shutil

    home = tmp_path / "home"
    shutil.copytree(trained_home, home)
    reg = Registry.open(home)
    before_models = {r.name for r in reg.models()}
    before_stats = reg.stats()
    neighbours = reg.similar("syn-synfam0-1b", k=3)
    evals = _evals_file(reg, "syn-synfam1-1b", tmp_path / "e.jsonl")
    token = (home / "generation").read_text()
    marker = tmp_path / "inside"
    # The child pauses after the transaction has written evaluations (before the model row): the
    # worst moment to die. The parent kills it there with SIGKILL.
    child = _child(f"""
        import time, pathlib
        import registry.catalog.landing as landing
        real = landing.fingerprint_columns
        def pause(*args, **kwargs):
            pathlib.Path({str(marker)!r}).write_text("x")
            time.sleep(120)
            return real(*args, **kwargs)
        landing.fingerprint_columns = pause
        from registry import Registry
        Registry.open({str(home)!r}).add_model("doomed", {str(evals)!r})
    """)
    deadline = time.time() + 120
    while not marker.exists():
        assert child.poll() is None, child.communicate()[1]
        assert time.time() < deadline
        time.sleep(0.1)
    assert (home / "journal.json").exists()  # it died inside a transaction
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    after = Registry.open(home)  # opening recovers the dead writer's journal
    assert not (home / "journal.json").exists()
    # and gives the store a new generation: a cache read while the dead writer's rows were there is stale
    assert (home / "generation").read_text() != token
    assert {r.name for r in after.models()} == before_models
    assert after.stats() == before_stats
    assert after.check().problems == []
    assert after.similar("syn-synfam0-1b", k=3) == neighbours
    after.add_model("doomed", evals)  # and the registry takes writes again
    assert "doomed" in {r.name for r in after.models()}


def test_an_index_read_while_another_process_writes_is_never_saved_for_the_newer_version(
        trained_home, tmp_path, monkeypatch):
    """A reader builds the index from the models table's rows: a write landing between those rows and the
    table's version (another process; here a refine from inside the read) must not leave an index saved
    under the newer version with the older vectors, which every later open would trust."""
    import shutil

    from indexing.model_index import ModelIndex
    from indexing.store import Store

    home = tmp_path / "home"
    shutil.copytree(trained_home, home)
    reg = Registry.open(home)
    name = reg.models()[0].name
    table = reg.store.read_in("evaluations", ["query_id", "score"], "model", [name])
    flipped = [{"query_id": q, "score": 1 - s} for q, s in zip(table.column("query_id").to_pylist()[:20],
                                                               table.column("score").to_pylist()[:20])]
    reader = Store(home, create=False)
    real_read, landed = Store.read, []

    def read(self, table_name, *args, **kwargs):
        rows = real_read(self, table_name, *args, **kwargs)
        if self is reader and table_name == "models" and not landed:
            landed.append(Registry.open(home).refine(name, flipped).version)
        return rows

    monkeypatch.setattr(Store, "read", read)
    ModelIndex.open(reader, rebuild=False)
    monkeypatch.undo()
    assert landed == [2]
    fresh = Store(home, create=False)
    assert ModelIndex.open(fresh).problems(fresh) == []
    assert Registry.open(home).check().problems == []
