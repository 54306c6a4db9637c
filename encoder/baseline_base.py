"""What every baseline shares, without torch: the interface (`Baseline`), what a baseline may read
(`_Split`), the truth matrix and the metrics helpers, and the best single model. The kNN router
(encoder/knn.py) is built on it and is read by `registry route`, which must not import torch."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from .data import EvalData
from .metrics import best_single_accuracy, correctness_accuracy, oracle_accuracy, routing_accuracy

__all__ = ["Baseline", "BestSingle", "truth_matrix", "evaluate", "oracle", "best_single"]

# --------------------------------------------------------------------------------------------------
# shared helpers


def truth_matrix(data: EvalData, query_indices: np.ndarray, evals: np.ndarray | None = None) -> np.ndarray:
    """(M, len(query_indices)) float32 scores, NaN where unscored; only `evals` (indices into the
    evaluations) when given, else every evaluation of those queries."""
    query_indices = np.asarray(query_indices, dtype=np.int64)
    column = np.full(data.n_queries, -1, dtype=np.int64)
    column[query_indices] = np.arange(len(query_indices))
    if evals is None:
        evals = np.flatnonzero(column[data.query_index] >= 0)
    else:
        evals = np.asarray(evals, dtype=np.int64)
        evals = evals[column[data.query_index[evals]] >= 0]
    matrix = np.full((data.n_models, len(query_indices)), np.nan, dtype=np.float32)
    matrix[data.model_index[evals], column[data.query_index[evals]]] = data.scores[evals]
    return matrix


def evaluate(pred: np.ndarray, data: EvalData, query_indices: np.ndarray) -> dict[str, float]:
    """Routing and correctness-prediction accuracy of `pred` (M, len(query_indices)) against every
    evaluation of those queries."""
    truth = truth_matrix(data, query_indices)
    return {"routing": routing_accuracy(pred, truth), "correctness": correctness_accuracy(pred, truth)}


def oracle(data: EvalData, query_indices: np.ndarray) -> float:
    """Oracle routing accuracy: 1 where some scored model was right (metrics.oracle_accuracy)."""
    return oracle_accuracy(truth_matrix(data, query_indices))


def best_single(data: EvalData, train_evals: np.ndarray, query_indices: np.ndarray) -> float:
    """Routing accuracy of always picking the model with the best training accuracy
    (metrics.best_single_accuracy over the training evaluations only)."""
    train_evals = np.asarray(train_evals, dtype=np.int64)
    train_queries = np.unique(data.query_index[train_evals])
    return best_single_accuracy(
        truth_matrix(data, train_queries, train_evals), truth_matrix(data, query_indices)
    )


class _Split:
    """What a baseline may read: the training triples and the validation truth."""

    def __init__(self, data: EvalData, train_evals: np.ndarray, val_queries: np.ndarray):
        train_evals = np.asarray(train_evals, dtype=np.int64)
        val_queries = np.unique(np.asarray(val_queries, dtype=np.int64))
        if len(train_evals) == 0:
            raise ValueError("no training evaluations")
        self.model = data.model_index[train_evals]
        self.query = data.query_index[train_evals]
        self.score = data.scores[train_evals].astype(np.float32)
        if np.isin(self.query, val_queries).any():
            raise ValueError("training evaluations include validation queries")
        self.val_queries = val_queries
        self.val_truth = truth_matrix(data, val_queries) if len(val_queries) else None
        # per-model training mean (the pool mean for a model without training evaluations)
        sums = np.bincount(self.model, weights=self.score, minlength=data.n_models)
        counts = np.bincount(self.model, minlength=data.n_models)
        overall = float(self.score.mean())
        self.prior = np.where(counts > 0, sums / np.maximum(counts, 1), overall).astype(np.float64)
        self.counts, self.sums = counts, sums

    def val_score(self, pred: np.ndarray) -> tuple[float, float]:
        """(routing, correctness) accuracy on the validation queries."""
        if self.val_truth is None or np.isnan(self.val_truth).all():
            return (0.0, 0.0)
        return (routing_accuracy(pred, self.val_truth), correctness_accuracy(pred, self.val_truth))


class Baseline(ABC):
    """A router/correctness predictor fitted from per-model evaluations.

    `fit(data, train_evals, val_queries, *, seed)` reads only the evaluations `train_evals` (for
    training) and those of `val_queries` (for tuning); `predict(query_indices)` returns an
    (data.n_models, len(query_indices)) array of P(correct) in [0, 1]. After `fit`, `config_` holds
    the chosen hyperparameters and `tuning_` one row per configuration tried (with its validation
    routing/correctness accuracy).
    """

    name: str = "baseline"

    def __init__(self) -> None:
        self.config_: dict[str, Any] = {}
        self.tuning_: list[dict[str, Any]] = []
        self.fit_seconds_: float = 0.0

    @abstractmethod
    def fit(
        self, data: EvalData, train_evals: np.ndarray, val_queries: np.ndarray, *, seed: int = 0
    ) -> "Baseline": ...

    @abstractmethod
    def predict(self, query_indices: np.ndarray) -> np.ndarray: ...

    def _check_fitted(self) -> None:
        if not hasattr(self, "_data"):
            raise RuntimeError(f"{self.name}: call fit() first")


# --------------------------------------------------------------------------------------------------
# best single model


class BestSingle(Baseline):
    """Every query goes to the model with the best training accuracy: P(correct) is each model's
    training mean, the same for every query. No tuning."""

    name = "best-single"

    def fit(self, data, train_evals, val_queries, *, seed=0):
        split = _Split(data, train_evals, val_queries)
        self._data = data
        self._prior = split.prior
        return self

    def predict(self, query_indices):
        self._check_fitted()
        return np.repeat(self._prior[:, None], len(query_indices), axis=1)
