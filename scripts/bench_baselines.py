"""Baselines on MMLU-Pro's open-weight pool: routing and correctness accuracy on the test queries.

    python scripts/bench_baselines.py [--data ../shared/data/mmlu-pro] [--n 256 512 1024]
                                      [--only knn embedllm-mf ...] [--split-seed 0] [--seed 0]

One query split (80/10/10, --split-seed), N training evaluations per model (a random subset of its
training queries, sampled with --seed), validation queries for tuning, test queries for the table.
Wall time per baseline includes its whole tuning. Torch runs on --threads threads (2 by default).
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np
import torch

from encoder.baselines import BestSingle, EmbedLLMMF, IRTNet, KNNRouter, best_single, evaluate, oracle
from encoder.data import load_triple_dir, sample_per_model, split_queries

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "mmlu-pro"
FACTORIES = {
    "best-single": BestSingle,
    "knn": KNNRouter,
    # the facts file's anchor configuration, untuned
    "knn-k1000-c20": lambda: KNNRouter(k=1000, pseudo_count=20, mode="pooled", tune=False),
    "embedllm-mf": EmbedLLMMF,
    "irt-net": IRTNet,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2")
    parser.add_argument("--n", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--only", nargs="+", choices=list(FACTORIES), default=list(FACTORIES))
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--all-models", action="store_true", help="use the whole pool, not only access == open")
    parser.add_argument("--verbose", action="store_true", help="print each baseline's chosen configuration")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    data = load_triple_dir(args.data, encoder=args.encoder)
    if not args.all_models:
        with open(args.data / "models.csv", encoding="utf-8", newline="") as handle:
            open_names = [row["name"] for row in csv.DictReader(handle) if row["access"] == "open"]
        data = data.select_models(open_names)
    split = split_queries(data.n_queries, seed=args.split_seed)
    print(f"{data.n_models} models, {data.n_queries} queries "
          f"(train {len(split.train)} / val {len(split.val)} / test {len(split.test)}), "
          f"encoder {args.encoder}, split seed {args.split_seed}, sample seed {args.seed}")

    rows = []
    for n in args.n:
        train_evals = sample_per_model(data, split.train, n_per_model=n, seed=args.seed)
        rows.append((n, "best single (metrics)", best_single(data, train_evals, split.test), float("nan"), 0.0))
        rows.append((n, "oracle", oracle(data, split.test), float("nan"), 0.0))
        for name in args.only:
            start = time.perf_counter()
            baseline = FACTORIES[name]().fit(data, train_evals, split.val, seed=args.seed)
            pred = baseline.predict(split.test)
            seconds = time.perf_counter() - start
            scores = evaluate(pred, data, split.test)
            rows.append((n, name, scores["routing"], scores["correctness"], seconds))
            if args.verbose:
                print(f"  N={n} {name}: {baseline.config_}  ({seconds:.1f} s)", file=sys.stderr)

    print()
    print(f"| {'N':>5} | {'method':<22} | {'routing':>7} | {'correct':>7} | {'wall s':>6} |")
    print(f"|{'-' * 7}|{'-' * 24}|{'-' * 9}|{'-' * 9}|{'-' * 8}|")
    for n, name, routing, corr, seconds in rows:
        corr_s = "" if np.isnan(corr) else f"{corr:.3f}"
        print(f"| {n:>5} | {name:<22} | {routing:7.3f} | {corr_s:>7} | {seconds:6.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
