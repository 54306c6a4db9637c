"""Training robustness and cost on real data: does selection avoid a collapsed predictor, and how
long does `registry train`'s default take on a large pool?

    .venv/bin/python scripts/bench_training.py robustness [--max-seconds 120] [--seed 0]
    .venv/bin/python scripts/bench_training.py speed [--max-seconds 480]
    .venv/bin/python scripts/bench_training.py step-cost [--view-weight 0]
    .venv/bin/python scripts/bench_training.py epoch-cost [--steps 30] [--threads 1,2]

robustness: three pools cut from ../shared/data/mmlu-pro with the properties that made LOCUS stop at
a collapsed predictor (base-rate correctness accuracy) while IRT-Net did well:
  skewed   the hardest questions (lowest mean accuracy) until about 11% of labels are positive;
  partial  a random 81% of the model x question matrix observed;
  few      300 random questions.
Each runs the `registry evaluate` protocol (LOCUS with TrainConfig's defaults, capped at --max-seconds,
and IRT-Net) and prints a markdown table: LOCUS's correctness accuracy against the majority-class
rate and IRT-Net's, routing accuracy, best epoch and why training stopped.

step-cost: CPU seconds of one step and one validation on the joint pool (one thread, process time).

epoch-cost: what one epoch of default `registry train` costs on MMLU-Pro (32 models x 12,032 questions,
all-mpnet-base-v2 query vectors, seed-0 80/10/10 split, 1,024 evaluations per model, TrainConfig's
defaults: one step per epoch, a validation every 10 epochs): the same seeded sequence of --steps
training steps and 3 validations, timed as wall and as CPU (process) seconds for each torch thread
count in --threads, with the load average beside them (other work on the machine slows wall time,
and with more than one thread also inflates CPU time: threads spin waiting for each other), and the
time 1,000 and 4,000 epochs would take at that rate.

speed: the union of MMLU-Pro (32 models x 12,032 questions) and BFCL (71 x 1,460 tasks), 103 models,
all-mpnet-base-v2 query vectors, trained as `registry train` does (seed-0 80/10/10 split, 1024
evaluations per model, TrainConfig's defaults, 2 threads); prints wall time, epochs, seconds per
epoch, best epoch and why it stopped.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
ENCODER = "all-mpnet-base-v2"


def _mmlu_pro():
    from encoder.data import load_triple_dir

    return load_triple_dir(SHARED / "mmlu-pro", encoder=ENCODER)


def _subset(data, *, queries=None, keep_evals=None):
    """The same models on a subset of queries and/or evaluations (query indices renumbered)."""
    from encoder.data import EvalData

    keep = np.ones(len(data.scores), dtype=bool) if keep_evals is None else keep_evals.copy()
    if queries is None:
        queries = np.arange(data.n_queries)
    queries = np.sort(np.asarray(queries))
    new_index = np.full(data.n_queries, -1, dtype=np.int64)
    new_index[queries] = np.arange(len(queries))
    keep &= new_index[data.query_index] >= 0
    return EvalData(models=data.models, query_ids=[data.query_ids[q] for q in queries],
                    tasks=[data.tasks[q] for q in queries], query_vectors=data.query_vectors[queries],
                    model_index=data.model_index[keep], query_index=new_index[data.query_index[keep]],
                    scores=data.scores[keep])


def robustness_pools(seed: int = 0) -> dict:
    data = _mmlu_pro()
    rng = np.random.default_rng(seed)
    mean = np.nanmean(data.dense(), axis=0)  # per-question accuracy over the pool
    order = np.argsort(mean, kind="stable")
    cum = np.cumsum(mean[order]) / np.arange(1, len(order) + 1)  # rises as easier questions join
    n_hard = int(np.searchsorted(cum, 0.11))  # the hardest questions until the positive rate reaches 11%
    return {
        "skewed": _subset(data, queries=order[: max(n_hard, 500)]),
        "partial": _subset(data, keep_evals=rng.random(len(data.scores)) < 0.81),
        "few": _subset(data, queries=rng.choice(data.n_queries, size=300, replace=False)),
    }


def robustness(args) -> None:
    from encoder.training import TrainConfig
    from registry.lab.evaluation import run_evaluation, truth_on
    from encoder.data import split_queries

    config = TrainConfig(max_seconds=args.max_seconds)
    print(f"TrainConfig: defaults, max_seconds={args.max_seconds}; seed {args.seed}; 1024 evaluations per model\n")
    print("| pool | models x queries | observed | positives | majority rate (test) | LOCUS correctness | IRT-Net "
          "correctness | LOCUS routing | IRT-Net routing | best single | LOCUS best epoch / stopped | LOCUS s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for name, pool in robustness_pools(args.seed).items():
        if args.pools and name not in args.pools.split(","):
            continue
        result = run_evaluation(pool, evals_per_model=1024, seed=args.seed, baselines=("irt_net",),
                                train_config=config)
        split = split_queries(pool.n_queries, seed=args.seed)
        test = truth_on(pool, split.test)
        labels = test[~np.isnan(test)] >= 0.5
        majority = max(labels.mean(), 1 - labels.mean())
        ca, ra = result["correctness_accuracy"], result["routing_accuracy"]
        observed = len(pool.scores) / (pool.n_models * pool.n_queries)
        print(f"| {name} | {pool.n_models} x {pool.n_queries} | {observed:.2f} "
              f"| {pool.scores.mean():.3f} | {majority:.3f} | {ca['locus']:.3f} | {ca['irt_net']:.3f} | "
              f"{ra['locus']:.3f} | {ra['irt_net']:.3f} | {ra['best_single']:.3f} | {result['locus_best_epoch']} / "
              f"{result['locus_stopped']} | {result['seconds']['locus']:.0f} |", flush=True)


def joint():
    """MMLU-Pro and BFCL as one EvalData (ids prefixed so they cannot collide)."""
    from encoder.data import EvalData, load_triple_dir

    parts = [(prefix, load_triple_dir(SHARED / name, encoder=ENCODER)) for prefix, name in
             (("mmlu", "mmlu-pro"), ("bfcl", "bfcl"))]
    models, qids, tasks, vectors, mi, qi, sc = [], [], [], [], [], [], []
    for prefix, d in parts:
        mi.append(d.model_index + len(models)), qi.append(d.query_index + len(qids)), sc.append(d.scores)
        models += [f"{prefix}:{m}" for m in d.models]
        qids += [f"{prefix}:{q}" for q in d.query_ids]
        tasks += d.tasks
        vectors.append(d.query_vectors)
    return EvalData(models, qids, tasks, np.concatenate(vectors), np.concatenate(mi), np.concatenate(qi),
                    np.concatenate(sc))


def speed(args) -> None:
    from encoder.data import sample_per_model, split_queries
    from encoder.training import TrainConfig, train_locus

    data = joint()
    split = split_queries(data.n_queries, seed=0)
    train = sample_per_model(data, split.train, n_per_model=1024, seed=0)
    config = TrainConfig() if args.max_seconds is None else TrainConfig(max_seconds=args.max_seconds)
    started = time.perf_counter()
    last = [0.0]

    def progress(p):
        if p.seconds - last[0] > 30 or p.improved and p.epoch % 200 == 0:
            last[0] = p.seconds
            print(f"  epoch {p.epoch} val loss {p.validation.loss:.4f} best {p.best_loss:.4f}@{p.best_epoch} "
                  f"{p.seconds:.0f} s", file=sys.stderr, flush=True)

    result = train_locus(data, train, split.val, config=config, seed=0, progress=progress)
    seconds = time.perf_counter() - started
    epochs = len(result.history)
    print("| pool | epochs run | best epoch | stopped | wall s | s / epoch | val loss (chance) | val AUC |")
    print("|---|---:|---:|---|---:|---:|---|---:|")
    print(f"| MMLU-Pro + BFCL, {data.n_models} x {data.n_queries} | {epochs} | {result.best_epoch} | {result.stopped} "
          f"| {seconds:.0f} | {seconds / epochs:.3f} | {result.best.loss:.4f} ({result.best.chance_loss:.4f}) | "
          f"{result.best.auc:.3f} |")


def step_cost(args) -> None:
    """CPU seconds (process time, one thread: independent of other load on the machine) of one
    training step over all 103 models and of one validation, on the joint pool."""
    import torch

    from encoder.data import sample_per_model, split_queries
    from encoder.locus import Locus
    from encoder.data import evals_by_model
    from encoder.training import TrainConfig, recommended_config, train_step, validate
    from encoder.training import _sample_batch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = joint()
    split = split_queries(data.n_queries, seed=0)
    per_model = evals_by_model(data, sample_per_model(data, split.train, n_per_model=1024, seed=0))
    qidx, ys = [data.query_index[e] for e in per_model], [data.scores[e] for e in per_model]
    cfg = TrainConfig(view_weight=args.view_weight)
    locus = Locus(recommended_config(data.query_vectors.shape[1]))
    optimizer = torch.optim.AdamW(locus.parameters(), lr=cfg.lr_encoder)
    phi_all, rng, steps = torch.from_numpy(data.query_vectors), np.random.default_rng(0), 12
    started = time.process_time()
    for _ in range(steps):
        train_step(locus, optimizer, _sample_batch(rng, np.arange(data.n_models), qidx, ys, cfg, "cpu"), phi_all, cfg)
    per_step = (time.process_time() - started) / steps
    started = time.process_time()
    validate(locus, data, per_model, split.val, data.dense()[:, split.val], 0.5)
    per_validation = time.process_time() - started
    print("| pool | view_weight | CPU s / step (all models) | CPU s / validation | CPU s / 4000 epochs, eval every 10 |")
    print("|---|---:|---:|---:|---:|")
    print(f"| MMLU-Pro + BFCL, {data.n_models} x {data.n_queries} | {args.view_weight:g} | {per_step:.3f} | "
          f"{per_validation:.2f} | {4000 * per_step + 400 * per_validation:.0f} |")


def epoch_cost(args) -> None:
    """Seconds per training step and per validation on MMLU-Pro, default config, per thread count."""
    import os

    import torch

    from encoder.data import evals_by_model, sample_per_model, split_queries
    from encoder.locus import Locus
    from encoder.training import (TrainConfig, _optimizer, _sample_batch, _trainable, recommended_config,
                                  train_step, validate)

    data = _mmlu_pro()
    split = split_queries(data.n_queries, seed=0)
    train = sample_per_model(data, split.train, n_per_model=1024, seed=0)
    per_model = evals_by_model(data, train)
    qidx, ys = [data.query_index[e] for e in per_model], [data.scores[e] for e in per_model]
    val_truth = data.dense()[:, split.val]
    base_rate = float(data.scores[train].mean())
    cfg = TrainConfig()
    print(f"MMLU-Pro {data.n_models} x {data.n_queries}, {len(train)} training evaluations, {len(split.val)} "
          f"validation queries; TrainConfig defaults (eval_every {cfg.eval_every}); {args.steps} steps, 3 validations\n")
    print("| threads | load avg (1 min) before / after | wall s / step | CPU s / step | wall s / validation | "
          "CPU s / validation | wall s / epoch | CPU s / epoch | wall 1,000 / 4,000 epochs |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        locus = Locus(recommended_config(data.query_vectors.shape[1]))
        optimizer = _optimizer(locus, cfg)
        phi_all = torch.from_numpy(data.query_vectors)
        trainable = _trainable(per_model)

        def step():
            batch = _sample_batch(rng, rng.permutation(trainable), qidx, ys, cfg, "cpu")
            train_step(locus, optimizer, batch, phi_all, cfg)

        step()  # warm-up: first-call allocations
        validate(locus, data, per_model, split.val, val_truth, base_rate)  # and sklearn's import
        load_before = os.getloadavg()[0]
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            step()
        step_wall, step_cpu = (time.perf_counter() - wall) / args.steps, (time.process_time() - cpu) / args.steps
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(3):
            validate(locus, data, per_model, split.val, val_truth, base_rate)
        val_wall, val_cpu = (time.perf_counter() - wall) / 3, (time.process_time() - cpu) / 3
        epoch_wall, epoch_cpu = step_wall + val_wall / cfg.eval_every, step_cpu + val_cpu / cfg.eval_every
        print(f"| {threads} | {load_before:.1f} / {os.getloadavg()[0]:.1f} | {step_wall:.3f} | {step_cpu:.3f} | "
              f"{val_wall:.3f} | {val_cpu:.3f} | {epoch_wall:.3f} | {epoch_cpu:.3f} | {1000 * epoch_wall:.0f} s / "
              f"{4000 * epoch_wall:.0f} s |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["robustness", "speed", "step-cost", "epoch-cost"])
    ap.add_argument("--view-weight", type=float, default=0.0)
    ap.add_argument("--pools", default="", help="robustness: comma-separated subset of skewed,partial,few")
    ap.add_argument("--max-seconds", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=30, help="epoch-cost: training steps timed")
    ap.add_argument("--threads", default="1,2", help="epoch-cost: comma-separated torch thread counts")
    args = ap.parse_args()
    if not (SHARED / "mmlu-pro" / "evals.csv").is_file():
        sys.exit(f"MMLU-Pro not found at {SHARED / 'mmlu-pro'}")
    if args.what == "robustness" and args.max_seconds is None:
        args.max_seconds = 120.0
    {"robustness": robustness, "speed": speed, "step-cost": step_cost, "epoch-cost": epoch_cost}[args.what](args)


if __name__ == "__main__":
    main()
