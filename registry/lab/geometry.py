"""Does the embedding geometry carry identity and behaviour? The metrics of the geometry scorecard.

The pure functions take distance matrices, embeddings and score matrices (no store); `view_card`
reads a registry view (the models passing a `--where` filter, with the active encoder) and fills a
`GeometryCard`. scripts/scorecard.py prints and writes them (docs/results/scorecard.md).

(a) identity
    self-retrieval: a model re-embedded from n random evaluations of its own ("a copy") ranks its
    stored vector first (top-1) or among the first 3 (top-3) of all the view's stored vectors, by
    cosine distance. Mutual pairs: each model embedded twice from disjoint n-evaluation samples A and
    B; among all 2M such embeddings, A's nearest is B and B's nearest is A.
(b) behaviour
    raw disagreement of two models = mean |y_i - y_j| over the queries both were scored on (the
    normalised Hamming distance for 0/1 scores). The embedding's nearest neighbour is "behavioural"
    when it is among the 3 models with the lowest raw disagreement. Family purity@k = the share of a
    model's k nearest neighbours with its family, averaged over the models that have a family, beside
    the same figure with raw disagreement as the distance. Sibling rate (BFCL: `base_model`): among
    models that have a sibling (another model with the same value), how often the nearest neighbour
    is one. ARI: scikit-learn's adjusted Rand index between the family and the hierarchical clusters
    of `registry.analytics.clusters.cluster_distances` (the default linkage, k by silhouette, and k =
    number of families), on the embedding distances and on raw disagreement.
(c) distance vs disagreement on held-out queries: over model pairs with common test queries,
    Pearson / Spearman / Kendall between embedding distance (cosine and Euclidean; embeddings built
    without the test queries) and disagreement on the test queries; nearest-neighbour agreement =
    1 - disagreement with the embedding's nearest neighbour, averaged over models (paper: 79%).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pydantic import BaseModel

from registry.analytics.clusters import cluster_distances, cosine_distances
from registry.defaults import CLUSTER_LINKAGE

__all__ = ["disagreement_matrix", "nearest", "self_retrieval_ranks", "mutual_pair_rate",
           "behavioural_nn_rate", "label_purity", "nn_shares_label", "sibling_rate", "distance_correlations",
           "nn_agreement", "cluster_ari", "euclidean_distances", "GeometryCard", "FingerprintCard", "view_card", "PAPER"]

# The paper's geometry figures (section 3.4; ../shared/reference/LOCUS-facts.md), cosine distance.
PAPER = {"pearson": 0.845, "spearman": 0.886, "kendall": 0.714, "nn_agreement": 0.79}


# --------------------------------------------------------------------------- the pure parts
def disagreement_matrix(truth: np.ndarray, *, min_common: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(D, n_common) for a (M, Q) score matrix with NaN holes: D[i, j] = mean |y_i - y_j| over the
    queries both were scored on (NaN where fewer than `min_common`; 0 on the diagonal), n_common the
    count of those queries. For scores in [0, 1] that are not 0/1 the sum is y_i (1 - y_j) + (1 - y_i) y_j,
    the chance that they disagree if each is a coin with that probability."""
    truth = np.asarray(truth, dtype=np.float64)
    observed = (~np.isnan(truth)).astype(np.float64)  # (M, Q)
    y = np.nan_to_num(truth)  # (M, Q), 0 where unobserved
    not_y = observed - y  # 1 - y where observed
    n_common = observed @ observed.T  # (M, M)
    count = y @ not_y.T + not_y @ y.T
    with np.errstate(invalid="ignore", divide="ignore"):
        d = count / n_common
    d[n_common < max(min_common, 1)] = np.nan
    np.fill_diagonal(d, 0.0)
    return d, n_common.astype(np.int64)


def euclidean_distances(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    sq = (z * z).sum(1)
    d = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * z @ z.T, 0.0))
    np.fill_diagonal(d, 0.0)
    return d


def _off_diagonal(d: np.ndarray) -> np.ndarray:
    """A copy with +inf on the diagonal and where d is NaN: never chosen as a neighbour."""
    out = np.array(d, dtype=np.float64)
    out[np.isnan(out)] = np.inf
    np.fill_diagonal(out, np.inf)
    return out


def nearest(d: np.ndarray, k: int = 1) -> np.ndarray:
    """(M, k) indices of each row's k nearest others (ties broken by index, stable)."""
    return np.argsort(_off_diagonal(d), axis=1, kind="stable")[:, :k]


