"""Routing on real pools: the registry's predictor against LOCUS alone and every baseline.

    .venv/bin/python scripts/bench_router.py [--datasets mmlu-pro,bfcl] [--evals 256,1024] [--seeds 0,1,2]
        [--jobs 1] [--json docs/results/router.json] [--markdown docs/results/router.md]
    .venv/bin/python scripts/bench_router.py --from-json docs/results/router.json --markdown docs/results/router.md

Each (dataset, evaluations per model, seed) runs `registry evaluate`'s protocol (registry.lab.evaluation):
queries split 80/10/10 by seed, at most N training evaluations per model, LOCUS trained with
TrainConfig's defaults (budgeted in epochs, no wall-clock cap), the baselines tuned on the validation
queries, everything measured on the test queries. "registry" is the predictor `registry route` uses and
`registry evaluate` reports: LOCUS, the item table and kNN over the stored queries mixed for routing on the
validation queries (encoder/blend.py fit_routing_blend); "locus+item" is the same fit without kNN (the
router before it). `--dump-dir` keeps each run's component predictions (`--skip-dumped` goes on where a
run of the whole set stopped: on 2 CPU cores one BFCL run at 1,024 evaluations took 22 min); `--from-dumps` scores
them again (the blends and metrics of this commit) without training. Paired tests: McNemar's exact
test over the test queries (the sign test on routed scores, which are 0/1 but where models tie at the
top), registry against each method, per seed; over every seed's queries, each distinct query once.
MMLU-Pro is its open-weight pool (access == open), as the dataset's README advises; BFCL its whole pool.
"""
from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import platform
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from encoder.metrics import paired_test, pooled_paired_test  # noqa: E402

DATA_ROOT = ROOT.parent / "shared" / "data"
ENCODER = "all-mpnet-base-v2"
BASELINES = ("knn", "irt_net", "embedllm_mf", "best_single")
METHODS = ("registry", "locus", "item", "locus+item", "locus+item (logistic)", "baselines blended", *BASELINES)


def load(dataset: str, data_root: Path):
    from encoder.data import load_triple_dir

    path = data_root / dataset
    if not (path / "evals.csv").is_file():
        sys.exit(f"{dataset} not found at {path}: put ../shared/data/{dataset} beside the project (or --data-root)")
    data = load_triple_dir(path, encoder=ENCODER)
    if dataset == "mmlu-pro":  # the open-weight pool: routing over the full pool can hardly beat Gemini
        with open(path / "models.csv", encoding="utf-8", newline="") as handle:
            open_models = [row["name"] for row in csv.DictReader(handle) if row["access"] == "open"]
        data = data.select_models(open_models)
    return data


def one_run(job: tuple) -> dict:
    dataset, evals, seed, data_root, threads, epochs, baselines, dump_dir = job
    import torch

    torch.set_num_threads(threads)
    from encoder.training import TrainConfig
    from registry.lab.evaluation import run_evaluation

    data = load(dataset, Path(data_root))
    started = time.perf_counter()
    r = run_evaluation(data, evals_per_model=evals, seed=seed, keep_routed=True, keep_predictions=True,
                       baselines=baselines,
                       train_config=TrainConfig(threads=threads) if epochs is None else
                       TrainConfig(threads=threads, epochs=epochs, min_epochs=min(epochs, 100)))
    predictions = r.pop("predictions")
    r.pop("pool", None)
    r.update(dataset=dataset, models=data.n_models, wall_seconds=round(time.perf_counter() - started, 1))
    if dump_dir:
        save_dump(Path(dump_dir), r, predictions)
    with_paired(r)
    print(f"{dataset} N={evals} seed {seed}: registry {r['routing_accuracy']['registry']:.4f} locus "
          f"{r['routing_accuracy']['locus']:.4f} knn {r['routing_accuracy'].get('knn', float('nan')):.4f} "
          f"({r['locus_best_epoch']} epochs best, stopped: {r['locus_stopped']}) in {r['wall_seconds']} s", flush=True)
    return r


