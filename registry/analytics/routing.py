"""Routing a query text to the models most likely to answer it, with nearest-neighbour fallback
(paper, section 2.3 and appendix E.2): the decision, given the query vectors (registry.operations.route
finds those, by text hash in the view's caches and the store, encoding only new texts).

One batched prediction of P(correct) over every candidate model (embedded, passing `where`, not
excluded) and every text ranks the models: LOCUS, sigmoid(G(z_m, phi(x))), blended with the item table's
prediction and kNN over the stored queries when the encoder has a router blend (`p_correct`). `fallback` lists the
top model's nearest candidates, by behaviour fingerprint when it has one (else in the LOCUS index, as
`registry search`): the models to try when the routed one is unavailable.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from registry.errors import InputError, NotFoundError, RegistryError

if TYPE_CHECKING:
    from registry.results import RouteDecision

__all__ = ["query_texts", "candidate_rows", "p_correct", "decide"]


def query_texts(queries: str | Sequence[str]) -> tuple[list[str], bool]:
    single = isinstance(queries, str)
    texts = [queries] if single else list(queries) if isinstance(queries, (list, tuple)) else None
    if texts is None:
        raise InputError(f"queries must be a text or a list of texts, not {type(queries).__name__}", field="query")
    if not texts:
        raise InputError("no query: give at least one query text", field="query")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"query {i + 1} is a {type(text).__name__}, not a text", field="query")
        if not text.strip():
            raise InputError("the query text is empty" if single else f"query {i + 1} is empty", field="query")
        from registry.limits import check_query_text

        check_query_text(text, line=None if single else i + 1, field="query")
    return texts, single


def candidate_rows(models, active, exclude: Iterable[str], where: str | None) -> np.ndarray:
    """Index rows a query may be routed to: the embedded models passing `where`, less `exclude`.
    Refuses unknown excluded names, an empty index, vectors from another encoder and an empty pool."""
    exclude = [exclude] if isinstance(exclude, str) else list(exclude)
    names = models.index.names
    for name in exclude:
        if name not in models.records:
            raise NotFoundError.model(name, list(models.records), field="exclude")
    if not names:
        raise RegistryError("no model is embedded yet: run `registry embed --all`")
    if models.index.encoder_id != active.encoder_id:
        raise RegistryError(f"the models are embedded with encoder {models.index.encoder_id}, not the active "
                            f"{active.encoder_id}: run `registry embed --all`")
    rows_where = models.allowed_rows(where)
    allowed = list(range(len(names))) if rows_where is None else rows_where.tolist()
    if not allowed:
        raise InputError(f"the filter {where!r} matches none of the {len(names)} embedded models", field="where")
    excluded = set(exclude)
    rows = np.asarray([i for i in allowed if names[i] not in excluded], dtype=np.int64)
    if len(rows) == 0:
        raise InputError(f"no model left to route to: all {len(allowed)} embedded models"
                         f"{' matching the filter' if where else ''} are excluded", field="exclude")
    return rows


def p_correct(models, active, phi: np.ndarray, *, table=None, prints=None, knn=None) -> tuple[np.ndarray, str]:
    """(M, Q) P(correct) of every model of the LOCUS index on the query vectors `phi` (Q, D), and which
    predictor gave it. With the active encoder's router blend (`active.blend`, fitted at training on
    validation queries), the item table `table` and the fingerprint index `prints` of that table:
    LOCUS and the item table blended ("locus+item"); a new text reaches the item table through its text
    map, as the validation queries did when the blend was fitted. A model without a fingerprint of
    that table has its LOCUS prediction stand for its item-table part. A blend that also reads kNN over
    the stored queries takes it from `knn` (encoder.knn.KNNRouter fitted on the stored evaluations of
    the index's models, rows in the index's order; "locus+item+knn"); without one, LOCUS stands for it.
    Otherwise LOCUS alone."""
    from encoder.predictor import predict  # a numpy G (route) or a torch Locus (the service's)

    p_locus = predict(active.locus, models.index.vectors, phi)  # (M, Q), one pass
    blend = getattr(active, "blend", None)
    if blend is None or table is None or prints is None or prints.index.encoder_id != table.table_id:
        return p_locus, "locus"
    names = models.index.names
    printed = set(prints.index.names)  # the models with a fingerprint (the index's rows hold every model)
    have = [i for i, n in enumerate(names) if n in printed]
    p_item = p_locus.copy()
    if have:
        identity = np.stack([prints.index.vector(names[i]) for i in have]).astype(np.float64)
        thetas = table.thetas_of(identity)
        f, b = table.item_params([None] * len(phi), phi)  # every text by its vector (see above)
        p_item[have] = table.probabilities(thetas, f, b)
    parts = {"locus": p_locus, "item": p_item}
    predictor = "locus+item"
    if "knn" in blend.components:
        parts["knn"] = p_locus if knn is None else knn.predict_vectors(phi)
        predictor = "locus+item" if knn is None else "locus+item+knn"
    # the query term's mean over the models the blend was fitted on (those still embedded), not over
    # whatever the index holds now: adding a thin model must not move every other model's P(correct)
    pool = getattr(active, "pool", frozenset())
    reference = np.asarray([i for i, n in enumerate(names) if n in pool], np.int64)
    return blend.predict(parts, reference=reference if len(reference) else None), predictor


def decide(models, active, rows: np.ndarray, phi: np.ndarray, texts: Sequence[str], *, k: int,
           fallback: int, by: str | None = None, prints=None, min_evals: int = 0,
           table=None, rank=None, behaviour=None, knn=None) -> "list[RouteDecision]":
    """One decision per text: the candidates `rows` ranked by predicted P(correct) (`p_correct`, from
    the query vectors `phi` (Q, D) in one pass), and the top model's nearest candidates as fallbacks,
    from the fingerprint index `prints` when `by` allows (None: when the top model has a fingerprint)
    else LOCUS; in both, models embedded from fewer than `min_evals` evaluations come after the others.
    By fingerprint, the top model's nearest in the behaviour index `behaviour` (least expected
    disagreement with its answers; `registry.analytics.search.behaviour_neighbours`) when it holds the
    top model under the item table `table`, else the fingerprint index's identity nearest.
    `rank(p, rows)`, when given, is what the candidates are sorted by instead of P(correct) (a cost
    trade-off, registry.analytics.cost.TradeOff.rank)."""
    from registry.analytics.search import behaviour_neighbours
    from registry.evidence import demote_thin, evidence_note, is_thin, thin_names
    from registry.results import Fallback, RankedModel, RouteDecision

    thin = thin_names(models.index.rows, min_evals)

    def low(name: str) -> bool:
        return is_thin(models.index.rows.get(name, {}).get("n_evals"))

    if phi.shape[1] != active.config.query_dim:
        raise RegistryError(f"encoder {active.encoder_id} reads {active.config.query_dim}-d query vectors; "
                            f"{active.query_encoder} gives {phi.shape[1]}-d")
    names = models.index.names
    prints_rows: dict[str, tuple] = {}  # top model -> fingerprint-index rows and names of the other candidates
    p, predictor = p_correct(models, active, phi, table=table, prints=prints, knn=knn)
    p = p[rows]  # (candidates, Q)
    row_names = np.array([names[r] for r in rows])
    out = []
    for j, text in enumerate(texts):
        # best first, near-ties by name; under a trade-off, equal utilities by P(correct) first
        order = _rank(p[:, j], row_names) if rank is None else _rank(rank(p[:, j], rows), row_names, then=p[:, j])
        # a P(correct) read from a vector of a few evaluations is as noisy as the vector: thin models after
        order, pushed = demote_thin(order, lambda i: row_names[i] in thin, k)
        ranking = [RankedModel(name=str(row_names[i]), p_correct=round(float(p[i, j]), 6),
                               low_evidence=low(str(row_names[i]))) for i in order]
        left_out = [str(row_names[i]) for i in pushed]
        top = rows[order[0]]
        others = rows[rows != top]
        if fallback and len(others) and _by_fingerprint(by, prints, names[top]):
            if names[top] not in prints_rows:
                candidates = {names[r] for r in rows} - {names[top]}
                allowed = np.asarray([i for i, n in enumerate(prints.index.names) if n in candidates], np.int64)
                prints_rows[names[top]] = (allowed, {prints.index.names[r] for r in allowed})
            allowed, among = prints_rows[names[top]]
            found = behaviour_neighbours(None, table, names[top], fallback + len(thin), index=behaviour, among=among) \
                if behaviour is not None and len(allowed) else None
            metric = "behaviour"
            if found is None:  # no behaviour index of this table holds the top model: the identity nearest
                metric = "euclidean"
                found = [(prints.index.names[r], d) for r, d in prints.index.search(
                    prints.index.vector(names[top]), fallback + len(thin), metric="euclidean", allowed=allowed)] \
                    if len(allowed) else []
            found, pushed = demote_thin(found, lambda hit: hit[0] in thin, fallback)
            left_out += [n for n, _ in pushed if n not in left_out]
            fallbacks = [Fallback(name=n, by="fingerprint", distance=d, metric=metric,
                                  distance_cosine=_cosine(models, names[top], n), low_evidence=low(n)) for n, d in found]
        else:
            hits = models.index.search(models.index.vectors[top], fallback + len(thin), metric="cosine",
                                       allowed=others) if fallback and len(others) else []
            hits, pushed = demote_thin(hits, lambda hit: names[hit[0]] in thin, fallback)
            left_out += [names[r] for r, _ in pushed if names[r] not in left_out]
            fallbacks = [Fallback(name=names[r], distance_cosine=d, by="locus", distance=d, metric="cosine",
                                  low_evidence=low(names[r]))
                         for r, d in hits]
        out.append(RouteDecision(query=text, ranking=ranking, fallbacks=fallbacks, min_evals=min_evals, predictor=predictor,
                                 evidence_note=evidence_note(left_out, min_evals, what="ranked after the "
                                                             "well-evidenced models and so left out of this "
                                                             "ranking or its fallbacks")))
    return out


TIE = 1e-6  # P(correct) closer than this rank as equal: the prediction's float32 noise is ~1e-7


def _rank(p: np.ndarray, row_names: np.ndarray, then: np.ndarray | None = None) -> list[int]:
    """Indices of `p` most likely first; a run of candidates each within TIE of the next ranks by name.
    Two models with all but equal embeddings (a mirror, a new endpoint of one model) get P(correct)
    a rounding apart, and which is ahead then depended on how the products were summed (torch's G or
    numpy's, one CPU's kernels or another's): by name, the ranking is the same whichever computed it.
    `then`: within such a run, what ranks first before the name (P(correct) under a cost trade-off, whose
    utilities tie exactly for models of one cost when λ·cost swamps P(correct)), its own near-ties by name."""
    order = np.lexsort((row_names, -p))
    group = _tie_runs(p[order])
    if then is not None:  # `group` is sorted along `order`, so it stays aligned after this reorder
        order = order[np.lexsort((row_names[order], -then[order], group))]
        group = _tie_runs(then[order], within=group)
    return order[np.lexsort((row_names[order], group))].tolist()


def _tie_runs(values: np.ndarray, within: np.ndarray | None = None) -> np.ndarray:
    """Run numbers along `values` (sorted largest first): a new run where the next is TIE or more below, or
    where the run of `within` changes."""
    col = np.asarray(values, np.float64)
    new = col[:-1] - col[1:] >= TIE
    if within is not None:
        new |= within[1:] != within[:-1]
    return np.concatenate([[0], np.cumsum(new)])


def _by_fingerprint(by: str | None, prints, top: str) -> bool:
    """Whether the fallbacks come from the fingerprint index: asked for (an error when the top model has
    no fingerprint), or by default when it has one."""
    if by == "locus" or (by is None and (prints is None or top not in prints.index.names)):
        return False
    if prints is None or top not in prints.index.names:
        raise RegistryError(f"the top model {top!r} has no behaviour fingerprint: fallbacks --by locus")
    return True


def _cosine(models, a: str, b: str) -> float:
    x, y = models.vector(a).astype(np.float64), models.vector(b).astype(np.float64)
    return float(1.0 - x @ y / max(np.linalg.norm(x) * np.linalg.norm(y), 1e-12))