def _cross_distances(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    from scipy.spatial.distance import cdist

    return cdist(np.asarray(a, np.float64), np.asarray(b, np.float64), metric=metric)


def self_retrieval_ranks(copies: np.ndarray, stored: np.ndarray, *, metric: str = "cosine") -> np.ndarray:
    """(M,) rank (1 = first) of each model's stored vector among all stored vectors, seen from its copy
    (copies[m] and stored[m] are model m), by cosine (or Euclidean) distance; ties count against the model."""
    d = _cross_distances(copies, stored, metric)  # (M copies, M stored)
    own = np.diag(d)
    others = d + np.diag(np.full(len(d), np.inf))
    return (others <= own[:, None]).sum(1) + 1


def mutual_pair_rate(a: np.ndarray, b: np.ndarray, *, metric: str = "cosine") -> float:
    """Share of models m whose two embeddings a[m], b[m] are each other's nearest among all 2M."""
    both = np.concatenate([a, b])  # (2M, d)
    nn = nearest(_cross_distances(both, both, metric))[:, 0]
    m = len(a)
    rows = np.arange(m)
    return float(np.mean((nn[rows] == rows + m) & (nn[rows + m] == rows)))


def behavioural_nn_rate(embedding_d: np.ndarray, raw_d: np.ndarray, k: int = 3) -> tuple[float, np.ndarray]:
    """(rate, hits): whether each model's embedding nearest neighbour is among its k least-disagreeing
    models by raw evidence. A neighbour with no common queries (NaN raw) is a miss."""
    nn = nearest(embedding_d)[:, 0]
    raw_near = nearest(raw_d, k)
    hits = np.array([nn[i] in raw_near[i] and np.isfinite(raw_d[i, nn[i]]) for i in range(len(nn))])
    return float(hits.mean()), hits


def _labels_known(labels: Sequence[Any]) -> np.ndarray:
    return np.array([label is not None and label == label and str(label) != "" for label in labels])


def label_purity(d: np.ndarray, labels: Sequence[Any], k: int) -> float:
    """Mean share of a model's k nearest (by d) that carry its label, over models with a label."""
    known = _labels_known(labels)
    lab = np.array([str(x) for x in labels], dtype=object)
    near = nearest(d, k)
    shares = [np.mean([known[j] and lab[j] == lab[i] for j in near[i]]) for i in np.flatnonzero(known)]
    return float(np.mean(shares)) if shares else float("nan")


def nn_shares_label(d: np.ndarray, labels: Sequence[Any]) -> int:
    """How many models' nearest neighbour (by d) carries their label."""
    known = _labels_known(labels)
    lab = np.array([str(x) for x in labels], dtype=object)
    nn = nearest(d)[:, 0]
    return int(sum(known[i] and known[nn[i]] and lab[i] == lab[nn[i]] for i in range(len(nn))))


def sibling_rate(d: np.ndarray, groups: Sequence[Any]) -> tuple[int, int]:
    """(hits, n): among the n models that share their group with another model, how many have a
    group sibling as nearest neighbour (by d)."""
    known = _labels_known(groups)
    lab = np.array([str(x) for x in groups], dtype=object)
    nn = nearest(d)[:, 0]
    has = [i for i in range(len(lab)) if known[i] and ((lab == lab[i]) & known).sum() > 1]
    return int(sum(lab[nn[i]] == lab[i] and known[nn[i]] for i in has)), len(has)


def distance_correlations(dist: np.ndarray, disagreement: np.ndarray) -> dict[str, float]:
    """Pearson, Spearman, Kendall (scipy) between distance and disagreement over the pairs i < j
    where the disagreement is defined; also the number of pairs."""
    from scipy import stats

    iu = np.triu_indices(len(dist), k=1)
    x, y = dist[iu], disagreement[iu]
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"pearson": float("nan"), "spearman": float("nan"), "kendall": float("nan"), "pairs": int(len(x))}
    return {"pearson": float(stats.pearsonr(x, y)[0]), "spearman": float(stats.spearmanr(x, y)[0]),
            "kendall": float(stats.kendalltau(x, y)[0]), "pairs": int(len(x))}


def nn_agreement(dist: np.ndarray, disagreement: np.ndarray) -> float:
    """Mean over models of 1 - disagreement with their nearest neighbour by `dist` (models whose
    neighbour shares no query with them are left out)."""
    nn = nearest(dist)[:, 0]
    values = np.array([disagreement[i, nn[i]] for i in range(len(nn))])
    values = values[np.isfinite(values)]
    return float(1.0 - values.mean()) if len(values) else float("nan")


