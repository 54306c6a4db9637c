"""Joint training of LOCUS's F and G (paper, section 2.3), and batched embedding and prediction.

Each step takes a mini-batch of models; for each model m it draws, from m's training evaluations, a
random encoder subset S_enc (builds z_m = F(S_enc)) and a DISJOINT decoder batch S_dec on which the
loss BCE(sigmoid(G(z_m, phi(x))), y) is taken. The size of S_enc is drawn afresh every step
(log-uniform between `enc_min` and `enc_max`), so F learns to embed from a handful of evaluations as
well as from a thousand, and every step shows a new view of every model. Query vectors get Gaussian
noise (std annealed from `noise[0]` to `noise[1]`; 0.1 by default) and the BCE targets are smoothed
toward 0.5 (`label_smoothing`, 0.1 by default). AdamW, separate learning rates for F and G.
Early stopping on validation routing accuracy: every `eval_every` epochs each model is embedded from
all its training evaluations and the model with the highest predicted p is picked on each validation
query. One epoch = every model once (one step when `models_per_batch` >= number of models).
Optional and off by default (measured neutral to harmful on MMLU-Pro's open pool, see train_locus):
an exponential moving average of the weights (`ema`), validated and returned instead of the raw
weights, and selection on a moving average of the last `select_window` validation routings.

Seeded: `torch.manual_seed(seed)` (initialisation, dropout, noise) and a numpy Generator (subsets);
on CPU with a fixed thread count the same seed and data give bitwise the same weights.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from encoder.data import EvalData
from encoder.locus import Locus, LocusConfig, QueryProjection, default_device
from encoder.metrics import routing_accuracy

__all__ = ["TrainResult", "train_locus", "embed_models", "predict", "evals_by_model", "recommended_config"]


def recommended_config(query_dim: int) -> LocusConfig:
    """The sizes measured on MMLU-Pro's open pool (27 models; see scripts/tune_locus.py): smaller than
    the paper's (d=128, r=64, L=2), which overfit a pool this small and train 3x slower on a CPU.
    A soft-topic term in G (16 topics) and a 16-d query path; the per-query difficulty b(phi) on."""
    return LocusConfig(query_dim=query_dim, d=64, latents=16, blocks=1, heads=4, predictor_hidden=64,
                       dropout=0.1, predictor_d=16, topics=16, difficulty=True)


@dataclass
class TrainResult:
    locus: Locus  # the weights of the best validation epoch, in eval mode
    config: LocusConfig
    history: list[dict] = field(default_factory=list)  # {"epoch", "loss" (BCE on the unsmoothed labels), "val_routing" (or None), "seconds"}
    best_epoch: int = -1
    best_val_routing: float = float("nan")
    seconds: float = 0.0
    settings: dict = field(default_factory=dict)  # the training knobs used, for the record


def evals_by_model(data: EvalData, eval_indices: np.ndarray) -> list[np.ndarray]:
    """Split an array of evaluation indices into one (sorted) array per model."""
    eval_indices = np.asarray(eval_indices, dtype=np.int64)
    owner = data.model_index[eval_indices]
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(data.n_models + 1))
    return [np.sort(eval_indices[order[bounds[m] : bounds[m + 1]]]) for m in range(data.n_models)]


def _pad(rows: Sequence[np.ndarray], fill: float | int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Ragged rows -> (B, n) array and padding mask (True = padding)."""
    width = max(1, max(len(r) for r in rows))
    out = np.full((len(rows), width), fill, dtype=dtype)
    pad = np.ones((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        pad[i, : len(r)] = False
    return out, pad


def _sample_size(rng: np.random.Generator, low: int, high: int) -> int:
    """Log-uniform integer in [low, high]."""
    if high <= low:
        return max(1, high)
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


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
            q, pad = _pad([local[data.query_index[per_model[m]]] for m in chunk], 0, np.int64)
            y, _ = _pad([data.scores[per_model[m]] for m in chunk], 0.0, np.float32)
            q_t = torch.from_numpy(q).to(device)
            proj = QueryProjection(base[q_t], signed[q_t])  # (B, n, d), gathered, not recomputed
            z = locus.encoder.embed(proj, torch.from_numpy(y).to(device), torch.from_numpy(pad).to(device))
            out[chunk] = z.float().cpu().numpy()
    locus.train(was_training)
    return out


MAX_BATCH_TOKENS = 1 << 20  # evaluations in one padded embedding batch (memory grows with it)


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
    locus.eval()
    device = locus.device
    z = torch.as_tensor(np.asarray(embeddings, dtype=np.float32), device=device)
    out = np.empty((z.shape[0], len(query_vectors)), dtype=np.float32)
    for start in range(0, len(query_vectors), batch_size):
        phi = torch.as_tensor(np.asarray(query_vectors[start : start + batch_size], dtype=np.float32), device=device)
        out[:, start : start + len(phi)] = torch.sigmoid(locus(z, phi)).float().cpu().numpy()
    locus.train(was_training)
    return out


def _validation(locus: Locus, data: EvalData, per_model, val_queries, val_truth) -> tuple[float, float]:
    """(routing accuracy, mean BCE of the predicted P(correct)) on the validation queries."""
    z = embed_models(locus, data, per_model)
    pred = predict(locus, np.nan_to_num(z), data.query_vectors[val_queries])
    seen = ~np.isnan(val_truth)
    p = np.clip(pred[seen].astype(np.float64), 1e-6, 1 - 1e-6)
    y = val_truth[seen]
    bce = float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()) if seen.any() else float("nan")
    return routing_accuracy(pred, val_truth), bce


def train_locus(
    data: EvalData,
    train_evals: np.ndarray,
    val_queries: np.ndarray,
    *,
    config: LocusConfig | None = None,
    seed: int = 0,
    epochs: int = 1500,
    patience: int = 600,
    eval_every: int = 10,
    models_per_batch: int = 128,
    enc_min: int = 16,
    enc_max: int = 1024,
    dec_size: int = 256,
    dec_min: int = 32,
    lr_encoder: float = 2e-3,
    lr_predictor: float = 2e-3,
    weight_decay: float = 5e-2,
    noise: tuple[float, float] = (0.1, 0.1),
    label_smoothing: float = 0.1,
    grad_clip: float | None = 1.0,
    ema: float | None = None,
    select_window: int = 1,
    select: str = "routing",
    threads: int | None = 2,
    device: str | torch.device | None = None,
    max_seconds: float | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train F and G jointly on `train_evals` (evaluation indices into data; e.g. at most N per model
    from the training queries); early-stop on routing accuracy over `val_queries`.

    config: None -> `recommended_config`. The release's defaults were lr 2e-4 / 8e-4 and noise 0.10 -> 0.05;
    on 27 models they never moved routing off the best single model within a CPU budget (see
    scripts/tune_locus.py), so the defaults here are lr 2e-3 for both, a constant query noise of 0.1 and
    label smoothing 0.1 (over noise 0.05 / no smoothing: test routing +0.4 to +1.5 points at N=256 and
    N=1024 on two query splits).
    ema: decay of an exponential moving average of the weights (e.g. 0.99 per step; None = off); when on,
    the averaged weights are validated, selected and returned. select_window: early stopping and model
    selection on the mean of the last `select_window` validation routings (1 = the raw value). Both
    were measured on the open pool (MiniLM, N=256/1024, two splits) and did not help on average
    (EMA: -1.3 to +0.4 points; a window of 3: -1.8 to +0.9), so both are off by default.
    select: what early stopping and selection watch, "routing" (validation routing accuracy, the
    paper's protocol) or "loss" (validation BCE of the predicted P(correct)). In a pool where one
    model is best on most queries, routing plateaus within a few epochs, at the model that predicts
    ability and little else; the loss keeps rewarding per-query structure (the registry trains on it).
    `max_seconds` stops early on wall time (then runs are no longer bitwise reproducible)."""
    if select not in ("routing", "loss"):
        raise ValueError(f"select must be 'routing' or 'loss', not {select!r}")
    started = time.perf_counter()
    settings = {k: v for k, v in locals().items() if k not in ("data", "train_evals", "val_queries", "config", "started")}
    settings["device"] = str(settings["device"])
    config = config or recommended_config(data.query_vectors.shape[1])
    if config.query_dim != data.query_vectors.shape[1]:
        raise ValueError(f"config.query_dim={config.query_dim} but query vectors have {data.query_vectors.shape[1]}")
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        device = torch.device(device) if device is not None else default_device()
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        locus = Locus(config).to(device)

        per_model = evals_by_model(data, train_evals)
        trainable = np.array([m for m in range(data.n_models) if len(per_model[m]) >= 2], dtype=np.int64)
        if len(trainable) == 0:
            raise ValueError("no model has two or more training evaluations")
        val_queries = np.asarray(val_queries, dtype=np.int64)
        val_truth = data.dense()[:, val_queries]
        has_val = len(val_queries) > 0 and not np.isnan(val_truth).all()

        phi_all = torch.from_numpy(data.query_vectors).to(device)  # (Q, D)
        qidx = [data.query_index[e] for e in per_model]
        ys = [data.scores[e] for e in per_model]
        optimizer = torch.optim.AdamW(
            [
                {"params": locus.encoder.parameters(), "lr": lr_encoder},
                {"params": locus.predictor.parameters(), "lr": lr_predictor},
            ],
            weight_decay=weight_decay,
        )

        result = TrainResult(locus=locus, config=config, settings=settings)
        ema_locus = copy.deepcopy(locus) if ema else None  # exponential moving average of the weights
        watched = ema_locus if ema_locus is not None else locus  # the weights validated and returned
        steps = 0
        best_state = copy.deepcopy(watched.state_dict())
        best, best_epoch, since_best, best_routing = -np.inf, 0, 0, float("nan")
        recent: list[float] = []  # the last `select_window` validation routings
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=epochs, desc="LOCUS", unit="ep", leave=False)
        for epoch in range(1, epochs + 1):
            locus.train()
            sigma = noise[0] + (noise[1] - noise[0]) * (epoch - 1) / max(1, epochs - 1)
            order = rng.permutation(trainable)
            losses = []
            for start in range(0, len(order), models_per_batch):
                batch = order[start : start + models_per_batch]
                n_avail = min(len(qidx[m]) for m in batch)
                size = _sample_size(rng, min(enc_min, n_avail - 1), max(1, min(enc_max, n_avail - dec_min)))
                enc_q, enc_y, dec_q, dec_y = [], [], [], []
                for m in batch:
                    perm = rng.permutation(len(qidx[m]))
                    k = min(size, len(perm) - 1)  # leave at least one evaluation for the loss
                    enc, dec = perm[:k], perm[k : k + dec_size]
                    enc_q.append(qidx[m][enc]), enc_y.append(ys[m][enc])
                    dec_q.append(qidx[m][dec]), dec_y.append(ys[m][dec])
                eq, epad = _pad(enc_q, 0, np.int64)
                ey, _ = _pad(enc_y, 0.0, np.float32)
                dq, dpad = _pad(dec_q, 0, np.int64)
                dy, _ = _pad(dec_y, 0.0, np.float32)
                eq, epad, ey = (torch.from_numpy(a).to(device) for a in (eq, epad, ey))
                dq, dpad, dy = (torch.from_numpy(a).to(device) for a in (dq, dpad, dy))

                phi_enc = phi_all[eq]  # (B, n_enc, D)
                phi_dec = phi_all[dq]  # (B, n_dec, D)
                if sigma > 0:
                    phi_enc = phi_enc + sigma * torch.randn_like(phi_enc)
                    phi_dec = phi_dec + sigma * torch.randn_like(phi_dec)
                z = locus.encoder(phi_enc, ey, epad)  # (B, d)
                u, b = locus.predictor.project_queries(phi_dec)  # (B, n_dec, g), (B, n_dec)
                logits = locus.predictor.logits(z[:, None, :], u, b)  # (B, n_dec)
                target = dy * (1 - label_smoothing) + 0.5 * label_smoothing
                valid = ~dpad
                loss = F.binary_cross_entropy_with_logits(logits[valid], target[valid])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if grad_clip:
                    torch.nn.utils.clip_grad_norm_(locus.parameters(), grad_clip)
                optimizer.step()
                if label_smoothing:  # the history records BCE on the observed labels, comparable across settings
                    with torch.no_grad():
                        loss = F.binary_cross_entropy_with_logits(logits[valid], dy[valid])
                losses.append(loss.item())
                if ema_locus is not None:
                    steps += 1
                    decay = min(ema, (1 + steps) / (10 + steps))  # warm-up: early averages stay short
                    with torch.no_grad():
                        for pe, pr in zip(ema_locus.parameters(), locus.parameters()):
                            pe.lerp_(pr, 1 - decay)
                        for be, br in zip(ema_locus.buffers(), locus.buffers()):
                            be.copy_(br)

            record = {"epoch": epoch, "loss": float(np.mean(losses)), "val_routing": None,
                      "seconds": time.perf_counter() - started}
            out_of_time = max_seconds is not None and record["seconds"] > max_seconds
            if has_val and (epoch % eval_every == 0 or epoch == epochs or out_of_time):
                acc, bce = _validation(watched, data, per_model, val_queries, val_truth)
                record["val_routing"], record["val_loss"] = acc, bce
                recent = (recent + [acc if select == "routing" else -bce])[-max(1, select_window):]
                smoothed = float(np.mean(recent))  # a moving average: a lucky single peak is not picked
                if smoothed > best:
                    best, best_epoch, since_best = smoothed, epoch, 0
                    best_routing = acc
                    best_state = copy.deepcopy(watched.state_dict())
                else:
                    since_best += eval_every
            result.history.append(record)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.4f}", val=f"{best_routing:.4f}", best_ep=best_epoch)
            if out_of_time or (has_val and since_best >= patience):
                break
        if bar is not None:
            bar.close()
        if has_val:
            locus.load_state_dict(best_state)
        elif ema_locus is not None:
            locus.load_state_dict(ema_locus.state_dict())
        else:
            best_epoch = result.history[-1]["epoch"]
        locus.eval()
        result.best_epoch = best_epoch
        result.best_val_routing = best_routing if has_val else float("nan")
        result.seconds = time.perf_counter() - started
        return result
    finally:
        torch.set_num_threads(old_threads)
