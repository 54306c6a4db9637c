"""Duplicate-endpoint audit: which pairs of models are likely one model behind two names.

The embeddings propose, the evaluations decide.

1. Candidates: each model's k nearest neighbours in the FAISS index (`k`, 10 by default), the same
   search `registry search` runs, and, when the encoder has an item table, its k nearest in the
   behaviour index from its stored vector (`_fingerprint_candidates`: they find a copy's original where the
   embedding misses it, e.g. a quantised copy or one sharing no query); no model is re-embedded.
   `--model NAME` audits one model against its own candidates only.
2. Evidence (`registry.analytics.audit_stats`): the pool's IRT fit (per-query difficulty, per-model task
   abilities) gives the disagreement two *distinct* models of the pair's abilities would show if they
   were independent given the query; the pair's excess agreement kappa = 1 - observed / expected is
   compared with the pool's own pairs of similar accuracy (median and upper spread), so strong pools (distinct
   models disagreeing on ~10%) and skewed labels (weak models agreeing on 95%) are judged against what
   is normal there. The chance of any false flag in a run is held at `alpha` over the run's
   candidates (Holm's step-down, family-wise); a pair that disagrees significantly more than `max_noise` is cleared; a flag
   whose disagreements lean one way within tasks, whose kappa is not above the pool's closest pair
   of provably distinct models (snapshots of one product can agree as closely as a re-served copy),
   or whose kappa is clearly below either member's best match, is "same product line?" rather than
   "duplicate". The calibration also judges every model's index-neighbour pairs, where a big pool's
   relatives are.
   Pairs with no shared query are tested for equal accuracy within task x difficulty strata.

The pool calibration (IRT fit and reference kappas) is cached in `<home>/audit/`, keyed by encoder
and the store's generation; `audit --model` reuses the cached one (saying when it is from an older
generation) and so reads only the index and the evaluations of the model and its candidates.
"""
from __future__ import annotations

import time

import numpy as np

from indexing.home import generation as _generation
from indexing.store import QUERIES, Store
from registry.analytics.audit_stats import Calibration, PoolEvals, calibrate, evidence, holm_level, label, prefer_best_match
from registry.checks import check_count, check_fraction
from registry.defaults import AUDIT_ALPHA, AUDIT_MAX_NOISE
from registry.errors import InputError, RegistryError
from registry.results import AuditCalibration, AuditEvidence, AuditPair, AuditReport
from registry.catalog.rows import read_evaluations

__all__ = ["audit", "calibration", "pool_evaluations", "model_rows", "CALIBRATION_DIR", "AuditReport", "AuditPair",
           "AuditEvidence", "AuditCalibration"]

CALIBRATION_DIR = "audit"  # under the home: the cached pool calibration (drift reads it too)


def pool_evaluations(store: Store, names: list[str]) -> PoolEvals:
    """The evaluations of `names` with every query's task: what a pool calibration is fitted on."""
    queries = store.read(QUERIES, ["query_id", "task"])
    models, qids, scores = read_evaluations(store, None)
    wanted = set(names)  # np.isin on object arrays compares every pair: minutes at 10k models
    keep = np.fromiter((m in wanted for m in models), dtype=bool, count=len(models))
    return PoolEvals.from_triples(models[keep], qids[keep], scores[keep], queries.column("query_id").to_pylist(),
                                  queries.column("task").to_pylist())


def _fingerprint_candidates(store: Store, prints, k: int):
    """names -> {name: its k nearest by fingerprint}: in the behaviour index (from each model's stored
    vector) when it is the active item table's, else by identity distance in the fingerprint index.

    Why the behaviour index (scripts/bench_audit_real.py, docs/results/audit.md): a copy that re-answers
    the original's queries, or a quantised one, has its original among its 10 nearest there as often or
    more often than by identity distance in every pool (skewed MMLU-Pro, 8-10% of answers changed:
    1.00 / 0.88 against 0.81 / 0.69); by identity distance more often only for copies that share no query
    with the original, which the evidence cannot flag as duplicates anyway."""
    if prints is None:
        return lambda names: {}
    from registry.analytics.search import behaviour_neighbours_many
    from registry.catalog.fingerprint_store import load_item_table

    table = load_item_table(store)

    def nearest(names: list[str]) -> dict[str, list[str]]:
        found = behaviour_neighbours_many(store, table, names, k) if table is not None else None
        if found is not None:
            return {n: [other for other, _ in hits] for n, hits in found.items()}
        return {n: [other for other, _ in prints.neighbours(n, k, metric="euclidean")] for n in names
                if n in prints.names}

    return nearest