def cluster_ari(d: np.ndarray, labels: Sequence[Any], *, linkage: str = CLUSTER_LINKAGE) -> dict[str, float]:
    """Adjusted Rand (scikit-learn) of `labels` against the hierarchical clusters of d (`linkage`, the
    registry's default unless given), with k chosen by silhouette and with k = the number of distinct
    labels; over the models with a label. NaN in d (no common queries) counts as the largest distance."""
    from sklearn.metrics import adjusted_rand_score

    known = _labels_known(labels)
    idx = np.flatnonzero(known)
    lab = [str(labels[i]) for i in idx]
    n_labels = len(set(lab))
    out = {"ari": float("nan"), "ari_at_label_count": float("nan"), "k": 0, "labels": n_labels}
    if len(idx) < 3 or n_labels < 2:
        return out
    sub = np.array(d, dtype=np.float64)[np.ix_(idx, idx)]
    finite = sub[np.isfinite(sub)]
    sub[~np.isfinite(sub)] = finite.max() if len(finite) else 1.0
    sub = (sub + sub.T) / 2
    np.fill_diagonal(sub, 0.0)
    chosen = cluster_distances(sub, linkage=linkage)
    out["ari"] = float(adjusted_rand_score(lab, chosen["labels"]))
    out["k"] = int(chosen["k"])
    if n_labels < len(idx):
        at = cluster_distances(sub, linkage=linkage, k=n_labels)
        out["ari_at_label_count"] = float(adjusted_rand_score(lab, at["labels"]))
    return out


# --------------------------------------------------------------------------- the registry part
class FingerprintCard(BaseModel):
    """The same parts for the behaviour fingerprints (encoder.fingerprint) of the view's models: (a) by
    identity distance (RMS logit difference over the probe queries), (b) and (c) by behaviour distance
    (expected disagreement over them)."""

    table_id: str
    rank: int
    self_top1: float
    self_top3: float
    self_median_rank: float
    mutual_pairs: float | None
    behavioural_nn: float
    behavioural_nn_hits: int
    family_nn: int
    family_purity: float
    sibling: tuple[int, int] | None
    ari: dict[str, float]
    same_dataset_nn: int | None = None
    correlations: dict[str, float]  # behaviour distance without the test queries vs disagreement on them
    nn_agreement: float
    # models left out of the item table's fit (k folds), fingerprinted afterwards as add-model would:
    # {"folds", "self_top1", "self_top3", "behavioural_nn", "behavioural_nn_hits"}; None when not asked
    held_out: dict[str, float] | None = None
    # the same questions asked of the registry's index (`_index_card`): the stored fingerprint column
    # searched by FAISS (Euclidean = identity distance); None when the store holds no fingerprints of this table
    index: dict[str, Any] | None = None


class GeometryCard(BaseModel):
    """Parts (a)-(c) of the scorecard for one view of a registry."""

    view: str
    encoder_id: str
    models: int
    queries: int
    test_queries: int
    # (a)
    copy_evals: int
    draws: int
    self_top1: float
    self_top3: float
    self_median_rank: float
    mutual_pairs: float | None  # None when no model has 2 x copy_evals evaluations
    mutual_pair_models: int
    # (b)
    behavioural_nn: float
    behavioural_nn_hits: int
    family_models: int
    family_nn_embedding: int
    family_nn_raw: int
    family_purity_k: int
    family_purity_embedding: float
    family_purity_raw: float
    sibling_field: str | None
    sibling_embedding: tuple[int, int] | None
    sibling_raw: tuple[int, int] | None
    ari_embedding: dict[str, float]
    ari_raw: dict[str, float]
    # views over several datasets: how many models' nearest neighbour comes from their own dataset
    same_dataset_nn: int | None = None
    # (c)
    cosine: dict[str, float]
    euclidean: dict[str, float]
    nn_agreement: float
    nn_agreement_raw_best: float
    # spectrum of the stored vectors: share of variance of the first principal components
    pc_variance: list[float]
    fingerprint: FingerprintCard | None = None  # None when the active encoder has no item table


def _metadata(records, field: str) -> list[Any]:
    return [r.metadata().get(field) for r in records]


