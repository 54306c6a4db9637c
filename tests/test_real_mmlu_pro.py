"""Real data end to end: MMLU-Pro from ../shared (skipped with a message where it is absent)."""
from __future__ import annotations

import csv
import json

import numpy as np
from click.testing import CliRunner

from cli.main import cli


def _run(*args):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _slice(mmlu_pro, out, n_queries):
    """The first n queries of MMLU-Pro, all models, with their rows of the precomputed vectors."""
    out.mkdir()
    with open(mmlu_pro / "queries.csv", encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        rows = [row for _, row in zip(range(n_queries), reader)]
        with open(out / "queries.csv", "w", encoding="utf-8", newline="") as g:
            writer = csv.DictWriter(g, reader.fieldnames)
            writer.writeheader()
            writer.writerows(rows)
    keep = {row["query_id"] for row in rows}
    (out / "models.csv").write_bytes((mmlu_pro / "models.csv").read_bytes())
    with open(mmlu_pro / "evals.csv", encoding="utf-8") as f, open(out / "evals.csv", "w", encoding="utf-8") as g:
        g.write(f.readline())
        n_evals = 0
        for line in f:
            if line.split(",")[1] in keep:
                g.write(line)
                n_evals += 1
    ids = np.load(mmlu_pro / "query_embeddings" / "all-MiniLM-L6-v2_ids.npy")
    vectors = np.load(mmlu_pro / "query_embeddings" / "all-MiniLM-L6-v2.npy")
    chosen = np.isin(ids.astype(str), list(keep))
    np.save(out / "v.npy", vectors[chosen])
    np.save(out / "i.npy", ids[chosen])
    return n_evals


def test_mmlu_pro_slice_imports_end_to_end(mmlu_pro, tmp_path):
    home = str(tmp_path / "home")
    data = tmp_path / "slice"
    n_evals = _slice(mmlu_pro, data, 400)
    args = ["--home", home, "import", str(data), "--encoder", "all-MiniLM-L6-v2",
            "--query-embeddings", str(data / "v.npy"), "--query-ids", str(data / "i.npy"), "--json"]
    report = json.loads(_run(*args))
    assert report["new_evaluations"] == n_evals and report["encoded_texts"] == 0
    stats = json.loads(_run("--home", home, "stats", "--json"))
    assert stats["n_models"] == 32 and stats["n_queries"] == 400 and stats["n_evaluations"] == n_evals
    models = {m["name"]: m for m in json.loads(_run("--home", home, "models", "list", "--json"))}
    assert models["Llama-3-8B"]["family"] == "llama3" and models["Llama-3-8B"]["access"] == "open"
    assert models["Llama-3-8B"]["extra"]["source_key"]  # extra columns of models.csv kept as metadata
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
    """The audit's second stage on the real results, without an encoder: no two distinct MMLU-Pro
    models pass as one model, while a copy (same answers on shared queries) and a disjoint-half copy
    of Mistral-7B-v0.1 do."""
    from registry.audit import _Pool, evidence

    with open(mmlu_pro / "models.csv", encoding="utf-8") as f:
        names = {row["model_id"]: row["name"] for row in csv.DictReader(f)}
    with open(mmlu_pro / "queries.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    q_index = {row["query_id"]: i for i, row in enumerate(rows)}
    _, task = np.unique([row["task"] for row in rows], return_inverse=True)
    order = sorted(names, key=int)
    m_index = {m: i for i, m in enumerate(order)}
    scores = np.full((len(order) + 2, len(rows)), np.nan)
    with open(mmlu_pro / "evals.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            scores[m_index[row["model_id"]], q_index[row["query_id"]]] = float(row["score"])
    mistral = [names[m] for m in order].index("Mistral-7B-v0.1")
    answered = np.flatnonzero(~np.isnan(scores[mistral]))
    half = np.random.default_rng(0).permutation(answered)[: len(answered) // 2]
    copy, disjoint = len(order), len(order) + 1
    scores[copy, half] = scores[mistral, half]  # a second endpoint, same answers on half the queries
    scores[disjoint] = scores[mistral]
    scores[disjoint, half] = np.nan  # the other half only: no query shared with `copy`
    pool = _Pool.from_dense(scores, task)

    kept = [(a, b) for a in range(len(order)) for b in range(a + 1, len(order))
            if not evidence(pool, a, b, tolerance=0.10, alpha=0.01)["cleared"]]
    assert kept == []  # all 496 distinct pairs are told apart by their answers
    assert not evidence(pool, mistral, copy, tolerance=0.10, alpha=0.01)["cleared"]
    apart = evidence(pool, copy, disjoint, tolerance=0.10, alpha=0.01)
    assert apart["shared_queries"] == 0 and not apart["cleared"] and apart["homogeneity_p"] > 0.01