def with_paired(r: dict) -> dict:
    """Per method, the paired test of the registry against it on this seed's test queries, and (for the test
    over every seed's queries, `pooled_paired_test`) the queries where they scored differently, by query id."""
    routed = r.pop("routed")
    ids = np.asarray(r["routed_queries"], np.int64)
    if any(len(v) != len(ids) for v in routed.values()):
        raise ValueError("each method's routed scores must be one per routed query")
    r["paired"] = {m: paired_test(routed["registry"], routed[m]) for m in routed if m != "registry"}
    r["routed_differences"] = {}
    for m in r["paired"]:
        diff = np.asarray(routed["registry"], np.float64) - np.asarray(routed[m], np.float64)
        r["routed_differences"][m] = [[int(q), float(d)] for q, d in zip(ids, diff) if d != 0]
    return r


def pooled(runs: list[dict], method: str) -> dict:
    """The registry against `method` over the runs' test queries together, each distinct query once."""
    pairs = []
    for r in runs:
        ids = np.asarray(r["routed_queries"], np.int64)
        diff = np.zeros(len(ids))
        at = {q: i for i, q in enumerate(ids.tolist())}
        for q, d in r["routed_differences"][method]:
            diff[at[q]] = d
        pairs.append((ids, diff))
    return pooled_paired_test(pairs)


_RUN_FIELDS = ("dataset", "evals_per_model", "seed", "models", "held_out", "n_train_queries", "n_val_queries",
               "n_test_queries", "seconds", "locus_best_epoch", "locus_stopped", "wall_seconds")


def save_dump(directory: Path, run: dict, predictions: dict) -> None:
    """One run's component predictions (npz) and facts (json), so that the scoring (the blends and the
    metrics, registry.lab.evaluation.score_predictions) can be rerun without training again."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"{run['dataset']}-{run['evals_per_model']}-{run['seed']}"
    arrays = {f"val/{k}": v for k, v in predictions["val"].items()}
    arrays.update({f"test/{k}": v for k, v in predictions["test"].items()})
    arrays.update({k: predictions[k] for k in ("val_truth", "test_truth", "train_mean")})
    np.savez_compressed(stem.with_suffix(".npz"), **arrays)
    stem.with_suffix(".json").write_text(json.dumps({k: run[k] for k in _RUN_FIELDS if k in run}), "utf-8")


def rescore_dump(stem: Path) -> dict:
    """A dumped run scored by this commit's registry.lab.evaluation.score_predictions."""
    from encoder.data import split_queries
    from registry.lab.evaluation import score_predictions

    run = json.loads(stem.with_suffix(".json").read_text("utf-8"))
    with np.load(stem.with_suffix(".npz")) as z:
        predictions = {"val": {k[4:]: z[k] for k in z.files if k.startswith("val/")},
                       "test": {k[5:]: z[k] for k in z.files if k.startswith("test/")},
                       **{k: z[k] for k in ("val_truth", "test_truth", "train_mean")}}
    run.update(score_predictions(predictions, keep_routed=True))
    # the test queries' ids, from the split the run made (its test truth has a column per test query)
    n_queries = run["n_train_queries"] + run["n_val_queries"] + predictions["test_truth"].shape[1]
    run["routed_queries"] = split_queries(n_queries, seed=run["seed"]).test[run["routed_queries"]].tolist()
    return with_paired(run)