def view_card(store, *, where: str | None = None, copy_evals: int = 512, draws: int = 3, seed: int = 0,
              purity_k: int = 3, sibling_field: str | None = "base_model", label: str | None = None,
              holdout_folds: int = 0) -> GeometryCard:
    """Parts (a)-(c) for the models passing `where` (all when None), with the active encoder and the
    vectors stored in the models table (which must come from that encoder: `registry embed --all`)."""
    from encoder.data import evals_by_model
    from encoder.inference import embed_models
    from indexing.store import MODELS
    from registry.api import Registry
    from registry.catalog.dataset import load_eval_data
    from registry.catalog.embedding import active_encoder
    from registry.errors import RegistryError
    from registry.analytics.heldout import held_out

    reg = Registry(store)
    records = reg.list(where)
    active = active_encoder(store)
    rows = {r["name"]: r for r in store.read(MODELS, ["name", "vector", "encoder_id"]).to_pylist()}
    stale = [r.name for r in records if rows[r.name]["vector"] is None or rows[r.name]["encoder_id"] != active.encoder_id]
    if stale:
        raise RegistryError(f"{len(stale)} model(s) are not embedded with the active encoder {active.encoder_id} "
                            f"(e.g. {stale[0]}): run `registry embed --all`")
    names = [r.name for r in records]
    data = load_eval_data(store, active.query_encoder, models=names)
    stored = np.array([rows[n]["vector"] for n in names], dtype=np.float64)  # (M, d)
    own = evals_by_model(data, np.arange(len(data.scores)))

    # (a) copies from copy_evals random evaluations; disjoint pairs
    ranks = []
    for draw in range(draws):
        rng = np.random.default_rng(seed + 1000 + draw)
        sets = [np.sort(rng.choice(e, min(copy_evals, len(e)), replace=False)) for e in own]
        copies = embed_models(active.locus, data, sets)
        ranks.append(self_retrieval_ranks(np.asarray(copies, dtype=np.float64), stored))
    ranks = np.concatenate(ranks)
    rng = np.random.default_rng(seed + 2000)
    able = [m for m, e in enumerate(own) if len(e) >= 2 * copy_evals]
    mutual = None
    if len(able) >= 2:
        first, second = [], []
        for m in range(len(own)):
            perm = rng.permutation(own[m])
            first.append(np.sort(perm[:copy_evals]))
            second.append(np.sort(perm[copy_evals:2 * copy_evals]))
        a = np.asarray(embed_models(active.locus, data, first), dtype=np.float64)[able]
        b = np.asarray(embed_models(active.locus, data, second), dtype=np.float64)[able]
        mutual = mutual_pair_rate(a, b)

    # (b) behaviour from raw evidence on every common query
    truth = data.dense()
    raw_d, _ = disagreement_matrix(truth)
    emb_d = cosine_distances(stored)
    behav, hits = behavioural_nn_rate(emb_d, raw_d)
    families = _metadata(records, "family")
    have_sibling_field = sibling_field is not None and any(v is not None for v in _metadata(records, sibling_field))
    siblings = _metadata(records, sibling_field) if have_sibling_field else None

    # (c) held-out: embeddings without the test queries, disagreement on them
    held = held_out(store, models=names)
    test_truth = held.truth()
    test_d, _ = disagreement_matrix(test_truth)
    held_z = np.asarray(held.embeddings, dtype=np.float64)
    held_cos = cosine_distances(held_z)

    datasets = _metadata(records, "dataset")
    mixed = len({d for d in datasets if d is not None}) > 1

    centred = stored - stored.mean(0)
    sv = np.linalg.svd(centred, compute_uv=False) ** 2
    share = (sv / sv.sum()).tolist() if sv.sum() > 0 else []

    fingerprint = _fingerprint_card(store, active, data, own, raw_d, held, test_d, copy_evals=copy_evals,
                                    draws=draws, seed=seed, purity_k=purity_k, families=families, siblings=siblings,
                                    datasets=datasets if mixed else None, holdout_folds=holdout_folds, where=where)
    return GeometryCard(
        fingerprint=fingerprint,
        view=label or (where or "all"), encoder_id=active.encoder_id, models=len(names), queries=data.n_queries,
        test_queries=int(len(held.test_queries)),
        copy_evals=copy_evals, draws=draws, self_top1=float(np.mean(ranks == 1)),
        self_top3=float(np.mean(ranks <= 3)), self_median_rank=float(np.median(ranks)),
        mutual_pairs=mutual, mutual_pair_models=len(able),
        behavioural_nn=behav, behavioural_nn_hits=int(hits.sum()),
        family_models=int(_labels_known(families).sum()),
        family_nn_embedding=nn_shares_label(emb_d, families), family_nn_raw=nn_shares_label(raw_d, families),
        family_purity_k=purity_k, family_purity_embedding=label_purity(emb_d, families, purity_k),
        family_purity_raw=label_purity(raw_d, families, purity_k),
        sibling_field=sibling_field if have_sibling_field else None,
        sibling_embedding=sibling_rate(emb_d, siblings) if siblings else None,
        sibling_raw=sibling_rate(raw_d, siblings) if siblings else None,
        ari_embedding=cluster_ari(emb_d, families), ari_raw=cluster_ari(raw_d, families),
        same_dataset_nn=nn_shares_label(emb_d, datasets) if mixed else None,
        cosine=distance_correlations(held_cos, test_d), euclidean=distance_correlations(euclidean_distances(held_z), test_d),
        nn_agreement=nn_agreement(held_cos, test_d), nn_agreement_raw_best=nn_agreement(test_d, test_d),
        pc_variance=[round(x, 4) for x in share[:5]],
    )


