"""Store format migrations on the checked-in format-1 home (tests/fixtures/home-format1, built with the
code of main 06fcc3d by tests/fixtures/build_home_format1.py). Every test works on a copy."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from indexing.store import MODELS, STORE_FORMAT, VERSIONS, Store

FIXTURE = Path(__file__).parent / "fixtures" / "home-format1"


@pytest.fixture
def old_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(FIXTURE, home)
    return home


def _rows(home: Path, table: str) -> list[dict]:
    return sorted(Store(home, create=False).read(table).to_pylist(), key=lambda r: (r["name"], str(r.get("version"))))


def test_the_fixture_is_format_1_and_small():
    assert json.loads((FIXTURE / "config.json").read_text())["format"] == 1
    assert sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file()) < 1_000_000
    assert STORE_FORMAT == 4


def test_a_format_1_home_reads_but_refuses_writes_naming_migrate(old_home):
    from registry import Registry
    from registry.errors import RegistryError

    reg = Registry.open(old_home, create=False)
    names = [m.name for m in reg.models()]
    hits = reg.similar(names[0], k=2)  # no fingerprint column yet: answered by LOCUS
    assert hits.by == "locus" and len(hits.neighbours) == 2
    before = _rows(old_home, MODELS)
    with pytest.raises(RegistryError, match="registry migrate"):
        reg.remove(names[0])
    assert _rows(old_home, MODELS) == before
    assert json.loads((old_home / "config.json").read_text())["format"] == 1


def test_migrate_keeps_the_data_and_fills_fingerprints(old_home):
    from registry import Registry

    models_before, versions_before = _rows(old_home, MODELS), _rows(old_home, VERSIONS)
    evals_before = Store(old_home, create=False).read("evaluations").num_rows
    reg = Registry.open(old_home, create=False)
    report = reg.migrate()
    assert (report.from_format, report.to_format) == (1, 4) and len(report.applied) == 3
    assert json.loads((old_home / "config.json").read_text())["format"] == 4
    models_after, versions_after = _rows(old_home, MODELS), _rows(old_home, VERSIONS)
    # every old column of every row unchanged
    assert [{k: r[k] for k in models_before[0]} for r in models_after] == models_before
    assert [{k: r[k] for k in versions_before[0]} for r in versions_after] == versions_before
    assert Store(old_home, create=False).read("evaluations").num_rows == evals_before
    # the fixture's encoder has an item table: every live model (40 evaluations each) got a fingerprint
    from registry.catalog.fingerprint_store import load_item_table

    table = load_item_table(Store(old_home, create=False))
    assert report.fingerprints == len(models_after) > 0
    assert all(r["table_id"] == table.table_id and len(r["fingerprint"]) == table.rank + 1 for r in models_after)
    assert all(len(r["behaviour"]) == table.behaviour_dim for r in models_after)
    assert all(r["fingerprint"] is None and r["behaviour"] is None for r in versions_after)  # history predates them: nothing invented
    # writes work now, and a likeness search reads the fingerprint index
    name = models_after[0]["name"]
    assert reg.similar(name, k=2).by == "fingerprint"
    reg.remove(models_after[-1]["name"])


def test_migrate_is_idempotent(old_home):
    from registry import Registry

    reg = Registry.open(old_home, create=False)
    reg.migrate()
    rows = _rows(old_home, MODELS)
    again = reg.migrate()
    assert again.applied == [] and again.from_format == again.to_format == 4
    assert _rows(old_home, MODELS) == rows


def test_a_crash_inside_the_migration_leaves_a_usable_format_1_home(old_home, monkeypatch):
    from registry import Registry
    from registry.catalog import fingerprint_store

    before = _rows(old_home, MODELS)

    def crash(*args, **kwargs):
        raise RuntimeError("power cut")

    # the tables are rewritten to the new schema first; the crash comes after, inside the transaction
    monkeypatch.setattr(fingerprint_store, "rewrite_fingerprints", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        Registry.open(old_home, create=False).migrate()
    monkeypatch.undo()
    assert json.loads((old_home / "config.json").read_text())["format"] == 1
    assert "fingerprint" not in Store(old_home, create=False).read(MODELS).schema.names  # rolled back
    assert _rows(old_home, MODELS) == before
    reg = Registry.open(old_home, create=False)
    assert reg.similar(before[0]["name"], k=1).neighbours  # still readable
    assert reg.migrate().to_format == 4  # and the migration runs whole next time


def test_the_cli_migrates_and_write_commands_name_it(old_home):
    from click.testing import CliRunner

    from cli.main import cli

    runner = CliRunner()
    refused = runner.invoke(cli, ["--home", str(old_home), "remove", "syn-synfam0-1b"])
    assert refused.exit_code != 0 and "registry migrate" in refused.output
    done = runner.invoke(cli, ["--home", str(old_home), "migrate", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["to_format"] == 4
    assert runner.invoke(cli, ["--home", str(old_home), "migrate"]).output.strip().endswith("nothing to migrate")


def test_migration_3_logs_every_stored_evaluation_under_its_version(old_home):
    """Format 3's evaluation_log is filled from the evaluations table: one row per stored evaluation,
    each under the version its model had when the row was written; nothing else changes."""
    from registry import Registry
    from registry.catalog.evaluation_log import EVALUATION_LOG

    store = Store(old_home, create=False)
    evals = store.read("evaluations").to_pylist()
    current = {r["name"]: r["version"] for r in store.read(MODELS).to_pylist()}
    Registry.open(old_home, create=False).migrate()
    log = Store(old_home, create=False).read(EVALUATION_LOG).to_pylist()
    assert sorted((r["model"], r["query_id"], r["score"]) for r in log) == \
        sorted((r["model"], r["query_id"], r["score"]) for r in evals)
    # the fixture's models were imported or added once: their rows are logged under that version
    assert {(r["model"], r["version"]) for r in log} == {(m, current[m]) for m in {r["model"] for r in evals}
                                                         if m in current} | \
        {(m, 1) for m in {r["model"] for r in evals} if m not in current}
    assert Registry.open(old_home, create=False).migrate().applied == []  # idempotent: logged once
    assert Store(old_home, create=False).count(EVALUATION_LOG) == len(log)
