"""Cost-aware routing on real pools: docs/results/cost-routing.md (+ .json).

    .venv/bin/python scripts/report_cost_routing.py [--datasets mmlu-pro,bfcl] [--evals 256] [--seeds 0]
        [--epochs N] [--dump-dir DIR] [--json docs/results/cost-routing.json] [--markdown docs/results/cost-routing.md]
    .venv/bin/python scripts/report_cost_routing.py --from-dumps DIR ...    # bench_router.py --dump-dir's dumps
    .venv/bin/python scripts/report_cost_routing.py --from-json docs/results/cost-routing.json --markdown ...

Each (dataset, evaluations per model, seed) runs `registry evaluate`'s protocol (registry.lab.evaluation,
`keep_predictions=True`: LOCUS, the item table and kNN; the other baselines are not needed here) and
`registry evaluate --cost`'s curve over those predictions (registry.lab.cost_curve). Costs per call come
from registry.analytics.cost.model_cost over each model's metadata, as `route --max-cost` reads them:
MMLU-Pro's open-weight pool by the params_b proxy (its models.csv); BFCL from docs/results/bfcl-prices.csv
(list prices of the API models, a params_b proxy for open-weight ones, each row citing its basis).
`--from-dumps` reads component predictions dumped by scripts/bench_router.py (same protocol, same pools).
"""
from __future__ import annotations

import argparse
import csv
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

DATA_ROOT = ROOT.parent / "shared" / "data"
PRICES = ROOT / "docs" / "results" / "bfcl-prices.csv"


def costs_for(dataset: str, names: list[str], data_root: Path, prices: Path) -> tuple[list[float], list[str], dict]:
    """Cost per call of each model (in `names`' order), the models costed by proxy, and the metadata used."""
    from registry.analytics.cost import pool_costs
    from registry.records import ModelRecord

    if dataset == "bfcl":
        with open(prices, encoding="utf-8", newline="") as handle:
            rows = {r["name"]: {k: r[k] for k in ("price_in", "price_out", "params_b")} for r in csv.DictReader(handle)}
    else:
        with open(data_root / dataset / "models.csv", encoding="utf-8", newline="") as handle:
            rows = {r["name"]: {"params_b": r["params_b"]} for r in csv.DictReader(handle)}
    missing = [n for n in names if n not in rows]
    if missing:
        sys.exit(f"no price or params_b row for {len(missing)} {dataset} models: {', '.join(missing)}")
    records = {n: ModelRecord.from_flat(n, rows[n]) for n in names}
    costs = pool_costs(records, names)  # an unpriced model is an error naming it, as route's
    return ([costs[n].usd_per_call for n in names], [n for n in names if costs[n].by_proxy],
            {n: {"cost_usd": costs[n].usd_per_call, "source": costs[n].source} for n in names})


def run_one(dataset: str, evals: int, seed: int, data_root: Path, epochs: int | None, dump_dir: Path | None) -> dict:
    from bench_router import load, save_dump
    from encoder.training import TrainConfig
    from registry.lab.evaluation import run_evaluation

    data = load(dataset, data_root)
    config = TrainConfig() if epochs is None else TrainConfig(epochs=epochs, min_epochs=min(epochs, 100))
    started = time.perf_counter()
    r = run_evaluation(data, evals_per_model=evals, seed=seed, baselines=(), keep_predictions=True,
                       train_config=config)
    predictions = r.pop("predictions")
    run = {k: r[k] for k in ("evals_per_model", "seed", "n_test_queries", "locus_best_epoch", "locus_stopped")}
    run.update(dataset=dataset, models=list(data.models), wall_seconds=round(time.perf_counter() - started, 1),
               epochs_cap=epochs, routing_accuracy=r["routing_accuracy"])
    if dump_dir:
        save_dump(dump_dir, {**run, "models": data.n_models}, predictions)
    return {"run": run, "predictions": predictions}


def from_dump(stem: Path, data_root: Path) -> dict:
    """A bench_router.py dump; its rows are the pool's models in `load`'s order (checked by count)."""
    from bench_router import load

    run = json.loads(stem.with_suffix(".json").read_text("utf-8"))
    with np.load(stem.with_suffix(".npz")) as z:
        predictions = {"val": {k[4:]: z[k] for k in z.files if k.startswith("val/")},
                       "test": {k[5:]: z[k] for k in z.files if k.startswith("test/")},
                       **{k: z[k] for k in ("val_truth", "test_truth", "train_mean")}}
    names = list(load(run["dataset"], data_root).models)
    if len(names) != predictions["test_truth"].shape[0]:
        sys.exit(f"{stem}: {predictions['test_truth'].shape[0]} models in the dump, {len(names)} in the pool")
    run.update(models=names, epochs_cap=None, from_dump=str(stem))
    return {"run": run, "predictions": predictions}