def fingerprint_view_card(store, *, where: str | None = None, copy_evals: int = 512, draws: int = 3, seed: int = 0,
                          purity_k: int = 3, sibling_field: str | None = "base_model",
                          holdout_folds: int = 0) -> "FingerprintCard | None":
    """`view_card`'s fingerprint part alone (with the index's rows), without LOCUS copies: what the
    scorecard's part (i) regenerates when the LOCUS rows are not rerun."""
    from encoder.data import evals_by_model
    from registry.api import Registry
    from registry.catalog.dataset import load_eval_data
    from registry.catalog.embedding import active_encoder
    from registry.analytics.heldout import held_out

    records = Registry(store).list(where)
    active = active_encoder(store)
    names = [r.name for r in records]
    data = load_eval_data(store, active.query_encoder, models=names)
    own = evals_by_model(data, np.arange(len(data.scores)))
    raw_d, _ = disagreement_matrix(data.dense())
    held = held_out(store, models=names)
    test_d, _ = disagreement_matrix(held.truth())
    families = _metadata(records, "family")
    have_sibling_field = sibling_field is not None and any(v is not None for v in _metadata(records, sibling_field))
    datasets = _metadata(records, "dataset")
    mixed = len({d for d in datasets if d is not None}) > 1
    return _fingerprint_card(store, active, data, own, raw_d, held, test_d, copy_evals=copy_evals, draws=draws,
                             seed=seed, purity_k=purity_k, families=families,
                             siblings=_metadata(records, sibling_field) if have_sibling_field else None,
                             datasets=datasets if mixed else None, holdout_folds=holdout_folds, where=where)


