"""Inference with a trained LOCUS: embed models from their evaluations, predict P(correct).

What the product runs after training (add-model, embed, route, profile, portfolio, compare) and what
training's validation calls; no optimiser, no sampling, no seeds. Both functions run in eval mode
without gradients and hand the module back in the mode they found it in.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from encoder.data import EvalData, evals_by_model
from encoder.locus import Locus, QueryProjection

__all__ = ["embed_models", "predict", "MAX_BATCH_TOKENS"]

MAX_BATCH_TOKENS = 1 << 20  # evaluations in one padded embedding batch (memory grows with it)


def pad_rows(rows: Sequence[np.ndarray], fill: float | int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Ragged rows -> (B, n) array and padding mask (True = padding)."""
    width = max(1, max(len(r) for r in rows))
    out = np.full((len(rows), width), fill, dtype=dtype)
    pad = np.ones((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        pad[i, : len(r)] = False
    return out, pad


@torch.no_grad()
def embed_models(
    locus: Locus,
    data: EvalData,
    evals: np.ndarray | Sequence[np.ndarray],
    *,
    batch_size: int = 64,
) -> np.ndarray:
    """(M, d) embeddings, one per model of `data`, each from its evaluations in `evals` (an array of
    evaluation indices into data, or one array per model). Eval mode, no grad, batched with padding.
    A model without evaluations gets a row of NaN."""
    per_model = evals if not isinstance(evals, np.ndarray) else evals_by_model(data, evals)
    if len(per_model) != data.n_models:
        raise ValueError(f"expected evaluations for {data.n_models} models, got {len(per_model)}")
    was_training = locus.training
    if was_training:  # train()/eval() walk every submodule: half a cached route's time when done per call
        locus.eval()
    device = locus.device
    used = np.unique(np.concatenate([data.query_index[e] for e in per_model] + [np.zeros(0, np.int64)]))
    out = np.full((data.n_models, locus.config.d), np.nan, dtype=np.float32)
    if len(used):
        phi = torch.from_numpy(data.query_vectors[used]).to(device)
        base, signed = locus.encoder.project_queries(phi)  # (U, d) each, once per query
        local = np.full(data.n_queries, -1, dtype=np.int64)
        local[used] = np.arange(len(used))
        todo = [m for m in range(data.n_models) if len(per_model[m])]
        todo.sort(key=lambda m: len(per_model[m]))  # similar lengths share a batch: less padding
        for chunk in _batches(todo, [len(per_model[m]) for m in todo], batch_size):
            q, pad = pad_rows([local[data.query_index[per_model[m]]] for m in chunk], 0, np.int64)
            y, _ = pad_rows([data.scores[per_model[m]] for m in chunk], 0.0, np.float32)
            q_t = torch.from_numpy(q).to(device)
            proj = QueryProjection(base[q_t], signed[q_t])  # (B, n, d), gathered, not recomputed
            z = locus.encoder.embed(proj, torch.from_numpy(y).to(device), torch.from_numpy(pad).to(device))
            out[chunk] = z.float().cpu().numpy()
    locus.train(was_training)
    return out


def _batches(todo: list[int], lengths: list[int], batch_size: int) -> list[list[int]]:
    """Consecutive runs of `todo` (sorted by length) of at most `batch_size` models and, past one
    model, at most MAX_BATCH_TOKENS padded evaluations."""
    out, chunk = [], []
    for m, n in zip(todo, lengths):
        if chunk and (len(chunk) == batch_size or (len(chunk) + 1) * n > MAX_BATCH_TOKENS):
            out.append(chunk)
            chunk = []
        chunk.append(m)
    return out + [chunk] if chunk else out


@torch.no_grad()
def predict(
    locus: Locus, embeddings: np.ndarray, query_vectors: np.ndarray, *, batch_size: int = 1024
) -> np.ndarray:
    """(M, Q) probabilities that each embedded model answers each query correctly."""
    was_training = locus.training
    if was_training:  # train()/eval() walk every submodule: half a cached route's time when done per call
        locus.eval()
    device = locus.device
    # require "W": the index's vectors are read-only views, and torch warns on every process's first one
    z = torch.as_tensor(np.require(embeddings, dtype=np.float32, requirements="W"), device=device)
    out = np.empty((z.shape[0], len(query_vectors)), dtype=np.float32)
    for start in range(0, len(query_vectors), batch_size):
        phi = torch.as_tensor(np.require(query_vectors[start : start + batch_size], dtype=np.float32,
                                         requirements="W"), device=device)
        out[:, start : start + len(phi)] = torch.sigmoid(locus(z, phi)).float().cpu().numpy()
    if was_training:
        locus.train()
    return out
