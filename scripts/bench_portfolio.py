"""The answers portfolio's greedy at pool scale: the lazy greedy of `registry.analytics.portfolio` against
the plain one it replaced (every column's gain recomputed at every step). Prints one table.

    .venv/bin/python scripts/bench_portfolio.py [--queries 12032] [--models 1000,10000] [--k 10]

The answers are synthetic: each model answers each query correctly with its own ability (uniform 0.2-0.9)
plus a per-query difficulty shift, 0/1 scores, as the registry holds MMLU-Pro's (12,032 queries). Time is
wall time on this machine, the matrix laid out as `PortfolioSpace` holds it (the transpose of a
(models, queries) array: a model's answers contiguous); memory is tracemalloc's peak of numpy's allocations during the call (the
(queries, models) matrix itself is allocated before and not counted).
"""
from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from registry.analytics.portfolio import answer_greedy  # noqa: E402


def plain_greedy(answers: np.ndarray, k: int) -> list[int]:
    """The greedy before the lazy one (registry/analytics/portfolio.py at ba4abb7)."""
    chosen, best, means = [], np.zeros(len(answers)), answers.mean(axis=0)
    while len(chosen) < k:
        gains = np.maximum(answers - best[:, None], 0.0).sum(axis=0)
        gains[chosen] = -1.0
        j = int(np.argmax(gains))
        if gains[j] <= 1e-9:  # the _TOL it used
            rest = np.setdiff1d(np.arange(answers.shape[1]), chosen)
            j = int(rest[np.argmax(means[rest])])
        chosen.append(j)
        best = np.maximum(best, answers[:, j])
    return chosen


def measure(fn, answers: np.ndarray, k: int) -> tuple[list[int], float, float]:
    tracemalloc.start()
    started = time.perf_counter()
    chosen = fn(answers, k)
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return chosen, seconds, peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=12_032)
    parser.add_argument("--models", default="1000,10000")
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    print(f"answers portfolio, k = {args.k}, {args.queries:,} queries; wall s and tracemalloc peak MB per call")
    print(f"{'models':>7} {'matrix MB':>10} {'plain s':>9} {'plain MB':>9} {'lazy s':>8} {'lazy MB':>8} {'same':>5}")
    for models in (int(m) for m in args.models.split(",")):
        rng = np.random.default_rng(0)
        ability = rng.uniform(0.2, 0.9, size=(models, 1))
        shift = rng.normal(0.0, 0.15, size=(1, args.queries))
        # (models, queries) then transposed, as PortfolioSpace holds it: each model's answers contiguous
        answers = (rng.random((models, args.queries)) < np.clip(ability + shift, 0.0, 1.0)).astype(np.float64).T
        plain, plain_s, plain_mb = measure(plain_greedy, answers, args.k)
        lazy, lazy_s, lazy_mb = measure(answer_greedy, answers, args.k)
        print(f"{models:>7} {answers.nbytes / 2**20:>10.0f} {plain_s:>9.2f} {plain_mb:>9.0f} {lazy_s:>8.2f} "
              f"{lazy_mb:>8.0f} {str(plain == lazy):>5}", flush=True)
        del answers


if __name__ == "__main__":
    main()
