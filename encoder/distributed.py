"""Multi-process training of LOCUS with torch.distributed (`TrainConfig.nproc` > 1).

`train_distributed` spawns `nproc` worker processes (start method 'spawn': no forked torch state),
which join one process group over a TCP store the parent holds on 127.0.0.1 (port chosen by the
OS, never a fixed one): gloo on CPU, NCCL on CUDA with one GPU per process.

Every process draws the same epoch order and samples the same whole mini-batch from one seeded
numpy Generator (the single-process draws), then keeps its own contiguous slice of the batch's
models. Gradients are summed with one all-reduce per step, by hand rather than through
DistributedDataParallel: the step is not a module's forward (noisy projections read the linear
layers' weights directly, batches are ragged), and each process's loss is its cells' BCE sum over
the WHOLE batch's cell count, so the summed gradient is the single-process step's gradient (up to
float order and the noise/dropout draws, which differ per process). Every process then clips and
steps identically. The InfoNCE view term (view_weight > 0) contrasts a model only with the models of
its own slice: fewer negatives than in one process.

Validation, model selection and the stop decision happen on rank 0, which broadcasts the decision
so all processes stop at the same epoch; rank 0 sends progress, and at the end the selected
weights, back to the parent through a queue. A worker's exception, a worker that dies, or one silent
for `STALL_SECONDS` ends the run with a `TrainingError` in the parent; the parent then terminates
the remaining workers.
"""
from __future__ import annotations

import copy
import queue as queue_module
import time
import traceback
from datetime import timedelta
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from encoder.data import EvalData
from encoder.locus import Locus, LocusConfig, default_device
from encoder.training import (Progress, Selector, TrainConfig, TrainingError, TrainResult, _Batch, _forward,
                              _sample_batch, _view_terms, evals_by_model, validate)

__all__ = ["train_distributed", "STALL_SECONDS", "COLLECTIVE_TIMEOUT_SECONDS"]

HOST = "127.0.0.1"
COLLECTIVE_TIMEOUT_SECONDS = 600  # a collective waiting this long for a peer fails instead of hanging
STALL_SECONDS = COLLECTIVE_TIMEOUT_SECONDS + 120  # the parent gives up on workers silent this long
HEARTBEAT_SECONDS = 1.0
STOPS = ("", "patience", "patience_seconds", "max_seconds")  # the stop decision, broadcast as its index


