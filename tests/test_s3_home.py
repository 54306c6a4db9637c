"""The registry home on S3 (`--home s3://BUCKET/PREFIX`), against moto in server mode on a loopback port
with fake credentials: the tables (LanceDB over S3), everything beside them, the journal and the lease."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the `test` extra")
boto3 = pytest.importorskip("boto3")

from click.testing import CliRunner  # noqa: E402

from cli.main import cli  # noqa: E402
from indexing import object_store  # noqa: E402
from indexing.errors import RegistryError  # noqa: E402
from indexing.home import JOURNAL_FILE, as_path  # noqa: E402
from indexing.store import LOCK_FILE, MODELS, Store  # noqa: E402
from registry import Registry  # noqa: E402
from tests.helpers import own_evaluations, synthetic_registry  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "locus-test"
HOME = f"s3://{BUCKET}/registry"


@pytest.fixture(scope="module")
def s3():
    """moto's S3 on 127.0.0.1 (a free port), the AWS_* variables pointing at it, one bucket."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    patch = pytest.MonkeyPatch()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}.items():
        patch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"):
        patch.delenv(key, raising=False)
    object_store.reset_client()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}")
    client.create_bucket(Bucket=BUCKET)
    yield client
    object_store.reset_client()
    patch.undo()
    server.stop()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """An empty working directory the whole module runs in: nothing may land on local disk."""
    return tmp_path_factory.mktemp("cwd")


@pytest.fixture(scope="module")
def trained(s3, workdir):
    patch = pytest.MonkeyPatch()
    patch.chdir(workdir)
    reg = synthetic_registry(HOME, train_epochs=5, n_families=2, models_per_family=2, queries_per_task=10,
                             tasks=("math", "law"), seed=1)
    yield reg
    patch.undo()


