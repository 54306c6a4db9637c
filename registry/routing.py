"""Routing a query text to the models most likely to answer it, with nearest-neighbour fallback
(paper, section 2.3 and appendix E.2).

Each text gets a query vector from the active encoder's query encoder: a text already stored (same
text hash) reuses its stored vector and is not re-encoded; a new text is encoded (nothing is written
to the store). One batched prediction P(correct) = sigmoid(G(z_m, phi(x))) over every candidate
model (embedded, passing `where`, not excluded) and every text ranks the models. `fallback` lists the
top model's nearest candidates in embedding space (cosine distance, as `registry search`): the
models to try when the routed one is unavailable.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from registry.errors import InputError, NotFoundError, RegistryError

if TYPE_CHECKING:
    from indexing.store import Store
    from registry.results import RouteDecision

__all__ = ["query_vectors", "route", "candidate_rows", "decide"]


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(f"{name} must be an integer of at least {minimum}, not {value!r}", field=name)
    return int(value)


def _texts(queries: str | Sequence[str]) -> tuple[list[str], bool]:
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


def query_vectors(store: Store, encoder: str, texts: list[str]) -> tuple[np.ndarray, int]:
    """(len(texts), D) vectors: stored ones by text hash, the rest encoded now (not stored); and how
    many texts were encoded."""
    from registry.importers._common import text_hash

    hashes = [text_hash(t) for t in texts]
    cached = store.cached_vectors(encoder, hashes)
    missing = sorted({t for t, h in zip(texts, hashes) if h not in cached})
    encoded: dict[str, np.ndarray] = {}
    if missing:
        from encoder import query_encoder

        # exported: a fresh process encoding a text or two need not import torch (encoder.query_encoder)
        vectors = query_encoder.load_query_encoder(encoder, exported=True).encode(missing, progress=False)
        encoded = dict(zip(missing, vectors))
    rows = [cached[h] if h in cached else encoded[t] for t, h in zip(texts, hashes)]
    return np.stack(rows).astype(np.float32), len(missing)


def route(store: Store, queries: str | Sequence[str], *, k: int = 3, exclude: Iterable[str] = (),
          where: str | None = None, fallback: int = 3, by: str | None = None,
          min_evals: int | None = None) -> "RouteDecision | list[RouteDecision]":
    """For one text a decision, for a list of texts a list of decisions (one batched prediction): the
    top k models by P(correct) (LOCUS: skill on an unseen query), most likely first, and the top
    model's nearest candidates (up to `fallback`) by `by`: the behaviour fingerprint (the default when
    the top model has one: the models that answer as it does) or LOCUS (cosine). Candidates are the
    embedded models that pass `where` and are not in `exclude`; an excluded model never appears.
    Models embedded from fewer than `min_evals` evaluations (default: the documented minimum,
    registry.evidence) come after the others, in the ranking and among the fallbacks."""
    from registry.evidence import MIN_EVALS, check_min_evals
    from registry.search import canonical_by, open_index

    texts, single = _texts(queries)
    k = _check_int(k, "k", 1)
    fallback = _check_int(fallback, "fallback", 0)
    min_evals = check_min_evals(MIN_EVALS if min_evals is None else min_evals)
    models = open_index(store)
    active = _active_predictor(store)
    rows = candidate_rows(models, active, exclude, where)
    phi, _ = query_vectors(store, active.query_encoder, texts)
    by = canonical_by(by)
    prints = open_index(store, by="fingerprint") if fallback and by != "locus" else None
    out = decide(models, active, rows, phi, texts, k=k, fallback=fallback, by=by, prints=prints, min_evals=min_evals)
    return out[0] if single else out


def _active_predictor(store: Store):
    """`registry.embedding.active_encoder` with the predictor G in numpy (`encoder.predictor`) in place
    of the torch Locus: route reads only G, and importing torch cost a cold route about a second. The
    checkpoint is verified as there (its id recomputed from its contents)."""
    import json

    from encoder.predictor import load_predictor
    from registry.embedding import ActiveEncoder

    encoder_id = store.config.get("active_encoder")
    if not encoder_id:
        raise RegistryError("no active encoder: run `registry train` first")
    directory = store.home / "encoders" / encoder_id
    if not directory.is_dir():
        raise RegistryError(f"encoder {encoder_id} is not in {store.home / 'encoders'}")
    predictor, config, loaded_id = load_predictor(directory)
    if loaded_id != encoder_id:
        raise RegistryError(f"checkpoint in {directory} has id {loaded_id}, not {encoder_id}")
    info = json.loads((directory / "training.json").read_text("utf-8"))
    return ActiveEncoder(encoder_id, predictor, config, info["query_encoder"], directory)


def candidate_rows(models, active, exclude: Iterable[str], where: str | None) -> np.ndarray:
    """Index rows a query may be routed to: the embedded models passing `where`, less `exclude`.
    Refuses unknown excluded names, an empty index, vectors from another encoder and an empty pool."""
    exclude = [exclude] if isinstance(exclude, str) else list(exclude)
    names = models.index.names
    for name in exclude:
        if name not in models.records:
            raise NotFoundError.model(name, list(models.records))
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


def decide(models, active, rows: np.ndarray, phi: np.ndarray, texts: Sequence[str], *, k: int,
           fallback: int, by: str | None = None, prints=None, min_evals: int = 0) -> "list[RouteDecision]":
    """One decision per text: the candidates `rows` ranked by predicted P(correct) from the query
    vectors `phi` (Q, D) in one pass, and the top model's nearest candidates as fallbacks, from the
    fingerprint index `prints` when `by` allows (None: when the top model has a fingerprint) else LOCUS;
    in both, models embedded from fewer than `min_evals` evaluations come after the others."""
    from encoder.predictor import predict  # a numpy G (route) or a torch Locus (the service's)
    from registry.evidence import demote_thin, evidence_note, is_thin, thin_names
    from registry.results import Fallback, RankedModel, RouteDecision

    thin = thin_names(models.index.rows, min_evals)

    def low(name: str) -> bool:
        return is_thin(models.index.rows.get(name, {}).get("n_evals"))

    if phi.shape[1] != active.config.query_dim:
        raise RegistryError(f"encoder {active.encoder_id} reads {active.config.query_dim}-d query vectors; "
                            f"{active.query_encoder} gives {phi.shape[1]}-d")
    names = models.index.names
    prints_rows: dict[str, np.ndarray] = {}  # top model -> fingerprint-index rows of the other candidates
    p = predict(active.locus, models.index.vectors[rows], phi)  # (candidates, Q), one pass
    row_names = np.array([names[r] for r in rows])
    out = []
    for j, text in enumerate(texts):
        order = _rank(p[:, j], row_names)  # most likely first, near-ties by name
        # a P(correct) read from a vector of a few evaluations is as noisy as the vector: thin models after
        order, pushed = demote_thin(order, lambda i: row_names[i] in thin, k)
        ranking = [RankedModel(name=str(row_names[i]), p_correct=round(float(p[i, j]), 6),
                               low_evidence=low(str(row_names[i]))) for i in order]
        left_out = [str(row_names[i]) for i in pushed]
        top = rows[order[0]]
        others = rows[rows != top]
        if fallback and len(others) and _by_fingerprint(by, prints, names[top]):
            allowed = prints_rows.get(names[top])
            if allowed is None:
                candidates = {names[r] for r in rows} - {names[top]}
                allowed = np.asarray([i for i, n in enumerate(prints.index.names) if n in candidates], np.int64)
                prints_rows[names[top]] = allowed
            hits = prints.index.search(prints.index.vector(names[top]), fallback + len(thin), metric="euclidean",
                                       allowed=allowed) if len(allowed) else []
            hits, pushed = demote_thin(hits, lambda hit: prints.index.names[hit[0]] in thin, fallback)
            left_out += [prints.index.names[r] for r, _ in pushed if prints.index.names[r] not in left_out]
            fallbacks = [Fallback(name=prints.index.names[r], by="fingerprint", distance=d,
                                  distance_cosine=_cosine(models, names[top], prints.index.names[r]),
                                  low_evidence=low(prints.index.names[r])) for r, d in hits]
        else:
            hits = models.index.search(models.index.vectors[top], fallback + len(thin), metric="cosine",
                                       allowed=others) if fallback and len(others) else []
            hits, pushed = demote_thin(hits, lambda hit: names[hit[0]] in thin, fallback)
            left_out += [names[r] for r, _ in pushed if names[r] not in left_out]
            fallbacks = [Fallback(name=names[r], distance_cosine=d, by="locus", distance=d, low_evidence=low(names[r]))
                         for r, d in hits]
        out.append(RouteDecision(query=text, ranking=ranking, fallbacks=fallbacks, min_evals=min_evals,
                                 evidence_note=evidence_note(left_out, min_evals, what="ranked after the "
                                                             "well-evidenced models and so left out of this "
                                                             "ranking or its fallbacks")))
    return out


TIE = 1e-6  # P(correct) closer than this rank as equal: the prediction's float32 noise is ~1e-7


def _rank(p: np.ndarray, row_names: np.ndarray) -> list[int]:
    """Indices of `p` most likely first; a run of candidates each within TIE of the next ranks by name.
    Two models with all but equal embeddings (a mirror, a new endpoint of one model) get P(correct)
    a rounding apart, and which is ahead then depended on how the products were summed (torch's G or
    numpy's, one CPU's kernels or another's): by name, the ranking is the same whichever computed it."""
    order = np.lexsort((row_names, -p))
    col = p[order].astype(np.float64)
    group = np.concatenate([[0], np.cumsum(col[:-1] - col[1:] >= TIE)])
    return order[np.lexsort((row_names[order], group))].tolist()


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
