"""Multi-process training (`registry train --nproc N`) against one process on a real-data pool.

    .venv/bin/python scripts/bench_train_nproc.py [--queries 2000] [--max-seconds 120] [--runs 1:2,1:1,2:2]
                                                  [--epochs N]  # e.g. --epochs 200 --max-seconds 0: equal epochs

The pool: every model of ../shared/data/mmlu-pro (32) on a seeded random slice of --queries questions,
MiniLM query vectors, read in place. Each run trains as `registry train` does (seed-0 80/10/10 query
split, up to 1024 training evaluations per model, TrainConfig's defaults) with a wall-clock cap of --max-seconds, from the same
seed; --runs lists nproc:threads pairs, threads being TrainConfig.threads, the torch threads of all
processes together (2: `registry train`'s default; each of 2 processes then gets 1). Prints a
markdown table: wall time (process start-up included), epochs run, seconds per epoch, best epoch and
why training stopped, the selected weights' validation loss (and chance's), validation AUC, and
correctness accuracy (P(correct) >= 0.5 against the label) on the validation and test queries.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MMLU_PRO = ROOT.parent / "shared" / "data" / "mmlu-pro"
ENCODER = "all-MiniLM-L6-v2"


def pool(n_queries: int, seed: int = 0):
    """All models of MMLU-Pro on a seeded random slice of its questions (query indices renumbered)."""
    from encoder.data import EvalData, load_triple_dir

    data = load_triple_dir(MMLU_PRO, encoder=ENCODER)
    queries = np.sort(np.random.default_rng(seed).choice(data.n_queries, size=min(n_queries, data.n_queries),
                                                         replace=False))
    new_index = np.full(data.n_queries, -1, dtype=np.int64)
    new_index[queries] = np.arange(len(queries))
    keep = new_index[data.query_index] >= 0
    return EvalData(models=data.models, query_ids=[data.query_ids[q] for q in queries],
                    tasks=[data.tasks[q] for q in queries], query_vectors=data.query_vectors[queries],
                    model_index=data.model_index[keep], query_index=new_index[data.query_index[keep]],
                    scores=data.scores[keep])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--max-seconds", type=float, default=120.0, help="wall-clock cap per run; 0: none")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default TrainConfig's 4000)")
    parser.add_argument("--runs", default="1:2,1:1,2:2", help="comma-separated nproc:threads pairs")
    args = parser.parse_args()
    if not (MMLU_PRO / "evals.csv").is_file():
        sys.exit(f"skipped: MMLU-Pro not found at {MMLU_PRO} (../shared/data/mmlu-pro beside the project)")

    import torch

    from encoder.data import sample_per_model, split_queries
    from encoder.metrics import correctness_accuracy
    from encoder.inference import embed_models, predict
    from encoder.training import TrainConfig, train_locus

    data = pool(args.queries)
    split = split_queries(data.n_queries, seed=0)
    train = sample_per_model(data, split.train, n_per_model=1024, seed=0)
    truth = data.dense()
    print(f"pool: MMLU-Pro, {data.n_models} models x {data.n_queries} questions ({len(data.scores)} evaluations; "
          f"{len(train)} training evaluations, {len(split.val)} validation / {len(split.test)} test questions); "
          f"{torch.get_num_threads()} cores visible to torch", flush=True)
    rows = []
    for run in args.runs.split(","):
        nproc, threads = (int(n) for n in run.split(":"))
        config = dataclasses.replace(TrainConfig(), max_seconds=args.max_seconds or None, nproc=nproc, threads=threads,
                                     epochs=args.epochs or TrainConfig().epochs)
        started = time.perf_counter()
        result = train_locus(data, train, split.val, config=config, seed=0)
        seconds = time.perf_counter() - started
        z = embed_models(result.locus, data, train)
        accuracy = {}
        for name, queries in (("val", split.val), ("test", split.test)):
            accuracy[name] = correctness_accuracy(predict(result.locus, z, data.query_vectors[queries]),
                                                  truth[:, queries])
        epochs = len(result.history)
        best = result.best
        rows.append(f"| {nproc} | {threads} | {seconds:.0f} | {epochs} | {seconds / epochs:.3f} | {result.best_epoch} | "
                    f"{result.stopped} | {best.loss:.4f} ({best.chance_loss:.4f}) | {best.auc:.3f} | "
                    f"{accuracy['val']:.4f} | {accuracy['test']:.4f} |")
        print(f"nproc {nproc}, {threads} threads: done in {seconds:.0f} s", file=sys.stderr, flush=True)
    majority = float(np.nanmean(truth[:, split.test] >= 0.5))
    print(f"\nmajority label on the test questions: {max(majority, 1 - majority):.4f}\n")
    print("| nproc | threads (all processes) | wall s | epochs | s / epoch | best epoch | stopped | best val loss (chance) | val AUC "
          "| correctness acc. val | correctness acc. test |")
    print("|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
