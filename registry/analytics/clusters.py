"""Model families from the embedding geometry: hierarchical clusters (paper, section 3.4, figure 7).

The paper clusters the models' embeddings hierarchically and shows a dendrogram beside a distance
heatmap; families and specialisations (math, code) group together. Here:

Agglomerative clustering (scipy) on the distances between the models (answer distances for
fingerprints, cosine for LOCUS embeddings). Complete linkage by default: a cluster cut at height h
holds only models that are all within h of each other, which is what a family of models that behave
alike means. Average linkage chains: cut into as many clusters as there are families (20), it put 42
of BFCL's 71 models in one cluster (complete linkage: 25 at most), and its clusters agreed with family
no better than chance by either distance (docs/results/scorecard.md part (i) shows both linkages). `average`, `complete` and `single` linkage read the
distances directly; `ward` assumes Euclidean geometry, so it runs on the L2-normalised embeddings, whose
Euclidean distance sqrt(2 * cosine distance) ranks pairs exactly as cosine distance does (its merge
heights are in those units). The number of clusters is the one with the highest mean silhouette
(Rousseeuw, 1987; scikit-learn's) over k = 2 .. min(n - 1, 50), measured on the same distances, the
smaller k on a tie; the silhouette is reported with Kaufman & Rousseeuw's reading of it (> 0.70
strong, > 0.50 reasonable, > 0.25 weak, else no substantial structure), so a pool without families
says so instead of being forced into confident groups. The cophenetic correlation says how faithfully
the tree keeps the pairwise distances. Where models carry a `family`, the clusters are compared with
it by the adjusted Rand index (scikit-learn's; 0 = chance, 1 = the same partition; with a permutation
p-value) and purity, both at the chosen k and with the tree cut into as many clusters as there are
families.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from registry.checks import check_count
from registry.defaults import CLUSTER_LINKAGE, CLUSTER_LINKAGES
from registry.errors import InputError, RegistryError

if TYPE_CHECKING:
    from indexing.store import Store
    from registry.results import ClustersResult

__all__ = ["clusters", "cluster_distances", "cosine_distances", "silhouette", "adjusted_rand_index", "purity",
           "family_agreement", "LINKAGES", "DEFAULT_LINKAGE", "MIN_MODELS"]

LINKAGES = CLUSTER_LINKAGES
DEFAULT_LINKAGE = CLUSTER_LINKAGE
MIN_MODELS = 3  # silhouette needs 2 <= k <= n - 1; a map of two points says nothing a distance does not
MAX_K = 50
PERMUTATIONS = 999


# --------------------------------------------------------------------------- the pure parts
def cosine_distances(z: np.ndarray) -> np.ndarray:
    """(n, n) cosine distances 1 - cos (scipy), symmetric, zero diagonal, in [0, 2]."""
    from scipy.spatial.distance import pdist, squareform

    z = np.asarray(z, dtype=np.float64)
    if len(z) < 2:
        return np.zeros((len(z), len(z)))
    return np.clip(squareform(pdist(z, "cosine")), 0.0, 2.0)


def silhouette(d: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette of a partition under the distance matrix `d` (scikit-learn; singletons count 0,
    as in Rousseeuw 1987). Needs 2 <= clusters <= n - 1."""
    from sklearn.metrics import silhouette_score

    return float(silhouette_score(np.asarray(d, dtype=np.float64), np.asarray(labels), metric="precomputed"))


def adjusted_rand_index(a, b) -> float:
    """Hubert & Arabie's adjusted Rand index of two labelings (scikit-learn; 1 = same partition, ~0 =
    chance)."""
    from sklearn.metrics import adjusted_rand_score

    a, b = np.asarray(a), np.asarray(b)
    if len(a) != len(b):
        raise InputError(f"the labelings differ in length ({len(a)} and {len(b)})", field="labels")
    return float(adjusted_rand_score(a, b))