def _keys(s3, prefix="registry/") -> list[str]:
    return [item["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for item in page.get("Contents", [])]


def test_everything_the_home_holds_is_in_the_bucket_and_nothing_on_local_disk(s3, trained, workdir):
    reg = trained
    reg.similar(reg.models()[0].name, k=2)  # saves the fingerprint index beside the tables
    reg.similar(reg.models()[0].name, k=2, by="locus")  # and the LOCUS one
    keys = _keys(s3)
    tops = {k.split("/")[1] for k in keys}
    assert {"config.json", "generation", "db", "encoders", "index"} <= tops
    assert JOURNAL_FILE not in tops and LOCK_FILE not in tops  # no open transaction, no held lease
    active = reg.store.config["active_encoder"]
    for name in ("weights.safetensors", "config.json", "training.json"):
        assert f"registry/encoders/{active}/{name}" in keys
    assert not any(".staging-" in k for k in keys)
    assert any(k.startswith("registry/db/models.lance/") for k in keys)
    assert any(k.endswith(".cosine.faiss") for k in keys) and "registry/index/current.json" in keys
    assert "registry/index/current-fingerprint.json" in keys
    assert list(workdir.iterdir()) == []  # no ./s3: directory, no stray temporary files
    assert not Path("s3:").exists() and not Path(HOME).exists()


def test_search_from_the_saved_index_agrees_with_the_table(s3, trained):
    from indexing.model_index import ModelIndex

    name = trained.models()[0].name
    for by in ("locus", "fingerprint"):
        first = trained.similar(name, k=3, by=by)
        saved = ModelIndex._load_current(as_path(HOME), by)  # what a fresh process searches without LanceDB
        assert saved is not None and saved.by == by
        rebuilt = ModelIndex.open(trained.store, rebuild=True, by=by)
        assert saved.names == rebuilt.names and np.allclose(saved.vectors, rebuilt.vectors)
        again = Registry.open(HOME, create=False).similar(name, k=3, by=by)
        assert [h.name for h in again.neighbours] == [h.name for h in first.neighbours]
        assert not rebuilt.problems(trained.store)


def test_add_model_lands_on_s3_and_a_new_reader_finds_the_copy_first(s3, trained):
    source = trained.models()[0].name
    evals = own_evaluations(trained, source)
    result = trained.add_model("copy-on-s3", evals, {"provider": "someone"})
    assert result.version == 1 and result.encoded_texts == 0  # the query vectors came from the s3 cache
    reader = Registry.open(HOME, create=False)
    hits = reader.similar("copy-on-s3", k=2, by="locus").neighbours
    assert hits[0].name == source and hits[0].distance < 1e-5
    assert JOURNAL_FILE not in {k.split("/")[1] for k in _keys(s3)}
    # behaviour fingerprints: the item table train wrote into the bucket, the column in the models table
    by_behaviour = reader.similar("copy-on-s3", k=2, by="behaviour").neighbours
    assert by_behaviour[0].name == source and by_behaviour[0].behaviour_distance is not None
    active = reader.store.config["active_encoder"]
    keys = _keys(s3)
    assert f"registry/encoders/{active}/item_table.json" in keys
    row = next(r for r in reader.store.read("models").to_pylist() if r["name"] == "copy-on-s3")
    assert row["fingerprint"] is not None and row["table_id"]  # written with the LOCUS vector


def test_read_only_commands_through_the_cli_with_an_s3_home(s3, trained, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    runner = CliRunner()
    stats = runner.invoke(cli, ["--home", HOME, "stats", "--json"])
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.output)["n_models"] == len(trained.models())
    assert "registry/snapshot.json" in _keys(s3)  # the next read-only command answers from it
    monkeypatch.setenv("LOCUS_HOME", HOME)
    listed = runner.invoke(cli, ["models", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert sorted(m["name"] for m in json.loads(listed.output)) == sorted(m.name for m in trained.models())
    name = trained.models()[0].name
    found = runner.invoke(cli, ["search", name, "-k", "2", "--json"])
    assert found.exit_code == 0, found.output
    assert len(json.loads(found.output)["neighbours"]) == 2
    assert list(workdir.iterdir()) == []


def test_a_failed_transaction_rolls_every_table_back_and_releases_the_lease(s3, trained):
    store = Store(HOME, create=False)
    before = store.versions()
    n = store.count(MODELS)
    with pytest.raises(ValueError, match="half-way"):
        with store.transaction():
            store.table(MODELS).delete("true")
            assert store.count(MODELS) == 0
            assert f"registry/{JOURNAL_FILE}" in _keys(s3) and f"registry/{LOCK_FILE}" in _keys(s3)
            raise ValueError("half-way")
    assert store.count(MODELS) == n and set(store.versions()) == set(before)
    keys = _keys(s3)
    assert f"registry/{JOURNAL_FILE}" not in keys and f"registry/{LOCK_FILE}" not in keys


def test_a_live_writer_keeps_others_out_and_they_are_told_who_holds_the_home(s3, trained, monkeypatch):
    monkeypatch.setenv("LOCUS_S3_LOCK_WAIT_SECONDS", "0.5")
    holder = object_store.Lease(as_path(HOME) / LOCK_FILE, as_path(HOME))
    holder.acquire()  # another writer, renewing its lease
    try:
        with pytest.raises(RegistryError, match="locked by another writer") as refused:
            Store(HOME, create=False).update_config(note="x")
        assert holder.holder in str(refused.value)
    finally:
        holder.release()
    store = Store(HOME, create=False)
    store.update_config(note="x")  # free again
    assert store.config["note"] == "x"


def test_a_dead_writers_transaction_is_rolled_back_once_its_lease_lapses(s3, trained, monkeypatch):
    """A writer dies inside a transaction (journal written, a table changed, its lease no longer renewed):
    the next opener waits one lease term, takes the lease over and restores every table."""
    monkeypatch.setenv("LOCUS_S3_LEASE_SECONDS", "1")
    home = as_path(HOME)
    store = Store(HOME, create=False)
    n = store.count(MODELS)
    dead = object_store.Lease(home / LOCK_FILE, home)
    dead.acquire()
    dead._stop.set()  # the process "dies": its lease is never renewed again
    dead._thread.join()
    (home / JOURNAL_FILE).write_text(json.dumps({"versions": store.versions(), "pid": -1}))
    store._in_transaction = True
    store.table(MODELS).delete("true")  # a half-done write
    store._in_transaction = False
    assert Store(HOME, create=False).count(MODELS) == n  # recovered on open, after taking the lease over
    assert not (home / JOURNAL_FILE).is_file() and not (home / LOCK_FILE).is_file()
    with pytest.raises(object_store.LeaseLost):
        dead.check()  # had it woken up, it could not commit


def test_a_missing_bucket_is_a_clear_error(s3):
    with pytest.raises(RegistryError, match="no-such-bucket.*does not exist"):
        Registry.open("s3://no-such-bucket/registry")
    result = CliRunner().invoke(cli, ["--home", "s3://", "stats"])
    assert result.exit_code != 0 and "s3://BUCKET/PREFIX" in result.output


@pytest.mark.parametrize("prefix, says", [("x?y=1", "a '?'"), ("x#frag", "a '#'"), ("a%20b", "a '%'"), ("../up", "'..'"),
                                          ("a//b", "an empty"), ("./x", "'.'"), ("a\tb", "a control character")])
def test_a_prefix_lancedb_would_read_as_another_url_is_refused_before_anything_is_written(s3, prefix, says):
    """LanceDB opens the tables through a URL and the home's other files are keys as written: s3://b/x?a and
    s3://b/x?b shared their tables under two locks, s3://b/../up put its tables under up/."""
    runner = CliRunner()
    before = _keys(s3, "")
    result = runner.invoke(cli, ["--home", f"s3://{BUCKET}/{prefix}", "init", "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.output)["error"]
    assert error["option"] == "--home" and says in error["message"], error
    assert _keys(s3, "") == before  # nothing written anywhere
    ok = runner.invoke(cli, ["--home", f"s3://{BUCKET}/a b/\u00fc", "stats", "--json"])  # spaces and non-ASCII are fine
    assert "an s3 home's prefix" not in ok.output


def test_the_cli_with_a_local_home_does_not_import_boto3():
    code = ("import sys; from click.testing import CliRunner; from cli.main import cli; "
            "r = CliRunner().invoke(cli, ['--help']); print(r.exit_code, 'boto3' in sys.modules, "
            "'pyarrow.fs' in sys.modules, 'indexing.object_store' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.split() == ["0", "False", "False", "False"], out.stderr


def test_the_service_over_an_s3_home_serves_reads_and_lands_a_write(s3, trained, workdir, monkeypatch):
    """The service (in process, FastAPI's TestClient) on the s3 home: its job records live in the bucket,
    its writer takes the lease, and a reader elsewhere sees the write."""
    from fastapi.testclient import TestClient

    from registry.service.app import create_app
    from registry.service.settings import ServiceSettings

    monkeypatch.chdir(workdir)
    name = "syn-synfam1-7b"
    evals = own_evaluations(trained, name)
    with TestClient(create_app(ServiceSettings(home=as_path(HOME), token="t" * 24))) as client:
        near = client.get("/v1/similar", params={"name": name, "k": 2})
        assert near.status_code == 200, near.text
        added = client.post("/v1/models", headers={"Authorization": "Bearer " + "t" * 24},
                            json={"name": "via-service", "evaluations": evals})
        assert added.status_code == 201, added.text
        job = added.headers["x-job-id"]
        # the writer left the load to the first reader (each check is a request here), unless one waits
        state, landed = client.app.state.warm, int(added.headers["x-locus-generation"])
        assert state._snapshot.generation < landed and not state.readers_waiting()
        state._wanted = landed  # what a read that arrived during the next batch would have set
        state.warm()
        assert state._snapshot.generation >= landed and not state.readers_waiting()
        mine = client.get("/v1/similar", params={"name": "via-service", "k": 1}, headers={"X-Locus-Read": str(landed)})
        assert mine.status_code == 200 and int(mine.headers["x-locus-generation"]) >= landed
    assert f"registry/service/jobs/{job}.json" in _keys(s3)
    hits = Registry.open(HOME, create=False).similar("via-service", k=1).neighbours
    assert hits[0].name == name and hits[0].distance < 1e-5
    assert list(workdir.iterdir()) == []


def test_compact_merges_an_s3_homes_tables_and_keeps_every_row(s3, trained):
    from datetime import timedelta

    reader = Registry.open(HOME, create=False)
    rows = {name: reader.store.read(name) for name in reader.store.table_names()}
    report = reader.compact(keep_versions_for=timedelta(0))
    assert {t.table for t in report.tables} == set(rows)
    assert all(t.fragments[1] == 1 and t.versions[1] == 1 and t.bytes == [None, None] for t in report.tables)
    after = Registry.open(HOME, create=False)
    for name, table in rows.items():
        assert after.store.read(name).equals(table), name
    assert after.check().ok and JOURNAL_FILE not in {k.split("/")[1] for k in _keys(s3)}