def calibration(store: Store, names: list[str], encoder_id: str, *, refresh: bool,
                neighbours) -> tuple[Calibration, bool]:
    """The pool calibration: the cached one unless `refresh` or none matches the encoder; (cal, cached).
    `neighbours()`: every model's index-neighbour pairs, computed only when a calibration is made."""
    directory = store.home / CALIBRATION_DIR
    if not refresh:
        cached = Calibration.load(directory)
        if cached is not None and cached.encoder_id == encoder_id:
            return cached, True
    generation = _generation(store.home)  # before the reads: a write landing meanwhile leaves it marked stale
    cal = calibrate(pool_evaluations(store, names), neighbours=list(neighbours()))
    cal.generation, cal.encoder_id = generation, encoder_id
    try:
        cal.save(directory)
    except OSError:  # a home this process may only read: the next audit calibrates again
        pass
    return cal, False


def model_rows(cal: Calibration, models, qids, scores, name: str) -> tuple[np.ndarray, np.ndarray]:
    """`name`'s rows of (model, query id, score) arrays as `Calibration.query_rows` places them."""
    sel = models == name
    return cal.query_rows(qids[sel], scores[sel])


# ---------------------------------------------------------------- the audit
def audit(store: Store, *, model: str | None = None, metric: str = "cosine", k: int = 10, alpha: float = AUDIT_ALPHA,
          max_noise: float = AUDIT_MAX_NOISE, by: str | None = None) -> AuditReport:
    """by: which index proposes the candidate pairs: "locus", "fingerprint", or None for both (a
    copy is found by whichever sees it; the evidence then decides)."""
    from indexing.vector_index import METRICS
    from registry.analytics.search import canonical_by, embedding_distance, open_index

    started = time.perf_counter()
    if metric not in METRICS:
        raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")
    k = check_count(k, "k", 1)
    alpha, max_noise = check_fraction(alpha, "alpha"), check_fraction(max_noise, "max_noise")
    models = open_index(store)
    names = models.index.names
    if len(names) < 2:
        raise RegistryError("the audit needs at least 2 embedded models (registry embed --all)")
    k = min(k, len(names) - 1)  # a model has at most this many neighbours: the report says the k it used
    if model is not None and model not in names:
        if model not in models.index.rows:
            from indexing.store import MODELS
            from registry.catalog.models import not_live

            raise not_live(store, model, store.read(MODELS, ["name"]).column("name").to_pylist())
        models.vector(model)  # raises the not-embedded error
    encoder_id = models.index.encoder_id
    active = store.config.get("active_encoder")
    if active and active != encoder_id:
        raise RegistryError(f"models were embedded by {encoder_id}, the active encoder is {active}: "
                            "run `registry embed --all`")

    # 1. candidates: each audited model's k nearest neighbours by embedding and by fingerprint, one
    # undirected pair each: (embedding distance, rank, proposed by)
    by = canonical_by(by)
    prints = open_index(store, by="fingerprint").index if by in (None, "fingerprint") else None
    nearest_prints = _fingerprint_candidates(store, prints, k)
    position = {n: i for i, n in enumerate(names)}

    def candidates(rows, directed: bool) -> dict[tuple[str, str], tuple[float, int, str]]:
        pairs: dict[tuple[str, str], tuple[float, int, str]] = {}

        def propose(i: int, j: int, dist: float | None, rank: int, by: str) -> None:
            key = (names[i], names[j]) if directed or names[i] < names[j] else (names[j], names[i])
            if key in pairs:
                old = pairs[key]
                pairs[key] = (old[0], min(old[1], rank), old[2] if old[2] == by else "both")
            else:
                pairs[key] = (embedding_distance(models, names[i], names[j], metric) if dist is None else float(dist), rank, by)

        near_of = nearest_prints([names[i] for i in rows])
        for i in rows:
            hits = models.index.search(models.index.vectors[i], k + 1, metric=metric) if by != "fingerprint" else []
            rank = 0
            for j, dist in hits:
                if j == i:
                    continue
                rank += 1
                if rank > k:
                    break
                propose(i, j, dist, rank, "embedding")
            for rank, other in enumerate([n for n in near_of.get(names[i], []) if n in position], start=1):
                propose(i, position[other], None, rank, "fingerprint")
        return pairs

    pairs = candidates(range(len(names)) if model is None else [names.index(model)], directed=model is not None)

    # 2. evidence: the pool calibration (cached for --model), then each pair's tests; the calibration
    # also judges every model's neighbour pairs, where the pool's close relatives are
    every = (lambda: pairs) if model is None else (lambda: candidates(range(len(names)), directed=False))
    cal, cached = calibration(store, list(names), encoder_id, refresh=model is None, neighbours=every)
    involved = sorted({n for key in pairs for n in key})
    ev_models, ev_qids, ev_scores = read_evaluations(store, involved)
    own = {n: model_rows(cal, ev_models, ev_qids, ev_scores, n) for n in involved}
    decided = {key: evidence(cal, key[0], *own[key[0]], key[1], *own[key[1]], max_noise=max_noise, alpha=alpha)
               for key in pairs}
    level = holm_level([d.p_excess for d in decided.values() if d.p_excess is not None], alpha)
    for (a, b), d in decided.items():
        label(cal, d, a, b, level=level, alpha=alpha, max_noise=max_noise)
    prefer_best_match(decided)
    out: dict[str, list[AuditPair]] = {"flags": [], "cleared": [], "untested": []}
    for (a, b), d in decided.items():
        s = d.stats
        pair = AuditPair(
            a=a, b=b, label=d.label, reason=d.reason, distance=pairs[(a, b)][0], neighbour_rank=pairs[(a, b)][1],
            proposed_by=pairs[(a, b)][2],
            evidence=AuditEvidence(
                shared_queries=s.shared, disagreement_rate=s.disagreement,
                expected_disagreement_rate=s.expected_disagreement, excess_agreement_kappa=s.kappa,
                kappa_standard_error=s.kappa_se, null_kappa_median=d.null_kappa_median,
                null_kappa_scale=d.null_kappa_scale, null_pairs=d.null_pairs, z_excess=d.z, p_excess=d.p_excess,
                p_above_max_noise=d.p_above_max_noise, accuracy_a=s.accuracy_a, accuracy_b=s.accuracy_b,
                a_right_b_wrong=s.a_right_b_wrong, b_right_a_wrong=s.b_right_a_wrong, symmetry_p=s.symmetry_p,
                only_a_queries=s.only_a, only_b_queries=s.only_b, homogeneity_p=s.homogeneity_p,
                homogeneity_strata=s.homogeneity_strata, split_pass_rate=d.split_pass_rate,
                relatives_kappa=d.relatives_kappa,
                relatives_pair=list(d.relatives_pair) if d.relatives_pair else None))
        bucket = "flags" if d.label in ("duplicate", "same product line?") else d.label
        out[bucket].append(pair)
    order = {"duplicate": 0, "same product line?": 1}
    out["flags"].sort(key=lambda p: (order[p.label], p.evidence.p_excess if p.evidence.p_excess is not None else 1.0,
                                     p.distance))
    out["cleared"].sort(key=lambda p: p.distance)
    out["untested"].sort(key=lambda p: p.distance)
    generation = _generation(store.home)
    return AuditReport(
        models=len(names), model=model, metric=metric, k=k, by_fingerprint=bool(prints is not None and prints.names), alpha=alpha,
        max_noise=max_noise,
        candidates=len(pairs), flag_level_p=level, **out,
        calibration=AuditCalibration(
            models=len(cal.names), queries=len(cal.query_ids), reference_pairs=len(cal.ref_kappa),
            reference_kappa_median=float(np.median(cal.ref_kappa)) if len(cal.ref_kappa) else None,
            encoder_id=cal.encoder_id, generation=cal.generation, cached=cached,
            stale=cal.generation != generation),
        seconds=time.perf_counter() - started)