def _permutation_aris(fixed: np.ndarray, permuted: np.ndarray) -> np.ndarray:
    """(P,) adjusted Rand index of `fixed` (n,) against each row of `permuted` (P, n).

    A permutation keeps both labelings' cluster sizes, so only the contingency term sum C(n_ij, 2)
    changes: one vectorised pass instead of P calls (same formula as scikit-learn's, which this is
    checked against in the tests)."""
    _, f = np.unique(fixed, return_inverse=True)
    _, p = np.unique(permuted, return_inverse=True)
    p = p.reshape(permuted.shape)
    n_perm, n = p.shape
    n_f, n_p = f.max() + 1, p.max() + 1
    table = np.zeros((n_perm, n_f * n_p))
    np.add.at(table, (np.repeat(np.arange(n_perm), n), (f[None, :] * n_p + p).reshape(-1)), 1.0)
    index = (table * (table - 1) / 2).sum(1)
    rows = (np.bincount(f) * (np.bincount(f) - 1) / 2).sum()
    cols_counts = np.bincount(p[0])
    cols = (cols_counts * (cols_counts - 1) / 2).sum()
    expected = rows * cols / (n * (n - 1) / 2)
    best = (rows + cols) / 2
    if best == expected:
        return np.ones(n_perm)
    return (index - expected) / (best - expected)


def purity(clusters_of, families) -> float:
    """Fraction of models whose cluster's most common family is their own."""
    clusters_of, families = np.asarray(clusters_of), np.asarray(families)
    hits = 0
    for c in np.unique(clusters_of):
        hits += Counter(families[clusters_of == c].tolist()).most_common(1)[0][1]
    return hits / len(families)


def _structure(score: float) -> str:
    """Kaufman & Rousseeuw's reading of a mean silhouette."""
    if score > 0.70:
        return "strong"
    if score > 0.50:
        return "reasonable"
    if score > 0.25:
        return "weak"
    return "none"


def cluster_distances(d: np.ndarray, *, linkage: str = DEFAULT_LINKAGE, k: int | None = None,
                      euclidean: bool = False) -> dict[str, Any]:
    """Hierarchical clustering of an (n, n) distance matrix. `euclidean`: `d` is a Euclidean distance
    already, which ward reads as it is; else ward reads sqrt(2 d) (for a cosine distance of unit vectors,
    their Euclidean distance; for a disagreement rate of 0/1 answers, their scaled Euclidean distance).

    Returns the scipy linkage matrix `Z`, the cut `labels` (cluster ids 1..K numbered in dendrogram
    leaf order), `k`, the leaf `order`, `silhouette` (mean, and per k tried), the `cut_height` between
    the last merge kept and the first merge cut, and `cophenetic_correlation`. With `k` given the tree
    is cut there; otherwise at the silhouette maximum over 2..min(n - 1, 50)."""
    from scipy.cluster import hierarchy
    from scipy.spatial.distance import squareform

    if linkage not in LINKAGES:
        raise InputError(f"linkage must be one of {', '.join(LINKAGES)}, not {linkage!r}", field="linkage")
    d = np.asarray(d, dtype=np.float64)
    n = len(d)
    if n < MIN_MODELS:
        raise RegistryError(f"clustering needs at least {MIN_MODELS} models, got {n}")
    # ward is defined for Euclidean distances: on unit vectors sqrt(2 * cosine) is that distance.
    tree_d = np.sqrt(2.0 * np.maximum(d, 0.0)) if linkage == "ward" and not euclidean else d
    condensed = squareform(tree_d, checks=False)
    z = hierarchy.linkage(condensed, method=linkage)
    coph = float(hierarchy.cophenet(z, condensed)[0]) if np.ptp(condensed) > 0 else None  # all distances equal
    order = hierarchy.leaves_list(z)

    def cut(kk: int) -> np.ndarray:
        return hierarchy.fcluster(z, kk, criterion="maxclust")

    scores: dict[int, float] = {}
    if k is None:
        best = None
        for kk in range(2, min(n - 1, MAX_K) + 1):
            labels = cut(kk)
            if not 2 <= len(np.unique(labels)) <= n - 1:
                continue
            scores[kk] = silhouette(d, labels)
            if best is None or scores[kk] > scores[best] + 1e-12:
                best = kk
        k = best if best is not None else 1
    k = max(1, min(int(k), n))
    raw = cut(k)
    # number clusters 1..K in the order they appear along the dendrogram's leaves
    renumber: dict[int, int] = {}
    for leaf in order:
        renumber.setdefault(int(raw[leaf]), len(renumber) + 1)
    labels = np.array([renumber[int(c)] for c in raw])
    actual = len(renumber)
    heights = z[:, 2]
    cut_height = float((heights[n - actual - 1] + heights[n - actual]) / 2) if 1 < actual < n else (
        float(heights[-1]) * 1.01 if actual == 1 else 0.0)
    sil = silhouette(d, labels) if 2 <= actual <= n - 1 else None  # undefined for 1 or n clusters
    return {"Z": z, "labels": labels, "k": actual, "order": order.tolist(), "silhouette": sil,
            "silhouette_by_k": scores, "cut_height": cut_height, "cophenetic_correlation": coph}