def _fingerprint_card(store, active, data, own, raw_d, held, test_d, *, copy_evals, draws, seed, purity_k, families,
                      siblings, datasets, holdout_folds=0, where: str | None = None) -> FingerprintCard | None:
    """`view_card`'s parts for the fingerprints, on the same copies, pairs and held-out split."""
    from encoder.data import evals_by_model
    from registry.analytics.fingerprints import load_item_table

    table = load_item_table(store, active.encoder_id)
    if table is None:
        return None

    def prints(sets, on=data):
        return table.fingerprints(on.query_ids, on.query_vectors, sets, on.query_index, on.scores)

    stored = table.identity_vectors(prints(own))
    ranks = []
    for draw in range(draws):
        rng = np.random.default_rng(seed + 1000 + draw)
        sets = [np.sort(rng.choice(e, min(copy_evals, len(e)), replace=False)) for e in own]
        ranks.append(self_retrieval_ranks(table.identity_vectors(prints(sets)), stored, metric="euclidean"))
    ranks = np.concatenate(ranks)
    rng = np.random.default_rng(seed + 2000)
    able = [m for m, e in enumerate(own) if len(e) >= 2 * copy_evals]
    mutual = None
    if len(able) >= 2:
        halves = [rng.permutation(e) for e in own]
        a = table.identity_vectors(prints([np.sort(h[:copy_evals]) for h in halves]))[able]
        b = table.identity_vectors(prints([np.sort(h[copy_evals:2 * copy_evals]) for h in halves]))[able]
        mutual = mutual_pair_rate(a, b, metric="euclidean")
    behaviour = table.behaviour_distances(prints(own), coverage=table.coverage(_tasks_of(data, own)))
    behav, hits = behavioural_nn_rate(behaviour, raw_d)

    is_test = np.zeros(held.data.n_queries, dtype=bool)
    is_test[held.test_queries] = True
    outside = np.flatnonzero(~is_test[held.data.query_index])
    held_sets = evals_by_model(held.data, outside)
    held_d = table.behaviour_distances(prints(held_sets, on=held.data),
                                       coverage=table.coverage(_tasks_of(held.data, held_sets)))
    index = _index_card(store, table, data, own, raw_d, prints, families=families, copy_evals=copy_evals,
                        draws=draws, seed=seed, where=where)
    if index is not None:
        index["unseen"] = _unseen_queries(table, held, held_sets, prints(held_sets, on=held.data), test_d, is_test)
    return FingerprintCard(
        index=index,
        table_id=table.table_id, rank=table.rank, self_top1=float(np.mean(ranks == 1)),
        self_top3=float(np.mean(ranks <= 3)), self_median_rank=float(np.median(ranks)), mutual_pairs=mutual,
        behavioural_nn=behav, behavioural_nn_hits=int(hits.sum()), family_nn=nn_shares_label(behaviour, families),
        family_purity=label_purity(behaviour, families, purity_k),
        sibling=sibling_rate(behaviour, siblings) if siblings else None, ari=cluster_ari(behaviour, families),
        same_dataset_nn=nn_shares_label(behaviour, datasets) if datasets else None,
        correlations=distance_correlations(held_d, test_d), nn_agreement=nn_agreement(held_d, test_d),
        held_out=_fingerprint_held_out(table, data, own, raw_d, test=set(held.data.query_ids[i] for i in held.test_queries),
                                       folds=holdout_folds, copy_evals=copy_evals, draws=draws, seed=seed)
        if holdout_folds >= 2 else None)


def _index_card(store, table, data, own, raw_d, prints, *, families, copy_evals, draws, seed,
                where: str | None = None) -> dict | None:
    """The index's default likeness vector as the registry serves it: the `behaviour` column of the
    models table, searched through its FAISS index (`ModelIndex`, by="behaviour", inner product with
    `ItemTable.behaviour_queries`: least expected disagreement over the querying model's tasks). (a) a
    copy from `copy_evals` evaluations (the same draws as above), as `add-model` would store it, finds its
    model: rank of the model among the view's models in the index's answer; (b) each model's nearest in
    the index is among its 3 least-disagreeing by raw evidence, and so is the first answer of the
    registry's own search from the model (`registry search NAME --where ...`: the index's nearest by the
    probes the model answered, a possible copy first); clusters as `registry clusters` makes them (answer distances) against
    family."""
    from indexing.model_index import ModelIndex
    from indexing.vector_index import INNER
    from registry.analytics.search import (BEHAVIOUR_CANDIDATES, answer_distance_matrix, answer_keys, behaviour_order,
                                           behaviour_neighbours, similar)

    index = ModelIndex.open(store, by="behaviour")
    identity = ModelIndex.open(store, by="fingerprint")
    if index.encoder_id != table.table_id or identity.encoder_id != table.table_id:
        return None
    position = {n: i for i, n in enumerate(index.names)}
    view = [m for m, n in enumerate(data.models) if n in position and n in identity.names]
    if len(view) < 3:
        return None
    allowed = np.asarray([position[data.models[m]] for m in view], dtype=np.int64)
    ranks, copy_first = [], []
    thetas = table.thetas_of(np.stack([identity.vector(data.models[m]) for m in view]))  # (view, r + 1) as stored
    tasks = _tasks_of(data, own)
    for draw in range(draws):
        rng = np.random.default_rng(seed + 1000 + draw)
        sets = [np.sort(rng.choice(e, min(copy_evals, len(e)), replace=False)) for e in own]
        # searched as `registry search COPY` searches: by the probe queries it has answers on
        copies, reads = table.behaviour_queries(*behaviour_of(table, data, sets, prints(sets)))
        for m in view:
            found = index.search(copies[m], len(allowed), metric=INNER, allowed=allowed)
            hits = [index.names[r] for r, _ in found]
            ranks.append(hits.index(data.models[m]) + 1)
            # a search from the copy as `registry search` orders its index's nearest (answer_keys)
            found = found[:BEHAVIOUR_CANDIDATES]
            near = [int(np.flatnonzero(allowed == r)[0]) for r, _ in found]
            queries = data.query_index[sets[m]]
            keys = answer_keys(table, thetas[near], [data.query_ids[q] for q in queries], data.scores[sets[m]],
                               query_tasks=[data.tasks[q] for q in queries], other_tasks=[tasks[view[j]] for j in near],
                               index_distances=table.behaviour_mean(reads[m:m + 1], -np.asarray([[d for _, d in found]]))[0])
            copy_first.append(view[behaviour_order(near, keys)[0]] == m)
    ranks = np.asarray(ranks)
    raw_near = nearest(raw_d, 3)
    row_of = {n: m for m, n in enumerate(data.models)}
    members = {data.models[m] for m in view}
    nn_hits = []
    for m in view:  # as route's fallbacks read it: from the stored vector alone
        (other, _), = behaviour_neighbours(store, table, data.models[m], 1, among=members, index=index)
        j = row_of[other]
        nn_hits.append(bool(j in raw_near[m] and np.isfinite(raw_d[m, j])))
    search_hits = []
    for m in view:
        found = similar(store, data.models[m], k=1, where=where)
        j = row_of.get(found[0].name, -1) if found else -1
        search_hits.append(bool(j >= 0 and j in raw_near[m] and np.isfinite(raw_d[m, j])))
    d = answer_distance_matrix(store, [data.models[m] for m in view])  # as `registry clusters` clusters them
    if d is None:
        z = index.vectors[allowed].astype(np.float64)
        d = behaviour_matrix(table, z, z)
    sub_raw = raw_d[np.ix_(view, view)]
    labels = [families[m] for m in view]
    return {"table_id": index.encoder_id, "vector": "behaviour", "models": len(view), "of": data.n_models,
            "self_top1": float(np.mean(ranks == 1)), "self_top3": float(np.mean(ranks <= 3)),
            "search_copy_top1": float(np.mean(copy_first)),
            "behavioural_nn": float(np.mean(nn_hits)), "behavioural_nn_hits": int(np.sum(nn_hits)),
            "search_behavioural_nn": float(np.mean(search_hits)), "search_behavioural_nn_hits": int(np.sum(search_hits)),
            "ari": cluster_ari(d, labels), "ari_raw": cluster_ari(sub_raw, labels), "linkage": CLUSTER_LINKAGE,
            # the linkage that was the default before: both distances agree with family ~0 on BFCL with it
            "ari_average": cluster_ari(d, labels, linkage="average"),
            "ari_raw_average": cluster_ari(sub_raw, labels, linkage="average")}


