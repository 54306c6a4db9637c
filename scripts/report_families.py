"""Model families on MMLU-Pro: clusters, maps and a pairwise compare; writes docs/results/families.md.

    .venv/bin/python scripts/report_families.py [--home DIR]

DIR is a registry home. When it holds no trained, embedded registry yet (an empty or new directory,
or no --home: a temporary one), it is built by scripts/_mmlu_pro.py: ../shared/data/mmlu-pro imported
with its precomputed all-mpnet-base-v2 query vectors, the encoder trained with `registry train`'s
defaults, every model embedded. Then:
The page is about the LOCUS embeddings' geometry, so every command reads them (`--by locus`; the registry's
default is the fingerprint) and clusters with average linkage (the registry's default is complete):
1. `registry clusters --by locus --linkage average` (and the other three linkages); agreement with
   the `family` metadata; the same clustering rule run on two references computed from the
   evaluations themselves (correctness disagreement on shared queries, and per-task accuracy
   profiles), so that the embedding's result can be read against what the data allow;
2. `registry map` coloured by family, access and params_b;
3. `registry compare Llama-3-8B Llama-3.1-8B`.
Figures go to docs/results/families/.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "results"
FIGURES = DOCS / "families"
sys.path.insert(0, str(ROOT))

from _mmlu_pro import mmlu_pro_registry  # noqa: E402

PAIR = ("Llama-3-8B", "Llama-3.1-8B")


def reference_distances(reg, names: list[str]) -> dict[str, np.ndarray]:
    """Distances computed from the evaluations, not the embeddings: the normalised Hamming
    disagreement on shared queries (the paper's section 3.4 measure) and the Euclidean distance
    between per-task accuracy profiles."""
    from registry.catalog.dataset import load_eval_data

    data = load_eval_data(reg.store, reg.query_encoder, models=names)
    dense = data.dense()
    have = ~np.isnan(dense)
    filled = np.nan_to_num(dense)
    n = len(names)
    disagreement = np.zeros((n, n))
    for i in range(n):
        both = have[i] & have
        diff = np.abs(filled[i] - filled) * both
        disagreement[i] = diff.sum(1) / np.maximum(both.sum(1), 1)
    tasks = np.array(data.tasks)
    profile = np.stack([np.nanmean(np.where(tasks == t, dense, np.nan), axis=1) for t in sorted(set(data.tasks))], 1)
    euclid = np.sqrt(((profile[:, None, :] - profile[None, :, :]) ** 2).sum(-1))
    return {"correctness disagreement (shared queries)": disagreement,
            "per-task accuracy profile (Euclidean)": euclid, "_profile": profile,
            "_tasks": sorted(set(data.tasks)), "_accuracy": np.nanmean(dense, axis=1)}


def fmt(x, digits=2) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None, help="Registry home (built there when it is not one yet).")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    reg, built = mmlu_pro_registry(Path(args.home) if args.home else None, threads=args.threads)
    from scipy.stats import pearsonr, spearmanr

    from registry.analytics.clusters import adjusted_rand_index, cluster_distances, cosine_distances, family_agreement
    from registry.analytics.search import open_index

    FIGURES.mkdir(parents=True, exist_ok=True)
    out: list[str] = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        out.append(line)

    active = reg.store.config["active_encoder"]
    info = json.loads((reg.home / "encoders" / active / "training.json").read_text())
    n_evals = [n for n in reg.store.read("models", ["n_evals"]).column("n_evals").to_pylist() if n]
    command = "scripts/report_families.py" + (f" --home {args.home}" if args.home else "")
    say("# Model families on MMLU-Pro")
    say()
    say(f"Written by `.venv/bin/python {command}`"
        + (" (which built the registry first)." if built else
           " on a registry built as `scripts/_mmlu_pro.py` builds one."))
    say(f"Registry: 32 models of `../shared/data/mmlu-pro` (12,032 questions, 14 tasks), query vectors "
        f"{info['query_encoder']}; LOCUS encoder `{active}` (seed {info['seed']}, {info['evals_per_model']} "
        f"training evaluations per model, {info['seconds']:.0f} s of training, best validation epoch "
        f"{info['best_epoch']}, validation routing accuracy {info['val_routing_accuracy']:.4f}); each model "
        f"embedded from {min(n_evals)}-{max(n_evals)} evaluations (the n_evals of the models table).")
    say()
    say("This page is about the LOCUS embeddings' geometry, so every command below asks for them (`--by locus`) "
        "and for average linkage; the registry's defaults are the fingerprint's behaviour distances and complete "
        "linkage, which [scorecard.md](scorecard.md) part (i) measures against family.")
    say()

    # ------------------------------------------------------------------ clusters
    result = reg.clusters(plot=FIGURES / "mmlu-pro-clusters.png", by="locus", linkage="average")
    models = open_index(reg.store)
    names = list(models.index.names)
    records = models.records
    families = [records[n].family for n in names]
    say("## Clusters")
    say()
    say("`registry clusters --by locus --linkage average --plot docs/results/families/mmlu-pro-clusters.png` (average linkage on cosine "
        "distances; the number of clusters is the mean-silhouette maximum over k = 2..31):")
    say()
    say(f"**{result.k} clusters**, mean silhouette {result.silhouette:.2f} ({result.structure} "
        f"structure by Kaufman & Rousseeuw's reading), cophenetic correlation {result.cophenetic_correlation:.2f}.")
    say()
    say("| cluster | models | families |")
    say("|---:|---|---|")
    for c in result.clusters:
        fam = ", ".join(f"{f} x{k}" if k > 1 else f for f, k in c.families.items())
        say(f"| {c.id} | {', '.join(c.members)} | {fam} |")
    say()
    say("![dendrogram and distance heatmap](families/mmlu-pro-clusters.png)")
    say()
    g = result.family_agreement
    say("### Agreement with the `family` metadata")
    say()
    say(f"Over {g.n_models} models in {g.n_families} families: adjusted Rand index **{g.adjusted_rand:.2f}** "
        f"(0 is chance, 1 the same partition; permutation p = {g.p_value:.3f} over {g.permutations} "
        f"shuffles of the family labels), purity {g.purity:.2f}; with the tree cut into "
        f"{g.at_family_count.k} clusters (as many as there are families) the adjusted Rand index is "
        f"{g.at_family_count.adjusted_rand:.2f}.")
    say()
    say("| family | models | clusters they fall in |")
    say("|---|---:|---|")
    for f, row in sorted(g.by_family.items(), key=lambda kv: -kv[1].n_models):
        say(f"| {f} | {row.n_models} | {', '.join(map(str, row.clusters))} |")
    say()

    say("Each linkage, same rule for k:")
    say()
    say("| linkage | k | silhouette | cophenetic r | ARI vs family | ARI, cut at 12 |")
    say("|---|---:|---:|---:|---:|---:|")
    linkage_ari = []
    for linkage in ("average", "complete", "single", "ward"):
        r = result if linkage == "average" else reg.clusters(linkage=linkage, by="locus")
        a = r.family_agreement
        linkage_ari += [a.adjusted_rand, a.at_family_count.adjusted_rand]
        say(f"| {linkage} | {r.k} | {r.silhouette:.2f} | {r.cophenetic_correlation:.2f} | "
            f"{a.adjusted_rand:.2f} (p {a.p_value:.2f}) | {a.at_family_count.adjusted_rand:.2f} |")
    say()

    # references from the evaluations themselves
    refs = reference_distances(reg, names)
    d_emb = cosine_distances(models.index.vectors)
    iu = np.triu_indices(len(names), 1)
    say("### Against distances measured from the evaluations")
    say()
    say("The same clustering (average linkage, silhouette rule) on two distances computed from the stored "
        "evaluations instead of the embeddings: the correctness disagreement on shared queries (normalised "
        "Hamming distance, the paper's section 3.4 measure) and the Euclidean distance between per-task "
        "accuracy profiles (14 tasks).")
    say()
    say("| distance | k | silhouette | ARI vs family | ARI, cut at 12 | ARI vs the embedding's clusters |")
    say("|---|---:|---:|---:|---:|---:|")
    emb_labels = np.zeros(len(names), dtype=int)
    for c in result.clusters:
        for m in c.members:
            emb_labels[names.index(m)] = c.id
    rows = [("LOCUS embedding (cosine)", d_emb)] + [(k, v) for k, v in refs.items() if not k.startswith("_")]
    at12 = {}
    for label, dist in rows:
        tree = cluster_distances(dist, linkage="average")
        a = family_agreement(tree["Z"], tree["labels"], families)
        at12[label] = a["at_family_count"]["adjusted_rand"]
        say(f"| {label} | {tree['k']} | {tree['silhouette']:.2f} | {a['adjusted_rand']:.2f} (p {a['p_value']:.2f}) | "
            f"{a['at_family_count']['adjusted_rand']:.2f} | {adjusted_rand_index(emb_labels, tree['labels']):.2f} |")
    say()
    dis = refs["correctness disagreement (shared queries)"]
    acc = refs["_accuracy"]
    gap = np.abs(acc[:, None] - acc[None, :])
    say(f"Over the {len(iu[0])} model pairs, the embedding's cosine distance against the measured disagreement: "
        f"Pearson {pearsonr(d_emb[iu], dis[iu])[0]:.3f}, Spearman {spearmanr(d_emb[iu], dis[iu])[0]:.3f}; against "
        f"the gap in overall accuracy: Pearson {pearsonr(d_emb[iu], gap[iu])[0]:.3f}, Spearman "
        f"{spearmanr(d_emb[iu], gap[iu])[0]:.3f}.")
    say()

    # ------------------------------------------------------------------ maps
    say("## Maps")
    say()
    maps = {}
    for field in ("family", "access", "params_b"):
        maps[field] = reg.map(FIGURES / f"mmlu-pro-map-{field}.png", color_by=field, by="locus")
    m = maps["family"]
    pc1 = np.array([c.x for c in m.coordinates])
    order = [c.name for c in m.coordinates]
    acc_by_name = dict(zip(names, acc))
    r_pc1 = spearmanr(pc1, [acc_by_name[n] for n in order])[0]
    say(f"`registry map --by locus --plot docs/results/families/mmlu-pro-map-family.png --color-by family` (and `access`, "
        f"`params_b`): PCA of the L2-normalised embeddings. The two axes keep {100 * m.explained_variance.total:.1f}% "
        f"of the variance (PC1 {100 * m.explained_variance.x:.1f}%, PC2 {100 * m.explained_variance.y:.1f}%); map "
        f"distances correlate with embedding chord distances at r = {m.distance_correlation:.3f}. PC1 against "
        f"each model's overall measured accuracy: Spearman {r_pc1:.3f}.")
    say()
    say("![map coloured by family](families/mmlu-pro-map-family.png)")
    say()
    say("![map coloured by access](families/mmlu-pro-map-access.png)")
    say()
    say("![map coloured by parameter count](families/mmlu-pro-map-params_b.png)")
    say()

    # ------------------------------------------------------------------ compare
    a, b = PAIR
    c = reg.compare(a, b, by="locus")
    say("## Compare")
    say()
    say(f"`registry compare {a} {b} --by locus`: cosine distance {c.distance_cosine:.4f}; {b} is {a}'s "
        f"#{c.rank_of_b_among_a_neighbours} nearest of {c.n_neighbours}, {a} is {b}'s "
        f"#{c.rank_of_a_among_b_neighbours}. On {c.agreement.shared_queries} shared queries they disagree "
        f"on {100 * c.agreement.disagreement_rate:.1f}% (only {a} right: {c.agreement.only_a}, only {b} "
        f"right: {c.agreement.only_b}). Overall accuracy {100 * c.overall.a_accuracy:.1f}% vs "
        f"{100 * c.overall.b_accuracy:.1f}% (paired z {c.overall.z:+.2f}, "
        f"p {c.overall.p_value:.2g}).")
    say()
    say(f"| task | {a} % | {b} % | n (shared) | difference, points | z | p (Holm) | "
        f"predicted {a} % | predicted {b} % |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in c.tasks:
        say(f"| {t.task} | {100 * t.a_accuracy:.1f} | {100 * t.b_accuracy:.1f} | {t.shared_n} | "
            f"{100 * t.difference:+.1f} | {t.z:+.2f} | {t.p_adjusted:.2g} | "
            f"{fmt(100 * t.a_predicted if t.a_predicted is not None else None, 1)} | "
            f"{fmt(100 * t.b_predicted if t.b_predicted is not None else None, 1)} |")
    say()
    say("Tests are paired on the shared queries (McNemar's z for 0/1 scores), two-sided, Holm-adjusted over the "
        "14 tasks. Predicted: the mean predicted P(correct) over each task's stored queries, from the two "
        "embeddings.")
    say()
    measured = [100 * t.a_accuracy for t in c.tasks]
    predicted = [100 * t.a_predicted for t in c.tasks if t.a_predicted is not None]
    say("## Reading")
    say()
    follows = g.at_family_count.adjusted_rand >= 0.5
    say(f"- The paper (section 3.4, figure 7; EmbedLLM, 112 models) finds families in the dendrogram. Here the "
        f"clusters {'largely follow' if follows else 'do not follow'} the `family` metadata: adjusted Rand "
        f"{g.adjusted_rand:.2f} (p {g.p_value:.2f}) at the silhouette cut, "
        f"{g.at_family_count.adjusted_rand:.2f} with {g.at_family_count.k} clusters, at most "
        f"{max(linkage_ari):.2f} over the four linkages.")
    if m.explained_variance.total >= 0.95 and abs(r_pc1) >= 0.9:
        say(f"- The embeddings are nearly two-dimensional ({100 * m.explained_variance.total:.1f}% of the variance in two "
            f"axes) and the first axis orders the models by overall measured accuracy (Spearman {r_pc1:.2f}): the "
            "clusters are bands of ability more than lineages, and the silhouette is high because those bands are "
            "well separated along that axis.")
    else:
        say(f"- Two map axes keep {100 * m.explained_variance.total:.1f}% of the variance; the first against overall "
            f"accuracy: Spearman {r_pc1:.2f}.")
    e12, d12 = at12["LOCUS embedding (cosine)"], at12["correctness disagreement (shared queries)"]
    say(f"- Clustering the measured disagreement instead gives adjusted Rand {d12:.2f} at 12 clusters, against "
        f"{e12:.2f} for the embedding: the evaluations carry {'more' if d12 > e12 + 0.05 else 'about as much'} family "
        f"signal {'than the embeddings keep' if d12 > e12 + 0.05 else 'as the embeddings'}. Embedding distance tracks "
        f"disagreement (Spearman {spearmanr(d_emb[iu], dis[iu])[0]:.2f}; the paper reports 0.886) about as "
        f"closely as it tracks the gap in overall accuracy (Spearman {spearmanr(d_emb[iu], gap[iu])[0]:.2f}).")
    if predicted:
        say(f"- Predicted task accuracies for {a} span {min(predicted):.0f}-{max(predicted):.0f}%, measured ones "
            f"{min(measured):.0f}-{max(measured):.0f}%; predicted overall {100 * c.overall.a_predicted:.1f}% "
            f"vs {100 * c.overall.b_predicted:.1f}%, measured {100 * c.overall.a_accuracy:.1f}% vs "
            f"{100 * c.overall.b_accuracy:.1f}%.")
    budget = (info.get("train_config") or info.get("settings") or {}).get("max_seconds")
    stopped = f"; training stopped at its {budget:.0f} s budget" if budget and info["seconds"] >= budget else ""
    say(f"- The checkpoint's best validation epoch was {info['best_epoch']}{stopped}. How the picture changes with "
        "a longer-trained encoder is not tested here.")
    say()
    say(f"_{time.perf_counter() - started:.0f} s in all._")
    (DOCS / "families.md").write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"\nwrote {DOCS / 'families.md'}")


if __name__ == "__main__":
    main()