def summarise(runs: list[dict]) -> dict:
    """Per (dataset, evals): mean and sd over seeds of each method's routing and correctness accuracy,
    and whether the registry is ahead of every baseline."""
    out = {}
    for key in sorted({(r["dataset"], r["evals_per_model"]) for r in runs}):
        rs = sorted((r for r in runs if (r["dataset"], r["evals_per_model"]) == key), key=lambda r: r["seed"])
        rows = {}
        for m in METHODS:
            if all(m in r["routing_accuracy"] for r in rs):
                route = [r["routing_accuracy"][m] for r in rs]
                corr = [r["correctness_accuracy"].get(m) for r in rs]
                rows[m] = {"routing": float(np.mean(route)), "routing_sd": float(np.std(route)),
                           "correctness": None if None in corr else float(np.mean(corr))}
        best_base = max((m for m in BASELINES if m in rows), key=lambda m: rows[m]["routing"])
        corr_bases = [m for m in BASELINES if m in rows and rows[m]["correctness"] is not None]
        out[f"{key[0]}@{key[1]}"] = {
            "dataset": key[0], "evals_per_model": key[1], "models": rs[0]["models"], "seeds": [r["seed"] for r in rs],
            "test_queries": rs[0]["n_test_queries"], "methods": rows, "best_baseline": best_base,
            "routing_ahead": rows["registry"]["routing"] > rows[best_base]["routing"],
            "correctness_ahead": all(rows["registry"]["correctness"] > rows[m]["correctness"] for m in corr_bases),
            "paired_vs_best": [r["paired"][best_base] for r in rs],
            "paired_pooled": pooled(rs, best_base),
            "blend": [r.get("blend", {}).get("registry") for r in rs],
        }
    return out


