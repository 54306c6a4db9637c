"""The baselines LOCUS is compared against, behind one small interface.

Every baseline is fitted on `train_evals` (indices into the data's evaluations: at most N training
evaluations per model, on training queries only) and tuned on the evaluations of `val_queries`
(the validation split: used only to choose hyperparameters and the early-stopping epoch, never as
training signal). Nothing else is read: no evaluation on a test query, and no training evaluation
outside `train_evals`. Query vectors (`data.query_vectors`) are inputs, not evaluations, and may be
read for any query.

    baseline = KNNRouter().fit(data, train_evals, split.val, seed=0)
    pred = baseline.predict(split.test)          # (n_models, len(split.test)) P(correct)
    scores = evaluate(pred, data, split.test)    # {"routing": ..., "correctness": ...}

Implemented: `EmbedLLMMF` (matrix factorisation, Zhuang et al. 2025), `IRTNet` (item response
theory with query-predicted item parameters), `KNNRouter` (nearest training queries, shrunk toward
each model's training mean), `BestSingle` (always the model with the best training accuracy) and
`oracle` (some model in the pool was right). All are seeded and deterministic on a fixed thread count.
"""
from __future__ import annotations

import copy
import itertools
import time
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from .data import EvalData
from .metrics import best_single_accuracy, correctness_accuracy, oracle_accuracy, routing_accuracy

__all__ = [
    "Baseline",
    "EmbedLLMMF",
    "IRTNet",
    "KNNRouter",
    "BestSingle",
    "oracle",
    "best_single",
    "truth_matrix",
    "evaluate",
]


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
        self.counts = counts

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


# --------------------------------------------------------------------------------------------------
# kNN


