"""Model families from the embedding geometry: hierarchical clusters, a 2-D map, a pairwise compare.

The paper (section 3.4, figure 7) clusters the models' embeddings hierarchically and shows a
dendrogram beside a distance heatmap; families and specialisations (math, code) group together. Here:

clusters
    Agglomerative clustering (scipy) on the cosine distances between the embeddings, the metric
    `registry search` uses. `average`, `complete` and `single` linkage read the cosine distances
    directly; `ward` assumes Euclidean geometry, so it runs on the L2-normalised embeddings, whose
    Euclidean distance sqrt(2 * cosine distance) ranks pairs exactly as cosine distance does (its merge
    heights are in those units). The number of clusters is the one with the highest mean silhouette
    (Rousseeuw, 1987) over k = 2 .. min(n - 1, 50), measured on the cosine distances, the smaller k on
    a tie; the silhouette is reported with Kaufman & Rousseeuw's reading of it (> 0.70 strong,
    > 0.50 reasonable, > 0.25 weak, else no substantial structure), so a pool without families says
    so instead of being forced into confident groups. The cophenetic correlation says how faithfully
    the tree keeps the pairwise distances. Where models carry a `family`, the clusters are compared
    with it by the adjusted Rand index (0 = chance, 1 = the same partition; with a permutation p-value)
    and purity, both at the chosen k and with the tree cut into as many clusters as there are families.

embedding_map
    PCA of the L2-normalised embeddings (SVD of the centred matrix). On unit vectors this is exactly
    classical MDS of the chord distances sqrt(2 * cosine distance), so the map shows the geometry that
    search and clustering use, it is deterministic, and it says how much it keeps: the variance share
    of each axis and the correlation between map distances and embedding distances.

compare
    Two models side by side: their cosine distance and neighbour ranks; per task their measured
    accuracies over all their stored evaluations, and a test of the difference. Where the two share
    queries in a task (the usual case) the test is paired on those shared queries: z = sum(d) /
    sqrt(sum(d^2)) with d = score_a - score_b per query, which for 0/1 scores is McNemar's test and
    for partial-credit scores its sign-flip analogue; with fewer than 10 shared queries it is the
    unpaired two-proportion z-test. p-values are two-sided, with Holm's adjustment over the tasks.
    Predicted accuracies come from the embeddings: the mean predicted P(correct) over the task's
    stored queries.
"""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from registry.errors import InputError, RegistryError
from registry.records import METADATA_FIELDS, ModelRecord

if TYPE_CHECKING:
    from indexing.store import Store

__all__ = ["clusters", "embedding_map", "compare", "cluster_distances", "cosine_distances", "silhouette",
           "adjusted_rand_index", "purity", "paired_test", "two_proportion_test", "LINKAGES", "MIN_MODELS"]

LINKAGES = ("average", "complete", "single", "ward")
MIN_MODELS = 3  # silhouette needs 2 <= k <= n - 1; a map of two points says nothing a distance does not
MAX_K = 50
MIN_PAIRED = 10
PERMUTATIONS = 999


# --------------------------------------------------------------------------- the pure parts
def cosine_distances(z: np.ndarray) -> np.ndarray:
    """(n, n) cosine distances 1 - cos, symmetric, zero diagonal, in [0, 2]."""
    z = np.asarray(z, dtype=np.float64)
    u = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    d = np.clip(1.0 - u @ u.T, 0.0, 2.0)
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0.0)
    return d


