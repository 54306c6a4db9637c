"""LOCUS on MMLU-Pro's open pool: train at N evaluations per model, report routing / correctness.

    python scripts/tune_locus.py --n 256 512 1024 [--encoder all-MiniLM-L6-v2] [--set key=value ...]

One 80/10/10 split by query (seed 0 unless --split-seed); N training evaluations per model from the training queries;
validation queries for early stopping; test queries for the numbers. Also prints best single model.
"""
from __future__ import annotations

import argparse
import dataclasses
import csv
import json
import time
from pathlib import Path

import numpy as np

from encoder.data import load_triple_dir, sample_per_model, split_queries
from encoder.metrics import best_single_accuracy, correctness_accuracy, routing_accuracy
from encoder.data import evals_by_model
from encoder.inference import embed_models, predict
from encoder.training import TrainConfig, recommended_config, train_locus

DATA = Path("/work/shared/data/mmlu-pro")


def parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--encoder", default="all-MiniLM-L6-v2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split-seed", type=int, default=0, help="seed of the 80/10/10 query split")
    ap.add_argument("--set", nargs="*", default=[], help="TrainConfig fields, key=value (JSON values)")
    ap.add_argument("--cfg", nargs="*", default=[], help="LocusConfig fields, key=value")
    ap.add_argument("--history", action="store_true")
    ap.add_argument("--onboard", action="store_true", help="also check embedding from 128 vs 1024 evals")
    args = ap.parse_args()

    data = load_triple_dir(DATA, encoder=args.encoder)
    with open(DATA / "models.csv", encoding="utf-8", newline="") as handle:
        open_names = [r["name"] for r in csv.DictReader(handle) if r["access"] == "open"]
    data = data.select_models(open_names)
    split = split_queries(data.n_queries, seed=args.split_seed)
    truth = data.dense()
    kwargs = {k: parse_value(v) for k, v in (s.split("=", 1) for s in args.set)}
    cfg_kwargs = {k: parse_value(v) for k, v in (s.split("=", 1) for s in args.cfg)}
    # --cfg overrides the recommended sizes; the paper's: d=128 latents=64 blocks=2 predictor_d=null topics=0
    config = dataclasses.replace(recommended_config(data.query_vectors.shape[1]), **cfg_kwargs)
    for n in args.n:
        train_evals = sample_per_model(data, split.train, n_per_model=n, seed=0)
        t0 = time.perf_counter()
        res = train_locus(data, train_evals, split.val, config=TrainConfig(**kwargs), locus_config=config,
                          seed=args.seed)
        wall = time.perf_counter() - t0
        z = embed_models(res.locus, data, train_evals)
        p = predict(res.locus, z, data.query_vectors[split.test])
        test_truth = truth[:, split.test]
        train_truth = np.full_like(truth, np.nan)
        train_truth[data.model_index[train_evals], data.query_index[train_evals]] = data.scores[train_evals]
        line = {
            "N": n, "split_seed": args.split_seed, "encoder": args.encoder, "routing": round(routing_accuracy(p, test_truth), 4),
            "correctness": round(correctness_accuracy(p, test_truth), 4),
            "best_single": round(best_single_accuracy(train_truth, test_truth), 4),
            "val_best": round(res.best_val_routing, 4), "best_epoch": res.best_epoch,
            "epochs_run": res.history[-1]["epoch"], "wall_s": round(wall, 1),
            "kwargs": kwargs, "cfg": cfg_kwargs,
        }
        if args.onboard:
            per = evals_by_model(data, train_evals)
            rng = np.random.default_rng(1)
            small = [np.sort(rng.choice(e, size=min(128, len(e)), replace=False)) for e in per]
            p_small = predict(res.locus, embed_models(res.locus, data, small), data.query_vectors[split.test])
            line["correctness_128"] = round(correctness_accuracy(p_small, test_truth), 4)
            line["routing_128"] = round(routing_accuracy(p_small, test_truth), 4)
        print(json.dumps(line), flush=True)
        if args.history:
            vals = [(h["epoch"], round(h["loss"], 4), round(h["val_routing"], 4)) for h in res.history
                    if "val_routing" in h]
            print("  history (epoch, loss, val):", vals, flush=True)


if __name__ == "__main__":
    main()
