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
    assert stats["models"] == 32 and stats["queries"] == 400 and stats["evaluations"] == n_evals
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
    assert (stats["models"], stats["queries"], stats["evaluations"]) == (32, 12032, 383274)
    _run(*args)
    assert json.loads(_run("--home", home, "stats", "--json")) == stats
