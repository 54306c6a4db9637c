"""Write docs/results/profile-fallback.md (and its plots): hypothetical task profiles (paper, appendix
E.1) and nearest-neighbour fallback routing (appendix E.2) on MMLU-Pro.

    .venv/bin/python scripts/report_profile_fallback.py [--home DIR] [--evals 64,128,256,512,1024,2048,8192] [--seeds 3]

--home is a registry home: used as it is when it holds an active encoder and embedded models, else
built there (scripts/_mmlu_pro.py: import ../shared/data/mmlu-pro with its precomputed
all-mpnet-base-v2 vectors, `registry train`'s defaults, embed all).
Without --home a temporary one is built.

(a) Profile recall. For each embedded model: its own task profile (per-task accuracy over all its
stored evaluations) -> `registry profile` (ProfileSpace.profile, the code path of profile()) -> the
rank of the model among all real embeddings. recall@1/5/10 against the number of synthetic evaluations,
mean over seeds. References: the same number of the model's REAL evaluations (true labels, random
queries) embedded the same way; chance (k / pool).

(b) Fallback. On the active encoder's held-out test queries (`registry.analytics.heldout`: embeddings built
without them), each query goes to the model with the highest predicted P(correct) among the models
scored on it; then that model is unavailable and its k-th nearest neighbour (cosine, held-out
embeddings, among the models scored on the query) answers instead. Routing accuracy (real scores) as
a fraction of the original routing accuracy, k = 1..5. References: the k-th next model by predicted P
(k = 1 is the router's second choice), the k-th most alike model by score agreement on the training
queries (no embeddings), a random other model (exact expectation) and the best single model. Full pool (32)
and the open-weight pool (access == open, 27).
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
FIGURES = OUT / "profile-fallback"
sys.path.insert(0, str(ROOT))

from _mmlu_pro import mmlu_pro_registry  # noqa: E402

KS = (1, 5, 10)
FALLBACK_KS = (1, 2, 3, 4, 5)


# ------------------------------------------------------------------------------ (a) profile recall
def profile_recall(store, evals_list, seeds):
    from registry.catalog.dataset import load_eval_data
    from registry.analytics.profile import ProfileSpace

    space = ProfileSpace(store)
    names = space.models.index.names
    pool = len(names)
    data = load_eval_data(store, space.active.query_encoder, models=names)
    tasks = np.asarray(data.tasks, dtype=object)
    row_of = {q: i for i, q in enumerate(space.query_ids)}
    eval_rows = np.array([row_of[data.query_ids[q]] for q in data.query_index])
    profiles, own = {}, {}
    for m, name in enumerate(names):
        mine = np.flatnonzero(data.model_index == m)
        own[name] = mine
        profiles[name] = {t: float(data.scores[mine][tasks[data.query_index[mine]] == t].mean())
                          for t in sorted(set(tasks[data.query_index[mine]]))}

    def rank(name, vector):
        hits = space.models.index.search(vector, pool, metric="cosine")
        return [names[r] for r, _ in hits].index(name) + 1

    ranks = {"profile": {}, "real": {}}  # [n][seed] -> {name: rank}
    top1 = {}
    for n in evals_list:
        for kind in ranks:
            ranks[kind][n] = []
        for seed in seeds:
            got, real = {}, {}
            for name in names:
                result = space.profile(profiles[name], k=pool, evals=n, seed=seed)
                order = [r.name for r in result.neighbours]
                got[name] = order.index(name) + 1
                if n == evals_list[-1] and seed == seeds[0]:
                    top1[name] = order[0]
                rng = np.random.default_rng(seed)
                chosen = rng.choice(own[name], size=min(n, len(own[name])), replace=False)
                real[name] = rank(name, space.embed(eval_rows[chosen], data.scores[chosen]))
            ranks["profile"][n].append(got)
            ranks["real"][n].append(real)
        summary = {kind: [np.mean([np.mean([r[x] <= k for x in names]) for r in ranks[kind][n]]) for k in KS]
                   for kind in ranks}
        print(f"evals {n:>5}: profile recall@1/5/10 = " + " / ".join(f"{v:.3f}" for v in summary["profile"]) +
              "; real evaluations " + " / ".join(f"{v:.3f}" for v in summary["real"]), flush=True)
    return {"names": names, "pool": pool, "ranks": ranks, "top1": top1, "profiles": profiles,
            "records": space.models.records}


def recall_table(result, kind, evals_list, seeds):
    names = result["names"]
    rows = []
    for n in evals_list:
        per_seed = np.array([[np.mean([r[x] <= k for x in names]) for k in KS] for r in result["ranks"][kind][n]])
        rows.append((n, per_seed.mean(0), per_seed.std(0)))
    return rows


# ------------------------------------------------------------------------------------ (b) fallback
def fallback_curves(store, models, label):
    from encoder.inference import predict
    from registry.analytics.heldout import held_out

    ho = held_out(store, models=models)
    truth = ho.truth()  # (M, T), NaN = not scored
    scored = ~np.isnan(truth)
    pred = predict(ho.active.locus, ho.embeddings, ho.data.query_vectors[ho.test_queries])
    z = ho.embeddings / np.linalg.norm(ho.embeddings, axis=1, keepdims=True)
    dist = 1.0 - z @ z.T  # cosine distance between held-out embeddings
    m_count, t_count = truth.shape
    train_mask = np.ones(ho.data.n_queries, dtype=bool)
    train_mask[ho.test_queries] = False
    dense = ho.data.dense()
    behaviour = _disagreement(dense[:, train_mask])  # (M, M) on training queries, no embedding involved
    masked = np.where(scored, pred, -np.inf)
    routed = masked.argmax(0)
    cols = np.arange(t_count)
    base = truth[routed, cols]
    nn = {k: np.full(t_count, np.nan) for k in FALLBACK_KS}
    by_p = {k: np.full(t_count, np.nan) for k in FALLBACK_KS}
    by_behaviour = {k: np.full(t_count, np.nan) for k in FALLBACK_KS}
    random_other = np.full(t_count, np.nan)
    same_order = np.zeros(t_count, dtype=bool)
    for q in range(t_count):
        r = routed[q]
        others = np.flatnonzero(scored[:, q])
        others = others[others != r]
        near = others[np.argsort(dist[r, others], kind="stable")]
        next_p = others[np.argsort(-pred[others, q], kind="stable")]
        alike = others[np.argsort(behaviour[r, others], kind="stable")]
        for k in FALLBACK_KS:
            if len(others) >= k:
                nn[k][q] = truth[near[k - 1], q]
                by_p[k][q] = truth[next_p[k - 1], q]
                by_behaviour[k][q] = truth[alike[k - 1], q]
        random_other[q] = truth[others, q].mean() if len(others) else np.nan
        same_order[q] = np.array_equal(near[:5], next_p[:5])
    base_acc = float(base.mean())
    best = int(np.nanargmax(np.nanmean(dense[:, train_mask], axis=1)))
    out = {
        "label": label, "models": m_count, "queries": t_count, "routing": base_acc,
        "best_single": float(np.nanmean(truth[best])), "best_single_name": ho.data.models[best],
        "oracle": float(np.nanmax(np.where(scored, truth, 0), axis=0).mean()),
        "nn": {k: float(np.nanmean(v)) for k, v in nn.items()},
        "by_p": {k: float(np.nanmean(v)) for k, v in by_p.items()},
        "by_behaviour": {k: float(np.nanmean(v)) for k, v in by_behaviour.items()},
        "random": float(np.nanmean(random_other)),
        "same_order": float(same_order.mean()),
        "n_routed": len(np.unique(routed)),
        "pc_share": [float(x) for x in _pc_share(ho.embeddings)[:2]],
        "routed_models": {ho.data.models[m]: int(c) for m, c in
                          sorted(zip(*np.unique(routed, return_counts=True)), key=lambda x: -x[1])[:5]},
    }
    frac = lambda a: a / base_acc
    print(f"fallback [{label}, {m_count} models, {t_count} test queries]: routing accuracy {base_acc:.4f} "
          f"(best single {out['best_single']:.4f}, oracle {out['oracle']:.4f})", flush=True)
    print("  k-th nearest neighbour, fraction of routing accuracy k=1..5: " +
          " / ".join(f"{frac(out['nn'][k]):.3f}" for k in FALLBACK_KS), flush=True)
    print("  k-th next by predicted P, fraction k=1..5:                 " +
          " / ".join(f"{frac(out['by_p'][k]):.3f}" for k in FALLBACK_KS), flush=True)
    print("  k-th most alike by training-query agreement, fraction k=1..5: " +
          " / ".join(f"{frac(out['by_behaviour'][k]):.3f}" for k in FALLBACK_KS), flush=True)
    print(f"  random other model (expectation), fraction:                {frac(out['random']):.3f}", flush=True)
    print(f"  {out['n_routed']} distinct routed models; 5 nearest neighbours in the order of predicted P on "
          f"{out['same_order']:.1%} of queries; embedding variance on PC1/PC2 "
          f"{out['pc_share'][0]:.3f}/{out['pc_share'][1]:.3f}", flush=True)
    return out


def _disagreement(matrix: np.ndarray) -> np.ndarray:
    """(M, M) fraction of common queries on which two models' scores differ."""
    seen = ~np.isnan(matrix)
    x = np.nan_to_num(matrix)
    common = seen.astype(float) @ seen.T.astype(float)
    differ = (x * seen) @ ((1 - x) * seen).T
    return (differ + differ.T) / np.maximum(common, 1)


