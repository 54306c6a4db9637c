"""The audit's evidence on real pools holding several copies of one model (a model behind many resellers).

    .venv/bin/python scripts/bench_audit_copies.py [--copies 2,4,6,8] [--rate 0.03] [--seed 0]
    .venv/bin/python scripts/bench_audit_copies.py --degraded 0,1.5,4 [--trials 4]

For MMLU-Pro (a random slice of 2,000 questions: the evidence's cost grows with the queries) and BFCL
(../shared/data, read in place), every pair of the real pool is judged by registry.analytics.audit_stats as
a full audit judges its candidates (the pool calibration, Holm at 0.01, max noise 12%), with no embedding
stage: all pairs, a stricter count than the audit's k nearest. Then c copies of one random model, each with
`--rate` of its answers flipped (half right ones, half wrong: re-served, `reserved`), join the pool and everything is judged again: how the copy pairs (the
original among them) are labelled, and how many pairs of distinct real models are flagged. Prints a table.

With --degraded: the pool's closest relatives beside a model's copies. Per dataset and per value D, in each
of --trials draws, two re-served copies of a random model X join the pool with a degraded copy of another
model Y (1% of its answers re-served, then D points of its right answers turned wrong: a quantised endpoint,
leaning one way); how X's three copy pairs are labelled (a duplicate among them is demoted to "same
product line?" when the degraded pair is a relative its tests cannot tell it from), and Y ~ its copy.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from registry.analytics import audit_stats as st  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


def load(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    import pandas as pd

    d = DATA / name
    ev, q = pd.read_csv(d / "evals.csv"), pd.read_csv(d / "queries.csv")
    position = {v: i for i, v in enumerate(q.query_id)}
    scores = np.full((int(ev.model_id.max()) + 1, len(q)), np.nan)
    scores[ev.model_id.to_numpy(), ev.query_id.map(position).to_numpy()] = ev.score.to_numpy()
    tasks, task = np.unique(q.task.astype(str), return_inverse=True)
    return scores, task, list(tasks)


def reserved(row: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """`row` re-served: `rate` of its answers flipped, half of them right ones and half wrong ones, as sampling
    noise does (flipping at random would turn a weak model's wrong answers right more often: a skewed copy)."""
    row = row.copy()
    n = int(round(rate * np.count_nonzero(~np.isnan(row)) / 2))
    for value in (1.0, 0.0):
        flip = rng.choice(np.flatnonzero(row == value), n, replace=False)
        row[flip] = 1.0 - value
    return row


def judge(scores, task, tasks, names, *, alpha=0.01, max_noise=0.12) -> dict:
    pool = st.PoolEvals.from_dense(names, scores, task, tasks)
    cal = st.calibrate(pool)
    pairs = [(a, b) for a in range(len(names)) for b in range(a + 1, len(names))]
    decided = {(a, b): st.evidence(cal, names[a], *pool.rows[a], names[b], *pool.rows[b], max_noise=max_noise,
                                   alpha=alpha) for a, b in pairs}
    level = st.holm_level([d.p_excess for d in decided.values() if d.p_excess is not None], alpha)
    for (a, b), d in decided.items():
        st.label(cal, d, names[a], names[b], level=level, alpha=alpha, max_noise=max_noise)
    st.prefer_best_match(decided)
    return decided


def degraded(row: np.ndarray, points: float, rng: np.random.Generator) -> np.ndarray:
    """`row` re-served at 1%, then `points` points of its right answers turned wrong (lean one way)."""
    row = reserved(row, 0.01, rng)
    right = np.flatnonzero(row == 1.0)
    n = int(round(points / 100 * np.count_nonzero(~np.isnan(row))))
    row[rng.choice(right, min(n, len(right)), replace=False)] = 0.0
    return row


def relatives_table(name, scores, task, tasks, points_list, trials, rate, rng) -> None:
    m = len(scores)
    names = [f"m{i}" for i in range(m)]
    for points in points_list:
        inside, outside, pair = Counter(), Counter(), Counter()
        for _ in range(trials):
            x, y = rng.choice(m, 2, replace=False)
            extra = [reserved(scores[x], rate, rng), reserved(scores[x], rate, rng), degraded(scores[y], points, rng)]
            decided = judge(np.vstack([scores, extra]), task, tasks, names + ["copy0", "copy1", "degraded"])
            group = {x, m, m + 1}
            inside += Counter(d.label for (a, b), d in decided.items() if a in group and b in group)
            outside += Counter(d.label for (a, b), d in decided.items()
                               if a not in group and b not in group and m + 2 not in (a, b))
            pair[decided[(y, m + 2)].label] += 1
        print(f"| {name} | {points:g} | {sum(inside.values())} | {inside['duplicate']} | {inside['same product line?']} "
              f"| {inside['cleared']} | {pair['duplicate']} / {pair['same product line?']} / {pair['cleared']} | "
              f"{outside['duplicate']} duplicate, {outside['same product line?']} related |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", default="2,4,6,8")
    parser.add_argument("--rate", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--degraded", default=None, help="points lost by a degraded copy of another model "
                        "(comma-separated): the relatives table instead of the copies one")
    parser.add_argument("--trials", type=int, default=4, help="with --degraded: draws per dataset and value")
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"no data at {DATA}: this benchmark reads ../shared/data in place")
    rng = np.random.default_rng(args.seed)
    if args.degraded is not None:
        print(f"| data | degraded copy: points lost | X's copy pairs ({args.trials} draws) | duplicate | same product "
              "line? | cleared | Y ~ degraded: duplicate / related / cleared | distinct pairs flagged (summed over the draws) |")
        print("|---|---|---|---|---|---|---|---|")
    else:
        print("| data | copies | copy pairs | duplicate | same product line? | cleared | distinct pairs flagged |")
        print("|---|---|---|---|---|---|---|")
    for name in ("mmlu-pro", "bfcl"):
        scores, task, tasks = load(name)
        if name == "mmlu-pro":
            cols = rng.choice(scores.shape[1], 2000, replace=False)
            scores, task = scores[:, cols], task[cols]
        if args.degraded is not None:
            relatives_table(name, scores, task, tasks, [float(v) for v in args.degraded.split(",")], args.trials,
                            args.rate, rng)
            continue
        m = len(scores)
        names = [f"m{i}" for i in range(m)]
        real = Counter(d.label for d in judge(scores, task, tasks, names).values())
        print(f"| {name} | 0 | 0 | | | | {real['duplicate']} duplicate, {real['same product line?']} related "
              f"(of {sum(real.values())}) |")
        for c in (int(x) for x in args.copies.split(",")):
            base = int(rng.integers(m))
            copies = []
            for _ in range(c):
                copies.append(reserved(scores[base], args.rate, rng))
            decided = judge(np.vstack([scores, copies]), task, tasks, names + [f"copy{j}" for j in range(c)])
            group = {base, *range(m, m + c)}
            inside = Counter(d.label for (a, b), d in decided.items() if a in group and b in group)
            outside = Counter(d.label for (a, b), d in decided.items() if a not in group and b not in group)
            print(f"| {name} | {c} of m{base} | {sum(inside.values())} | {inside['duplicate']} | "
                  f"{inside['same product line?']} | {inside['cleared']} | {outside['duplicate']} duplicate, "
                  f"{outside['same product line?']} related |", flush=True)


if __name__ == "__main__":
    main()