def _unseen_queries(table, held, sets, thetas, test_d, is_test) -> dict[str, float]:
    """Whether the nearest by a vector built without the test queries is among the 3 that disagree least
    on them: the behaviour index's distance, the identity distance, and raw disagreement on the other
    queries (what the answers alone say). Out of sample: the behaviour vector holds recorded answers, so
    in sample its nearest is close to the raw-disagreement truth by construction."""
    stored, _ = behaviour_of(table, held.data, sets, thetas)
    identity = table.identity_vectors(thetas)
    dense = held.data.dense().astype(np.float64)
    dense[:, is_test] = np.nan
    seen_d, _ = disagreement_matrix(dense)
    seen_d = np.where(np.isnan(seen_d), np.inf, seen_d)
    return {"behaviour": behavioural_nn_rate(behaviour_matrix(table, stored, stored), test_d)[0],
            "identity": behavioural_nn_rate(_cross_distances(identity, identity, "euclidean"), test_d)[0],
            "raw": behavioural_nn_rate(seen_d, test_d)[0]}


def behaviour_of(table, data, sets, thetas) -> tuple[np.ndarray, np.ndarray]:
    """((M, S + T) the behaviour vectors (`ItemTable.behaviour_vectors`) of models from these evaluation sets
    (indices into data) and their fingerprints, as `registry.catalog.fingerprint_store` stores them; (M, S)
    bool the probe queries each set has answers on, which a search from it reads)."""
    cover = table.coverage(_tasks_of(data, sets))
    answers = np.stack([table.probe_answers([data.query_ids[q] for q in data.query_index[e]], data.scores[e])
                        for e in sets]) if len(sets) else np.zeros((0, len(table.probe)))
    return table.behaviour_vectors(thetas, cover, answers), ~np.isnan(answers)


