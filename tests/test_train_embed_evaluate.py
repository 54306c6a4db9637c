"""`registry train`, `embed --all` and `evaluate` end to end on a small synthetic pool, and their refusals."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from registry import Registry

FAST = ["--epochs", "12", "--no-time-limit"]  # a time cap would make results depend on the load


@pytest.fixture
def home(pool_home, tmp_path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(pool_home, copy)
    return copy


def run(home, *args, ok=True):
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_train_then_embed_writes_vectors_with_the_encoder_id(home):
    report = json.loads(run(home, "train", *FAST, "--evals-per-model", "60", "--json").output)
    encoder_dir = home / "encoders" / report["encoder_id"]
    assert (encoder_dir / "weights.safetensors").is_file() and (encoder_dir / "config.json").is_file()
    assert not list(encoder_dir.glob("*.pt")) and not list(encoder_dir.glob("*.pkl"))
    assert Registry.open(home).store.config["active_encoder"] == report["encoder_id"]

    summary = json.loads(run(home, "embed", "--all", "--json").stdout)
    assert summary["n_embedded"] == 10 and summary["encoder_id"] == report["encoder_id"]
    rows = Registry.open(home).store.read("models").to_pylist()
    d = json.loads((encoder_dir / "config.json").read_text())["config"]["d"]
    assert all(r["encoder_id"] == report["encoder_id"] and len(r["vector"]) == d for r in rows)
    assert {r["n_evals"] for r in rows} == {100}  # every model has 4 x 25 evaluations, all used
    # Embedding is a forward pass: doing it again gives the same vectors.
    run(home, "embed", "--all")
    again = {r["name"]: r["vector"] for r in Registry.open(home).store.read("models").to_pylist()}
    for r in rows:
        np.testing.assert_allclose(again[r["name"]], r["vector"], atol=1e-6)


def test_same_seed_same_data_gives_the_same_checkpoint(home, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(home, other)
    first = json.loads(run(home, "train", *FAST, "--seed", "3", "--json").output)["encoder_id"]
    second = json.loads(run(other, "train", *FAST, "--seed", "3", "--json").output)["encoder_id"]
    assert first == second


def test_evaluate_reports_every_method(home, monkeypatch):
    # What is checked is the report (every method, the split, the bounds), not LOCUS's quality: its
    # encoder trains for 20 epochs, not the default schedule (early stopping after >= 100 epochs, often
    # hundreds more). The command still goes CLI -> Registry.evaluate -> run_evaluation.
    import registry.lab.evaluation as evaluation
    from encoder.training import TrainConfig

    real = evaluation.run_evaluation
    short = TrainConfig(epochs=20, min_epochs=0, max_seconds=None)
    monkeypatch.setattr(evaluation, "run_evaluation", lambda data, **kw: real(data, **{**kw, "train_config": short}))
    out = run(home, "evaluate", "--pool", "access == open", "--evals-per-model", "60", "--holdout-models", "2",
              "--onboard-evals", "16,60", "--json").output
    result = json.loads(out)
    assert len(result["pool"]) == 10 and len(result["held_out"]) == 2
    blended = {"registry", "item", "locus+item", "locus+item (logistic)", "baselines blended"}
    assert set(result["routing_accuracy"]) == {"locus", "embedllm_mf", "irt_net", "knn", "best_single", "oracle", *blended}
    assert set(result["correctness_accuracy"]) == {"locus", "embedllm_mf", "irt_net", "knn", *blended}
    assert set(result["blend"]["registry"]["weights"]) == {"locus", "item", "knn"}  # what `route` blends
    # and the kNN it blends, as router_blend.json records it: the kNN baseline's tuned settings
    from encoder.knn import KNNRouter

    settings = result["blend"]["registry"]["settings"]["knn"]
    assert set(settings) == {"mode", "k", "pseudo_count"} and KNNRouter(tune=False, **settings).settings == settings
    assert set(result["blend"]["locus+item"]["weights"]) == {"locus", "item"}
    assert set(result["blend"]["baselines blended"]["weights"]) == {"knn", "irt_net", "embedllm_mf"}
    assert result["n_test_queries"] == 10
    oracle = result["routing_accuracy"]["oracle"]
    assert all(0.0 <= v <= oracle + 1e-9 for v in result["routing_accuracy"].values())
    assert set(result["onboarding"]) == {"16", "60"}
    assert result["locus_stopped"] == "epochs"  # the short schedule was the one used


def test_train_needs_enough_models(home):
    before = Registry.open(home).stats()
    result = run(home, "train", *FAST, "--models", "name == syn-synfam0-1b", ok=False)
    assert result.exit_code == 2 and "at least 3 models" in result.output
    assert Registry.open(home).stats() == before and not (home / "encoders").exists()


def test_embed_without_an_active_encoder_is_refused(home):
    result = run(home, "embed", "--all", ok=False)
    assert result.exit_code == 2 and "no active encoder" in result.output


@pytest.mark.parametrize("pool, message", [
    ("family == nothing", "matches no model"),
    ("colour == red", "unknown field 'colour'"),
])
def test_evaluate_refuses_an_empty_pool_or_unknown_field(home, pool, message):
    result = run(home, "evaluate", "--pool", pool, ok=False)
    assert result.exit_code == 2 and message in result.output  # the option's value refused: a usage error


def test_a_tampered_checkpoint_is_refused_and_nothing_changes(home):
    encoder_id = json.loads(run(home, "train", *FAST, "--json").output)["encoder_id"]
    config = home / "encoders" / encoder_id / "config.json"
    meta = json.loads(config.read_text())
    meta["config"]["d"] *= 2  # no longer the width the weights were trained with
    config.write_text(json.dumps(meta))
    before = Registry.open(home).store.versions()
    result = run(home, "embed", "--all", ok=False)
    assert result.exit_code == 2 and "weights do not match" in result.output, result.output
    assert Registry.open(home).store.versions() == before


def test_evaluate_refuses_a_bad_onboard_list(home):
    result = run(home, "evaluate", "--holdout-models", "2", "--onboard-evals", "16,lots", ok=False)
    assert result.exit_code == 2 and "--onboard-evals" in result.output and "'16,lots'" in result.output


def test_train_prints_progress_to_stderr_and_records_why_it_stopped(home):
    result = run(home, "train", "--epochs", "20", "--no-time-limit", "--evals-per-model", "60")
    assert "epoch 10/20  train loss" in result.stderr and "val loss" in result.stderr
    assert "epoch" not in result.stdout.split("trained encoder")[0]  # progress never goes to stdout
    assert "stopped after 20 epochs (epochs)" in result.stdout and "chance" in result.stdout
    checkpoint = result.stdout.split("checkpoint: ")[1].split(" (now")[0]
    info = json.loads((Path(checkpoint) / "training.json").read_text())
    assert info["train_config"]["epochs"] == 20 and info["stopped"] == "epochs" and info["epochs_run"] == 20
    assert info["validation"]["loss"] > 0 and isinstance(info["warnings"], list)


def test_train_refuses_bad_options(home):
    result = run(home, "train", "--patience", "0", ok=False)
    assert result.exit_code == 2 and "--patience" in result.output
    result = run(home, "train", "--select", "accuracy", ok=False)
    assert result.exit_code == 2 and "--select" in result.output


def test_a_collapsed_encoder_is_reported(tmp_path):
    """Scores independent of model and query: the CLI must say the encoder learnt nothing."""
    from helpers import write_triple

    rng = np.random.default_rng(0)
    queries = [(f"q{i}", ("math", "law")[i % 2], f"Question number {i} about topic {i % 7}?") for i in range(80)]
    models = [(str(m), f"coin-{m}", f"fam{m % 2}", "7", "open") for m in range(6)]
    evals = [(m[0], q[0], int(rng.random() < 0.5)) for m in models for q in queries]
    home = tmp_path / "home"
    reg = Registry.open(home)
    reg.set_query_encoder("all-MiniLM-L6-v2")
    reg.import_path(write_triple(tmp_path / "coins", queries=queries, models=models, evals=evals))
    result = run(home, "train", "--epochs", "20", "--no-time-limit")
    assert "warning: validation loss" in result.stderr and "at chance" in result.stderr, result.output
    active = Registry.open(home).store.config["active_encoder"]
    info = json.loads((home / "encoders" / active / "training.json").read_text())
    assert any("at chance" in w for w in info["warnings"])


def test_a_checkpoint_from_the_old_trainer_still_loads(home):
    """Homes written before TrainConfig have `settings` (with ema, select_window) in training.json."""
    report = json.loads(run(home, "train", *FAST, "--json").output)
    info_path = Path(report["checkpoint"]) / "training.json"
    info = json.loads(info_path.read_text())
    info.pop("train_config")
    info["settings"] = {"epochs": 4000, "patience": 1000, "ema": None, "select_window": 1, "noise": [0.1, 0.1]}
    info_path.write_text(json.dumps(info))
    assert json.loads(run(home, "embed", "--all", "--json").stdout)["n_embedded"] == 10