def write_markdown(result: dict, path: Path) -> None:
    lines = [
        "# Routing: the registry's predictor against every baseline", "",
        f"Generated by `{result['command']}` on {result['date']} ({result['machine']}); do not edit by hand.", "",
        "Protocol (`registry evaluate`, registry/lab/evaluation.py): queries split 80/10/10 by seed; each model keeps at "
        "most N random evaluations of the training queries; LOCUS trained with `TrainConfig`'s defaults (epochs and "
        "patience in epochs, no wall-clock cap); baselines tuned on the validation queries; all numbers on the test "
        "queries, each routed among the models scored on it" + (" (models tied at the top share a query: their mean "
        "score)" if result.get("ties") == "shared" else "") + ", every model's evaluations of the validation queries (a tenth of the queries) read beyond its N training "
        "ones (early stopping, the baselines' and kNN's settings, the blend's fit). **registry** is the router "
        "`registry route` uses "
        "(the blend `registry train` stores beside the encoder): LOCUS, the item table (encoder/fingerprint.py, "
        "fitted on the training evaluations only) and kNN over the stored queries (encoder/knn.py, its k, "
        "pseudo-count and mode tuned on the validation queries, the same as the knn baseline) mixed by "
        "`encoder.blend.fit_routing_blend` on the validation queries (non-negative mixing weights and a "
        "temperature chosen by the validation routing likelihood, then calibrated). **locus+item** is that fit "
        "without kNN (the router before it); **locus+item (logistic)** the earlier cell-wise logistic blend; "
        "**item** the item table alone" + ("; **baselines blended** kNN, IRT-Net and EmbedLLM-MF mixed by the registry's "
        "fit (not a baseline of the target: it shows how much of a lead is the blend's)" if any(
            "baselines blended" in block["methods"] for block in result["summary"].values()) else "") + ". MMLU-Pro: its open-weight pool "
        "(access == open); BFCL: all models.", "",
    ] + (["Component predictions (LOCUS, item table, baselines) were made and dumped by " + "; ".join(
          f"`{m['command']}` on {m['date']} ({m['machine']}{', runs ' + m['runs'] if m.get('runs') else ''})"
          for m in result["made"]) + "; the blends and metrics on this page are its command scoring those dumps "
          "(registry.lab.evaluation.score_predictions).", ""] if result.get("made") else []) + ([f"Note: {result['note']}", ""] if result.get("note") else [])
    for name, block in result["summary"].items():
        rows = block["methods"]
        lines += [f"## {block['dataset']}, {block['evals_per_model']} evaluations per model "
                  f"({block['models']} models, {block['test_queries']} test queries, seeds "
                  f"{', '.join(map(str, block['seeds']))})", "",
                  "| method | routing accuracy (mean ± sd) | correctness accuracy |", "|---|---|---|"]
        for m, row in sorted(rows.items(), key=lambda kv: -kv[1]["routing"]):
            corr = "" if row["correctness"] is None else f"{row['correctness']:.4f}"
            bold = "**" if m == "registry" else ""
            lines.append(f"| {bold}{m}{bold} | {row['routing']:.4f} ± {row['routing_sd']:.4f} | {corr} |")
        together = block["paired_pooled"]
        paired = ", ".join(f"seed {s}: {p['diff']:+.4f} ({p['wins']} won / {p['losses']} lost, p {p['p']:.3g})"
                           for s, p in zip(block["seeds"], block["paired_vs_best"]))
        test_name = "sign test" if result.get("ties") == "shared" else "McNemar"
        within = "" if together["p"] < 0.05 else f" (within noise: p {together['p']:.2g} over every seed's queries)"
        lines += ["", f"Best baseline: {block['best_baseline']}. Registry ahead on routing: "
                      f"**{'yes' if block['routing_ahead'] else 'NO'}**{within if block['routing_ahead'] else ''}; "
                      f"ahead of every baseline on correctness: **{'yes' if block['correctness_ahead'] else 'NO'}**.",
                  f"Paired against {block['best_baseline']} ({test_name}, test queries): {paired}; every seed's "
                  f"queries together: {together['diff']:+.4f} ({together['wins']} won / {together['losses']} lost "
                  f"of {together['n']}" + (" distinct queries (the seeds' test sets overlap: a query's "
                  "differences are summed over the seeds that tested it; sign test)" if "cells" in together
                  else "") + f", p {together['p']:.3g}).", ""]
        weights = [b for b in block["blend"] if b]
        if weights:
            lines += ["Blend weights per seed (logit of each component; intercept): " + "; ".join(
                ", ".join(f"{k} {v:.2f}" for k, v in b["weights"].items()) + f"; {b['intercept']:+.2f}" for b in weights),
                ""]
    met = [b for b in result["summary"].values() if b["routing_ahead"] and b["correctness_ahead"]]
    lines += ["## Target", "",
              f"Registry ahead of max(kNN, IRT-Net, EmbedLLM-MF, best single) in routing and of every baseline in "
              f"correctness: {len(met)} of {len(result['summary'])} settings.", "",
              "By how much, per setting (the registry's mean over seeds minus the best baseline's; one test query "
              "of one seed moves a mean over seeds by 1 / (seeds x test queries)):", ""]
    for block in result["summary"].values():
        rows = block["methods"]
        best_corr = max((m for m in BASELINES if m in rows and rows[m]["correctness"] is not None),
                        key=lambda m: rows[m]["correctness"])
        one = 1 / (len(block["seeds"]) * block["test_queries"])
        lines.append(f"- {block['dataset']} {block['evals_per_model']}: routing "
                     f"{rows['registry']['routing'] - rows[block['best_baseline']]['routing']:+.4f} against "
                     f"{block['best_baseline']}, correctness {rows['registry']['correctness'] - rows[best_corr]['correctness']:+.4f} "
                     f"against {best_corr} (one query: {one:.4f})")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="mmlu-pro,bfcl")
    ap.add_argument("--evals", default="256,1024")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel processes (threads split between them)")
    ap.add_argument("--epochs", type=int, default=None, help="cap LOCUS's epochs (smoke runs; default: TrainConfig's)")
    ap.add_argument("--baselines", default=",".join(BASELINES), help="(smoke runs: fewer)")
    ap.add_argument("--data-root", type=Path, default=DATA_ROOT)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None)
    ap.add_argument("--from-json", type=Path, default=None, help="render --markdown from a stored --json")
    ap.add_argument("--dump-dir", type=Path, default=None,
                    help="keep each run's component predictions here (npz + json) for --from-dumps")
    ap.add_argument("--from-dumps", type=Path, default=None,
                    help="score the runs dumped in this directory with this commit's blends (no training)")
    ap.add_argument("--note", default=None, help="a sentence for the page (where and how the runs were made)")
    ap.add_argument("--skip-dumped", action="store_true",
                    help="with --dump-dir: leave out the runs dumped there already (a long CPU run goes on where it "
                         "stopped; --from-dumps then scores them all)")
    args = ap.parse_args(argv)
    if args.from_json:
        result = json.loads(args.from_json.read_text("utf-8"))
    elif args.from_dumps:
        stems = sorted(p.with_suffix("") for p in args.from_dumps.glob("*.npz"))
        if not stems:
            sys.exit(f"no dumped runs (*.npz) in {args.from_dumps}")
        made_file = args.from_dumps / "made.json"
        made = json.loads(made_file.read_text("utf-8")) if made_file.is_file() else []
        runs = [rescore_dump(stem) for stem in stems]
        result = {"command": "scripts/bench_router.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
                  "date": time.strftime("%Y-%m-%d"), "machine": f"scoring on {os.cpu_count()} CPU cores",
                  "made": made, "runs": runs, "summary": summarise(runs), "ties": "shared"}
        if args.json:
            args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    else:
        jobs = [(d, int(n), int(s)) for d in args.datasets.split(",") for n in args.evals.split(",")
                for s in args.seeds.split(",")]
        if args.skip_dumped:
            if args.dump_dir is None:
                sys.exit("--skip-dumped needs --dump-dir")
            done = [job for job in jobs if all((args.dump_dir / "{}-{}-{}".format(*job)).with_suffix(suffix).is_file()
                                               for suffix in (".npz", ".json"))]
            jobs = [job for job in jobs if job not in done]
            print(f"{len(done)} run(s) dumped in {args.dump_dir} already, left out; {len(jobs)} to run", flush=True)
            if not jobs:
                return
        threads = max(1, (os.cpu_count() or 2) // max(1, args.jobs))
        work = [(d, n, s, str(args.data_root), threads, args.epochs,
                 tuple(b for b in args.baselines.split(",") if b != "best_single"),
                 str(args.dump_dir) if args.dump_dir else None) for d, n, s in jobs]
        import torch

        device = "cuda: " + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        result = {"command": "scripts/bench_router.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
                  "date": time.strftime("%Y-%m-%d"),
                  "machine": f"{os.cpu_count()} CPU cores, torch {torch.__version__} on {device}, "
                             f"Python {platform.python_version()}", "runs": [], "ties": "shared"}
        if args.dump_dir:
            args.dump_dir.mkdir(parents=True, exist_ok=True)
            made_file = args.dump_dir / "made.json"  # every command that dumped runs here
            made = json.loads(made_file.read_text("utf-8")) if made_file.is_file() else []
            made.append({k: result[k] for k in ("command", "date", "machine")})
            made_file.write_text(json.dumps(made, indent=1), encoding="utf-8")

        def record(run: dict) -> None:  # written after every run: a run cut short keeps what finished
            result["runs"].append(run)
            result["summary"] = summarise(result["runs"])
            if args.json:
                args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")

        if args.jobs > 1:
            with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:  # CUDA: no fork
                for future in as_completed([pool.submit(one_run, job) for job in work]):
                    record(future.result())
        else:
            for job in work:
                record(one_run(job))
    for name, block in result["summary"].items():
        rows = block["methods"]
        print(f"{name}: " + "  ".join(f"{m} {rows[m]['routing']:.4f}" for m in METHODS if m in rows)
              + f"  -> ahead: routing {block['routing_ahead']}, correctness {block['correctness_ahead']}")
    if args.note:
        result["note"] = args.note
        if args.json:
            args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    if args.markdown:
        write_markdown(result, args.markdown)


if __name__ == "__main__":
    main()
