"""scripts/report_onboarding.py --development: the onboarding protocol scored on the validation queries,
reading no test score (a criterion can be tried without spending the test queries: a reviewer found the
registry's default criterion chosen on the page's own test output). Synthetic data, two folds."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return load_script("report_onboarding")


def _data(flip_test: bool, seed: int = 0):
    from encoder.data import EvalData, split_queries

    rng = np.random.default_rng(7)
    models, queries, rank = 10, 200, 3
    theta, items = rng.normal(size=(models, rank)), rng.normal(size=(queries, rank))
    p = 1 / (1 + np.exp(-(theta @ items.T + rng.normal(0, 0.5, size=(models, 1)))))
    scores = (rng.random((models, queries)) < p).astype(np.float32)
    if flip_test:  # every test score the other way: a run that reads none gives the same numbers
        test = split_queries(queries, seed=seed).test
        scores[:, test] = 1 - scores[:, test]
    vectors = rng.normal(size=(queries, 16)).astype(np.float32)
    m, q = (a.ravel() for a in np.meshgrid(np.arange(models), np.arange(queries), indexing="ij"))
    return EvalData(models=[f"m{i}" for i in range(models)], query_ids=[f"q{i}" for i in range(queries)],
                    tasks=["a" if i % 2 else "b" for i in range(queries)], query_vectors=vectors / np.linalg.norm(
                        vectors, axis=1, keepdims=True), model_index=m, query_index=q, scores=scores[m, q])


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # its `_datasets`, as when run from scripts/
    module = _script()
    flip = {"test": False}
    monkeypatch.setattr("encoder.data.load_triple_dir", lambda directory, encoder=None: _data(flip["test"]))
    from encoder import fingerprint

    fit = fingerprint.fit_on_data  # a short fit of a small table: the protocol is what is tested, in seconds
    monkeypatch.setattr(fingerprint, "fit_on_data", lambda data, exclude=frozenset(): fit(
        data, exclude=exclude, config=fingerprint.FingerprintConfig(rank=4, steps=60)))
    return module, flip


def _run(module, development):
    return module.run("synthetic", folds=2, draws=1, seed=0, log=lambda m: None, max_held=1, development=development)


def test_development_scores_the_validation_queries_and_reads_no_test_score(script):
    from encoder.data import split_queries

    module, flip = script
    first = _run(module, development=True)
    assert first["scored_on"] == "validation" and first["test_queries"] == len(split_queries(200, seed=0).val)
    flip["test"] = True
    again = _run(module, development=True)
    assert again["curve"] == first["curve"] and again["full_train"] == first["full_train"]
    # the page's run reads them: the same flip moves its numbers
    on_test = _run(module, development=False)
    flip["test"] = False
    assert on_test["scored_on"] == "test" and _run(module, development=False)["curve"] != on_test["curve"]


def test_a_development_run_writes_no_page_unless_told_where(script, tmp_path, monkeypatch, capsys):
    module, _ = script
    monkeypatch.setattr(module, "OUT", tmp_path / "results")
    monkeypatch.setattr(module, "DATASETS", ("synthetic",))
    monkeypatch.setattr("sys.argv", ["report_onboarding.py", "--development", "--folds", "2", "--draws", "1",
                                     "--max-held", "1", "--datasets", "synthetic"])
    module.main()
    assert not (tmp_path / "results").exists() and "synthetic correctness_accuracy" in capsys.readouterr().out
    monkeypatch.setattr("sys.argv", ["report_onboarding.py", "--development", "--folds", "2", "--draws", "1",
                                     "--max-held", "1", "--datasets", "synthetic", "--out", str(tmp_path / "dev")])
    module.main()
    assert "Development run (`--development`)" in (tmp_path / "dev" / "onboarding.md").read_text()
    monkeypatch.setattr("sys.argv", ["report_onboarding.py", "--development", "--out", str(tmp_path / "results")])
    with pytest.raises(SystemExit):  # never over the test run's page
        module.main()
    assert not (tmp_path / "results").exists()
