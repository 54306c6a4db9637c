"""scripts/bench_router.py scores dumped component predictions (`--from-dumps`): the router page's numbers.
On synthetic dumps of two seeds whose test sets overlap: every seed's queries together count each distinct
query once, and a tie at the top is shared, so best single does not depend on the order of the models."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from helpers import load_script

COMPONENTS = ("locus", "item", "knn", "irt_net", "embedllm_mf")


def _script():
    return load_script("bench_router")


def _dump(directory: Path, seed: int, n_queries: int = 100, models: int = 4) -> np.ndarray:
    from encoder.data import split_queries

    split = split_queries(n_queries, seed=seed)
    rng = np.random.default_rng(seed)
    val_truth = (rng.random((models, len(split.val))) < 0.6).astype(np.float64)
    test_truth = (rng.random((models, len(split.test))) < 0.6).astype(np.float64)
    test_truth[:, 3] = np.nan  # a test query no model is scored on: not routed, its id left out
    arrays = {}
    for part, truth in (("val", val_truth), ("test", test_truth)):
        for c in COMPONENTS:  # noisy readings of the truth
            arrays[f"{part}/{c}"] = np.clip(0.5 + 0.3 * (truth - 0.5) + 0.2 * rng.normal(size=truth.shape), 0.01, 0.99)
    # models 0 and 1 tie on training accuracy: best single shares each query between them
    arrays.update(val_truth=val_truth, test_truth=test_truth, train_mean=np.array([0.7, 0.7, 0.5, 0.4]))
    np.savez_compressed(directory / f"bfcl-256-{seed}.npz", **arrays)
    (directory / f"bfcl-256-{seed}.json").write_text(json.dumps(
        {"dataset": "bfcl", "evals_per_model": 256, "seed": seed, "models": models, "n_train_queries": len(split.train),
         "n_val_queries": len(split.val), "n_test_queries": len(split.test)}))
    return np.delete(split.test, 3), np.delete(test_truth, 3, axis=1)


def test_dumps_are_scored_with_shared_ties_and_overlapping_test_sets_counted_once(tmp_path):
    tests = [_dump(tmp_path, seed) for seed in (0, 1)]
    overlap = np.intersect1d(tests[0][0], tests[1][0])
    assert len(overlap) > 0  # the premise: two seeds' test sets share queries
    out = tmp_path / "router.json"
    _script().main(["--from-dumps", str(tmp_path), "--json", str(out), "--markdown", str(tmp_path / "router.md")])
    result = json.loads(out.read_text())
    for run, (_, truth) in zip(sorted(result["runs"], key=lambda r: r["seed"]), tests):
        assert run["routing_accuracy"]["best_single"] == truth[:2].mean()  # models 0 and 1 share every query
    block = result["summary"]["bfcl@256"]
    together = block["paired_pooled"]
    assert together["cells"] == sum(len(t) for t, _ in tests) == 18
    assert together["n"] == len(np.union1d(tests[0][0], tests[1][0])) == 18 - len(overlap)
    for run, (ids, _) in zip(sorted(result["runs"], key=lambda r: r["seed"]), tests):
        assert run["routed_queries"] == ids.tolist()  # the routed queries' own ids, the unscored one left out
    per_seed = block["paired_vs_best"]
    assert together["wins"] + together["losses"] <= sum(p["wins"] + p["losses"] for p in per_seed)
    page = (tmp_path / "router.md").read_text()
    assert "distinct queries (the seeds' test sets overlap" in page and "share a query" in page
    assert f"Paired against {block['best_baseline']} (sign test, test queries): seed 0: " in page