class KNNRouter(Baseline):
    """kNN over query vectors, shrunk toward each model's training mean.

    For a test query q and model m: take q's k nearest training queries by cosine similarity,
    keep those m was evaluated on (n of them, s correct), and predict
    P = (s + c * prior_m) / (n + c), prior_m = m's mean training score (P = prior_m where n + c = 0).
    Two neighbourhoods: "pooled" takes the k nearest among all training queries that any model was
    evaluated on (a model with N of U training queries then sees about k * N / U of them);
    "per_model" takes the k nearest among m's own evaluated queries (n = min(k, N_m)).
    k = None means all training queries; c = 0 is the plain, unshrunk kNN.

    Tuning (when `tune`, the default): exhaustive grid on the validation queries, chosen by
    validation routing accuracy (ties: validation correctness accuracy, then grid order):
    mode in {pooled, per_model} x k in {10, 20, 50, 100, 200, 500, 1000, 2000, 5000, all} x
    c in {0, 1, 2, 5, 10, 20, 50, 100, 200}: 180 configurations, all read off one sort of the
    validation x training similarities (a few seconds on MMLU-Pro's open pool). With tune=False the
    given k, pseudo_count and mode are used as they are.
    """

    name = "knn"
    GRID_K: tuple[int | None, ...] = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, None)
    GRID_C: tuple[float, ...] = (0, 1, 2, 5, 10, 20, 50, 100, 200)
    GRID_MODE: tuple[str, ...] = ("pooled", "per_model")

    def __init__(
        self,
        k: int | None = 1000,
        pseudo_count: float = 20.0,
        mode: str = "pooled",
        *,
        tune: bool = True,
        chunk: int = 512,
    ):
        super().__init__()
        if mode not in ("pooled", "per_model"):
            raise ValueError(f"unknown mode {mode!r}")
        self.k, self.pseudo_count, self.mode, self.tune, self.chunk = k, pseudo_count, mode, tune, chunk

    def fit(self, data, train_evals, val_queries, *, seed=0):
        start = time.perf_counter()
        split = _Split(data, train_evals, val_queries)
        self._data = data
        self._prior = split.prior
        # training queries that carry at least one evaluation, as columns
        self._train_q = np.unique(split.query)
        column = np.searchsorted(self._train_q, split.query)
        M, U = data.n_models, len(self._train_q)
        self._Y = np.zeros((M, U), dtype=np.float64)
        self._O = np.zeros((M, U), dtype=np.float64)
        self._Y[split.model, column] = split.score
        self._O[split.model, column] = 1.0
        self._own = [np.flatnonzero(self._O[m] > 0) for m in range(M)]
        self._train_vecs = data.query_vectors[self._train_q].astype(np.float32)

        candidates = [(self.mode, self.k, self.pseudo_count)]
        if self.tune and split.val_truth is not None:
            candidates = list(itertools.product(self.GRID_MODE, self.GRID_K, self.GRID_C))
        self.tuning_ = []
        if len(candidates) > 1:
            best_key = None
            for mode in self.GRID_MODE:
                sums, counts = self._stats(split.val_queries, mode, self.GRID_K)
                for ki, k in enumerate(self.GRID_K):
                    for c in self.GRID_C:
                        pred = self._shrink(sums[ki], counts[ki], c)
                        routing, corr = split.val_score(pred)
                        self.tuning_.append(
                            {"mode": mode, "k": k, "pseudo_count": c, "val_routing": routing, "val_correctness": corr}
                        )
                        key = (routing, corr)
                        if best_key is None or key > best_key:
                            best_key = key
                            self.mode, self.k, self.pseudo_count = mode, k, c
        self.config_ = {"mode": self.mode, "k": self.k, "pseudo_count": self.pseudo_count}
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def predict(self, query_indices):
        self._check_fitted()
        sums, counts = self._stats(np.asarray(query_indices, dtype=np.int64), self.mode, (self.k,))
        return self._shrink(sums[0], counts[0], self.pseudo_count).astype(np.float32)

    def _shrink(self, sums: np.ndarray, counts: np.ndarray, c: float) -> np.ndarray:
        prior = self._prior[:, None]
        denom = counts + c
        with np.errstate(invalid="ignore", divide="ignore"):
            pred = (sums + c * prior) / denom
        return np.where(denom > 0, pred, np.broadcast_to(prior, pred.shape))

    def _stats(self, queries: np.ndarray, mode: str, ks: Sequence[int | None]):
        """(len(ks), M, T) neighbour score sums and counts for each k."""
        M, T = self._data.n_models, len(queries)
        sums = np.zeros((len(ks), M, T))
        counts = np.zeros((len(ks), M, T))
        U = len(self._train_q)
        for lo in range(0, T, self.chunk):
            block = slice(lo, min(lo + self.chunk, T))
            vecs = self._data.query_vectors[queries[block]].astype(np.float32)
            sim = vecs @ self._train_vecs.T  # (t, U)
            if mode == "pooled":
                # stable sort: ties broken by training-query index, so results are deterministic
                order = np.argsort(-sim, axis=1, kind="stable")
                cols = np.array([U if k is None else min(k, U) for k in ks]) - 1
                for m in range(M):
                    cs = np.cumsum(self._Y[m][order], axis=1)
                    cc = np.cumsum(self._O[m][order], axis=1)
                    sums[:, m, block] = cs[:, cols].T
                    counts[:, m, block] = cc[:, cols].T
            else:
                for m in range(M):
                    own = self._own[m]
                    if len(own) == 0:
                        continue
                    order = np.argsort(-sim[:, own], axis=1, kind="stable")
                    cs = np.cumsum(self._Y[m, own][order], axis=1)
                    cols = np.array([len(own) if k is None else min(k, len(own)) for k in ks]) - 1
                    sums[:, m, block] = cs[:, cols].T
                    counts[:, m, block] = (cols + 1)[:, None]
        return sums, counts


# --------------------------------------------------------------------------------------------------
# trainable baselines (torch)


