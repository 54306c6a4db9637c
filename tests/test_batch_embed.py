"""`registry embed --all --engine ray`: the same vectors as the single process, written through the
registry's transaction; without Ray, a message that says how to install it. One tiny synthetic registry
(6 models, 45 queries); the Ray test starts one local cluster (2 workers) and shuts it down."""
from __future__ import annotations

import builtins
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import SMALL_TRAINED
from indexing.home import GENERATION_FILE
from indexing.store import EVALUATIONS, MODELS, VERSIONS
from registry import Registry
from registry.catalog.embedding import write_embeddings
from registry.errors import RegistryError
from registry.results import EmbedReport

# Ray forks its worker processes after LanceDB is loaded; the workers here only read through pylance.
pytestmark = pytest.mark.filterwarnings("ignore:lance is not fork-safe", "ignore:lancedb fork support")


@pytest.fixture(scope="module")
def tiny(synthetic_home) -> Path:
    return synthetic_home("batch", **SMALL_TRAINED)


def run(home: Path, *args: str, code: int = 0):
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result


def vectors(home: Path) -> dict[str, np.ndarray]:
    rows = Registry.open(home, create=False).store.read(MODELS).to_pylist()
    return {r["name"]: np.asarray(r["vector"], np.float32) for r in rows if r["vector"] is not None}


def test_ray_engine_gives_the_single_process_vectors(tiny):
    pytest.importorskip("ray.data", reason="the ray extra is not installed (pip install 'locus-registry[ray]')")
    reg = Registry.open(tiny, create=False)
    # Two models with evaluations on queries stored without a vector (--no-encode): both engines say so.
    stored = reg.store.read("queries", ["query_id"]).column("query_id").to_pylist()
    unencoded = Path(tiny).parent / "unencoded.jsonl"
    unencoded.write_text("".join(json.dumps(r) + "\n" for r in [
        {"model": "half", "query_id": stored[0], "score": 1},
        {"model": "half", "query": "An unencoded question about bats?", "score": 0},
        {"model": "none", "query": "Another unencoded question, on owls?", "score": 1}]))
    reg.import_path(unencoded, encode=False)
    local = EmbedReport.model_validate_json(run(tiny, "embed", "--all", "--json").stdout)
    expected = vectors(tiny)
    assert local.engine == "local" and len(expected) == 7 and "none" not in expected
    # Spoil the stored vectors so that only a real Ray write can bring them back.
    write_embeddings(reg.store, local.encoder_id, sorted(expected), np.zeros((7, len(next(iter(expected.values())))),
                                                                              np.float32), [1] * 7)
    generation = (tiny / GENERATION_FILE).read_text()
    n_versions = reg.store.count(VERSIONS)

    report = EmbedReport.model_validate_json(
        run(tiny, "embed", "--all", "--engine", "ray", "--workers", "2", "--json").stdout)
    assert (report.engine, report.workers, report.encoder_id) == ("ray", 2, local.encoder_id)
    assert report.seconds > 0 and 0 < report.worker_seconds
    assert report.n_evals == local.n_evals  # every model, from all 30 of its evaluations (half: its 1 encoded)
    [warning] = [w for w in report.warnings if "no all-MiniLM-L6-v2 vector" in w]
    assert warning in local.warnings and "half (1 of 2)" in warning and "none (1 of 1, not embedded)" in warning
    got = vectors(tiny)
    assert sorted(got) == sorted(expected)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)
    # Written through the transaction: a version row per model, and a new generation for the index.
    assert reg.store.count(VERSIONS) == n_versions + 7
    assert (tiny / GENERATION_FILE).read_text() != generation
    nearest = json.loads(run(tiny, "search", sorted(expected)[0], "-k", "2", "--json").stdout)
    assert nearest  # the index rebuilt from the new vectors answers


def test_without_ray_the_command_says_how_to_install_it(home, monkeypatch):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    result = run(home, "embed", "--all", "--engine", "ray", code=2)
    assert "pip install 'locus-registry[ray]'" in result.output
    error = json.loads(run(home, "embed", "--all", "--engine", "ray", "--json", code=2).stdout)["error"]
    assert error["type"] == "RegistryError" and "locus-registry[ray]" in error["message"]


def test_engine_options_are_checked_before_anything_runs(home):
    error = json.loads(run(home, "embed", "--all", "--engine", "ray", "--max-evals", "8", "--json",
                           code=2).stdout)["error"]
    assert error["option"] == "--max-evals" and "all evaluations" in error["message"]
    error = json.loads(run(home, "embed", "--all", "--address", "localhost:6379", "--json", code=2).stdout)["error"]
    assert error["option"] == "--address"
    for engine in ("ray", "local"):  # a 0 is refused whichever engine it would not reach
        error = json.loads(run(home, "embed", "--all", "--engine", engine, "--workers", "0", "--json",
                               code=2).stdout)["error"]
        assert error["option"] == "--workers"


def test_a_ray_address_or_worker_count_ray_cannot_use_is_said_before_ray_starts(tiny):
    """Ray's own answers: a ValueError traceback for a malformed address, minutes of retries for one where
    nothing listens, and 100,000 local actors spun until Ray aborted."""
    import socket

    error = json.loads(run(tiny, "embed", "--all", "--engine", "ray", "--address", "garbage", "--json",
                           code=2).stdout)["error"]
    assert error["option"] == "--address" and "is not a Ray address" in error["message"], error
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        error = json.loads(run(tiny, "embed", "--all", "--engine", "ray", "--address", address, "--json",
                               code=2).stdout)["error"]
        assert f"no Ray cluster answers at {address}" in error["message"], error
    error = json.loads(run(tiny, "embed", "--all", "--engine", "ray", "--workers", "100000", "--json",
                           code=2).stdout)["error"]
    assert error["option"] == "--workers" and "local Ray cluster" in error["message"], error
    import ray

    assert not ray.is_initialized()


def test_a_write_from_stale_evaluations_is_refused_and_stores_nothing(tiny):
    reg = Registry.open(tiny, create=False)
    before = vectors(tiny)
    stale = {EVALUATIONS: reg.store.versions()[EVALUATIONS] - 1}
    with pytest.raises(RegistryError, match="changed while embedding"):
        write_embeddings(reg.store, "x", sorted(before), np.zeros((len(before), 4), np.float32), [1] * len(before),
                         expect_versions=stale)
    after = vectors(tiny)
    assert sorted(after) == sorted(before) and all(np.array_equal(after[n], before[n]) for n in before)
