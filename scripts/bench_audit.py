"""Precision and recall of the duplicate audit on synthetic pools with planted duplicates.

    .venv/bin/python scripts/bench_audit.py [--seeds 0,1,2] [--queries-per-task 20,50,100] [--disjoint]

For each seed and evaluation count: a synthetic pool (4 families x 3 models, 6 tasks, 3 planted
duplicate endpoints whose answers differ from the original's by 5% noise, each model scored on a
random 80% of the queries, so endpoints share only some queries) is imported into a fresh registry;
the encoder is trained on the pool without the planted copies (as in practice: the registry's encoder
predates the suspicious endpoint), every model is embedded, and `audit` runs at its default threshold.
A flag is a true positive when it pairs a model with its planted copy. Also counted: candidates (pairs
within the self-spread threshold before the evidence stage) and how many true copies were among them.

--disjoint: every model is scored on a random half of the queries and each planted copy loses every
query its original answered, so a copy and its original share no query: only the embeddings and the
task x difficulty test can tell them apart (the hard case of "evaluated on different query sets").
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(seed: int, per_task: int, disjoint: bool = False) -> dict:
    from encoder.training import TrainConfig
    from registry import Registry
    from registry.synthetic import synthetic_pool

    pool = synthetic_pool(seed=seed, queries_per_task=per_task, n_duplicates=3, coverage=0.5 if disjoint else 0.8)
    truth = {frozenset(p) for p in pool.duplicates}
    if disjoint:
        answered = {}
        for e in pool.evaluations:
            answered.setdefault(e.model, set()).add(e.query)
        copy_of = {copy: original for original, copy in pool.duplicates}
        pool.evaluations = [e for e in pool.evaluations
                            if e.model not in copy_of or e.query not in answered[copy_of[e.model]]]
    with tempfile.TemporaryDirectory() as scratch:
        reg = Registry.open(Path(scratch) / "home")
        reg.set_query_encoder("all-MiniLM-L6-v2")
        reg.import_path(pool.write_triple(Path(scratch) / "data"))
        reg.train(models="provider != reseller", config=TrainConfig(epochs=400))
        reg.embed_all()
        result = reg.audit()
    flagged = {frozenset((f["a"], f["b"])) for f in result["flags"]}
    candidates = flagged | {frozenset((f["a"], f["b"])) for f in result["cleared"]}
    hits = len(flagged & truth)
    return {"flags": len(flagged), "true": hits, "candidates": len(candidates),
            "true_candidates": len(candidates & truth), "precision": hits / len(flagged) if flagged else float("nan"),
            "recall": hits / len(truth), "threshold": result["threshold"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--queries-per-task", default="20,50,100")
    parser.add_argument("--disjoint", action="store_true", help="Copies share no query with their originals.")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    print("| queries per task (x6 tasks) | seed | candidates (true) | flags | true flags | precision | "
          "recall | threshold |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = []
    for per_task in (int(q) for q in args.queries_per_task.split(",")):
        rows = []
        for seed in seeds:
            r = one(seed, per_task, args.disjoint)
            rows.append(r)
            print(f"| {per_task} | {seed} | {r['candidates']} ({r['true_candidates']}) | {r['flags']} | {r['true']} | {r['precision']:.2f} | {r['recall']:.2f} | "
                  f"{r['threshold']:.4f} |", flush=True)
        summary.append((per_task, np.nanmean([r["precision"] for r in rows]), np.mean([r["recall"] for r in rows])))
    print("\n| queries per task | mean precision | mean recall |")
    print("|---:|---:|---:|")
    for per_task, precision, recall in summary:
        print(f"| {per_task} | {precision:.2f} | {recall:.2f} |")


if __name__ == "__main__":
    main()