def curve_of(item: dict, data_root: Path, prices: Path) -> dict:
    from registry.lab.cost_curve import cost_curve

    run = item["run"]
    costs, proxy, used = costs_for(run["dataset"], run["models"], data_root, prices)
    curve = cost_curve(item["predictions"], costs, run["models"], proxy=proxy)
    return {**{k: v for k, v in run.items() if k != "models"}, "costs": used, "curve": _plain(curve)}


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---------------------------------------------------------------------------------------------- page
def _f(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _mean_sd(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return f"{100 * np.mean(values):.1f}% ± {100 * np.std(values):.1f}" if len(values) > 1 else f"{100 * values[0]:.1f}%"


def markdown(report: dict) -> str:
    from registry.analytics.cost import ASSUMED_TOKENS_IN, ASSUMED_TOKENS_OUT, PROXY_USD_PER_M_TOKENS_PER_B

    lines = ["# Cost-aware routing: quality against cost", "",
             f"Generated by `{report['command']}` on {report['date']} ({report['machine']})"
             + (f", the page rendered from its JSON by `{report['rendered_by']}`" if report.get("rendered_by") else "")
             + "; do not edit by hand.", ""]
    if report.get("note"):
        lines += [f"Note: {report['note']}", ""]
    lines += [
        "Protocol: `registry evaluate --cost` (registry/lab/cost_curve.py) over the predictions of `registry evaluate`'s "
        "protocol (registry/lab/evaluation.py: queries split 80/10/10 by seed, at most N training evaluations per model, "
        "everything measured on the test queries, each routed among the models scored on it). **registry** is the "
        "registry's router (LOCUS, the item table and kNN over the stored queries blended on the validation queries, `BLENDS[\"registry\"]`, what `route` uses) "
        "choosing per query the model with the largest P(correct) - λ·cost, λ swept from 0 to every query's cheapest "
        "model. **always-best**: the best single model by training accuracy; **always-cheapest**: the cheapest model; "
        "**random mixing**: a share x of the calls to always-best, the rest to always-cheapest (its expected accuracy "
        "and cost). *Gap recovered* = (accuracy - always-cheapest) / (always-best - always-cheapest) (RouteLLM's "
        "PGR; above 100%: more accurate than always-best). *x of the calls to the expensive model*: the router at the "
        "smallest λ whose mean test cost is within random mixing's cost at x (λ set from routing decisions alone, no test "
        "truth, as RouteLLM calibrates thresholds); APGR: the mean gap recovered over x in [0, 1] (random mixing: 50%). "
        "*Pair*: RouteLLM's own setting, the router choosing only between always-best's and always-cheapest's models, "
        "x of the queries (those where it predicts the best model ahead by most) to the best; CPT(p): the smallest "
        "share of calls to the best model that recovers p of the gap.", "",
        f"Costs (registry/analytics/cost.py, the rule `route --max-cost` uses): USD per call for {ASSUMED_TOKENS_IN:,} "
        f"input and {ASSUMED_TOKENS_OUT:,} output tokens. Priced models: price_in/price_out (USD per 1M tokens). Models "
        f"without a price: the params_b proxy, {PROXY_USD_PER_M_TOKENS_PER_B} USD per billion parameters per 1M tokens "
        "(2024 serverless prices of open models: Llama-3-70B about $0.5-0.8 per 1M tokens, Llama-3.1-8B and Mistral-7B "
        "about $0.06-0.2). MMLU-Pro: its open-weight pool, all by the proxy (params_b from its models.csv), so only "
        "ratios of sizes matter there. BFCL: docs/results/bfcl-prices.csv, list prices of the API models and the proxy "
        "for open-weight ones (sizes from the name or the model card, mixtures of experts at their total size), each "
        "row citing its basis.", ""]
    for key, group in report["summary"].items():
        runs = [r for r in report["runs"] if f"{r['dataset']}, {r['evals_per_model']}" == key]
        first = runs[0]["curve"]
        lines += [f"## {key} evaluations per model ({len(first['models'])} models, {first['n_test_queries']} test "
                  f"queries, seeds {', '.join(str(r['seed']) for r in runs)})", ""]
        training = sorted({(r.get("epochs_cap"), r.get("from_dump")) for r in runs}, key=str)
        lines += ["LOCUS training: " + "; ".join(
            f"seed {r['seed']}: " + (f"dump {Path(r['from_dump']).name}" if r.get("from_dump") else
                                     f"at most {r['epochs_cap']} epochs" if r.get("epochs_cap") else "TrainConfig's defaults")
            + f", best epoch {r['locus_best_epoch']} (stopped: {r['locus_stopped']})" for r in runs) + ".", ""]
        del training
        lines += ["| figure | " + " | ".join(f"seed {r['seed']}" for r in runs) + " | mean ± sd |",
                  "|---|" + "---|" * (len(runs) + 1)]
        rows = [("gap recovered at half always-best's cost (target >= 80%)", "half"),
                ("APGR (registry, pool)", "apgr"), *[(f"gap recovered at {s} of the calls (pool)", f"share {s}")
                                                     for s in ("20%", "50%", "80%")],
                ("APGR (pair)", "pair apgr"), *[(f"gap recovered at {s} of the calls (pair)", f"pair {s}")
                                                for s in ("20%", "50%", "80%")],
                ("CPT(50%) (pair)", "cpt 50%"), ("CPT(80%) (pair)", "cpt 80%")]
        for label, what in rows:
            values = [group["figures"][what][i] for i in range(len(runs))]
            lines.append(f"| {label} | " + " | ".join(_pct(v) for v in values) + f" | {_mean_sd(values)} |")
        lines += ["", "Target (at half the cost of always-best, >= 80% of its gap over always-cheapest recovered): "
                      + _verdict(group), ""]
        c = first
        lines += [f"Seed {runs[0]['seed']}: always-best {c['always_best']['model']} (routing accuracy "
                  f"{_f(c['always_best']['routing_accuracy'])}, ${c['always_best']['cost_usd']:.6f} per call), "
                  f"always-cheapest {c['always_cheapest']['model']} ({_f(c['always_cheapest']['routing_accuracy'])}, "
                  f"${c['always_cheapest']['cost_usd']:.6f}); the pair's {c['pair']['n_queries']} queries scored for "
                  f"both. {len(c['costed_by_proxy'])} of {len(c['models'])} models costed by the params_b proxy. "
                  f"One test query is {_pct(1 / (c['n_test_queries'] * c['gap']) if c['gap'] > 0 else None)} of the "
                  "gap: figures move in steps that size.", "",
                  "| policy | λ (per USD) | cost per call (USD) | share of always-best's cost | routing accuracy | "
                  "gap recovered | random mixing at that cost |", "|---|---|---|---|---|---|---|"]
        for name, part in (("always-best", c["always_best"]), ("always-cheapest", c["always_cheapest"])):
            lines.append(f"| {name} ({part['model']}) |  | {part['cost_usd']:.6f} | "
                         f"{_pct(part['cost_usd'] / c['always_best']['cost_usd'])} | {_f(part['routing_accuracy'], 4)} | | |")
        shown, last = [], None
        for pt in c["points"]:
            key_ = (round(pt["cost_usd"], 9), round(pt["routing_accuracy"], 6))
            if key_ != last:
                shown.append(pt)
                last = key_
        step = max(1, len(shown) // 14)
        for pt in shown[::step] + ([shown[-1]] if (len(shown) - 1) % step else []):
            lam = "∞ (cheapest)" if pt["lam"] is None else f"{pt['lam']:.4g}"
            lines.append(f"| registry | {lam} | {pt['cost_usd']:.6f} | {_pct(pt['cost_share'])} | "
                         f"{_f(pt['routing_accuracy'], 4)} | {_pct(pt['gap_recovered'])} | {_f(pt['random_mix_accuracy'], 4)} |")
        lines.append("")
    lines += ["## Target", ""]
    for key, group in report["summary"].items():
        lines.append(f"- {key} evaluations per model: " + _verdict(group))
    return "\n".join(lines) + "\n"


def _verdict(group: dict) -> str:
    half = [v for v in group["figures"]["half"] if v is not None]
    mean = float(np.mean(half)) if half else None
    short = "" if group["target_met"] or mean is None else f", {100 * (0.8 - mean):.1f} points short"
    return (f"**{'met' if group['target_met'] else 'NOT met'}** on the mean over seeds ({_mean_sd(half)}{short}; "
            f"at least 80% in {group['n_met']} of {len(group['figures']['half'])} seeds).")


def summarise(runs: list[dict]) -> dict:
    out: dict[str, dict] = {}
    for r in sorted(runs, key=lambda r: (r["dataset"], r["evals_per_model"], r["seed"])):
        key = f"{r['dataset']}, {r['evals_per_model']}"
        c = r["curve"]
        group = out.setdefault(key, {"figures": {}})
        f = group["figures"]
        values = {"half": c["half_cost_gap_recovered"], "apgr": c["apgr"], "pair apgr": c["pair"]["apgr"],
                  **{f"share {s}": (c["at_share"].get(s) or {}).get("gap_recovered") for s in ("20%", "50%", "80%")},
                  **{f"pair {s}": c["pair"]["at_share"].get(s) for s in ("20%", "50%", "80%")},
                  **{f"cpt {s}": c["pair"]["cpt"].get(s) for s in ("50%", "80%")}}
        for name, value in values.items():
            f.setdefault(name, []).append(value)
    for group in out.values():
        half = group["figures"]["half"]
        group["n_met"] = sum(1 for v in half if v is not None and v >= 0.8)
        valid = [v for v in half if v is not None]
        group["target_met"] = bool(valid) and float(np.mean(valid)) >= 0.8
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="mmlu-pro,bfcl")
    ap.add_argument("--evals", default="256")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--epochs", type=int, default=None, help="cap LOCUS's epochs (default: TrainConfig's)")
    ap.add_argument("--data-root", type=Path, default=DATA_ROOT)
    ap.add_argument("--prices", type=Path, default=PRICES, help="BFCL's prices (name, price_in, price_out, params_b, basis)")
    ap.add_argument("--dump-dir", type=Path, default=None, help="keep each run's predictions (bench_router's format)")
    ap.add_argument("--from-dumps", type=Path, default=None, help="score bench_router.py dumps instead of training")
    ap.add_argument("--from-json", type=Path, default=None, help="render --markdown from a stored --json")
    ap.add_argument("--merge-json", type=Path, action="append", default=[],
                    help="add the runs of an earlier --json (e.g. other seeds) to this report")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None)
    ap.add_argument("--note", default=None)
    args = ap.parse_args()

    if args.from_json:
        report = json.loads(args.from_json.read_text("utf-8"))
        report["rendered_by"] = "scripts/report_cost_routing.py " + shlex.join(sys.argv[1:])
        if args.note:
            report["note"] = args.note
    else:
        datasets = [d for d in args.datasets.split(",") if d]
        evals = [int(n) for n in args.evals.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
        runs = []
        report = {"command": "scripts/report_cost_routing.py " + shlex.join(sys.argv[1:]),
                  "date": time.strftime("%Y-%m-%d"), "machine": _machine(), "note": args.note, "runs": runs}
        for seed in seeds:  # every dataset's seed 0 first: a run cut short still has both datasets
            for dataset in datasets:
                for n in evals:
                    if args.from_dumps:
                        stem = args.from_dumps / f"{dataset}-{n}-{seed}"
                        if not stem.with_suffix(".npz").is_file():
                            print(f"no dump {stem}.npz: skipped", file=sys.stderr)
                            continue
                        item = from_dump(stem, args.data_root)
                    else:
                        item = run_one(dataset, n, seed, args.data_root, args.epochs, args.dump_dir)
                    r = curve_of(item, args.data_root, args.prices)
                    c = r["curve"]
                    print(f"{dataset} N={n} seed {seed}: gap recovered at half cost {_pct(c['half_cost_gap_recovered'])}, "
                          f"APGR {_pct(c['apgr'])}, pair APGR {_pct(c['pair']['apgr'])} "
                          f"(best epoch {r['locus_best_epoch']}, {r.get('wall_seconds', '-')} s)", flush=True)
                    runs.append(r)
                    if args.json:  # after every run: a long sweep cut short keeps what it measured
                        write(report, args.json, args.markdown)
        for extra in args.merge_json:
            runs += json.loads(extra.read_text("utf-8"))["runs"]
    page = write(report, args.json, args.markdown)
    if not args.markdown:
        print(page)


def _machine() -> str:
    import os

    import torch

    return f"{os.cpu_count()} CPU cores, torch {torch.__version__}, Python {platform.python_version()}"


def write(report: dict, json_path: Path | None, markdown_path: Path | None) -> str:
    report["summary"] = summarise(report["runs"])
    if json_path:
        json_path.write_text(json.dumps(report, indent=1) + "\n", "utf-8")
    page = markdown(report)
    if markdown_path:
        markdown_path.write_text(page, "utf-8")
    return page


if __name__ == "__main__":
    main()
