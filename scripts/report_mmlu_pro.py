"""Write docs/results/mmlu-pro.md (and its plots) from ../shared/data/mmlu-pro.

    .venv/bin/python scripts/report_mmlu_pro.py [--seeds 0,1,2] [--fresh]

Every number on the page is computed by this command. Runs are slow on a 2-core machine (each is a
full `registry evaluate`: LOCUS plus three tuned baselines), so each finished run is kept in
docs/results/mmlu-pro-runs.json and reused by the next invocation with the same settings; --fresh
recomputes everything. Query vectors: the precomputed all-mpnet-base-v2 embeddings (the paper's).
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlu-pro"
OUT = ROOT / "docs" / "results"
RUNS = OUT / "mmlu-pro-runs.json"
FIGURES = OUT / "mmlu-pro"
sys.path.insert(0, str(ROOT))

ENCODER = "all-mpnet-base-v2"
N_VALUES = (256, 512, 1024)
ONBOARD = (16, 32, 64, 128, 256, 512, 1024)
METHODS = ("locus", "embedllm_mf", "irt_net", "knn", "best_single", "oracle")
LABELS = {"locus": "LOCUS", "embedllm_mf": "EmbedLLM-MF", "irt_net": "IRT-Net", "knn": "kNN (shrunk)",
          "best_single": "best single model", "oracle": "oracle"}


def load_pools():
    from encoder.data import load_triple_dir

    data = load_triple_dir(DATA, encoder=ENCODER)
    with open(DATA / "models.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    open_names = [r["name"] for r in rows if r["access"] == "open"]
    return {"full": data, "open": data.select_models(open_names)}, rows


def _train_config():
    from encoder.training import TrainConfig

    return TrainConfig(threads=1, max_seconds=240)  # two single-thread workers share the 2 cores


def _worker_init() -> None:
    import torch

    torch.set_num_threads(1)


_POOLS = None


def _job(key: str):
    """One run, in a worker process: `eval/<pool>/N<n>/seed<s>[/locus-only]`, `onboard/...`, or the
    robustness/geometry study."""
    global _POOLS
    from registry.lab.evaluation import run_evaluation

    if _POOLS is None:
        _POOLS = load_pools()[0]
    parts = key.split("/")
    if parts[0] == "eval":
        pool, n, seed = parts[1], int(parts[2][1:]), int(parts[3][4:])
        baselines = () if parts[-1] == "locus-only" else ("embedllm_mf", "irt_net", "knn")
        return run_evaluation(_POOLS[pool], evals_per_model=n, seed=seed, baselines=baselines,
                              train_config=_train_config())
    if parts[0] == "onboard":
        seed = int(parts[3][4:])
        return run_evaluation(_POOLS["open"], evals_per_model=1024, seed=seed, holdout_models=5,
                              onboard_evals=ONBOARD, baselines=(), train_config=_train_config())
    if parts[0] == "robustness-geometry":
        return _robustness_and_geometry(_POOLS)
    raise ValueError(key)


def run_all(cache: "RunCache", keys: list[str], workers: int = 2) -> None:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    todo = [k for k in keys if k not in cache.runs]
    if not todo:
        return
    print(f"{len(todo)} runs to do, {workers} at a time", flush=True)
    with ProcessPoolExecutor(workers, initializer=_worker_init) as pool:
        futures = {pool.submit(_job, key): key for key in todo}
        for future in as_completed(futures):
            cache.put(futures[future], future.result())


class RunCache:
    def __init__(self, fresh: bool) -> None:
        self.runs = {} if fresh or not RUNS.exists() else json.loads(RUNS.read_text())

    def put(self, key: str, value) -> None:
        self.runs[key] = value
        print(f"  done {key} ({time.strftime('%H:%M:%S')})", flush=True)
        RUNS.parent.mkdir(parents=True, exist_ok=True)
        RUNS.write_text(json.dumps(self.runs, indent=1))

    def get(self, key: str):
        return self.runs[key]


def mean_sd(values):
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def fmt(values) -> str:
    m, s = mean_sd(values)
    return f"{100 * m:.2f} ± {100 * s:.2f}"


def table2(cache, pools, seeds):
    runs = {(pool, n, seed): cache.get(f"eval/{pool}/N{n}/seed{seed}")
            for pool in ("open", "full") for n in N_VALUES for seed in seeds}
    lines = []
    for pool in ("open", "full"):
        lines.append(f"\n**{pool} pool** ({len(pools[pool].models)} models): routing accuracy / correctness accuracy, "
                     f"% on test queries, mean ± sd over seeds {', '.join(map(str, seeds))}\n")
        lines.append("| method | " + " | ".join(f"N = {n}" for n in N_VALUES) + " |")
        lines.append("|---|" + "---:|" * len(N_VALUES))
        for method in METHODS:
            cells = []
            for n in N_VALUES:
                routing = [runs[(pool, n, s)]["routing_accuracy"][method] for s in seeds]
                cell = fmt(routing)
                if method in runs[(pool, n, seeds[0])]["correctness_accuracy"]:
                    cell += " / " + fmt([runs[(pool, n, s)]["correctness_accuracy"][method] for s in seeds])
                cells.append(cell)
            lines.append(f"| {LABELS[method]} | " + " | ".join(cells) + " |")
    return runs, "\n".join(lines)


def plot_table2(runs, seeds, pools):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for ax, pool in zip(axes, ("open", "full")):
        for method in METHODS[:-1]:  # the oracle (far above) would flatten the comparison: it is in the title
            means, sds = zip(*(mean_sd([runs[(pool, n, s)]["routing_accuracy"][method] for s in seeds]) for n in N_VALUES))
            style = "--" if method in ("best_single", "oracle") else "-"
            ax.errorbar(N_VALUES, means, yerr=sds, label=LABELS[method], linestyle=style, marker="o", capsize=3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(N_VALUES, [str(n) for n in N_VALUES])
        ax.set_xlabel("training evaluations per model (N)")
        ax.set_ylabel("routing accuracy on test queries")
        oracle = np.mean([runs[(pool, N_VALUES[0], s)]["routing_accuracy"]["oracle"] for s in seeds])
        ax.set_title(f"MMLU-Pro, {pool} pool ({len(pools[pool].models)} models); oracle {oracle:.3f}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = FIGURES / "routing-vs-n.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def onboarding(cache, pools, seeds):
    runs = [cache.get(f"onboard/open/K5/seed{seed}") for seed in seeds]
    lines = ["| evaluations of each held-out model | correctness accuracy of held-out models | routing accuracy, pool with them |",
             "|---:|---:|---:|"]
    for n in ONBOARD:
        lines.append(f"| {n} | {fmt([r['onboarding'][str(n)]['correctness_accuracy'] for r in runs])} | "
                     f"{fmt([r['onboarding'][str(n)]['routing_accuracy'] for r in runs])} |")
    gap = [r["onboarding"]["1024"]["correctness_accuracy"] - r["onboarding"]["128"]["correctness_accuracy"] for r in runs]
    held = "; ".join(", ".join(r["held_out"]) for r in runs)
    return runs, "\n".join(lines), mean_sd(gap), held


def plot_onboarding(runs):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("correctness_accuracy", "correctness accuracy (held-out models)"),
                       ("routing_accuracy", "routing accuracy (pool incl. held-out)")):
        means, sds = zip(*(mean_sd([r["onboarding"][str(n)][key] for r in runs]) for n in ONBOARD))
        ax.errorbar(ONBOARD, means, yerr=sds, marker="o", capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ONBOARD, [str(n) for n in ONBOARD])
    ax.set_xlabel("evaluations used to embed each held-out model")
    ax.set_ylabel("accuracy on test queries")
    ax.set_title("Onboarding unseen models (5 held out, open pool)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = FIGURES / "onboarding.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _trained(pool_data, seed=0, n=1024):
    """A LOCUS trained under the evaluation protocol (for the geometry/robustness study)."""
    from encoder.data import sample_per_model, split_queries
    from encoder.training import train_locus

    split = split_queries(pool_data.n_queries, seed=seed)
    train = sample_per_model(pool_data, split.train, n_per_model=n, seed=seed)
    result = train_locus(pool_data, train, split.val, config=_train_config(), seed=seed)
    return result.locus, split, train


def _robustness_and_geometry(pools):
    from scipy import stats

    from encoder.data import sample_per_model
    from encoder.metrics import correctness_accuracy, routing_accuracy
    from encoder.data import evals_by_model
    from encoder.inference import embed_models, predict
    from registry.lab.evaluation import truth_on

    data = pools["open"]
    locus, split, train = _trained(data)
    truth = truth_on(data, split.test)
    out = {"subsample": {}, "overlap": {}, "geometry": {}}
    rng = np.random.default_rng(1)
    for n in (32, 64, 128, 256, 512, 1024):
        accs = []
        for draw in range(5):
            z = embed_models(locus, data, sample_per_model(data, split.train, n_per_model=n, seed=100 * n + draw))
            pred = predict(locus, np.nan_to_num(z), data.query_vectors[split.test])
            accs.append((routing_accuracy(pred, truth), correctness_accuracy(pred, truth)))
        out["subsample"][str(n)] = {"routing": [a for a, _ in accs], "correctness": [c for _, c in accs]}
    own = evals_by_model(data, sample_per_model(data, split.train, n_per_model=None))
    size = 512
    z_ref = None
    for overlap in (0.0, 0.25, 0.5, 0.75, 1.0):
        first, second = [], []
        for e in own:
            perm = rng.permutation(e)
            shared = int(round(overlap * size))
            a = perm[:size]
            b = np.concatenate([a[:shared], perm[size : size + size - shared]])
            first.append(np.sort(a))
            second.append(np.sort(b))
        za, zb = embed_models(locus, data, first), embed_models(locus, data, second)
        cos = lambda x, y: 1 - (x * y).sum(-1) / (np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1))
        self_d = cos(za, zb)
        if z_ref is None:
            z_ref = za
        others = np.array([[cos(za[i], za[j]) for j in range(len(za)) if j != i] for i in range(len(za))])
        out["overlap"][str(overlap)] = {"self_cosine": float(self_d.mean()),
                                        "nearest_other_cosine": float(others.min(axis=1).mean()),
                                        "self_closer_than_any_other": float((self_d < others.min(axis=1)).mean())}
    z = embed_models(locus, data, train)
    pairs = [(i, j) for i in range(data.n_models) for j in range(i + 1, data.n_models)]
    disagreement, d_cos, d_euc = [], [], []
    for i, j in pairs:
        both = ~np.isnan(truth[i]) & ~np.isnan(truth[j])
        disagreement.append(float(np.mean(truth[i, both] != truth[j, both])))
        d_cos.append(float(1 - z[i] @ z[j] / (np.linalg.norm(z[i]) * np.linalg.norm(z[j]))))
        d_euc.append(float(np.linalg.norm(z[i] - z[j])))
    for name, dist in (("cosine", d_cos), ("euclidean", d_euc)):
        out["geometry"][name] = {"pearson": float(stats.pearsonr(dist, disagreement)[0]),
                                 "spearman": float(stats.spearmanr(dist, disagreement)[0]),
                                 "kendall": float(stats.kendalltau(dist, disagreement)[0])}
    nn_agree = []
    d = np.array([[np.linalg.norm(z[i] - z[j]) if i != j else np.inf for j in range(len(z))] for i in range(len(z))])
    for i in range(len(z)):
        j = int(d[i].argmin())
        both = ~np.isnan(truth[i]) & ~np.isnan(truth[j])
        nn_agree.append(float(np.mean(truth[i, both] == truth[j, both])))
    out["nearest_neighbour_agreement"] = float(np.mean(nn_agree))
    return out


def sample_efficiency(runs, seeds, extra):
    """N at which LOCUS reaches each baseline's N=1024 routing accuracy (log-linear interpolation
    of the mean curve), as a ratio 1024 / N."""
    ns = (128,) + N_VALUES
    curve = [np.mean(extra) if n == 128 else np.mean([runs[("open", n, s)]["routing_accuracy"]["locus"] for s in seeds])
             for n in ns]
    lines = ["| baseline | its routing accuracy at N = 1024 | N at which LOCUS reaches it | ratio |", "|---|---:|---:|---:|"]
    for method in ("embedllm_mf", "irt_net", "knn", "best_single"):
        target = np.mean([runs[("open", 1024, s)]["routing_accuracy"][method] for s in seeds])
        if curve[0] >= target:
            where, ratio = f"≤ {ns[0]}", f"≥ {1024 // ns[0]}x"
        elif max(curve) < target:
            where, ratio = "not reached", "< 1x"
        else:
            k = next(i for i in range(1, len(ns)) if curve[i] >= target)
            lo, hi = np.log2(ns[k - 1]), np.log2(ns[k])
            frac = (target - curve[k - 1]) / (curve[k] - curve[k - 1])
            n_at = 2 ** (lo + frac * (hi - lo))
            where, ratio = f"{n_at:.0f}", f"{1024 / n_at:.1f}x"
        lines.append(f"| {LABELS[method]} | {100 * target:.2f} | {where} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not (DATA / "evals.csv").is_file():
        sys.exit(f"MMLU-Pro not found at {DATA}: this report reads ../shared/data/mmlu-pro")
    seeds = [int(s) for s in args.seeds.split(",")]
    FIGURES.mkdir(parents=True, exist_ok=True)
    cache = RunCache(args.fresh)
    pools, _ = load_pools()
    started = time.perf_counter()

    keys = ([f"eval/{pool}/N{n}/seed{s}" for n in N_VALUES[::-1] for pool in ("open", "full") for s in seeds]
            + [f"onboard/open/K5/seed{s}" for s in seeds] + ["robustness-geometry/open/N1024/seed0"]
            + [f"eval/open/N128/seed{s}/locus-only" for s in seeds])
    run_all(cache, keys, workers=args.workers)
    runs, table = table2(cache, pools, seeds)
    extra = [cache.get(f"eval/open/N128/seed{s}/locus-only")["routing_accuracy"]["locus"] for s in seeds]
    efficiency = sample_efficiency(runs, seeds, extra)
    routing_png = plot_table2(runs, seeds, pools)
    onboard_runs, onboard_table, gap, held = onboarding(cache, pools, seeds)
    onboard_png = plot_onboarding(onboard_runs)
    robust = cache.get("robustness-geometry/open/N1024/seed0")

    sub = ["| evaluations per model used to embed | routing accuracy | correctness accuracy |", "|---:|---:|---:|"]
    for n, row in robust["subsample"].items():
        sub.append(f"| {n} | {fmt(row['routing'])} | {fmt(row['correctness'])} |")
    ov = ["| overlap of the two 512-query sets | mean cosine distance, same model | mean cosine distance to nearest other model | same model closer than any other |",
          "|---:|---:|---:|---:|"]
    for f, row in robust["overlap"].items():
        ov.append(f"| {float(f):.2f} | {row['self_cosine']:.4f} | {row['nearest_other_cosine']:.4f} | "
                  f"{100 * row['self_closer_than_any_other']:.0f}% |")
    geo = ["| distance | Pearson | Spearman | Kendall |", "|---|---:|---:|---:|"]
    for name, row in robust["geometry"].items():
        geo.append(f"| {name} | {row['pearson']:.3f} | {row['spearman']:.3f} | {row['kendall']:.3f} |")

    page = f"""# LOCUS on MMLU-Pro