class _TorchBaseline(Baseline):
    """Shared training loop: Adam + BCE on the training triples, Gaussian noise on query vectors in
    training, mini-batches in a seeded order, early stopping on validation routing accuracy (checked
    every epoch; ties broken by validation correctness accuracy, then earlier epoch), the best
    epoch's weights kept. Each grid configuration is trained from the same seed; the one with the
    best validation routing accuracy wins (ties: correctness, then grid order)."""

    GRID: tuple[dict[str, Any], ...] = ()
    DEFAULTS: dict[str, Any] = {}

    def __init__(self, *, tune: bool = True, **config: Any):
        super().__init__()
        unknown = set(config) - set(self.DEFAULTS)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown option(s) {sorted(unknown)}")
        self.tune = tune
        self.base_config = {**self.DEFAULTS, **config}

    @abstractmethod
    def _build(self, n_models: int, dim_in: int, cfg: dict[str, Any]) -> nn.Module: ...

    def fit(self, data, train_evals, val_queries, *, seed=0):
        start = time.perf_counter()
        split = _Split(data, train_evals, val_queries)
        self._data = data
        configs = [self.base_config]
        if self.tune and split.val_truth is not None and self.GRID:
            configs = [{**self.base_config, **g} for g in self.GRID]
        self.tuning_ = []
        best = None
        for cfg in configs:
            t0 = time.perf_counter()
            net, key, epoch = self._train(data, split, cfg, seed)
            row = {**cfg, "val_routing": key[0], "val_correctness": key[1], "best_epoch": epoch,
                   "seconds": round(time.perf_counter() - t0, 2)}
            self.tuning_.append(row)
            if best is None or key > best[0]:
                best = (key, net, cfg, epoch)
        self._net = best[1]
        self.config_ = {**best[2], "best_epoch": best[3]}
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _train(self, data: EvalData, split: _Split, cfg: dict[str, Any], seed: int):
        vecs = torch.from_numpy(np.ascontiguousarray(data.query_vectors, dtype=np.float32))
        m_idx = torch.from_numpy(split.model)
        q_idx = torch.from_numpy(split.query)
        y = torch.from_numpy(split.score)
        val_q = torch.from_numpy(split.val_queries)
        # the global RNG (initialisation, dropout) is seeded here and restored afterwards
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self._train_loop(data.n_models, vecs, m_idx, q_idx, y, val_q, split, cfg, seed)

    def _train_loop(self, n_models, vecs, m_idx, q_idx, y, val_q, split, cfg, seed):
        net = self._build(n_models, vecs.shape[1], cfg)
        gen = torch.Generator().manual_seed(seed + 1)
        opt = torch.optim.Adam(net.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
        loss_fn = nn.BCEWithLogitsLoss()
        n, batch = len(y), cfg["batch_size"]
        best_key, best_state, best_epoch, stale = None, None, 0, 0
        for epoch in range(1, cfg["max_epochs"] + 1):
            net.train()
            order = torch.randperm(n, generator=gen)
            for lo in range(0, n, batch):
                b = order[lo : lo + batch]
                # query-side networks run once per distinct query in the batch
                uq, inv = torch.unique(q_idx[b], return_inverse=True)
                q = vecs[uq]
                q = q + cfg["noise"] * torch.randn(q.shape, generator=gen)
                logit = net.pair_logits(m_idx[b], q, inv)
                loss = loss_fn(logit, y[b])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            net.eval()
            with torch.no_grad():
                pred = torch.sigmoid(net.all_logits(vecs[val_q])).numpy()
            key = split.val_score(pred)
            if best_key is None or key > best_key:
                best_key, best_state, best_epoch, stale = key, copy.deepcopy(net.state_dict()), epoch, 0
            else:
                stale += 1
                if stale >= cfg["patience"]:
                    break
        net.load_state_dict(best_state)
        net.eval()
        return net, best_key, best_epoch

    def predict(self, query_indices):
        self._check_fitted()
        q = torch.from_numpy(
            np.ascontiguousarray(self._data.query_vectors[np.asarray(query_indices, dtype=np.int64)], dtype=np.float32)
        )
        with torch.no_grad():
            return torch.sigmoid(self._net.all_logits(q)).numpy()


class _MFNet(nn.Module):
    def __init__(self, n_models: int, dim_in: int, dim: int):
        super().__init__()
        self.model_emb = nn.Embedding(n_models, dim)
        self.query_proj = nn.Linear(dim_in, dim)
        self.head = nn.Linear(dim, 1)

    def pair_logits(self, m: torch.Tensor, q: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
        return self.head(self.model_emb(m) * self.query_proj(q)[inv]).squeeze(-1)

    def all_logits(self, q: torch.Tensor) -> torch.Tensor:  # (M, Q)
        p = self.query_proj(q)  # (Q, d)
        return (self.model_emb.weight * self.head.weight) @ p.T + self.head.bias


class EmbedLLMMF(_TorchBaseline):
    """EmbedLLM-style matrix factorisation (Zhuang et al., ICLR 2025).

    One trainable embedding e_m per model; the query vector (plus N(0, 0.05^2) noise in training) is
    projected by a Linear to the same dimension (the noise is drawn once per distinct query in a
    mini-batch); logit = w . (e_m * W phi(x) + b) + b0, a linear head
    over the elementwise product as in EmbedLLM's code. Adam, BCE, batch 2048.

    Tuning budget (tune=True): 4 configurations, each trained for at most 150 epochs with early
    stopping (patience 25 epochs) on validation routing accuracy: dim in {32, 232} x
    weight_decay in {1e-5, 1e-3}, lr 1e-3 (EmbedLLM's 1e-4 for ~50 epochs underfits at N <= 1024
    evaluations per model: it makes too few steps). Measured on MMLU-Pro's open pool at N = 1024
    (scripts/bench_baselines.py, shared 2-core machine): 27-45 s in all, tuning included.
    """

    name = "embedllm-mf"
    DEFAULTS = {"dim": 232, "lr": 1e-3, "weight_decay": 1e-5, "batch_size": 2048, "noise": 0.05,
                "max_epochs": 150, "patience": 25}
    GRID = tuple({"dim": d, "weight_decay": wd} for d in (32, 232) for wd in (1e-5, 1e-3))

    def _build(self, n_models, dim_in, cfg):
        return _MFNet(n_models, dim_in, cfg["dim"])


class _IRTNet(nn.Module):
    def __init__(self, n_models: int, dim_in: int, dim: int, hidden: int, dropout: float):
        super().__init__()
        self.theta = nn.Embedding(n_models, dim)
        nn.init.normal_(self.theta.weight, std=0.1)
        self.a_net = nn.Sequential(nn.Linear(dim_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, dim))
        self.b_net = nn.Sequential(nn.Linear(dim_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))

    def pair_logits(self, m: torch.Tensor, q: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
        return (self.a_net(q)[inv] * self.theta(m)).sum(-1) - self.b_net(q).squeeze(-1)[inv]

    def all_logits(self, q: torch.Tensor) -> torch.Tensor:  # (M, Q)
        return self.theta.weight @ self.a_net(q).T - self.b_net(q).T


class IRTNet(_TorchBaseline):
    """IRT-Net (item response theory with neural item parameters, Chen et al. 2025).

    logit(m, q) = a_q . theta_m - b_q: the discrimination vector a_q and the difficulty b_q are
    predicted from the query vector (plus N(0, 0.05^2) noise in training) by two one-hidden-layer
    MLPs (hidden 128, ReLU, dropout 0.1); theta_m is a learned per-model ability vector. Adam, BCE,
    batch 2048, lr 1e-3. b_q cannot change a routing decision (it is shared by all models), only
    correctness predictions.

    Tuning budget (tune=True): 4 configurations, each trained for at most 120 epochs with early
    stopping (patience 20 epochs) on validation routing accuracy: dim in {8, 32} x
    weight_decay in {1e-5, 1e-3}. Measured on MMLU-Pro's open pool at N = 1024
    (scripts/bench_baselines.py, shared 2-core machine): 59-110 s in all, tuning included.
    """

    name = "irt-net"
    DEFAULTS = {"dim": 32, "hidden": 128, "dropout": 0.1, "lr": 1e-3, "weight_decay": 1e-5,
                "batch_size": 2048, "noise": 0.05, "max_epochs": 120, "patience": 20}
    GRID = tuple({"dim": d, "weight_decay": wd} for d in (8, 32) for wd in (1e-5, 1e-3))

    def _build(self, n_models, dim_in, cfg):
        return _IRTNet(n_models, dim_in, cfg["dim"], cfg["hidden"], cfg["dropout"])
