"""The paper's metrics (section 3.1), for matrices with holes.

`pred` and `truth` are (M, Q) arrays over the same models and test queries; `truth` has NaN where a
model has no score. A query is routed only among the models scored on it: nobody can tell whether an
unscored model would have been right. Real-valued scores count as expected correctness. Models tied at
the top prediction share the query (`top_models`): it scores their mean, what a router breaking the tie
at random expects; taking the first would make the number depend on the order of the pool's models.
"""
from __future__ import annotations

import numpy as np

__all__ = ["paired_test", "pooled_paired_test", "routing_accuracy", "routed_scores", "top_models",
           "correctness_accuracy", "best_single_accuracy", "oracle_accuracy"]


def top_models(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(M, Q) bool: per query, the models scored on it whose prediction is the highest among those scored
    (several where they tie; a NaN prediction counts as the lowest; none where no model is scored)."""
    scored = ~np.isnan(truth)
    masked = np.where(scored, np.nan_to_num(np.asarray(pred, np.float64), nan=-np.inf), -np.inf)
    # `& scored`: when every scored model says -inf, the unscored ones would tie with them
    return (masked == masked.max(axis=0)) & scored


def routed_scores(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(n,) the score each query routed gets, over the n queries some model is scored on: the mean truth of
    its `top_models`."""
    ok = ~np.isnan(truth).all(axis=0)
    top = top_models(pred[:, ok], truth[:, ok])  # (M, n)
    return (np.where(top, truth[:, ok], 0.0).sum(axis=0) / top.sum(axis=0)).astype(np.float64)


def routing_accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(routed_scores(pred, truth).mean())


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
    """Two routers on the same test queries (`routed_scores` of each): mean difference, and the exact sign
    test on the queries they score differently (McNemar's exact test for 0/1 scores: two-sided binomial on
    the discordant queries; a tie shared at the top scores between 0 and 1 and counts by its sign)."""
    from scipy.stats import binomtest

    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    wins, losses = int((d > 1e-12).sum()), int((d < -1e-12).sum())  # as pooled_paired_test counts them
    p = float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0
    return {"diff": float(np.mean(a) - np.mean(b)), "wins": wins, "losses": losses, "p": p, "n": len(a)}


def pooled_paired_test(runs) -> dict:
    """Two routers over several seeds' test sets, each run a pair (query ids, a - b: the difference of their
    `routed_scores` per query). Seeds' test sets overlap (three MMLU-Pro seeds share over a hundred queries
    pairwise), and a query tested twice is one query, not two pieces of evidence: the mean difference is over
    every (seed, query), the exact sign test over the distinct queries, by the sign of the difference summed
    over the seeds that tested each (`n` distinct queries, `cells` (seed, query) pairs)."""
    from scipy.stats import binomtest

    ids = np.concatenate([np.asarray(q, np.int64) for q, _ in runs]) if runs else np.zeros(0, np.int64)
    diff = np.concatenate([np.asarray(d, np.float64) for _, d in runs]) if runs else np.zeros(0)
    if len(ids) != len(diff):
        raise ValueError("each run needs one difference per query id")
    distinct, at = np.unique(ids, return_inverse=True)
    net = np.bincount(at, weights=diff, minlength=len(distinct))
    wins, losses = int((net > 1e-12).sum()), int((net < -1e-12).sum())
    p = float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0
    return {"diff": float(diff.mean()) if len(diff) else 0.0, "wins": wins, "losses": losses, "p": p,
            "n": int(len(distinct)), "cells": int(len(diff))}