def behaviour_matrix(table, queries_from: np.ndarray, stored: np.ndarray, answered: np.ndarray | None = None) -> np.ndarray:
    """(M, N) mean expected disagreement of each of `queries_from`'s behaviour vectors with each stored one,
    as the behaviour index measures it (asymmetric: over the querying model's tasks, or with `answered`
    over the probes it answered, as a search from a model reads them)."""
    query, read = table.behaviour_queries(queries_from, answered)
    return table.behaviour_mean(read, query @ np.asarray(stored, np.float64).T)


def _tasks_of(data, per_model) -> list[set[str]]:
    """The tasks each model's evaluations (indices into data) are on: what its fingerprint covers."""
    return [{data.tasks[q] or "" for q in data.query_index[e]} for e in per_model]


def _fingerprint_held_out(table, data, own, raw_d, *, test, folds, copy_evals, draws, seed) -> dict[str, float]:
    """Self-retrieval and behavioural neighbours of models whose evaluations the item table never saw:
    the models split into `folds`; per fold a table is fitted (the same config) on the other models,
    every model fingerprinted with it, and the fold's models scored against the whole view."""
    from encoder.fingerprint import fit_on_data

    rng = np.random.default_rng(seed + 3000)
    fold_of = np.empty(data.n_models, np.int64)
    fold_of[rng.permutation(data.n_models)] = np.arange(data.n_models) % folds
    raw_near = nearest(raw_d, 3)
    from registry.analytics.search import BEHAVIOUR_CANDIDATES, answer_keys, behaviour_order

    ranks, hits, identity_hits, search_hits = [], [], [], []
    tasks = _tasks_of(data, own)
    for f in range(folds):
        fitted = fit_on_data(data.select_models([n for i, n in enumerate(data.models) if fold_of[i] != f]),
                             exclude=test, config=table.config)

        def prints(sets):
            return fitted.fingerprints(data.query_ids, data.query_vectors, sets, data.query_index, data.scores)

        thetas = prints(own)
        stored, answered = behaviour_of(fitted, data, own, thetas)  # what the behaviour index would hold
        cover = fitted.coverage(tasks)
        behaviour = fitted.behaviour_distances(thetas, coverage=cover)
        nn = nearest(behaviour)[:, 0]
        members = np.flatnonzero(fold_of == f)
        hits += [nn[i] in raw_near[i] and np.isfinite(raw_d[i, nn[i]]) for i in members]
        # what the index would answer for them: nearest by the behaviour index's distance
        in_index = behaviour_matrix(fitted, stored, stored)
        nn_id = nearest(in_index)[:, 0]
        identity_hits += [nn_id[i] in raw_near[i] and np.isfinite(raw_d[i, nn_id[i]]) for i in members]
        # and what `registry search` answers: the index's nearest (read by the model's answered probes), a
        # model that could have produced its answers first (registry.analytics.search.answer_keys)
        searched = behaviour_matrix(fitted, stored, stored, answered)
        for i in members:
            candidates = [j for j in np.argsort(searched[i], kind="stable") if j != i][:BEHAVIOUR_CANDIDATES]
            queries = data.query_index[own[i]]
            keys = answer_keys(fitted, thetas[candidates], [data.query_ids[q] for q in queries], data.scores[own[i]],
                               query_tasks=[data.tasks[q] for q in queries], other_tasks=[tasks[j] for j in candidates],
                               index_distances=searched[i, candidates])
            top = behaviour_order(candidates, keys)[0]
            search_hits.append(bool(top in raw_near[i] and np.isfinite(raw_d[i, top])))
        for draw in range(draws):
            pick = np.random.default_rng(seed + 1000 + draw)
            sets = [np.sort(pick.choice(e, min(copy_evals, len(e)), replace=False)) for e in own]
            chosen = [sets[i] for i in members]  # searched as `registry search COPY` searches: by its answers
            copies, copies_answered = behaviour_of(fitted, data, chosen, prints(chosen))
            d = behaviour_matrix(fitted, copies, stored, copies_answered)  # (fold, M)
            ranks += [int((d[j] <= d[j, i]).sum() - 1) + 1 for j, i in enumerate(members)]
    ranks = np.asarray(ranks)
    return {"folds": folds, "self_top1": float(np.mean(ranks == 1)), "self_top3": float(np.mean(ranks <= 3)),
            "behavioural_nn": float(np.mean(hits)), "behavioural_nn_hits": int(np.sum(hits)),
            "index_behavioural_nn": float(np.mean(identity_hits)), "index_behavioural_nn_hits": int(np.sum(identity_hits)),
            "search_behavioural_nn": float(np.mean(search_hits)), "search_behavioural_nn_hits": int(np.sum(search_hits))}