def _merges(z: np.ndarray, names: list[str]) -> list[dict[str, Any]]:
    n = len(names)

    def ref(i: float):
        i = int(i)
        return names[i] if i < n else i - n

    return [{"left": ref(a), "right": ref(b), "height": float(h), "size": int(s)} for a, b, h, s in z]


def family_agreement(z: np.ndarray, labels: np.ndarray, families: list[str | None], *,
                     field: str = "family", seed: int = 0) -> dict[str, Any] | None:
    """How the clusters agree with a metadata field (over the models that have it): the fields of
    `registry.results.FamilyAgreement`."""
    from scipy.cluster import hierarchy

    have = np.array([f is not None for f in families])
    if have.sum() < 2:
        return None
    fam = np.array([str(f) for f, h in zip(families, have) if h])
    mine = labels[have]
    n_fam = len(np.unique(fam))
    ari = adjusted_rand_index(fam, mine)
    rng = np.random.default_rng(seed)
    shuffled = np.stack([rng.permutation(fam) for _ in range(PERMUTATIONS)])
    at_least = int((_permutation_aris(mine, shuffled) >= ari - 1e-12).sum())
    result = {"field": field, "n_models": int(have.sum()), "n_families": n_fam, "n_clusters": len(np.unique(mine)),
              "adjusted_rand": ari, "p_value": (at_least + 1) / (PERMUTATIONS + 1), "permutations": PERMUTATIONS,
              "purity": purity(mine, fam), "at_family_count": None}
    if 1 < n_fam < len(labels):
        cut = hierarchy.fcluster(z, n_fam, criterion="maxclust")[have]
        result["at_family_count"] = {"k": n_fam, "adjusted_rand": adjusted_rand_index(fam, cut),
                                     "purity": purity(cut, fam)}
    spread = {}
    for f in sorted(np.unique(fam)):
        ids = sorted({int(c) for c in mine[fam == f]})
        spread[str(f)] = {"n_models": int((fam == f).sum()), "clusters": ids}
    result["by_family"] = spread
    return result


