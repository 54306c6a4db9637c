"""Multi-process training (`registry train --nproc N`, TrainConfig.nproc): two gloo processes reach the
single process's quality on the same data and seed, the checkpoint loads and embeds, too many
processes are refused naming --nproc, and a failing or dying worker is an error, not a hang."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from encoder.data import EvalData, sample_per_model, split_queries
from encoder.metrics import correctness_accuracy
from encoder.inference import embed_models, predict
from encoder.training import TrainingError, train_locus
from registry import Registry
from registry.errors import InputError
from test_locus_training import TINY, fast, synthetic


@pytest.fixture(scope="module")
def problem():
    data = synthetic()
    split = split_queries(data.n_queries, seed=0)
    return data, split, sample_per_model(data, split.train, n_per_model=150, seed=0)


def _quality(result, data, split, train_evals) -> float:
    """Correctness accuracy of P(correct) >= 0.5 on the validation queries (the majority label is
    0.68 of them: this pool's accuracy stays near it, so the test compares the runs, not the label rate)."""
    pred = predict(result.locus, embed_models(result.locus, data, train_evals), data.query_vectors[split.val])
    return correctness_accuracy(pred, data.dense()[:, split.val])


def test_two_processes_reach_the_single_process_quality(problem):
    data, split, train_evals = problem
    config = fast(epochs=30, patience=1000, threads=2)
    one = train_locus(data, train_evals, split.val, config=config, locus_config=TINY, seed=0)
    seen = []
    two = train_locus(data, train_evals, split.val, config=fast(epochs=30, patience=1000, threads=2, nproc=2),
                      locus_config=TINY, seed=0, progress=seen.append)
    assert two.train_config.nproc == 2 and not two.locus.training
    assert [p.epoch for p in seen] == [10, 20, 30]  # rank 0's validations reach the parent's callback
    assert len(two.history) == len(one.history) == 30 and two.stopped == one.stopped == "epochs"
    # Both learnt: the validation loss is clearly under chance's (the base rate everywhere), and
    # P(correct) ranks right answers above wrong ones.
    for run in (one, two):
        assert run.best.loss < run.best.chance_loss - 0.03 and run.best.auc > 0.65, run.best
    # ...and equally well: a step of two processes is the one-process step on the same batch, up to
    # the noise and dropout draws and float order.
    assert abs(two.best.loss - one.best.loss) < 0.03 and abs(two.best.auc - one.best.auc) < 0.05, (one.best, two.best)
    assert abs(_quality(two, data, split, train_evals) - _quality(one, data, split, train_evals)) < 0.05
    assert abs(two.history[-1]["loss"] - one.history[-1]["loss"]) < 0.05


def test_too_many_processes_are_refused(problem):
    data, split, train_evals = problem
    with pytest.raises(ValueError, match="nproc=3 is more than the 2 models of one training step"):
        train_locus(data, train_evals, split.val, config=fast(nproc=3, models_per_batch=2), locus_config=TINY)


def test_an_exception_in_a_worker_is_a_training_error(problem):
    data, split, train_evals = problem
    # float64 query vectors against float32 weights: every worker fails at its first step
    wide = EvalData(**{**data.__dict__, "query_vectors": data.query_vectors.astype(np.float64)})
    started = time.monotonic()
    with pytest.raises(TrainingError, match=r"(?s)training process \d of 2 failed:.*Traceback.*dtype"):
        train_locus(wide, train_evals, split.val, config=fast(epochs=5, nproc=2), locus_config=TINY)
    assert time.monotonic() - started < 60
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("training-")]


def test_a_worker_that_dies_is_an_error_not_a_hang(problem):
    data, split, train_evals = problem

    def kill_a_worker(progress) -> None:  # at rank 0's first validation, rank 1 is killed
        (victim,) = [p for p in multiprocessing.active_children() if p.name == "training-1"]
        os.kill(victim.pid, signal.SIGKILL)

    started = time.monotonic()
    with pytest.raises(TrainingError, match=f"training process 1 of 2 exited with code -{int(signal.SIGKILL)}"):
        train_locus(data, train_evals, split.val, config=fast(epochs=10_000, patience=10_000, nproc=2),
                    locus_config=TINY, progress=kill_a_worker)
    assert time.monotonic() - started < 60
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("training-")]


def test_workers_end_when_their_parent_is_killed(tmp_path):
    """SIGKILL leaves the parent no time to end its workers: one trained on for over 10 minutes, holding
    the caller's pipes open."""
    import subprocess
    import sys

    pids = tmp_path / "pids"
    script = f"""
import multiprocessing, sys
sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[1])!r}]
from encoder.data import sample_per_model, split_queries
from encoder.training import train_locus
from test_locus_training import TINY, fast, synthetic

def report(progress):  # the workers are up: say who they are, once
    with open({str(pids)!r}, "a") as out:
        out.write(" ".join(str(p.pid) for p in multiprocessing.active_children() if p.name.startswith("training-")) + "\\n")

if __name__ == "__main__":
    data = synthetic()
    split = split_queries(data.n_queries, seed=0)
    train_locus(data, sample_per_model(data, split.train, n_per_model=150, seed=0), split.val,
                config=fast(epochs=100_000, patience=100_000, nproc=2), locus_config=TINY, progress=report)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (pids.is_file() and pids.read_text().strip()) and time.monotonic() < deadline:
            assert parent.poll() is None, "the training script ended early"
            time.sleep(0.2)
        workers = [int(p) for p in pids.read_text().split("\n")[0].split()]
        assert len(workers) == 2
    finally:
        parent.kill()
        parent.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        status = Path(f"/proc/{pid}/stat")  # a zombie (exited, not yet reaped by init) is gone too
        return not (status.is_file() and status.read_text().split(")")[-1].split()[0] == "Z")

    deadline = time.monotonic() + 30
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [w for w in workers if alive(w)]


def run(home, *args):
    return CliRunner().invoke(cli, ["--home", str(home), *args])


def test_cli_trains_with_two_processes_and_the_checkpoint_embeds(pool_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(pool_home, home)
    result = run(home, "train", "--nproc", "2", "--epochs", "12", "--no-time-limit", "--evals-per-model", "60",
                 "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["epochs_run"] == 12 and report["best_epoch"] >= 1 and report["val_loss"] < report["val_chance_loss"]
    directory = Path(report["checkpoint"])
    assert json.loads((directory / "training.json").read_text())["train_config"]["nproc"] == 2
    assert Registry.open(home).store.config["active_encoder"] == report["encoder_id"]
    embedded = run(home, "embed", "--all", "--json")
    assert embedded.exit_code == 0, embedded.output
    assert json.loads(embedded.stdout)["n_embedded"] == 10
    rows = Registry.open(home).store.read("models").to_pylist()
    assert all(r["encoder_id"] == report["encoder_id"] and np.isfinite(r["vector"]).all() for r in rows)


def test_cli_refuses_more_processes_than_models(pool_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(pool_home, home)
    result = run(home, "train", "--nproc", "11", "--epochs", "2", "--json")
    assert result.exit_code == 2  # the option's value refused: a usage error
    error = json.loads(result.output)["error"]
    assert error["option"] == "--nproc" and "11 training processes for 10 models" in error["message"]
    assert "active_encoder" not in Registry.open(home).store.config  # nothing trained, nothing stored
    zero = run(home, "train", "--nproc", "0")
    assert zero.exit_code == 2 and "--nproc" in zero.output
    with pytest.raises(InputError, match="nproc must be an integer of at least 1"):
        Registry.open(home).train(nproc=0)