Written by `.venv/bin/python scripts/report_mmlu_pro.py --seeds {args.seeds}` (finished runs are kept in
`docs/results/mmlu-pro-runs.json`; `--fresh` recomputes them all). Data: `../shared/data/mmlu-pro`,
32 real LLMs x 12,032 questions (TIGER-AI-Lab's MMLU-Pro outputs; Wang et al., 2024), query vectors
all-mpnet-base-v2. Protocol (`registry evaluate`): queries split 80/10/10 by seed; each model gives
at most N random evaluations from the training queries; validation queries choose hyperparameters and
stop training; metrics on the test queries, each routed among the models scored on it.
LOCUS uses `TrainConfig`'s defaults with one thread and at most 240 s of training per run (two runs
share the 2 cores). Baselines and their tuning budgets are described in `encoder/baselines.py`.

## Routing and correctness accuracy (the paper's Table 2)
{table}

![routing accuracy against N]({routing_png.relative_to(OUT)})

## Sample efficiency (open pool)
LOCUS's mean routing-accuracy curve over N = 128, 256, 512, 1024 (N = 128: LOCUS-only runs), against
each baseline's accuracy with 1024 evaluations per model.

{efficiency}

## Onboarding unseen models (open pool, N = 1024 for the rest)
Five models per seed are left out of training and embedded afterwards, in one forward pass, from n of
their training-query evaluations. Held out: {held}.