def silhouette(d: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette of a partition under the distance matrix `d` (singletons count 0, as in
    Rousseeuw 1987). Needs 2 <= clusters <= n - 1."""
    labels = np.asarray(labels)
    _, inverse = np.unique(labels, return_inverse=True)
    k = inverse.max() + 1
    onehot = np.zeros((len(labels), k))
    onehot[np.arange(len(labels)), inverse] = 1.0
    sizes = onehot.sum(0)
    sums = d @ onehot  # (n, k): summed distance from each point to each cluster
    own = inverse
    own_size = sizes[own]
    a = np.where(own_size > 1, sums[np.arange(len(labels)), own] / np.maximum(own_size - 1, 1), 0.0)
    mean_to = sums / sizes
    mean_to[np.arange(len(labels)), own] = np.inf
    b = mean_to.min(1)
    denom = np.maximum(a, b)
    s = np.where((own_size > 1) & (denom > 0), (b - a) / np.where(denom > 0, denom, 1.0), 0.0)
    return float(s.mean())


def _comb2(x: np.ndarray | float) -> np.ndarray | float:
    return x * (x - 1) / 2.0


def adjusted_rand_index(a, b) -> float:
    """Hubert & Arabie's adjusted Rand index of two labelings (1 = same partition, ~0 = chance)."""
    a, b = np.asarray(a), np.asarray(b)
    if len(a) != len(b):
        raise ValueError("labelings differ in length")
    n = len(a)
    if n < 2:
        return 1.0
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    table = np.zeros((ai.max() + 1, bi.max() + 1))
    np.add.at(table, (ai, bi), 1)
    index = _comb2(table).sum()
    rows, cols = _comb2(table.sum(1)).sum(), _comb2(table.sum(0)).sum()
    expected = rows * cols / _comb2(n)
    best = (rows + cols) / 2
    if best == expected:  # both partitions trivial in the same way (all one cluster or all singletons)
        return 1.0
    return float((index - expected) / (best - expected))


def purity(clusters_of, families) -> float:
    """Fraction of models whose cluster's most common family is their own."""
    clusters_of, families = np.asarray(clusters_of), np.asarray(families)
    hits = 0
    for c in np.unique(clusters_of):
        hits += Counter(families[clusters_of == c].tolist()).most_common(1)[0][1]
    return hits / len(families)


def _normal_p(z: float) -> float:
    return float(math.erfc(abs(z) / math.sqrt(2)))


def paired_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(z, two-sided p) for paired scores on shared queries: z = sum(d) / sqrt(sum(d^2)), McNemar's
    test for 0/1 scores, its sign-flip analogue for partial credit."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    total = float(np.sum(d * d))
    if total == 0.0:
        return 0.0, 1.0
    z = float(d.sum() / math.sqrt(total))
    return z, _normal_p(z)


def two_proportion_test(mean_a: float, n_a: int, mean_b: float, n_b: int) -> tuple[float, float]:
    """(z, two-sided p) of the pooled two-proportion z-test."""
    if n_a == 0 or n_b == 0:
        return 0.0, 1.0
    pooled = (mean_a * n_a + mean_b * n_b) / (n_a + n_b)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    if se == 0.0:
        return 0.0, 1.0
    z = (mean_a - mean_b) / se
    return float(z), _normal_p(z)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order."""
    order = np.argsort(pvalues)
    m = len(pvalues)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted.tolist()


def _structure(score: float) -> str:
    """Kaufman & Rousseeuw's reading of a mean silhouette."""
    if score > 0.70:
        return "strong"
    if score > 0.50:
        return "reasonable"
    if score > 0.25:
        return "weak"
    return "none"


def cluster_distances(d: np.ndarray, *, linkage: str = "average", k: int | None = None) -> dict[str, Any]:
    """Hierarchical clustering of an (n, n) distance matrix (cosine distances for the registry).

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
    tree_d = np.sqrt(2.0 * np.maximum(d, 0.0)) if linkage == "ward" else d
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
            if len(np.unique(labels)) < 2:
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
    """How the clusters agree with a metadata field (over the models that have it)."""
    from scipy.cluster import hierarchy

    have = np.array([f is not None for f in families])
    if have.sum() < 2:
        return None
    fam = np.array([str(f) for f, h in zip(families, have) if h])
    mine = labels[have]
    n_fam = len(np.unique(fam))
    ari = adjusted_rand_index(fam, mine)
    rng = np.random.default_rng(seed)
    at_least = sum(adjusted_rand_index(rng.permutation(fam), mine) >= ari - 1e-12 for _ in range(PERMUTATIONS))
    result = {"field": field, "models": int(have.sum()), "families": n_fam, "clusters": len(np.unique(mine)),
              "adjusted_rand": ari, "p_value": (at_least + 1) / (PERMUTATIONS + 1), "permutations": PERMUTATIONS,
              "purity": purity(mine, fam)}
    if 1 < n_fam < len(labels):
        cut = hierarchy.fcluster(z, n_fam, criterion="maxclust")[have]
        result["at_family_count"] = {"k": n_fam, "adjusted_rand": adjusted_rand_index(fam, cut),
                                     "purity": purity(cut, fam)}
    spread = {}
    for f in sorted(np.unique(fam)):
        ids = sorted({int(c) for c in mine[fam == f]})
        spread[str(f)] = {"models": int((fam == f).sum()), "clusters": ids}
    result["by_family"] = spread
    return result


# --------------------------------------------------------------------------- the registry parts
def _open(store: "Store"):
    """`open_index`, with a registry that has no embedded model yet answered by a message saying so
    (building an index of nothing fails inside the vector index)."""
    from indexing.store import MODELS
    from registry.search import open_index

    try:
        return open_index(store)
    except ValueError:
        vectors = store.read(MODELS, ["vector"]).column("vector").to_pylist()
        if any(v is not None for v in vectors):
            raise
        raise RegistryError(f"no model in the registry is embedded yet ({len(vectors)} models): "
                            "registry train, then registry embed --all") from None


def _embedded(store: "Store", where: str | None, *, need: int = MIN_MODELS, what: str = "clustering"):
    """(names, vectors, records) of the embedded models that match `where`."""
    models = _open(store)
    names, z = list(models.index.names), models.index.vectors
    if where is not None:
        from registry.filters import parse_filter

        keep = parse_filter(where, list(models.records.values()))
        rows = [i for i, n in enumerate(names) if keep.matches(models.records[n])]
        if not rows:
            raise RegistryError(f"no embedded model matches {where!r} ({len(names)} embedded models)")
        names, z = [names[i] for i in rows], z[rows]
    if len(names) < need:
        scope = f" matching {where!r}" if where is not None else ""
        raise RegistryError(f"{what} needs at least {need} embedded models; the registry has {len(names)}{scope}"
                            + ("" if names else " (registry train, then registry embed --all)"))
    return names, np.asarray(z, dtype=np.float32), {n: models.records[n] for n in names}


def _plot_path(plot) -> Path:
    path = Path(plot).expanduser()
    if path.suffix == "":
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def clusters(store: "Store", *, where: str | None = None, plot=None, linkage: str = "average",
             k: int | None = None) -> dict[str, Any]:
    """Hierarchical clusters of the embedded models (see the module docstring for the rules)."""
    if linkage not in LINKAGES:
        raise InputError(f"linkage must be one of {', '.join(LINKAGES)}, not {linkage!r}", field="linkage")
    names, z, records = _embedded(store, where)
    d = cosine_distances(z)
    tree = cluster_distances(d, linkage=linkage, k=k)
    labels = tree["labels"]
    families = [records[n].family for n in names]
    order = tree["order"]
    groups = []
    for cid in range(1, tree["k"] + 1):
        members = [names[i] for i in order if labels[i] == cid]
        rows = [i for i in order if labels[i] == cid]
        within = d[np.ix_(rows, rows)][np.triu_indices(len(rows), 1)] if len(rows) > 1 else np.zeros(0)
        fams = Counter(records[m].family for m in members if records[m].family is not None)
        groups.append({"id": cid, "size": len(members), "members": members,
                       "mean_distance": float(within.mean()) if len(within) else 0.0,
                       "families": dict(fams.most_common())})
    result: dict[str, Any] = {
        "models": len(names), "metric": "cosine", "linkage": linkage,
        "heights": "cosine distance" if linkage != "ward" else "Euclidean distance of unit vectors, sqrt(2 * cosine)",
        "k": tree["k"],
        "k_rule": ("given" if k is not None else
                   f"highest mean silhouette over k = 2..{min(len(names) - 1, MAX_K)} (cosine distances)"),
        "silhouette": tree["silhouette"],
        "structure": _structure(tree["silhouette"]) if tree["silhouette"] is not None else "undefined",
        "silhouette_by_k": {str(kk): v for kk, v in tree["silhouette_by_k"].items()},
        "cophenetic_correlation": tree["cophenetic_correlation"], "cut_height": tree["cut_height"],
        "clusters": groups, "order": [names[i] for i in order], "merges": _merges(tree["Z"], names),
        "family_agreement": family_agreement(tree["Z"], labels, families),
        "plot": None,
    }
    if plot is not None:
        from registry.plots import dendrogram_heatmap

        path = _plot_path(plot)
        dendrogram_heatmap(path, names, d, tree, families=families, linkage=linkage,
                           heights_label=result["heights"], where=where)
        result["plot"] = str(path)
        result["plot_layout"] = ("one figure: dendrogram (left; leaves labelled, branches coloured by cluster, "
                                 "names coloured by family) beside the cosine-distance heatmap in dendrogram order")
    return result


def _field_values(records: list[ModelRecord], field: str) -> list[Any]:
    values = []
    for r in records:
        if field == "name":
            values.append(r.name)
            continue
        value = r.metadata().get(field)
        if isinstance(value, list):
            value = ", ".join(sorted(str(v) for v in value)) or None
        values.append(value)
    return values


def available_fields(records: list[ModelRecord]) -> list[str]:
    """Metadata fields at least one of these models has a value for."""
    present = []
    for field in (*METADATA_FIELDS, *sorted({k for r in records for k in r.extra})):
        if field in present:
            continue
        if any(v is not None for v in _field_values(records, field)):
            present.append(field)
    return present


def pca_2d(z: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """(n, 2) coordinates: PCA of the L2-normalised rows (= classical MDS of chord distances), signs
    fixed so that each axis's largest-magnitude coordinate is positive."""
    u = np.asarray(z, dtype=np.float64)
    u = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    centred = u - u.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    coords = centred @ vt[:2].T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    for j in range(2):
        if coords[np.argmax(np.abs(coords[:, j])), j] < 0:
            coords[:, j] = -coords[:, j]
    var = s ** 2
    total = float(var.sum())
    share = (var / total) if total > 0 else np.zeros_like(var)
    share = np.pad(share, (0, max(0, 2 - len(share))))
    return coords, {"x": float(share[0]), "y": float(share[1]), "total": float(share[0] + share[1])}


def embedding_map(store: "Store", plot, *, color_by: str | None = None, where: str | None = None) -> dict[str, Any]:
    """A labelled 2-D map of the embeddings (PCA of unit vectors), coloured by a metadata field."""
    from scipy.spatial.distance import pdist
    from scipy.stats import pearsonr

    if plot is None:
        raise InputError("the map needs a file to draw to (plot=FILE.png)", field="plot")
    names, z, records = _embedded(store, where, what="a map")
    recs = [records[n] for n in names]
    values = None
    if color_by is not None:
        fields = available_fields(recs)
        if color_by not in fields and color_by != "name":
            scope = "the mapped models" if where else "the registry's models"
            raise InputError(f"no model has a value for {color_by!r}; fields present on {scope}: "
                             f"{', '.join(fields) or '(none)'}", field="color_by")
        values = _field_values(recs, color_by)
    coords, explained = pca_2d(z)
    unit = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    chord, flat = pdist(unit.astype(np.float64)), pdist(coords)
    fidelity = float(pearsonr(chord, flat)[0]) if len(chord) > 2 and np.ptp(chord) > 0 and np.ptp(flat) > 0 else None
    from registry.plots import scatter_map

    path = _plot_path(plot)
    colouring = scatter_map(path, names, coords, explained, field=color_by, values=values, where=where)
    return {"plot": str(path), "models": len(names), "projection": "PCA of L2-normalised embeddings "
            "(= classical MDS of chord distances sqrt(2 * cosine distance))",
            "explained": explained, "distance_correlation": fidelity, "color_by": color_by, "colouring": colouring,
            "coordinates": [{"name": n, "x": float(x), "y": float(y)} for n, (x, y) in zip(names, coords)]}


# --------------------------------------------------------------------------- compare
def _scores_by_task(store: "Store", a: str, b: str):
    """{model: {query_id: score}} for a and b, and {query_id: task}, straight from the tables."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from indexing.store import EVALUATIONS, QUERIES

    evals = store.read(EVALUATIONS, ["model", "query_id", "score"])
    evals = evals.filter(pc.is_in(evals.column("model"), value_set=pa.array([a, b])))
    scores: dict[str, dict[str, float]] = {a: {}, b: {}}
    for m, q, s in zip(evals.column("model").to_pylist(), evals.column("query_id").to_pylist(),
                       evals.column("score").to_pylist()):
        scores[m][q] = float(s)
    queries = store.read(QUERIES, ["query_id", "task", "text_hash"])
    task_of = dict(zip(queries.column("query_id").to_pylist(), queries.column("task").to_pylist()))
    return scores, task_of, queries


def _predicted(store: "Store", models, za: np.ndarray, zb: np.ndarray, queries) -> tuple[dict, str | None]:
    """Mean predicted P(correct) per task over the task's stored queries with vectors."""
    from registry.embedding import active_encoder

    try:
        active = active_encoder(store)
    except RegistryError as err:
        return {}, str(err)
    if active.encoder_id != models.index.encoder_id:
        return {}, (f"models were embedded by {models.index.encoder_id}, the active encoder is "
                    f"{active.encoder_id} (registry embed --all)")
    from encoder.training import predict

    hashes = queries.column("text_hash").to_pylist()
    vectors = store.cached_vectors(active.query_encoder, hashes)
    rows = [i for i, h in enumerate(hashes) if h in vectors]
    if not rows:
        return {}, f"no query vectors from {active.query_encoder}"
    phi = np.stack([vectors[hashes[i]] for i in rows]).astype(np.float32)
    p = predict(active.locus, np.stack([za, zb]), phi)
    tasks = np.array([queries.column("task")[i].as_py() or "" for i in rows], dtype=object)
    out = {}
    for task in sorted(set(tasks.tolist())):
        mask = tasks == task
        out[task] = (float(p[0, mask].mean()), float(p[1, mask].mean()), int(mask.sum()))
    out[None] = (float(p[0].mean()), float(p[1].mean()), len(rows))
    return out, None


def _task_row(task, sa: dict[str, float], sb: dict[str, float]) -> dict[str, Any]:
    va, vb = np.array(list(sa.values())), np.array(list(sb.values()))
    shared = sorted(set(sa) & set(sb))
    acc_a = float(va.mean()) if len(va) else None
    acc_b = float(vb.mean()) if len(vb) else None
    row: dict[str, Any] = {"task": task, "a_accuracy": acc_a, "b_accuracy": acc_b, "a_n": len(va), "b_n": len(vb),
                           "shared_n": len(shared),
                           "difference": (acc_a - acc_b) if acc_a is not None and acc_b is not None else None}
    if len(shared) >= MIN_PAIRED:
        pa_, pb_ = np.array([sa[q] for q in shared]), np.array([sb[q] for q in shared])
        z, p = paired_test(pa_, pb_)
        row.update(test="paired", shared_difference=float(pa_.mean() - pb_.mean()),
                   disagreement_rate=float(np.abs(pa_ - pb_).mean()))
    else:
        z, p = two_proportion_test(acc_a or 0.0, len(va), acc_b or 0.0, len(vb))
        row.update(test="two-proportion", shared_difference=None, disagreement_rate=None)
    row.update(z=z, p_value=p)
    return row


def compare(store: "Store", a: str, b: str) -> dict[str, Any]:
    """How two models differ: embedding distance and neighbour ranks, and per task their measured
    accuracies with the test behind each difference (largest difference first), plus predicted ones."""
    models = _open(store)
    za, zb = models.vector(a), models.vector(b)  # not-found errors name the closest models
    if a == b:
        raise InputError(f"compare needs two different models (both are {a!r})", field="b")
    names = models.index.names
    d = cosine_distances(models.index.vectors)
    ia, ib = names.index(a), names.index(b)

    def rank(i: int, j: int) -> int:
        others = np.delete(d[i], i)
        return int((others < d[i, j] - 1e-12).sum()) + 1

    scores, task_of, queries = _scores_by_task(store, a, b)
    for name in (a, b):
        if not scores[name]:
            raise RegistryError(f"model {name!r} has no stored evaluations")
    tasks = sorted({task_of.get(q) or "" for name in (a, b) for q in scores[name]})
    rows = []
    for task in tasks:
        sa = {q: s for q, s in scores[a].items() if (task_of.get(q) or "") == task}
        sb = {q: s for q, s in scores[b].items() if (task_of.get(q) or "") == task}
        rows.append(_task_row(task, sa, sb))
    for row, adj in zip(rows, holm([r["p_value"] for r in rows])):
        row["p_adjusted"] = adj
    overall = _task_row("(all)", scores[a], scores[b])
    predicted, note = _predicted(store, models, za, zb, queries)
    for row in rows:
        got = predicted.get(row["task"])
        row["a_predicted"], row["b_predicted"] = (got[0], got[1]) if got else (None, None)
    if predicted:
        overall["a_predicted"], overall["b_predicted"] = predicted[None][0], predicted[None][1]
    rows.sort(key=lambda r: -abs(r["difference"]) if r["difference"] is not None else 0.0)
    shared = sorted(set(scores[a]) & set(scores[b]))
    sa_, sb_ = np.array([scores[a][q] for q in shared]), np.array([scores[b][q] for q in shared])
    ca, cb = sa_ >= 0.5, sb_ >= 0.5
    agreement = {"shared_queries": len(shared),
                 "disagreement_rate": float(np.abs(sa_ - sb_).mean()) if len(shared) else None,
                 "both_correct": int((ca & cb).sum()), "only_a": int((ca & ~cb).sum()),
                 "only_b": int((~ca & cb).sum()), "both_wrong": int((~ca & ~cb).sum())}
    cosine = float(1.0 - za @ zb / (np.linalg.norm(za) * np.linalg.norm(zb)))  # as `registry search` has it
    return {"a": a, "b": b, "metric": "cosine", "distance": cosine,
            "rank_of_b_among_a_neighbours": rank(ia, ib), "rank_of_a_among_b_neighbours": rank(ib, ia),
            "neighbours": len(names) - 1, "overall": overall, "tasks": rows, "agreement": agreement,
            "test": ("paired on shared queries (McNemar for 0/1 scores) where a task has 10+ of them, else the "
                     "two-proportion z-test; two-sided p, p_adjusted by Holm over tasks"),
            "predicted_from": "mean predicted P(correct) over each task's stored queries" if predicted else None,
            "predicted_note": note}
