"""Real data end to end: MMLU-Pro from ../shared (skipped with a message where it is absent)."""
from __future__ import annotations

import csv
import json

import numpy as np
from click.testing import CliRunner

from cli.main import cli
from helpers import mmlu_pro_slice


def _run(*args):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout if "--json" in map(str, args) else result.output  # JSON on stdout, warnings on stderr


def test_mmlu_pro_slice_imports_end_to_end(mmlu_pro, tmp_path):
    home = str(tmp_path / "home")
    data = tmp_path / "slice"
    n_evals = mmlu_pro_slice(mmlu_pro, data, 400)
    args = ["--home", home, "import", str(data), "--encoder", "all-MiniLM-L6-v2",
            "--query-embeddings", str(data / "v.npy"), "--query-ids", str(data / "i.npy"), "--json"]
    report = json.loads(_run(*args))
    assert report["new_evaluations"] == n_evals and report["encoded_texts"] == 0
    stats = json.loads(_run("--home", home, "stats", "--json"))
    assert stats["n_models"] == 32 and stats["n_queries"] == 400 and stats["n_evaluations"] == n_evals
    models = {m["name"]: m for m in json.loads(_run("--home", home, "models", "list", "--json"))}
    assert models["Llama-3-8B"]["family"] == "llama3" and models["Llama-3-8B"]["access"] == "open"
    assert models["Llama-3-8B"]["extra"]["source_key"]  # extra columns of models.csv kept as metadata
    assert "accuracy" not in models["Llama-3-8B"]["extra"]  # but not one named like the registry's own column
    assert any("column(s) accuracy not kept as metadata" in w for w in report["warnings"])
    assert json.loads(_run(*args))["unchanged_evaluations"] == n_evals


def test_full_mmlu_pro_import_matches_the_dataset_and_is_idempotent(mmlu_pro, tmp_path):
    home = str(tmp_path / "home")
    emb = mmlu_pro / "query_embeddings"
    args = ["--home", home, "import", str(mmlu_pro), "--query-embeddings", str(emb / "all-mpnet-base-v2.npy"),
            "--query-ids", str(emb / "all-mpnet-base-v2_ids.npy"), "--encoder", "all-mpnet-base-v2"]
    _run(*args)
    stats = json.loads(_run("--home", home, "stats", "--json"))
    assert (stats["n_models"], stats["n_queries"], stats["n_evaluations"]) == (32, 12032, 383274)
    _run(*args)
    assert json.loads(_run("--home", home, "stats", "--json")) == stats


def test_audit_evidence_on_mmlu_pro_clears_every_distinct_pair_and_keeps_copies(mmlu_pro):
    """The audit's evidence stage on the real results, without an encoder, every pair a candidate:
    no two distinct MMLU-Pro models are flagged at all (neither duplicate nor same product line?),
    while a copy of Mistral-7B-v0.1 with 5% of its answers re-sampled on half the queries, and a
    copy that shares no query with it, are flagged as duplicates."""
    from registry.analytics.audit_stats import PoolEvals, _sigmoid, calibrate, evidence, holm_level, label

    with open(mmlu_pro / "models.csv", encoding="utf-8") as f:
        names = {row["model_id"]: row["name"] for row in csv.DictReader(f)}
    with open(mmlu_pro / "queries.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    q_index = {row["query_id"]: i for i, row in enumerate(rows)}
    _, task = np.unique([row["task"] for row in rows], return_inverse=True)
    order = sorted(names, key=int)
    m_index = {m: i for i, m in enumerate(order)}
    scores = np.full((len(order), len(rows)), np.nan)
    with open(mmlu_pro / "evals.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            scores[m_index[row["model_id"]], q_index[row["query_id"]]] = float(row["score"])
    labels = [names[m] for m in order]
    pool = PoolEvals.from_dense(labels, scores, task)
    cal = calibrate(pool)
    pairs = [(a, b) for a in range(len(labels)) for b in range(a + 1, len(labels))]
    decided = {(a, b): evidence(cal, labels[a], *pool.rows[a], labels[b], *pool.rows[b], max_noise=0.12)
               for a, b in pairs}
    level = holm_level([d.p_excess for d in decided.values()], 0.01)
    flagged = [(labels[a], labels[b]) for (a, b), d in decided.items()
               if label(cal, d, labels[a], labels[b], level=level, alpha=0.01, max_noise=0.12).label != "cleared"]
    assert flagged == []  # all 496 distinct pairs, the Llama-3 / 3.1 and Mistral v0.1 / v0.2 pairs among them

    mistral = labels.index("Mistral-7B-v0.1")
    idx, y = pool.rows[mistral]
    rng = np.random.default_rng(0)
    p = _sigmoid(cal.theta[mistral][task[idx]] - cal.beta[idx])
    change = y * (1 - p) + (1 - y) * p
    noisy = np.where(rng.random(len(y)) < 0.05 * len(y) / change.sum() * change, 1 - y, y)
    half = np.sort(rng.permutation(len(idx))[: len(idx) // 2])
    copy = evidence(cal, "copy", idx[half], noisy[half], labels[mistral], idx, y, max_noise=0.12)
    label(cal, copy, "copy", labels[mistral], level=holm_level([copy.p_excess], 0.01), alpha=0.01, max_noise=0.12)
    assert copy.label == "duplicate" and 0.03 < copy.stats.disagreement < 0.07 and copy.stats.kappa > 0.5
    other = np.setdiff1d(np.arange(len(idx)), half)
    apart = evidence(cal, "copy", idx[half], noisy[half], labels[mistral], idx[other], y[other], max_noise=0.12,
                     calibrated_rows={labels[mistral]: (idx, y)})
    label(cal, apart, "copy", labels[mistral], level=0.0, alpha=0.01, max_noise=0.12)
    assert apart.stats.shared == 0 and apart.label == "duplicate" and apart.stats.homogeneity_p > 0.01