{onboard_table}

Correctness accuracy of held-out models from 1024 minus from 128 evaluations: {100 * gap[0]:.2f} ± {100 * gap[1]:.2f} points.

![onboarding curve]({onboard_png.relative_to(OUT)})

## Robustness to the choice and number of embedding queries (open pool, seed 0, N = 1024 training)
Each model re-embedded from n random training-query evaluations (5 draws each):

{chr(10).join(sub)}

Two embeddings of each model from 512-evaluation sets sharing a given fraction of queries:

{chr(10).join(ov)}

## Geometry (open pool, seed 0)
Embedding distance between every pair of models against their disagreement on common test queries
(normalised Hamming distance):

{chr(10).join(geo)}

Nearest neighbour (Euclidean) agrees with a model on {100 * robust['nearest_neighbour_agreement']:.1f}% of common test queries.
## The registry's analytics on MMLU-Pro

Written by their own scripts, on a registry trained with `registry train`'s defaults:
[portfolios](portfolio.md) (routing accuracy vs k and vs parameter budget, with the random band;
`scripts/report_portfolio.py`), [hypothetical profiles and fallback routing](profile-fallback.md)
(profile recall@1/5/10 vs synthetic evaluations, the fallback curve; `scripts/report_profile_fallback.py`),
[families](families.md) (dendrogram, distance heatmap, maps, a pairwise comparison;
`scripts/report_families.py`), and the duplicate audit in [benchmarks](benchmarks.md).
"""
    (OUT / "mmlu-pro.md").write_text(page)
    print(page)
    print(f"written {OUT / 'mmlu-pro.md'} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
