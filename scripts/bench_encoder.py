"""Speed of the LOCUS encoder: a benchmark that prints tables, not a timed test.

    .venv/bin/python scripts/bench_encoder.py [--skip-train] [--skip-evaluate]

1. Models embedded per second at 128 and 1024 evaluations per model, batch 1 and 64 (MMLU-Pro query
   vectors, all-mpnet-base-v2, 768-d; weights at their initialisation: speed does not depend on them).
   Query projections are computed once per distinct query and gathered for every model.
2. Training wall time and peak memory (max RSS of a fresh process) on MMLU-Pro's open pool at 1024
   training evaluations per model.
3. Wall time of the whole `registry evaluate` protocol (LOCUS + three baselines) at 1024 evaluations
   per model on the open pool; the target is 15 minutes on a 2-core machine.
Reads ../shared/data/mmlu-pro in place; exits with a message when it is absent.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlu-pro"
sys.path.insert(0, str(ROOT))


def _open_pool(encoder: str):
    import csv

    from encoder.data import load_triple_dir

    data = load_triple_dir(DATA, encoder=encoder)
    with open(DATA / "models.csv", encoding="utf-8") as handle:
        open_names = [row["name"] for row in csv.DictReader(handle) if row["access"] == "open"]
    return data.select_models(open_names)


def embedding_speed() -> None:
    import torch

    from encoder.data import load_triple_dir
    from encoder.locus import Locus, LocusConfig
    from encoder.data import evals_by_model
    from encoder.inference import embed_models

    torch.set_num_threads(2)
    data = load_triple_dir(DATA, encoder="all-mpnet-base-v2")
    locus = Locus(LocusConfig(query_dim=data.query_vectors.shape[1])).eval()
    rng = np.random.default_rng(0)
    own = evals_by_model(data, np.arange(len(data.scores)))
    print("| evals per model | batch | models | seconds | models / s |")
    print("|---:|---:|---:|---:|---:|")
    for n in (128, 1024):
        # 64 evaluation sets: two random samples of n from each of the 32 real models.
        sets = [np.sort(rng.choice(own[m % data.n_models], size=n, replace=False)) for m in range(64)]
        for batch in (1, 64):
            embed_models(locus, data, sets[: data.n_models], batch_size=batch)  # warm-up
            started = time.perf_counter()
            repeats = 0
            while True:
                for first in (0, data.n_models):
                    embed_models(locus, data, sets[first : first + data.n_models], batch_size=batch)
                repeats += 1
                if time.perf_counter() - started > 3.0:
                    break
            seconds = time.perf_counter() - started
            count = repeats * 64
            print(f"| {n} | {batch} | {count} | {seconds:.2f} | {count / seconds:.1f} |")


def _train_child() -> None:
    """Run in a fresh process so that max RSS is training's own."""
    import torch

    from encoder.data import sample_per_model, split_queries
    from encoder.training import train_locus

    torch.set_num_threads(2)
    data = _open_pool("all-mpnet-base-v2")
    split = split_queries(data.n_queries, seed=0)
    train = sample_per_model(data, split.train, n_per_model=1024, seed=0)
    started = time.perf_counter()
    result = train_locus(data, train, split.val, seed=0)
    seconds = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_rss_mib": peak_mib, "best_epoch": result.best_epoch,
                      "epochs_run": len(result.history), "val_routing": result.best_val_routing}))


def training_cost() -> None:
    out = subprocess.run([sys.executable, __file__, "--train-child"], capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    print("| what | value |")
    print("|---|---:|")
    print(f"| training wall time, open pool, N = 1024 (s) | {row['seconds']:.1f} |")
    print(f"| peak memory, max RSS of the process (MiB) | {row['peak_rss_mib']:.0f} |")
    print(f"| epochs run / best epoch | {row['epochs_run']} / {row['best_epoch']} |")


def evaluate_cost() -> None:
    from registry.lab.evaluation import run_evaluation

    data = _open_pool("all-mpnet-base-v2")
    started = time.perf_counter()
    result = run_evaluation(data, evals_per_model=1024, seed=0)
    total = time.perf_counter() - started
    print("| part | seconds |")
    print("|---|---:|")
    for name, seconds in result["seconds"].items():
        print(f"| {name} | {seconds:.1f} |")
    print(f"| whole evaluate protocol | {total:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-evaluate", action="store_true")
    args = parser.parse_args()
    if not (DATA / "evals.csv").is_file():
        sys.exit(f"MMLU-Pro not found at {DATA}: this benchmark reads ../shared/data/mmlu-pro")
    if args.train_child:
        _train_child()
        return
    print(f"# LOCUS encoder speed ({os.cpu_count()} CPUs, torch threads 2)\n")
    embedding_speed()
    if not args.skip_train:
        print()
        training_cost()
    if not args.skip_evaluate:
        print()
        evaluate_cost()


if __name__ == "__main__":
    main()
