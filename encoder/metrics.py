"""The paper's metrics (section 3.1), for matrices with holes.

`pred` and `truth` are (M, Q) arrays over the same models and test queries; `truth` has NaN where a
model has no score. A query is routed only among the models scored on it: nobody can tell whether an
unscored model would have been right. Real-valued scores count as expected correctness.
"""
from __future__ import annotations

import numpy as np

__all__ = ["paired_test", "routing_accuracy", "correctness_accuracy", "best_single_accuracy", "oracle_accuracy", "route"]


def route(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(Q,) index of the model with the highest prediction among those scored on each query
    (-1 where no model is scored)."""
    masked = np.where(np.isnan(truth), -np.inf, pred)
    choice = masked.argmax(axis=0)
    choice[np.isnan(truth).all(axis=0)] = -1
    return choice


def routing_accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    choice = route(pred, truth)
    ok = choice >= 0
    return float(truth[choice[ok], np.flatnonzero(ok)].mean())


def correctness_accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    """Agreement of (p >= 0.5) with (score >= 0.5) over the scored cells."""
    scored = ~np.isnan(truth)
    return float(((pred[scored] >= 0.5) == (truth[scored] >= 0.5)).mean())


def best_single_accuracy(train_truth: np.ndarray, test_truth: np.ndarray) -> float:
    """Always pick the model with the best training accuracy, falling to the next best where it is
    unscored."""
    train_mean = np.nanmean(train_truth, axis=1)
    train_mean = np.where(np.isnan(train_mean), -np.inf, train_mean)
    rank_score = np.broadcast_to(train_mean[:, None], test_truth.shape)
    return routing_accuracy(rank_score, test_truth)


def oracle_accuracy(truth: np.ndarray) -> float:
    """1 where some scored model was right (the best score, for real-valued scores)."""
    scored_any = ~np.isnan(truth).all(axis=0)
    return float(np.nanmax(truth[:, scored_any], axis=0).mean())


def paired_test(a, b) -> dict:
    """Two routers on the same test queries (the score of the model each routed each query to): mean
    difference, and McNemar's exact test (two-sided binomial on the discordant queries; scores rounded at 0.5)."""
    from scipy.stats import binomtest

    x, y = np.asarray(a) >= 0.5, np.asarray(b) >= 0.5
    wins, losses = int((x & ~y).sum()), int((~x & y).sum())
    p = float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0
    return {"diff": float(np.mean(a) - np.mean(b)), "wins": wins, "losses": losses, "p": p, "n": len(a)}


def pooled_paired_test(tests: list[dict]) -> dict:
    """`paired_test`s of the same two routers on disjoint test sets (one per seed) taken together: the mean
    difference over every query, and McNemar's exact test on all the discordant queries."""
    from scipy.stats import binomtest

    wins, losses, n = (sum(t[k] for t in tests) for k in ("wins", "losses", "n"))
    p = float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0
    return {"diff": sum(t["diff"] * t["n"] for t in tests) / n if n else 0.0, "wins": wins, "losses": losses,
            "p": p, "n": n}