# --------------------------------------------------------------------------- the registry part
def clusters(store: "Store", *, where: str | None = None, plot=None, linkage: str = DEFAULT_LINKAGE,
             k: int | None = None, by: str | None = None, min_evals: int | None = None) -> "ClustersResult":
    """Hierarchical clusters of the models (see the module docstring for the rules), on `by`: the
    behaviour fingerprint (the behaviour distance, `search.fingerprint_distances`; the default when the
    home has them) or the LOCUS embedding (cosine). Models embedded from fewer than `min_evals` evaluations (default: the
    documented minimum) are left out, named in the result: a vector that noisy would join, and
    reshape, whichever cluster it fell near."""
    from registry.evidence import MIN_EVALS, check_min_evals, evidence_note
    from registry.results import ClustersResult
    from registry.analytics.search import (ANSWER_MATRIX_MAX, embedded_subset, fingerprint_distances, likeness_kind,
                                           without_vector_note)

    min_evals = check_min_evals(MIN_EVALS if min_evals is None else min_evals)
    left_out: list[str] = []

    if linkage not in LINKAGES:
        raise InputError(f"linkage must be one of {', '.join(LINKAGES)}, not {linkage!r}", field="linkage")
    k = check_count(k, "k", 1, optional=True)
    by = likeness_kind(store, by)
    kept_thin: list[str] = []
    without: list[str] = []
    names, z, records = embedded_subset(store, where, need=MIN_MODELS, what="clustering", by=by, min_evals=min_evals,
                                        left_out=left_out, kept_thin=kept_thin, without=without)
    # fingerprints: by behaviour (how often two models' answers disagree); the identity distance ranks by
    # confident answers and misses families (docs/results/scorecard.md, "clusters vs family")
    d, metric = fingerprint_distances(store, names, z) if by == "fingerprint" else (cosine_distances(z), "cosine")
    tree = cluster_distances(d, linkage=linkage, k=k, euclidean=metric == "euclidean")
    labels = tree["labels"]
    families = [records[n].family for n in names]
    order = tree["order"]
    groups = []
    for cid in range(1, tree["k"] + 1):
        members = [names[i] for i in order if labels[i] == cid]
        rows = [i for i in order if labels[i] == cid]
        within = d[np.ix_(rows, rows)][np.triu_indices(len(rows), 1)] if len(rows) > 1 else np.zeros(0)
        fams = Counter(records[m].family for m in members if records[m].family is not None)
        mean = float(within.mean()) if len(within) else 0.0
        groups.append({"id": cid, "size": len(members), "members": members, "mean_distance": mean,
                       "mean_distance_cosine": mean, "families": dict(fams.most_common())})
    heights = "cosine distance" if linkage != "ward" else "Euclidean distance of unit vectors, sqrt(2 * cosine)"
    if metric == "euclidean":
        heights = "fingerprint identity distance (RMS logit difference over the probe queries)"
    elif metric == "behaviour" and len(names) <= ANSWER_MATRIX_MAX:
        heights = ("behaviour distance: how often each model's recorded answers would disagree with the other's "
                   "as its fingerprint predicts them, the mean of both directions (1: no task in common)")
    elif metric == "behaviour":
        heights = ("behaviour distance: the expected disagreement of the two models' stored behaviour vectors over "
                   "each one's probe queries, the mean of both directions (more models than "
                   f"{ANSWER_MATRIX_MAX}: the index's vectors, not every model's answers)")
    if linkage == "ward" and metric == "behaviour":  # ward's merge heights are of sqrt(2 d), not of d
        heights = f"sqrt(2 x {heights.replace(' (1: no task in common)', '')}), ward's Euclidean form"
    result: dict[str, Any] = {
        "n_models": len(names), "by": by, "metric": metric, "linkage": linkage, "heights": heights,
        "k": tree["k"],
        "k_rule": (("given" if tree["k"] == k else f"given ({k}; at most the {len(names)} models clustered)")
                   if k is not None else
                   f"highest mean silhouette over k = 2..{min(len(names) - 1, MAX_K)} ({metric} distances)"),
        "silhouette": tree["silhouette"],
        "structure": _structure(tree["silhouette"]) if tree["silhouette"] is not None else "undefined",
        "silhouette_by_k": {str(kk): v for kk, v in tree["silhouette_by_k"].items()},
        "cophenetic_correlation": tree["cophenetic_correlation"], "cut_height": tree["cut_height"],
        "clusters": groups, "order": [names[i] for i in order], "merges": _merges(tree["Z"], names),
        "family_agreement": family_agreement(tree["Z"], labels, families),
        "plot": None, "min_evals": min_evals, "left_out": left_out, "without_vector": without,
        "evidence_note": "; ".join(filter(None, [
            evidence_note(left_out, min_evals, what="left out of the clustering") or evidence_note(
                kept_thin, min_evals, what=f"clustered all the same (fewer than {MIN_MODELS} models have more), so "
                                           "these clusters rest on thin evidence", how="refine them with more evaluations"),
            without_vector_note(without, by, "the clustering")])) or None,
    }
    if plot is not None:
        from registry.analytics.plots import dendrogram_heatmap, plot_path

        path = plot_path(plot)
        dendrogram_heatmap(path, names, d, tree, families=families, linkage=linkage, heights_label=heights,
                           where=where, what="LOCUS embeddings" if by == "locus" else "models by fingerprint",
                           distance={"cosine": "cosine distance", "behaviour": "behaviour distance",
                                     "euclidean": "identity distance"}[metric])
        result["plot"] = str(path)
        result["plot_layout"] = ("one figure: dendrogram (left; leaves labelled, branches coloured by cluster, "
                                 "names coloured by family) beside the distance heatmap in dendrogram order")
    return ClustersResult.model_validate(result)
