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
each model's training mean, itself shrunk toward the pool's), `BestSingle` (always the model with the best training accuracy) and
`oracle` (some model in the pool was right). All are seeded and deterministic on a fixed thread count.
"""
from __future__ import annotations

import copy
import time
from abc import abstractmethod
from typing import Any

import numpy as np
import torch
from torch import nn

from .baseline_base import Baseline, BestSingle, _Split, best_single, evaluate, oracle, truth_matrix
from .data import EvalData
from .knn import KNNRouter

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