def train_distributed(
    data: EvalData,
    train_evals: np.ndarray,
    val_queries: np.ndarray,
    *,
    config: TrainConfig,
    locus_config: LocusConfig,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> TrainResult:
    """`train_locus` with `config.nproc` processes; the same arguments and result (see the module
    docstring for what is shared and what differs from one process)."""
    cfg = config
    started_wall = time.time()
    started = time.perf_counter()
    nproc = cfg.nproc
    per_model = evals_by_model(data, train_evals)
    trainable = sum(len(e) >= 2 for e in per_model)
    if trainable == 0:
        raise ValueError("no model has two or more training evaluations")
    if nproc > min(trainable, cfg.models_per_batch):
        raise ValueError(f"nproc={nproc} is more than the {min(trainable, cfg.models_per_batch)} models of one "
                         f"training step ({trainable} models with training evaluations, models_per_batch="
                         f"{cfg.models_per_batch}): every process needs a model per step")
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda":
        backend = "nccl"
        if torch.cuda.device_count() < nproc:
            raise ValueError(f"nproc={nproc} needs {nproc} CUDA devices (one per process), "
                             f"{torch.cuda.device_count()} visible")
    elif device.type == "cpu":
        backend = "gloo"
    else:
        raise ValueError(f"multi-process training runs on cpu or cuda, not {device.type}")
    threads = max(1, (cfg.threads or torch.get_num_threads()) // nproc)  # nproc workers share the cores

    # The parent holds the rendezvous store: the OS picks a free port and no worker races for it.
    store = dist.TCPStore(HOST, 0, nproc + 1, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_SECONDS))
    ctx = mp.get_context("spawn")
    messages = ctx.Queue()
    payload = (data, np.asarray(train_evals, dtype=np.int64), np.asarray(val_queries, dtype=np.int64), cfg,
               locus_config, seed, device.type, backend, threads, started_wall)
    workers = [ctx.Process(target=_worker, args=(rank, nproc, store.port, payload, messages), daemon=True,
                           name=f"locus-train-{rank}") for rank in range(nproc)]
    done = None
    try:
        for w in workers:
            w.start()
        last_heard = time.monotonic()
        while done is None:
            try:
                kind, rank, body = messages.get(timeout=0.5)
            except queue_module.Empty:
                dead = [(r, w.exitcode) for r, w in enumerate(workers) if w.exitcode is not None and w.exitcode != 0]
                if dead:
                    raise TrainingError("training process " + ", ".join(f"{r} exited with code {c}" for r, c in dead)
                                        + " before training finished") from None
                if all(w.exitcode is not None for w in workers):
                    raise TrainingError("the training processes exited without a result") from None
                if time.monotonic() - last_heard > STALL_SECONDS:
                    raise TrainingError(f"no word from the training processes for {STALL_SECONDS} s") from None
                continue
            last_heard = time.monotonic()
            if kind == "error":
                # a peer's death shows up on the others as a broken connection: name the dead one first
                time.sleep(0.2)
                killed = [(r, w.exitcode) for r, w in enumerate(workers) if w.exitcode is not None and w.exitcode < 0]
                first = "".join(f"training process {r} exited with code {c}; " for r, c in killed)
                raise TrainingError(f"{first}training process {rank} of {nproc} failed:\n{body}")
            if kind == "progress" and progress is not None:
                progress(body)
            elif kind == "done":
                done = body
        for w in workers:
            w.join(timeout=30)
    finally:
        for w in workers:  # on an error, or a worker still alive after the result
            if w.is_alive():
                w.terminate()
                w.join(timeout=5)
            if w.is_alive():
                w.kill()
                w.join()
        messages.close()
        del store

    state, history, best_epoch, best, stopped = done
    locus = Locus(locus_config)
    locus.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    locus.to(device).eval()
    result = TrainResult(locus=locus, config=locus_config, train_config=cfg, history=history,
                         best_epoch=best_epoch, best=best, stopped=stopped)
    result.seconds = time.perf_counter() - started
    return result


def _worker(rank: int, world: int, port: int, payload: tuple, messages) -> None:
    """One training process: join the group, train, rank 0 sends the result; any exception goes to
    the parent as text, and the group is left in every case."""
    try:
        data, train_evals, val_queries, cfg, locus_config, seed, device_type, backend, threads, t0 = payload
        torch.set_num_threads(threads)
        device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = dist.TCPStore(HOST, port, world + 1, is_master=False,
                              timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_SECONDS))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_SECONDS))
        out = _train_rank(rank, world, data, train_evals, val_queries, cfg, locus_config, seed, device, t0,
                          lambda kind, body: messages.put((kind, rank, body)))
        if rank == 0:
            messages.put(("done", rank, out))
    except BaseException:  # noqa: BLE001 - everything goes to the parent, which raises it
        messages.put(("error", rank, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        messages.close()
        messages.join_thread()  # the message is flushed before the process ends


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


def _train_rank(rank: int, world: int, data: EvalData, train_evals: np.ndarray, val_queries: np.ndarray,
                cfg: TrainConfig, locus_config: LocusConfig, seed: int, device: torch.device, t0: float,
                send: Callable[[str, object], None]):
    """The training loop of one process (rank 0 validates, selects and decides when to stop) -> on
    rank 0 (state dict as numpy arrays, history, best epoch, best Validation, stop reason)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)  # the same on every process: the same epoch order and batches
    locus = Locus(locus_config).to(device)
    for p in locus.parameters():  # the same seed gave the same weights; make sure of it
        dist.broadcast(p.data, 0)
    if rank:  # each process its own noise and dropout draws
        torch.manual_seed(seed * 1_000_003 + rank)

    per_model = evals_by_model(data, train_evals)
    trainable = np.array([m for m in range(data.n_models) if len(per_model[m]) >= 2], dtype=np.int64)
    lead = rank == 0
    has_val = False
    if lead:
        val_truth = data.dense()[:, val_queries]
        has_val = len(val_queries) > 0 and not np.isnan(val_truth).all()
        base_rate = float(data.scores[train_evals].mean())
        selector = Selector(cfg)
        best_state = copy.deepcopy(locus.state_dict())
    phi_all = torch.from_numpy(data.query_vectors).to(device)  # (Q, D)
    qidx = [data.query_index[e] for e in per_model]
    ys = [data.scores[e] for e in per_model]
    optimizer = torch.optim.AdamW(
        [
            {"params": locus.encoder.parameters(), "lr": cfg.lr_encoder},
            {"params": locus.predictor.parameters(), "lr": cfg.lr_predictor},
        ],
        weight_decay=cfg.weight_decay,
    )
    history: list[dict] = []
    decision = torch.zeros(1, dtype=torch.int64, device=device)
    last_beat = 0.0
    stopped = "epochs"
    for epoch in range(1, cfg.epochs + 1):
        order = rng.permutation(trainable)
        losses = []
        for s in range(0, len(order), cfg.models_per_batch):
            batch = _sample_batch(rng, order[s : s + cfg.models_per_batch], qidx, ys, cfg, device)
            n_cells = int((~batch.dec_pad).sum())
            losses.append(_shard_step(locus, optimizer, _shard(batch, rank, world), n_cells,
                                      int(batch.enc_q.shape[0]), phi_all, cfg))
        if lead:
            record = {"epoch": epoch, "loss": float(np.mean(losses)), "seconds": time.time() - t0}
            out_of_time = cfg.max_seconds is not None and record["seconds"] > cfg.max_seconds
            if has_val and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs or out_of_time):
                v = validate(locus, data, per_model, val_queries, val_truth, base_rate)
                record.update(val_loss=v.loss, val_auc=v.auc, val_routing=v.routing)
                improved = selector.update(epoch, record["seconds"], v)
                if improved:
                    best_state = copy.deepcopy(locus.state_dict())
                send("progress", Progress(epoch, cfg.epochs, record["loss"], v, selector.best_epoch,
                                          selector.best.loss, improved, time.time() - t0))
                last_beat = time.monotonic()
            elif time.monotonic() - last_beat > HEARTBEAT_SECONDS:
                send("heartbeat", epoch)
                last_beat = time.monotonic()
            history.append(record)
            stop = selector.stop_reason(epoch, time.time() - t0) if has_val else (
                "max_seconds" if out_of_time else None)
            decision.fill_(STOPS.index(stop or ""))
        dist.broadcast(decision, 0)  # every process stops at the same epoch
        if int(decision):
            stopped = STOPS[int(decision)]
            break
    if not lead:
        return None
    if has_val:
        locus.load_state_dict(best_state)
        best_epoch, best = selector.best_epoch, selector.best
    else:
        best_epoch, best = history[-1]["epoch"], None
    state = {k: v.detach().cpu().numpy().copy() for k, v in locus.state_dict().items()}
    return state, history, best_epoch, best, stopped
