"""`compact`: every write leaves a fragment and a version in each table it writes; compaction merges the
fragments and removes old versions without changing a row, keeps the versions a reader may still hold,
and is a transaction like any write. The service's writer runs it once enough writes have landed."""
from __future__ import annotations

import json
import time
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import SMALL_TRAINED
from registry import Registry

WRITES = 8


@pytest.fixture(scope="module")
def written(synthetic_home) -> Path:
    """A small trained home after WRITES add-models, one transaction each (read-only: tests copy it)."""
    home = synthetic_home("compact", **SMALL_TRAINED)
    reg = Registry.open(home)
    ids = [q.id for q in reg.queries().queries]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # thin evidence: these models are small on purpose
        for i in range(WRITES):
            reg.add_model(f"written-{i}", [{"query_id": q, "score": (i + j) % 2} for j, q in enumerate(ids[:30])])
    return home


@pytest.fixture
def home(written, tmp_path) -> Path:
    import shutil

    return shutil.copytree(written, tmp_path / "home")


def _tables(reg) -> dict:
    return {name: reg.store.read(name) for name in reg.store.table_names()}


def test_compaction_merges_fragments_and_drops_old_versions_leaving_every_row(home):
    reg = Registry.open(home)
    rows = _tables(reg)
    storage = {t["table"]: t for t in reg.store.storage()}
    assert storage["evaluations"]["fragments"] > WRITES and storage["models"]["versions"] > WRITES
    neighbours = reg.similar("written-3", k=3).neighbours
    routed = reg.route("Solve for x: 3x + 7 = 100.", k=3).ranking

    report = reg.compact(keep_versions_for=timedelta(0))

    after = Registry.open(home)
    for name, table in rows.items():
        assert after.store.read(name).equals(table), name  # the same rows in the same order
    by_table = {t.table: t for t in report.tables}
    assert set(by_table) == set(rows)
    for name, t in by_table.items():
        assert t.fragments == [storage[name]["fragments"], 1] and t.versions == [storage[name]["versions"], 1]
        assert t.bytes[1] <= t.bytes[0]
    assert by_table["evaluations"].bytes[1] < by_table["evaluations"].bytes[0]
    assert report.keep_versions_for_seconds == 0
    assert after.similar("written-3", k=3).neighbours == neighbours
    assert reg.similar("written-3", k=3).neighbours == neighbours  # the object that compacted, too
    assert after.route("Solve for x: 3x + 7 = 100.", k=3).ranking == routed
    assert after.check().ok
    # and the home takes writes again
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert after.add_model("after-compaction", [{"query_id": q.id, "score": 1} for q in after.queries().queries]
                               ).version == 1


def test_versions_superseded_within_the_window_stay_readable(home):
    import lance

    reg = Registry.open(home)
    path = str(home / "db" / "evaluations.lance")
    held = lance.dataset(path)  # a reader that opened the latest version before the compaction
    before = held.to_table()
    versions = len(held.versions())

    report = reg.compact(keep_versions_for=timedelta(hours=1))

    evaluations = next(t for t in report.tables if t.table == "evaluations")
    assert evaluations.fragments[1] == 1 and evaluations.versions[1] >= versions  # nothing old enough to go
    assert held.to_table().equals(before)  # its files are still there
    assert lance.dataset(path, version=held.version).to_table().equals(before)

    reg.compact(keep_versions_for=timedelta(0))  # removes it: only the latest version is left
    assert len(lance.dataset(path).versions()) == 1
    with pytest.raises(Exception):
        lance.dataset(path, version=held.version)


def test_a_compaction_that_fails_midway_is_rolled_back_to_the_same_rows(home, monkeypatch):
    from lance.dataset import DatasetOptimizer

    reg = Registry.open(home)
    rows = _tables(reg)
    fragments = {t["table"]: t["fragments"] for t in reg.store.storage()}
    compacted = []
    compact_files = DatasetOptimizer.compact_files

    def failing(self, *args, **kwargs):
        if compacted:  # one table compacted, the next one fails
            raise OSError("disk full")
        compacted.append(compact_files(self, *args, **kwargs))
        return compacted[-1]

    monkeypatch.setattr(DatasetOptimizer, "compact_files", failing)
    with pytest.raises(OSError, match="disk full"):
        reg.compact(keep_versions_for=timedelta(0))
    monkeypatch.undo()
    assert compacted and compacted[0].fragments_removed > 1
    after = Registry.open(home)
    for name, table in rows.items():
        assert after.store.read(name).equals(table), name
    # the table compacted before the failure is back at its old version, fragments and all
    assert {t["table"]: t["fragments"] for t in after.store.storage()} == fragments
    from indexing.home import JOURNAL_FILE

    assert not (home / JOURNAL_FILE).exists() and after.check().ok


def test_check_says_when_a_table_is_worth_compacting(home, monkeypatch):
    import registry.defaults

    monkeypatch.setattr(registry.defaults, "FRAGMENTS_TO_COMPACT", WRITES)
    reg = Registry.open(home)
    result = reg.check()
    assert result.ok
    note = next(n for n in result.notes if "fragments" in n)
    assert "evaluations holds" in note and "`registry compact`" in note
    reg.compact(keep_versions_for=timedelta(0))
    assert not any("fragments" in n for n in Registry.open(home).check().notes)


def test_cli_compact_prints_each_table_and_refuses_a_bad_duration(home):
    runner = CliRunner()
    out = runner.invoke(cli, ["--home", str(home), "compact", "--keep-versions-for", "0", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert {t["table"] for t in report["tables"]} >= {"evaluations", "models", "queries"}
    assert all(t["fragments"][1] == 1 and t["versions"][1] == 1 for t in report["tables"])
    out = runner.invoke(cli, ["--home", str(home), "compact", "--keep-versions-for", "30m"])
    assert out.exit_code == 0, out.output
    assert "evaluations" in out.output and "superseded within the last 30m kept" in out.output
    out = runner.invoke(cli, ["--home", str(home), "compact", "--keep-versions-for", "a week"])
    assert out.exit_code == 2 and "--keep-versions-for" in out.output and "not a duration" in out.output


def test_the_services_writer_compacts_once_enough_writes_have_landed(home):
    from registry.service.jobs import JobQueue
    from registry.service.settings import ServiceSettings
    from registry.service.state import WarmState
    from registry.service.writer import JobSpec

    state = WarmState(ServiceSettings(home=home, token="t" * 32, query_backend="fp32"))
    queue = JobQueue(state, compact_every=3)
    ids = [q.id for q in Registry.open(home).queries().queries]
    try:
        for i in range(3):  # one at a time: three batches
            job = queue.submit(JobSpec(id=queue.new_id(), kind="add", name=f"served-{i}",
                                       evaluations=[{"query_id": q, "score": (i + j) % 2} for j, q in enumerate(ids[:70])]))
            assert job.event.wait(120) and job.state == "done", job.error
            if i < 2:
                assert queue.compactions == 0
        deadline = time.monotonic() + 60
        while queue.compactions == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        queue.stop()
    assert queue.compactions == 1
    storage = {t["table"]: t for t in Registry.open(home).store.storage()}
    assert storage["evaluations"]["fragments"] == 1 and storage["models"]["fragments"] == 1
    # the warm state reloaded after it: the last model is served, the first written before it too
    assert [n.name for n in state.similar("served-2", None, k=1, metric=None, where=None).neighbours]
    assert Registry.open(home).show("written-0").n_evals == 30
