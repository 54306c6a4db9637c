"""Joint training of LOCUS's F and G (paper, section 2.3); inference (embed, predict) is encoder.inference.

Each step takes a mini-batch of models; for each model m it draws, from m's training evaluations, a
random encoder subset S_enc (builds z_m = F(S_enc)) and a DISJOINT decoder batch S_dec on which the
loss BCE(sigmoid(G(z_m, phi(x))), y) is taken. The size of S_enc is drawn afresh every step
(log-uniform between `enc_min` and `enc_max`), so F learns to embed from a handful of evaluations as
well as from a thousand, and every step shows a new view of every model. Query vectors get Gaussian
noise and the BCE targets are smoothed toward 0.5. AdamW, separate learning rates for F and G.
Optionally (`view_weight` > 0) a second encoder subset S_view, disjoint from S_enc, is embedded too and
an InfoNCE term asks z_m(S_enc) to be nearer z_m(S_view) than any other model's z(S_view) in the batch:
two samples of one model's evaluations should land together, which is what self-retrieval measures.

Every knob lives in one `TrainConfig`. There is one training loop, `_fit`: it runs a step per
mini-batch, `validate` every `eval_every` epochs, and a `Selector` keeps the best weights and decides
when to stop; `train_locus` runs it with `train_step`, and the multi-process case (`_train_rank`)
wraps the same loop, sharing every step out between processes. One
epoch = every model once (one step when `models_per_batch` >= number of models). With `nproc` > 1,
that many processes share every step (see "The same loop in several processes" below).

Selection watches the validation BCE by default, not routing accuracy: in a pool where one model is
best on most queries (or with skewed labels, few queries, or holes), routing accuracy reaches its
plateau at the first validation, where the predictor knows only each model's overall level and
predicts the base rate everywhere; the loss keeps rewarding per-query structure. No selection before
`min_epochs`, early stopping after `patience` epochs or `patience_seconds` without a relative
improvement of `min_delta`, and a wall-clock cap `max_seconds`. Measurements behind the defaults are
in docs/results (scripts/bench_training.py), not here.

Seeded: `torch.manual_seed(seed)` (initialisation, dropout, noise) and a numpy Generator (subsets);
on CPU with a fixed thread count the same seed and data give bitwise the same weights, as long as no
time limit ends the run.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Callable, Literal, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from encoder.data import EvalData, evals_by_model
from encoder.inference import embed_models, pad_rows, predict
from encoder.locus import Locus, LocusConfig, default_device
from encoder.metrics import routing_accuracy

__all__ = ["TrainConfig", "TrainResult", "TrainingError", "Validation", "Progress", "Selector", "train_locus",
           "train_step", "validate", "noisy_projections", "recommended_config", "embedding_spread",
           "collapse_warnings"]


def recommended_config(query_dim: int) -> LocusConfig:
    """The default architecture: smaller than the paper's (d=128, r=64, L=2), with a soft-topic term
    (16 topics), a 16-d query path in G and the per-query difficulty b(phi). The measurements behind
    it are produced by scripts/tune_locus.py."""
    return LocusConfig(query_dim=query_dim, d=64, latents=16, blocks=1, heads=4, predictor_hidden=64,
                       dropout=0.1, predictor_d=16, topics=16, difficulty=True)


def _sample_size(rng: np.random.Generator, low: int, high: int) -> int:
    """Log-uniform integer in [low, high]."""
    if high <= low:
        return max(1, high)
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _optimizer(locus: Locus, cfg: "TrainConfig") -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        [
            {"params": locus.encoder.parameters(), "lr": cfg.lr_encoder},
            {"params": locus.predictor.parameters(), "lr": cfg.lr_predictor},
        ],
        weight_decay=cfg.weight_decay,
    )


def _trainable(per_model: Sequence[np.ndarray]) -> np.ndarray:
    """Models with at least two training evaluations (a set of one teaches the encoder nothing)."""
    return np.array([m for m, e in enumerate(per_model) if len(e) >= 2], dtype=np.int64)


class TrainingError(RuntimeError):
    """Training could not finish: a training process failed, died or stopped answering (multi-process
    training). The message names the process and carries its traceback."""


# ---------------------------------------------------------------------------------------------
# One config, the result, and what validation measures
# ---------------------------------------------------------------------------------------------

SELECT_ON = ("loss", "auc", "routing")


@dataclass(frozen=True)
class TrainConfig:
    """Every training knob in one place; the defaults are the ones `registry train`, `registry
    evaluate`, the demo and the report scripts use (override with `dataclasses.replace`)."""

    # how long: at most `epochs`, never selected before `min_epochs`, stopped after `patience` epochs
    # without a relative improvement of `min_delta` in the watched value. Budgeted in epochs by default
    # so that a busy machine gives the same encoder; `patience_seconds` / `max_seconds` add wall-clock
    # limits when asked (None: none, and runs are bitwise reproducible)
    epochs: int = 4000
    min_epochs: int = 100
    patience: int = 500
    patience_seconds: float | None = None
    min_delta: float = 1e-3
    max_seconds: float | None = None
    eval_every: int = 10
    select: Literal["loss", "auc", "routing"] = "loss"  # what selection and early stopping watch
    # what one step sees
    models_per_batch: int = 128
    enc_min: int = 16  # S_enc size, log-uniform in [enc_min, enc_max]
    enc_max: int = 1024
    dec_size: int = 256  # S_dec, the evaluations the loss is taken on
    dec_min: int = 32
    # the optimiser and regularisers
    lr_encoder: float = 2e-3
    lr_predictor: float = 2e-3
    weight_decay: float = 5e-2
    noise: float = 0.1  # std of the Gaussian noise on query vectors
    label_smoothing: float = 0.1
    grad_clip: float | None = 1.0
    view_weight: float = 0.0  # weight of the InfoNCE term between two disjoint samples of each model
    view_temperature: float = 0.1
    threads: int | None = 2  # torch threads while training (None: leave torch's setting), all processes together
    # processes training together (torch.distributed, gloo on CPU, NCCL with one GPU each; see "The same
    # loop in several processes" below); every step's models are split between them and their gradients summed, so one step is
    # the single-process step on the same batch. 1: this process, the plain loop
    nproc: int = 1

    def __post_init__(self) -> None:
        if self.select not in SELECT_ON:
            raise ValueError(f"select must be one of {', '.join(SELECT_ON)}, not {self.select!r}")
        for item in fields(self):  # a NaN passes every comparison below, an infinity most (inf view_weight broke
            value = getattr(self, item.name)  # a Cholesky mid-run)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{item.name} must be a finite number, not {value}")
        for name in ("epochs", "eval_every", "models_per_batch", "enc_min", "enc_max", "dec_size", "dec_min",
                     "nproc"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.min_epochs < 0 or self.patience < 1:
            raise ValueError("min_epochs must be >= 0 and patience >= 1")
        for name in ("max_seconds", "patience_seconds"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None, not {value}")
        if not 0.0 <= self.label_smoothing < 1.0 or self.noise < 0 or self.view_weight < 0:
            raise ValueError("label_smoothing must lie in [0, 1); noise and view_weight must be >= 0")
        if self.view_temperature <= 0:
            raise ValueError("view_temperature must be positive")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "TrainConfig":
        """From a JSON object (e.g. a checkpoint's training.json); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s): {', '.join(unknown)}")
        return cls(**raw)


@dataclass(frozen=True)
class Validation:
    loss: float  # mean BCE of the predicted P(correct) on the observed validation cells
    auc: float  # ROC AUC of P(correct) against (score >= 0.5) over those cells (NaN: one class only)
    routing: float  # routing accuracy on the validation queries
    chance_loss: float  # BCE of predicting the training base rate everywhere: a predictor that learnt nothing


@dataclass(frozen=True)
class Progress:
    """What a progress callback receives after every validation."""

    epoch: int
    epochs: int
    loss: float  # mean training BCE of this epoch (on the unsmoothed labels)
    validation: Validation
    best_epoch: int
    best_loss: float  # validation loss at best_epoch
    improved: bool
    seconds: float


@dataclass
class TrainResult:
    locus: Locus  # the weights of the selected epoch, in eval mode
    config: LocusConfig
    train_config: TrainConfig
    # per epoch {"epoch", "loss", "seconds"}, with {"val_loss", "val_auc", "val_routing"} when validated
    history: list[dict] = field(default_factory=list)
    best_epoch: int = -1
    best: Validation | None = None  # validation at best_epoch (None without validation queries)
    stopped: str = ""  # why training ended: epochs, patience, patience_seconds, max_seconds
    seconds: float = 0.0

    @property
    def best_val_routing(self) -> float:
        return self.best.routing if self.best is not None else float("nan")


class Selector:
    """Keeps the best validation and says when to stop. Lower `score` is better (the loss, or minus
    AUC / routing). Nothing before `min_epochs` is kept once a later validation exists; the patience
    clocks restart only on a relative improvement of `min_delta`, the best weights on any improvement."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.best_score = math.inf
        self.best_epoch = 0
        self.best: Validation | None = None
        self._ref = math.inf  # the score the patience clocks measure improvement against
        self._ref_epoch, self._ref_seconds = 0, 0.0

    def score(self, v: Validation) -> float:
        value = {"loss": v.loss, "auc": -v.auc, "routing": -v.routing}[self.cfg.select]
        return math.inf if math.isnan(value) else value

    def update(self, epoch: int, seconds: float, v: Validation) -> bool:
        """Record a validation; True when it is the new best (its weights should be kept)."""
        s = self.score(v)
        warmup_over = epoch >= self.cfg.min_epochs and self.best_epoch < self.cfg.min_epochs
        if warmup_over:  # the first validation past min_epochs replaces whatever came before
            self.best_score = self._ref = math.inf
        improved = s < self.best_score or self.best is None
        if improved:
            self.best_score, self.best_epoch, self.best = s, epoch, v
        if s < self._ref - self.cfg.min_delta * abs(self._ref) or warmup_over or math.isinf(self._ref):
            self._ref, self._ref_epoch, self._ref_seconds = s, epoch, seconds
        return improved

    def stop_reason(self, epoch: int, seconds: float) -> str | None:
        cfg = self.cfg
        if cfg.max_seconds is not None and seconds > cfg.max_seconds:
            return "max_seconds"
        if epoch < cfg.min_epochs or self.best is None:
            return None
        if epoch - self._ref_epoch >= cfg.patience:
            return "patience"
        if cfg.patience_seconds is not None and seconds - self._ref_seconds > cfg.patience_seconds:
            return "patience_seconds"
        return None


# ---------------------------------------------------------------------------------------------
# One step, validation, and the loop
# ---------------------------------------------------------------------------------------------


@dataclass
class _Batch:
    enc_q: torch.Tensor  # (B, n_enc) query indices
    enc_y: torch.Tensor  # (B, n_enc) scores
    enc_pad: torch.Tensor  # (B, n_enc) True = padding
    dec_q: torch.Tensor  # (B, n_dec)
    dec_y: torch.Tensor  # (B, n_dec)
    dec_pad: torch.Tensor  # (B, n_dec)
    view: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # (q, y, pad) of S_view, each (B, n_view)


def _sample_batch(rng: np.random.Generator, batch: np.ndarray, qidx, ys, cfg: TrainConfig, device) -> _Batch:
    """For each model: S_enc, a disjoint S_dec and (view_weight > 0) S_view, disjoint from S_enc."""
    n_avail = min(len(qidx[m]) for m in batch)
    size = _sample_size(rng, min(cfg.enc_min, n_avail - 1), max(1, min(cfg.enc_max, n_avail - cfg.dec_min)))
    if cfg.view_weight > 0:
        size = max(1, min(size, n_avail // 2))  # room for two disjoint sets of the same size
    enc_q, enc_y, dec_q, dec_y, view_q, view_y = [], [], [], [], [], []
    for m in batch:
        perm = rng.permutation(len(qidx[m]))
        k = min(size, len(perm) - 1)  # leave at least one evaluation for the loss
        enc, dec = perm[:k], perm[k : k + cfg.dec_size]
        enc_q.append(qidx[m][enc]), enc_y.append(ys[m][enc])
        dec_q.append(qidx[m][dec]), dec_y.append(ys[m][dec])
        if cfg.view_weight > 0:  # may overlap S_dec: only the encoder sees it, never the loss's labels
            view = perm[k : 2 * k]
            view_q.append(qidx[m][view]), view_y.append(ys[m][view])

    def tensors(q_rows, y_rows):
        q, pad = pad_rows(q_rows, 0, np.int64)
        y, _ = pad_rows(y_rows, 0.0, np.float32)
        return tuple(torch.from_numpy(a).to(device) for a in (q, y, pad))

    eq, ey, epad = tensors(enc_q, enc_y)
    dq, dy, dpad = tensors(dec_q, dec_y)
    return _Batch(eq, ey, epad, dq, dy, dpad, tensors(view_q, view_y) if view_q else None)


def noisy_projections(groups: list[tuple[list[torch.nn.Linear], torch.Tensor]], phi_all: torch.Tensor,
                      sigma: float) -> list[list[torch.Tensor]]:
    """For each (linears, idx) group, the outputs of `linears` on phi_all[idx] + N(0, sigma^2 I) noise
    drawn afresh for every element of idx, without materialising (..., D) noisy vectors.

    The layers are linear, so W (phi + e) = W phi + W e with W e ~ N(0, sigma^2 W W^T): the clean part
    is one matmul over the distinct queries of all groups (every distinct layer once), the noise is
    drawn in the k output dimensions (Cholesky factor of the k x k covariance) when k < D, else from e
    itself. The same distribution as noising phi, at a fraction of the cost for wide query vectors
    (D = 768, k <= 128)."""
    layers: list[torch.nn.Linear] = []
    for linears, _ in groups:
        layers += [lin for lin in linears if all(lin is not seen for seen in layers)]
    W = torch.cat([lin.weight for lin in layers])  # (K, D)
    bias = torch.cat([lin.bias if lin.bias is not None else W.new_zeros(lin.out_features) for lin in layers])
    starts = np.cumsum([0] + [lin.out_features for lin in layers])
    used, inverse = torch.unique(torch.cat([idx.reshape(-1) for _, idx in groups]), return_inverse=True)
    # index_select, not phi_all[used]: the same rows, gathered in half the time
    clean = torch.index_select(phi_all, 0, used) @ W.T + bias  # (U, K), every distinct query once
    out, offset = [], 0
    for linears, idx in groups:
        rows = inverse[offset : offset + idx.numel()].view(idx.shape)
        offset += idx.numel()
        at = [next(j for j, seen in enumerate(layers) if seen is lin) for lin in linears]
        if at == list(range(at[0], at[0] + len(at))):
            # the group's layers side by side (always, for LOCUS's own groups): a view of their columns,
            # where a gather would copy (U, k) forward and scatter it back in the backward pass
            cols = slice(int(starts[at[0]]), int(starts[at[-1] + 1]))
        else:
            cols = torch.cat([torch.arange(starts[i], starts[i + 1]) for i in at])
        Wg = W[cols]  # (k, D)
        part = F.embedding(rows, clean[:, cols])  # (..., k); embedding, not indexing: its backward is deterministic
        if sigma > 0:
            k, D = Wg.shape
            if k < D:
                cov = sigma**2 * (Wg @ Wg.T)  # (k, k)
                jitter = 1e-6 * cov.diagonal().mean().detach() + 1e-12
                chol = torch.linalg.cholesky(cov + jitter * torch.eye(k, device=W.device, dtype=W.dtype))
                part = part + torch.randn_like(part) @ chol.T
            else:
                part = part + sigma * torch.randn(*idx.shape, D, device=W.device, dtype=W.dtype) @ Wg.T
        out.append(list(part.split([lin.out_features for lin in linears], dim=-1)))
    return out


def _forward(locus: Locus, batch: _Batch, phi_all: torch.Tensor,
             cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The training forward pass on one mini-batch -> (logits (B, n_dec), z (B, d), z_view (B, d) or
    None: S_view's embeddings, when view_weight > 0 and B > 1). Shared by `train_step` and the
    multi-process `_shard_step`."""
    enc, pred = locus.encoder, locus.predictor
    groups = [(enc.query_linears(), batch.enc_q), (pred.query_linears(), batch.dec_q)]
    if batch.view is not None:
        groups.append((enc.query_linears(), batch.view[0]))
    parts = noisy_projections(groups, phi_all, cfg.noise)
    z = enc.embed(enc.project_linear(parts[0]), batch.enc_y, batch.enc_pad)  # (B, d)
    u, b = pred.project_linear(parts[1])  # (B, n_dec, g), (B, n_dec)
    logits = locus.predictor.logits(z[:, None, :], u, b)  # (B, n_dec)
    z_view = None
    if batch.view is not None and z.shape[0] > 1:
        _, y, pad = batch.view
        z_view = enc.embed(enc.project_linear(parts[2]), y, pad)  # (B, d)
    return logits, z, z_view


def _view_terms(z: torch.Tensor, z_view: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    """The two InfoNCE cross-entropies (z -> z_view and back), summed; the loss takes half of it."""
    sim = F.normalize(z, dim=-1) @ F.normalize(z_view, dim=-1).T / cfg.view_temperature  # (B, B)
    own = torch.arange(z.shape[0], device=z.device)
    return F.cross_entropy(sim, own) + F.cross_entropy(sim.T, own)


def train_step(locus: Locus, optimizer: torch.optim.Optimizer, batch: _Batch, phi_all: torch.Tensor,
               cfg: TrainConfig) -> float:
    """One optimiser step on one mini-batch -> the BCE on the unsmoothed labels (for the history)."""
    locus.train()
    logits, z, z_view = _forward(locus, batch, phi_all, cfg)
    valid = ~batch.dec_pad
    target = batch.dec_y * (1 - cfg.label_smoothing) + 0.5 * cfg.label_smoothing
    loss = F.binary_cross_entropy_with_logits(logits[valid], target[valid])
    if z_view is not None:
        loss = loss + cfg.view_weight * 0.5 * _view_terms(z, z_view, cfg)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(locus.parameters(), cfg.grad_clip)
    optimizer.step()
    with torch.no_grad():
        return float(F.binary_cross_entropy_with_logits(logits[valid], batch.dec_y[valid]).item())


def _bce(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p.astype(np.float64), 1e-6, 1 - 1e-6)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()) if len(y) else float("nan")


def validate(locus: Locus, data: EvalData, per_model: Sequence[np.ndarray], val_queries: np.ndarray,
             val_truth: np.ndarray, base_rate: float) -> Validation:
    """Embed every model from its training evaluations and score P(correct) on the validation queries."""
    from sklearn.metrics import roc_auc_score

    z = embed_models(locus, data, per_model)
    pred = predict(locus, np.nan_to_num(z), data.query_vectors[val_queries])  # (M, V)
    seen = ~np.isnan(val_truth)
    p, y = pred[seen], val_truth[seen].astype(np.float64)
    positive = y >= 0.5
    auc = float(roc_auc_score(positive, p)) if 0 < positive.sum() < len(positive) else float("nan")
    return Validation(loss=_bce(p, y), auc=auc, routing=routing_accuracy(pred, val_truth),
                      chance_loss=_bce(np.full(len(y), base_rate), y))


def train_locus(
    data: EvalData,
    train_evals: np.ndarray,
    val_queries: np.ndarray,
    *,
    config: TrainConfig | None = None,
    locus_config: LocusConfig | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> TrainResult:
    """Train F and G jointly on `train_evals` (evaluation indices into data, e.g. at most N per model
    from the training queries); select and early-stop on `val_queries` as `config` says.

    locus_config: the architecture (None: `recommended_config`). progress: called after every
    validation (e.g. to print a line)."""
    cfg = config or TrainConfig()
    started = time.perf_counter()
    locus_config = locus_config or recommended_config(data.query_vectors.shape[1])
    if locus_config.query_dim != data.query_vectors.shape[1]:
        raise ValueError(f"config.query_dim={locus_config.query_dim} but query vectors have "
                         f"{data.query_vectors.shape[1]}")
    if cfg.nproc > 1:
        return _train_distributed(data, train_evals, val_queries, cfg, locus_config, seed, device, progress)
    old_threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        device = torch.device(device) if device is not None else default_device()
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        locus = Locus(locus_config).to(device)
        phi_all = torch.from_numpy(data.query_vectors).to(device)  # (Q, D)
        optimizer = _optimizer(locus, cfg)
        fit = _fit(locus, data, train_evals, val_queries, cfg, rng, device,
                   step=lambda batch: train_step(locus, optimizer, batch, phi_all, cfg),
                   clock=lambda: time.perf_counter() - started, on_validation=progress)
        return TrainResult(locus=locus, config=locus_config, train_config=cfg, history=fit.history,
                           best_epoch=fit.best_epoch, best=fit.best, stopped=fit.stopped,
                           seconds=time.perf_counter() - started)
    finally:
        torch.set_num_threads(old_threads)


@dataclass
class _Fit:
    history: list[dict]
    best_epoch: int
    best: Validation | None
    stopped: str


def _fit(locus: Locus, data: EvalData, train_evals: np.ndarray, val_queries: np.ndarray, cfg: TrainConfig,
         rng: np.random.Generator, device, *, step: Callable[[_Batch], float], clock: Callable[[], float],
         lead: bool = True, on_validation: Callable[[Progress], None] | None = None,
         between: Callable[[int], None] | None = None, agree: Callable[[str | None], str | None] | None = None) -> _Fit:
    """The training loop, whatever runs the steps: every epoch draws the models' order and batches
    from `rng`, `step(batch)` takes one optimiser step (-> the batch's BCE); the lead validates
    every `eval_every` epochs, keeps the best weights in a Selector and decides when to stop. On the
    lead `locus` ends holding the selected weights, in eval mode.

    The multi-process wrapper plugs in here (the rest is the single-process case's defaults):
    lead: this process validates and selects (rank 0); on_validation(progress) after each
    validation; between(epoch) after an epoch without one (a heartbeat); agree(stop) -> the stop
    decision every process acts on (a broadcast of the lead's). clock(): seconds since training began."""
    per_model = evals_by_model(data, train_evals)
    trainable = _trainable(per_model)
    if len(trainable) == 0:
        raise ValueError("no model has two or more training evaluations")
    has_val = False
    if lead:
        val_queries = np.asarray(val_queries, dtype=np.int64)
        val_truth = data.dense()[:, val_queries]
        has_val = len(val_queries) > 0 and not np.isnan(val_truth).all()
        base_rate = float(data.scores[np.asarray(train_evals, dtype=np.int64)].mean())
        selector = Selector(cfg)
        best_state = copy.deepcopy(locus.state_dict())
    qidx = [data.query_index[e] for e in per_model]
    ys = [data.scores[e] for e in per_model]
    history: list[dict] = []
    stopped = "epochs"
    for epoch in range(1, cfg.epochs + 1):
        order = rng.permutation(trainable)
        losses = [step(_sample_batch(rng, order[s : s + cfg.models_per_batch], qidx, ys, cfg, device))
                  for s in range(0, len(order), cfg.models_per_batch)]
        stop = None
        if lead:
            record = {"epoch": epoch, "loss": float(np.mean(losses)), "seconds": clock()}
            out_of_time = cfg.max_seconds is not None and record["seconds"] > cfg.max_seconds
            if has_val and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs or out_of_time):
                v = validate(locus, data, per_model, val_queries, val_truth, base_rate)
                record.update(val_loss=v.loss, val_auc=v.auc, val_routing=v.routing)
                improved = selector.update(epoch, record["seconds"], v)
                if improved:
                    best_state = copy.deepcopy(locus.state_dict())
                if on_validation is not None:
                    on_validation(Progress(epoch, cfg.epochs, record["loss"], v, selector.best_epoch,
                                           selector.best.loss, improved, clock()))
            elif between is not None:
                between(epoch)
            history.append(record)
            stop = selector.stop_reason(epoch, clock()) if has_val else ("max_seconds" if out_of_time else None)
        if agree is not None:
            stop = agree(stop)
        if stop:
            stopped = stop
            break
    if not lead:
        return _Fit(history, -1, None, stopped)
    if has_val:
        locus.load_state_dict(best_state)
        best_epoch, best = selector.best_epoch, selector.best
    else:
        best_epoch, best = history[-1]["epoch"], None
    locus.eval()
    return _Fit(history, best_epoch, best, stopped)


# ---------------------------------------------------------------------------------------------
# The same loop in several processes (TrainConfig.nproc > 1)
# ---------------------------------------------------------------------------------------------
#
# `encoder.distributed.run_in_group` spawns the processes (gloo on CPU, NCCL with one GPU each). Every
# process draws the same epoch order and samples the same whole mini-batch from one seeded numpy
# Generator (the single-process draws), then keeps its own contiguous slice of the batch's models.
# Gradients are summed by one all-reduce per step, by hand rather than through
# DistributedDataParallel: the step is not a module's forward (noisy projections read the linear
# layers' weights directly, batches are ragged), and each process's loss is its cells' BCE sum over the
# WHOLE batch's cell count, so the summed gradient is the single-process step's gradient (up to float
# order and the noise/dropout draws, which differ per process); every process then clips and steps
# identically. The InfoNCE view term contrasts a model only with the models of its own slice. Rank 0
# validates, selects and decides when to stop, and broadcasts the decision so all processes stop at
# the same epoch; it sends progress, and at the end the selected weights, to the parent.

HEARTBEAT_SECONDS = 1.0
STOPS = ("", "patience", "patience_seconds", "max_seconds")  # the stop decision, broadcast as its index


def _train_distributed(data: EvalData, train_evals: np.ndarray, val_queries: np.ndarray, cfg: TrainConfig,
                       locus_config: LocusConfig, seed: int, device: str | torch.device | None,
                       progress: Callable[[Progress], None] | None) -> TrainResult:
    """train_locus in cfg.nproc processes."""
    from encoder.distributed import GroupError, run_in_group

    started_wall, started = time.time(), time.perf_counter()
    per_model = evals_by_model(data, train_evals)
    trainable = sum(len(e) >= 2 for e in per_model)
    if trainable == 0:
        raise ValueError("no model has two or more training evaluations")
    if cfg.nproc > min(trainable, cfg.models_per_batch):
        raise ValueError(f"nproc={cfg.nproc} is more than the {min(trainable, cfg.models_per_batch)} models of one "
                         f"training step ({trainable} models with training evaluations, models_per_batch="
                         f"{cfg.models_per_batch}): every process needs a model per step")
    device = torch.device(device) if device is not None else default_device()
    threads = max(1, (cfg.threads or torch.get_num_threads()) // cfg.nproc)  # the processes share the cores

    def on_message(kind: str, body) -> None:
        if kind == "progress" and progress is not None:
            progress(body)

    args = (data, np.asarray(train_evals, dtype=np.int64), np.asarray(val_queries, dtype=np.int64), cfg,
            locus_config, seed, started_wall)
    try:
        state, history, best_epoch, best, stopped = run_in_group(
            _train_rank, args, nproc=cfg.nproc, device_type=device.type, threads=threads, on_message=on_message,
            name="training")
    except GroupError as err:
        raise TrainingError(str(err)) from err
    locus = Locus(locus_config)
    locus.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    locus.to(device).eval()
    return TrainResult(locus=locus, config=locus_config, train_config=cfg, history=history, best_epoch=best_epoch,
                       best=best, stopped=stopped, seconds=time.perf_counter() - started)


def _shard(batch: _Batch, rank: int, world: int) -> _Batch | None:
    """This process's contiguous slice of the batch's models, padding trimmed to the slice's longest
    row; None when the batch has fewer models than processes and this one gets none."""
    rows = np.array_split(np.arange(batch.enc_q.shape[0]), world)[rank]
    if len(rows) == 0:
        return None
    lo, hi = int(rows[0]), int(rows[-1]) + 1

    def cut(q, y, pad):
        width = max(1, int((~pad[lo:hi]).sum(dim=1).max()))
        return q[lo:hi, :width], y[lo:hi, :width], pad[lo:hi, :width]

    return _Batch(*cut(batch.enc_q, batch.enc_y, batch.enc_pad), *cut(batch.dec_q, batch.dec_y, batch.dec_pad),
                  cut(*batch.view) if batch.view is not None else None)


def _shard_step(locus: Locus, optimizer: torch.optim.Optimizer, shard: _Batch | None, n_cells: int, n_models: int,
                phi_all: torch.Tensor, cfg: TrainConfig) -> float:
    """One optimiser step, every process on its slice of one batch of `n_models` models with
    `n_cells` loss cells in all -> the batch's BCE on the unsmoothed labels (all slices)."""
    locus.train()
    params = list(locus.parameters())
    optimizer.zero_grad(set_to_none=True)
    bce_sum = 0.0
    if shard is not None:
        logits, z, z_view = _forward(locus, shard, phi_all, cfg)
        valid = ~shard.dec_pad
        target = shard.dec_y * (1 - cfg.label_smoothing) + 0.5 * cfg.label_smoothing
        # the batch mean's share of this slice: summed over processes, the single-process loss
        loss = F.binary_cross_entropy_with_logits(logits[valid], target[valid], reduction="sum") / n_cells
        if z_view is not None:
            loss = loss + cfg.view_weight * 0.5 * _view_terms(z, z_view, cfg) * (z.shape[0] / n_models)
        loss.backward()
        with torch.no_grad():
            bce_sum = float(F.binary_cross_entropy_with_logits(logits[valid], shard.dec_y[valid], reduction="sum"))
    # One all-reduce: every gradient (zeros where this process has none), which parameters have one
    # on some process (AdamW skips a parameter without a gradient), and the BCE sum.
    flat = torch.cat([p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in params]
                     + [torch.tensor([float(p.grad is not None) for p in params] + [bce_sum],
                                     device=phi_all.device, dtype=params[0].dtype)])
    dist.all_reduce(flat)
    offset = 0
    n_params = len(params)
    has_grad = flat[-1 - n_params : -1]
    for i, p in enumerate(params):
        g = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
        p.grad = g.clone() if has_grad[i] > 0 else None
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
    optimizer.step()
    return float(flat[-1]) / n_cells


def _train_rank(rank: int, world: int, device: torch.device, send: Callable[[str, object], None], data: EvalData,
                train_evals: np.ndarray, val_queries: np.ndarray, cfg: TrainConfig, locus_config: LocusConfig,
                seed: int, t0: float):
    """One process of multi-process training: `_fit` with its steps shared out (`_shard_step`), rank 0
    as the lead, its stop decision broadcast -> on rank 0 (state dict as numpy arrays, history, best
    epoch, best Validation, stop reason)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)  # the same on every process: the same epoch order and batches
    locus = Locus(locus_config).to(device)
    for p in locus.parameters():  # the same seed gave the same weights; make sure of it
        dist.broadcast(p.data, 0)
    if rank:  # each process its own noise and dropout draws
        torch.manual_seed(seed * 1_000_003 + rank)
    phi_all = torch.from_numpy(data.query_vectors).to(device)  # (Q, D)
    optimizer = _optimizer(locus, cfg)
    decision = torch.zeros(1, dtype=torch.int64, device=device)
    last_beat = [0.0]

    def step(batch: _Batch) -> float:
        n_cells = int((~batch.dec_pad).sum())
        return _shard_step(locus, optimizer, _shard(batch, rank, world), n_cells, int(batch.enc_q.shape[0]),
                           phi_all, cfg)

    def on_validation(p: Progress) -> None:
        send("progress", p)
        last_beat[0] = time.monotonic()

    def between(epoch: int) -> None:
        if time.monotonic() - last_beat[0] > HEARTBEAT_SECONDS:
            send("heartbeat", epoch)
            last_beat[0] = time.monotonic()

    def agree(stop: str | None) -> str | None:
        if rank == 0:
            decision.fill_(STOPS.index(stop or ""))
        dist.broadcast(decision, 0)  # every process stops at the same epoch
        return STOPS[int(decision)] or None

    fit = _fit(locus, data, train_evals, val_queries, cfg, rng, device, step=step, clock=lambda: time.time() - t0,
               lead=rank == 0, on_validation=on_validation, between=between, agree=agree)
    if rank:
        return None
    state = {k: v.detach().cpu().numpy().copy() for k, v in locus.state_dict().items()}
    return state, fit.history, fit.best_epoch, fit.best, fit.stopped


# ---------------------------------------------------------------------------------------------
# Did the encoder collapse?
# ---------------------------------------------------------------------------------------------

SPREAD_RATIO_WARNING = 1.5  # models no farther apart than this many self-spreads: "within noise"
INDISTINCT_Z = 4.0  # two models' accuracies this many standard errors apart are different models
INDISTINCT_SHARE = 0.05  # warn when this share of the pairs (of different accuracy) sit within one self-spread
CHANCE_MARGIN = 0.01  # a validation loss within 1% of chance's has learnt nothing usable


@torch.no_grad()
def embedding_spread(locus: Locus, data: EvalData, per_model: Sequence[np.ndarray], *, seed: int = 0) -> dict:
    """How far apart models are, in units of how far apart two embeddings of one model are: each
    model embedded from two disjoint random halves of its evaluations (the self-spread), and from all
    of them (between models). -> {"self": median self distance, "between": median distance between
    distinct models, "ratio": between / self}."""
    from scipy.spatial.distance import pdist

    rng = np.random.default_rng(seed)
    usable = [m for m in range(data.n_models) if len(per_model[m]) >= 4]
    if len(usable) < 2:
        return {"self": float("nan"), "between": float("nan"), "ratio": float("nan")}
    halves = [rng.permutation(per_model[m]) for m in usable]
    first = [np.zeros(0, np.int64)] * data.n_models
    second = list(first)
    for m, h in zip(usable, halves):
        first[m], second[m] = np.sort(h[: len(h) // 2]), np.sort(h[len(h) // 2 :])
    za = embed_models(locus, data, first)[usable]
    zb = embed_models(locus, data, second)[usable]
    full = embed_models(locus, data, [per_model[m] if m in set(usable) else per_model[m][:0]
                                      for m in range(data.n_models)])[usable]
    self_d = float(np.median(np.linalg.norm(za - zb, axis=1)))
    distances = pdist(full)  # (P,) condensed: pairs (i, j), i < j, of `usable`
    between = float(np.median(distances))
    # Pairs the encoder puts within one self-spread although their accuracies differ beyond doubt: a median
    # over all pairs would hide a pool whose families each sat at one point
    accuracy = np.array([float(data.scores[per_model[m]].mean()) for m in usable])
    n = np.array([len(per_model[m]) for m in usable], np.float64)
    i, j = np.triu_indices(len(usable), k=1)
    se = np.sqrt(accuracy[i] * (1 - accuracy[i]) / n[i] + accuracy[j] * (1 - accuracy[j]) / n[j])
    differ = np.abs(accuracy[i] - accuracy[j]) > INDISTINCT_Z * np.maximum(se, 1e-9)
    merged = np.flatnonzero((distances <= self_d) & differ)
    return {"self": self_d, "between": between, "ratio": between / self_d if self_d > 0 else float("inf"),
            "indistinct_pairs": int(len(merged)), "pairs": int(len(distances)),
            "indistinct_examples": [[data.models[usable[i[p]]], data.models[usable[j[p]]]] for p in merged[:3]]}


def collapse_warnings(best: Validation | None, spread: dict | None) -> list[str]:
    """Plain-language warnings when the encoder learnt nothing usable."""
    out = []
    if best is not None and not math.isnan(best.loss) and best.loss >= best.chance_loss * (1 - CHANCE_MARGIN):
        out.append(f"validation loss {best.loss:.4f} is at chance ({best.chance_loss:.4f}, the loss of predicting "
                   "the base rate everywhere): the predictor learnt nothing beyond the label rate")
    if best is not None and not math.isnan(best.auc) and best.auc < 0.55:
        out.append(f"validation AUC {best.auc:.3f} is near 0.5: predicted P(correct) does not rank right above wrong")
    if spread is not None and not math.isnan(spread["ratio"]) and spread["ratio"] < SPREAD_RATIO_WARNING:
        out.append(f"embeddings are within noise of each other: distinct models lie a median {spread['between']:.4g} "
                   f"apart, two samples of one model {spread['self']:.4g} (ratio {spread['ratio']:.2f} < "
                   f"{SPREAD_RATIO_WARNING}); neighbours in this space mean little")
    merged = (spread or {}).get("indistinct_pairs") or 0
    if merged and merged >= INDISTINCT_SHARE * spread["pairs"]:
        shown = ", ".join(f"{a} ~ {b}" for a, b in spread["indistinct_examples"])
        out.append(f"{merged} of {spread['pairs']} model pairs lie within two samples of one model's spread "
                   f"({spread['self']:.4g}) although their accuracies differ by more than {INDISTINCT_Z:g} standard "
                   f"errors (e.g. {shown}): the encoder does not tell them apart, and route ranks them alike on "
                   "LOCUS; train longer (more epochs or patience) or with more evaluations per model")
    return out