def _pc_share(vectors: np.ndarray) -> np.ndarray:
    centred = vectors - vectors.mean(0)
    singular = np.linalg.svd(centred, compute_uv=False) ** 2
    return singular / singular.sum()


# ----------------------------------------------------------------------------------------- output
def plot_recall(rows_profile, rows_real, pool, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ns = [r[0] for r in rows_profile]
    colours = {1: "tab:blue", 5: "tab:orange", 10: "tab:green"}
    for i, k in enumerate(KS):
        mean = np.array([r[1][i] for r in rows_profile])
        sd = np.array([r[2][i] for r in rows_profile])
        ax.errorbar(ns, mean, yerr=sd, marker="o", color=colours[k], capsize=3,
                    label=f"task profile, recall@{k}")
        ax.plot(ns, [r[1][i] for r in rows_real], ls="--", color=colours[k], alpha=0.6,
                label=f"real evaluations, recall@{k}")
        ax.axhline(k / pool, ls=":", color=colours[k], alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("synthetic evaluations in the hypothetical set")
    ax.set_ylabel(f"recall@k (fraction of the {pool} models)")
    ax.set_title("MMLU-Pro: a model's own task profile finds the model\n(error bars: sd over seeds; dotted: chance k / pool)")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fallback(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 4.2), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, c in zip(axes, curves):
        base = c["routing"]
        ax.plot(FALLBACK_KS, [c["nn"][k] / base for k in FALLBACK_KS], marker="o",
                label="k-th nearest neighbour (embedding)")
        ax.plot(FALLBACK_KS, [c["by_p"][k] / base for k in FALLBACK_KS], marker="s", ls="--",
                label="k-th next by predicted P (k=1: second-best)")
        ax.plot(FALLBACK_KS, [c["by_behaviour"][k] / base for k in FALLBACK_KS], marker="^", ls=":",
                label="k-th most alike by training-query agreement")
        ax.axhline(c["random"] / base, color="grey", ls=":", label="random other model")
        ax.axhline(c["best_single"] / base, color="tab:red", ls="-.", alpha=0.6, label="best single model")
        ax.set_xticks(FALLBACK_KS)
        ax.set_xlabel("neighbour rank k")
        ax.set_title(f"{c['label']} pool ({c['models']} models), routing acc {base:.3f}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fallback accuracy / original routing accuracy")
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle("MMLU-Pro held-out queries: routed model unavailable, fallback answers")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_markdown(command, recall, rows_profile, rows_real, curves, seeds, seconds, encoder_id, home):
    pool = recall["pool"]
    last = rows_profile[-1][0]
    at5 = {n: mean[1] for n, mean, _ in rows_profile}
    holds = [n for n, v in at5.items() if v > 0.5]
    first = recall["ranks"]["profile"][last][0]
    misses = sorted((r, n) for n, r in first.items() if r > 5)
    lines = [
        "# Hypothetical task profiles and fallback routing on MMLU-Pro",
        "",
        "Generated by (every number below is printed by it):",
        "",
        f"    {command}",
        "",
        f"Registry `{home}`: MMLU-Pro ({pool} embedded models, 14 tasks, all-mpnet-base-v2 query vectors), active encoder "
        f"`{encoder_id}` (trained seed 0, 1024 training evaluations per model); registry embeddings from all of "
        f"each model's evaluations. Seeds {', '.join(map(str, seeds))}; {seconds:.0f} s.",
        "",
        "## (a) A model's own task profile -> `registry profile` -> is the model found? (appendix E.1)",
        "",
        "For each of the models: its accuracy on each of the 14 tasks over all its stored evaluations is the "
        "target profile; `profile()` samples that many stored queries (allocated to tasks in proportion to "
        "the tasks' sizes), draws Bernoulli scores at the task's target, embeds the set with the active "
        "encoder and ranks the real embeddings by cosine distance. recall@k = fraction of models ranked "
        "within the top k; mean (sd) over seeds. Reference: the same number of the model's *real* "
        "evaluations (random queries, true labels) embedded the same way. Chance: k / "
        f"{pool} = {1 / pool:.3f} / {5 / pool:.3f} / {10 / pool:.3f}.",
        "",
        "| synthetic evals | recall@1 | recall@5 | recall@10 | real evals: recall@1 | recall@5 | recall@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for (n, mean, sd), (_, real, _) in zip(rows_profile, rows_real):
        lines.append(f"| {n} | " + " | ".join(f"{m:.3f} ({s:.3f})" for m, s in zip(mean, sd)) + " | " +
                     " | ".join(f"{m:.3f}" for m in real) + " |")
    lines += [
        "",
        "![recall@k against the number of synthetic evaluations](profile-fallback/recall.png)",
        "",
        "Done-when (\"a model's own task profile finds that model in the top 5 for most models\"): "
        + (f"**holds** at {', '.join(map(str, holds))} synthetic evaluations (recall@5 > 0.5)."
           if holds else "**does not hold** at any evaluation count measured (recall@5 <= 0.5 throughout)."),
        "",
        f"recall@1 stays low even for the model's own real evaluations ({rows_real[-1][1][0]:.3f} at {last}): "
        "re-embedding a model from another sample of its evaluations moves it about as far as its nearest "
        "other models are, so rank 1 is largely out of reach whatever the input; recall@5 and @10 are the "
        "informative numbers here.",
        "",
        f"Models ranked below 5 from their own profile at {last} synthetic evaluations (seed {seeds[0]}), with "
        "the model found first instead:",
        "",
        "| model | rank | found first |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {r} | {recall['top1'][n]} |" for r, n in misses] or ["| (none) | | |"]
    lines += [
        "",
        "## (b) Routed model unavailable: fall back to its k-th nearest neighbour (appendix E.2)",
        "",
        "Held-out test queries of the active encoder (never used to build the embeddings compared here). Each "
        "query goes to the model with the highest predicted P(correct) among the models scored on it; that "
        "model is then unavailable and its k-th nearest neighbour (cosine distance between held-out "
        "embeddings, among the models scored on the query) answers. Fraction = fallback routing accuracy / "
        "original routing accuracy (real scores). References: the k-th next model by predicted P (k = 1: "
        "the router's second choice, which needs P for the query), the k-th most alike model by agreement "
        "of scores on the training queries (a behavioural neighbour found without embeddings), a random "
        "other model (exact expectation), and the best single model (highest training accuracy).",
        "",
    ]
    for c in curves:
        base = c["routing"]
        lines += [
            f"### {c['label']} pool: {c['models']} models, {c['queries']} test queries",
            "",
            f"Routing accuracy {base:.4f}; best single model ({c['best_single_name']}) {c['best_single']:.4f}; "
            f"oracle {c['oracle']:.4f}. Most routed: "
            + ", ".join(f"{n} ({v})" for n, v in c["routed_models"].items()) + ".",
            "",
            "| fallback | k=1 | k=2 | k=3 | k=4 | k=5 |",
            "|---|---|---|---|---|---|",
            "| k-th nearest neighbour: accuracy | " + " | ".join(f"{c['nn'][k]:.4f}" for k in FALLBACK_KS) + " |",
            "| k-th nearest neighbour: fraction | " + " | ".join(f"{c['nn'][k] / base:.3f}" for k in FALLBACK_KS) + " |",
            "| k-th next by predicted P: accuracy | " + " | ".join(f"{c['by_p'][k]:.4f}" for k in FALLBACK_KS) + " |",
            "| k-th next by predicted P: fraction | " + " | ".join(f"{c['by_p'][k] / base:.3f}" for k in FALLBACK_KS) + " |",
            "| k-th most alike by training-query agreement: accuracy | " + " | ".join(f"{c['by_behaviour'][k]:.4f}" for k in FALLBACK_KS) + " |",
            "| k-th most alike by training-query agreement: fraction | " + " | ".join(f"{c['by_behaviour'][k] / base:.3f}" for k in FALLBACK_KS) + " |",
            "",
            f"Random other model: accuracy {c['random']:.4f}, fraction {c['random'] / base:.3f}. Best single "
            f"model: fraction {c['best_single'] / base:.3f}.",
            "",
            f"{c['n_routed']} distinct model{'s are' if c['n_routed'] != 1 else ' is'} ever routed to. On {c['same_order']:.1%} of the queries the "
            "routed model's 5 nearest neighbours, in order, are the next 5 models by predicted P, which is why "
            f"the two curves coincide: the held-out embeddings put {c['pc_share'][0]:.1%} of their variance on "
            f"one direction ({c['pc_share'][1]:.1%} on the next), and the predicted ranking barely changes "
            "from query to query.",
            "",
        ]
    lines += [
        "![fallback fraction against neighbour rank](profile-fallback/fallback.png)",
        "",
        "Paper (EmbedLLM data, 112 models): recall@10 about 97% at 8,192 synthetic evaluations; closest-neighbour "
        "fallback keeps up to 85% of routing accuracy. MMLU-Pro here is one benchmark of 14 subjects and 32 "
        "models, so a task profile carries 14 numbers.",
        "",
    ]
    (OUT / "profile-fallback.md").write_text("\n".join(lines), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None, help="Registry home (built there when not ready).")
    parser.add_argument("--evals", default="64,128,256,512,1024,2048,8192")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="Directory for profile-fallback.md and its plots "
                        "(default docs/results).")
    args = parser.parse_args()
    global OUT, FIGURES
    if args.out:
        OUT = Path(args.out)
        FIGURES = OUT / "profile-fallback"
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    reg, _ = mmlu_pro_registry(Path(args.home) if args.home else None, threads=args.threads)
    home = reg.home
    evals_list = [int(x) for x in args.evals.split(",")]
    seeds = list(range(args.seeds))
    print(f"registry {home}: encoder {reg.store.config['active_encoder']}", flush=True)

    recall = profile_recall(reg.store, evals_list, seeds)
    rows_profile = recall_table(recall, "profile", evals_list, seeds)
    rows_real = recall_table(recall, "real", evals_list, seeds)
    # the embedded models only: evaluations of removed models stay in the store (load_eval_data with
    # models=None would bring them back)
    curves = [fallback_curves(reg.store, recall["names"], "full"),
              fallback_curves(reg.store, reg.select_models("open"), "open-weight")]

    FIGURES.mkdir(parents=True, exist_ok=True)
    plot_recall(rows_profile, rows_real, recall["pool"], FIGURES / "recall.png")
    plot_fallback(curves, FIGURES / "fallback.png")
    command = ".venv/bin/python scripts/report_profile_fallback.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:])
    write_markdown(command.strip(), recall, rows_profile, rows_real, curves, seeds,
                   time.perf_counter() - started, reg.store.config["active_encoder"], home)
    print(f"wrote {OUT / 'profile-fallback.md'} and {FIGURES}/*.png in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
