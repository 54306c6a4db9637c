"""Similarity search over the models' embeddings, on the index `indexing.model_index.ModelIndex` owns.

This module adds what the registry knows and the index does not: model records (typed metadata), the
`--where` filter, and typed results.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from registry.checks import check_count
from indexing.errors import InputError, RegistryError
from indexing.model_index import METRICS, VECTOR_KINDS, ModelIndex
from registry.records import ModelRecord
from registry.catalog.rows import record_of

if TYPE_CHECKING:
    from indexing.store import Store
    from registry.results import Neighbour

__all__ = ["EmbeddedModels", "open_index", "open_indexes", "embedded", "open_embedded", "embedded_subset", "similar",
           "neighbours", "distance",
           "check_consistency", "search_result", "BY", "BY_ALIASES", "LIKENESS_DEFAULT", "canonical_by", "likeness_index",
           "behaviour_order", "behaviour_neighbours", "behaviour_neighbours_many", "behaviour_index", "answer_distance_matrix",
           "answer_keys", "ANSWER_MATRIX_MAX", "behaviour_distance_matrix", "fingerprint_distances"]


class _Records(Mapping):
    """name -> ModelRecord over the index's table rows, each converted when first read: a search or an
    audit reads a handful of 10,000 records, and building them all cost 0.4 s there."""

    def __init__(self, rows: dict[str, dict]) -> None:
        self._rows, self._made = rows, {}

    def __getitem__(self, name: str) -> ModelRecord:
        if name not in self._made:
            self._made[name] = record_of(self._rows[name])
        return self._made[name]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._rows


@dataclass
class EmbeddedModels:
    """The index with the models' records: `index.names`, `index.vectors`, `index.encoder_id`,
    `index.search(...)`, `records` (every model, embedded or not), `vector(name)`."""

    index: ModelIndex
    records: Mapping[str, ModelRecord]

    def vector(self, name: str) -> np.ndarray:
        return self.index.vector(name)

    def allowed_rows(self, where: str | None) -> np.ndarray | None:
        """Rows of the index whose models match `where` (None: every row)."""
        if where is None:
            return None
        from registry.filters import matching

        keep = set(matching(where, list(self.records.values())))
        return np.array([i for i, n in enumerate(self.index.names) if n in keep], dtype=np.int64)


def open_index(store_or_home: "Store | str | Path", *, rebuild: bool = False,
               store: "Callable[[], Store] | None" = None, by: str = "locus") -> EmbeddedModels:
    """The index of one vector kind for the models table as it is now, with records (`ModelIndex.open`)."""
    return embedded(ModelIndex.open(store_or_home, rebuild=rebuild, store=store, by=canonical_by(by) or "locus"))


def embedded(index: ModelIndex) -> EmbeddedModels:
    """`index` with its models' records."""
    return EmbeddedModels(index, _Records(index.rows))


def open_embedded(store: "Store", by: str | None = "locus") -> EmbeddedModels:
    """`open_index` (by=None: `likeness_index`'s default), refusing a registry in which no model has that
    vector yet with a message saying so."""
    models = likeness_index(store, by)
    if not models.index.names and models.index.by == "fingerprint":
        raise RegistryError(f"no model in the registry has a behaviour fingerprint yet ({len(models.records)} models): "
                            "registry fit-fingerprints (or --by locus)")
    if not models.index.names:
        raise RegistryError(f"no model in the registry is embedded yet ({len(models.records)} models): "
                            "registry train, then registry embed --all")
    return models


def likeness_kind(store: "Store", by: str | None, names: tuple[str, ...] = ()) -> str:
    """Which vector a likeness operation over the whole pool reads: `by`, or by default the
    fingerprint when the home holds fingerprints (and for every one of `names`), else LOCUS."""
    by = canonical_by(by)
    if by is not None:
        return by
    prints = open_index(store, by="fingerprint").index
    return "fingerprint" if prints.names and all(n in prints.names for n in names) else "locus"


def pairwise_distances(z: np.ndarray, by: str) -> np.ndarray:
    """(n, n) distances in the vector kind's own metric: cosine for LOCUS, Euclidean (the identity
    distance, RMS logit difference) for fingerprints."""
    z = np.asarray(z, dtype=np.float64)
    if by == "fingerprint":
        sq = (z ** 2).sum(1)
        d = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * z @ z.T, 0.0))
        np.fill_diagonal(d, 0.0)  # exactly: rounding leaves ~1e-7 there, which scipy/sklearn refuse
        return d
    u = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    d = np.clip(1.0 - u @ u.T, 0.0, 2.0)
    np.fill_diagonal(d, 0.0)
    return d


def without_vector_note(without: list[str], by: str, what: str) -> str | None:
    """The sentence naming the models an operation over the index could not place, having no `by` vector."""
    if not without:
        return None
    shown = ", ".join(without[:10]) + (f" and {len(without) - 10} more" if len(without) > 10 else "")
    why = ("no behaviour fingerprint (too few evaluations for one; registry refine adds them), "
           "--by locus includes them") if by == "fingerprint" else "no LOCUS embedding (registry embed --all)"
    return f"{len(without)} model(s) left out of {what}: {shown}: {why}"


def embedded_subset(store: "Store", where: str | None, *, need: int, what: str, by: str | None = "locus",
                    min_evals: int = 0, left_out: list[str] | None = None, kept_thin: list[str] | None = None,
                    without: list[str] | None = None) -> tuple[list[str], np.ndarray, dict[str, ModelRecord]]:
    """(names, (n, d) float32 vectors, records) of the models that match `where` and have the `by`
    vector (None: the likeness default), less those embedded from fewer than `min_evals` evaluations
    (appended to `left_out`) when at least `need` others remain (else they stay, appended to
    `kept_thin`: with no well-evidenced models to rank before, they outrank none); refuses fewer than
    `need` of them, saying `what` needs them. The models that match but have no such vector (not
    embedded, or too few evaluations for a fingerprint) are appended to `without`."""
    from registry.evidence import thin_names

    models = open_embedded(store, by)
    names, z = list(models.index.names), models.index.vectors
    if without is not None:
        from registry.filters import matching

        indexed = set(names)
        without.extend(n for n in matching(where, list(models.records.values()), field="where") if n not in indexed)
    rows = models.allowed_rows(where)
    if rows is not None:
        if not len(rows):
            raise InputError(f"no embedded model matches {where!r} ({len(names)} embedded models)", field="where")
        names, z = [names[i] for i in rows], z[rows]
    thin = thin_names(models.index.rows, min_evals)
    keep = [i for i, n in enumerate(names) if n not in thin]
    if len(keep) < len(names):
        dropped = [n for n in names if n in thin]
        if len(keep) >= need:
            names, z = [names[i] for i in keep], z[keep]
        target = left_out if len(keep) >= need else kept_thin
        if target is not None:
            target.extend(dropped)
    if len(names) < need:
        scope = f" matching {where!r}" if where is not None else ""
        raise RegistryError(f"{what} needs at least {need} embedded models; the registry has {len(names)}{scope}")
    return names, np.asarray(z, dtype=np.float32), {n: models.records[n] for n in names}


# by="fingerprint" from a model: at least this many of the behaviour index's nearest are read, so that a copy
# (`same_model`, put first) is among them when the probes it answered say little
BEHAVIOUR_CANDIDATES = 200
BY = ("locus", "fingerprint")
# the names before the fingerprint was in the index; still accepted
BY_ALIASES = {"embedding": "locus", "behaviour": "fingerprint", "behavior": "fingerprint"}
# Likeness (who behaves like this model) defaults to the fingerprint, skill (who answers this query) to
# LOCUS: measured by scripts/scorecard.py, stated on docs/results/scorecard.md.
LIKENESS_DEFAULT = "fingerprint"
DEFAULT_METRIC = {"locus": "cosine", "fingerprint": "euclidean"}  # euclidean on fingerprints: the identity distance


def canonical_by(by: str | None) -> str | None:
    """"locus" or "fingerprint" (None stays None: the operation's default); an old name is accepted."""
    if by is None:
        return None
    if by in BY:
        return by
    if by in BY_ALIASES:
        return BY_ALIASES[by]
    raise InputError(f"by must be one of {', '.join(BY)} (or {', '.join(BY_ALIASES)}), not {by!r}", field="by")


def likeness_index(source: "Store | str | Path", by: str | None, *, query: str | None = None,
                   store: "Callable[[], Store] | None" = None, default: str = LIKENESS_DEFAULT) -> EmbeddedModels:
    """The index a likeness operation reads: `by` ("locus"/"fingerprint", old names accepted), or when
    None the `default` kind if it holds `query` (or any model, without a query), else LOCUS: a home
    without fingerprints (no item table, an unmigrated format-1 home) answers as it did before.
    `.index.by` says which one answered."""
    by = canonical_by(by)
    if by is not None:
        return open_index(source, store=store, by=by)
    if default == "fingerprint":
        prints = open_index(source, store=store, by="fingerprint")
        if prints.index.names and (query is None or query in prints.index.names):
            return prints
    return open_index(source, store=store, by="locus")


def similar(store: "Store | str | Path", query: str | np.ndarray, *, k: int = 5, metric: str | None = None,
            where: str | None = None, by: str | None = None,
            open_store: "Callable[[], Store] | None" = None, min_evals: int = 0,
            left_out: list[str] | None = None) -> "list[Neighbour]":
    """The k nearest models to a model name or a vector, nearest first (the model itself excluded).

    by="fingerprint" (the default for a model that has one): from a model name, the max(4k, 200) nearest
    in the behaviour index (`behaviour_neighbours`: the least expected disagreement with the model's
    recorded answers on the item table's probe queries, each candidate's recorded answers where it has
    them and its fingerprint's predictions where not; `behaviour_distance`), those whose fingerprint could
    have produced the model's answers first (`same_model`: a copy; `answer_keys`). Without a behaviour
    index of the active item table (a home not migrated to format 4), the fingerprint index's nearest
    ordered by answer distance as before. `distance` is the fingerprint identity distance (Euclidean = RMS
    logit difference over the probe queries); excess agreement on the queries both answered
    (`agreement_kappa`, `shared_queries`) is reported beside (docs/results/scorecard.md, part (i)).
    by="locus": the LOCUS embedding (cosine by default). Each neighbour says which vector answered
    (`vector`). Models embedded from fewer than `min_evals` evaluations come after the others
    (registry.evidence); those that this pushed out of the k are appended to `left_out`."""
    return _answer(store, query, k=k, metric=metric, where=where, by=by, open_store=open_store,
                   min_evals=min_evals, left_out=left_out)[1]


def search_result(store: "Store | str | Path", query: str | np.ndarray, *, k: int = 5, metric: str | None = None,
                  where: str | None = None, by: str | None = None, open_store: "Callable[[], Store] | None" = None,
                  warm: "EmbeddedModels | None" = None, min_evals: int = 0):
    """`similar` as a `SearchResult` that says which vector answered (`by`) and in which metric, and which
    thin models ranking after the others (`min_evals`, registry.evidence) pushed out of the k. `warm`: an
    index already open (the service's), used when it is of the kind asked."""
    from registry.evidence import evidence_note
    from registry.results import SearchResult

    left_out: list[str] = []
    used, hits = _answer(store, query, k=k, metric=metric, where=where, by=by, open_store=open_store,
                         warm=warm, min_evals=min_evals, left_out=left_out)
    notes = [evidence_note(left_out, min_evals)]
    if by is None and isinstance(query, str) and used == "locus":
        # the likeness default is the fingerprint: say why this model was searched by LOCUS instead
        prints = open_index(store, store=open_store, by="fingerprint").index.names
        if prints and query not in prints:
            from registry.catalog.fingerprint_store import MIN_FINGERPRINT_EVALS

            notes.append(f"{query} has no behaviour fingerprint (fewer than {MIN_FINGERPRINT_EVALS} evaluations on "
                         "the item table's queries; registry refine adds them): searched by its LOCUS embedding")
    if used == "fingerprint" and len(hits) + len(left_out) < k:
        # the whole fingerprint index answered: say that models without a fingerprint are not in it
        prints = set(open_index(store, store=open_store, by="fingerprint").index.names)
        missing = [n for n in open_index(store, store=open_store, by="locus").index.names if n not in prints]
        if missing:
            notes.append(f"{len(missing)} embedded model(s) have no behaviour fingerprint and are not in this "
                         f"search ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}; --by locus "
                         "reaches them)")
    return SearchResult(query=query if isinstance(query, str) else None, metric=metric or DEFAULT_METRIC[used],
                        where=where, by=used, neighbours=hits, min_evals=min_evals,
                        evidence_note="; ".join(n for n in notes if n) or None)


def _answer(store, query, *, k, metric, where, by, open_store, warm=None, min_evals=0,
            left_out: list[str] | None = None) -> tuple[str, "list[Neighbour]"]:
    """The one search behind `similar` and `search_result`: checks the arguments, picks the index (`warm`
    when it is of the kind asked), and returns which kind answered with the neighbours."""
    if metric is not None and metric not in METRICS:
        raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")
    k = check_count(k, "k", 1)
    by = canonical_by(by)
    if by is None and not isinstance(query, str):
        by = "locus"  # a vector given by hand is a LOCUS embedding unless said otherwise
    if by == "fingerprint" and not isinstance(query, str):
        raise InputError("by='fingerprint' needs a model name: a vector is searched in the LOCUS index", field="by")
    if warm is not None and by == warm.index.by:
        models = warm
    else:
        models = likeness_index(store, by, query=query if isinstance(query, str) else None, store=open_store)
    used = models.index.by
    hits = neighbours(models, query, k=int(k), metric=metric, where=where, by=used,
                      open_store=open_store if open_store is not None else lambda: _as_store(store),
                      min_evals=min_evals, left_out=left_out)
    return used, hits


MAX_VECTOR_ABS = 1e6  # LOCUS embeddings are of order 1; far beyond this is a mistake (1e39 overflows float32)


def check_query_vector(vector, dim: int, metric: str) -> np.ndarray:
    """A search vector as float32 (dim,), or an InputError naming `vector`: the index's dimension,
    finite values within +-1e6, not all zero (a zero vector has no direction)."""
    try:
        x = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("the vector must be a list of numbers", field="vector") from None
    if x.ndim != 1 or x.shape[0] != dim:
        raise InputError(f"the vector has {x.size} values; the embeddings have {dim}", field="vector")
    if not np.isfinite(x).all() or np.abs(x).max(initial=0.0) > MAX_VECTOR_ABS:
        raise InputError(f"every value of the vector must be finite and within +-{MAX_VECTOR_ABS:g}", field="vector")
    if not x.any():  # refused for euclidean too, so that the rule does not depend on the metric
        raise InputError("the vector is all zeros: no embedding is, and it has no direction", field="vector")
    return x.astype(np.float32)


def neighbours(models: EmbeddedModels, query: str | np.ndarray, *, k: int, metric: str | None, where: str | None,
               by: str | None, open_store: "Callable[[], Store]", min_evals: int = 0,
               left_out: list[str] | None = None) -> "list[Neighbour]":
    """`similar` on an open index of kind `by` (the service keeps one warm); arguments already checked."""
    from registry.evidence import thin_names
    from registry.results import Neighbour

    by = canonical_by(by) or models.index.by
    if by != models.index.by:
        raise InputError(f"by={by!r} asked of the {models.index.by} index", field="by")
    metric = metric or DEFAULT_METRIC[by]
    if not isinstance(query, str):
        query = check_query_vector(query, models.index.vectors.shape[1], metric)
    thin = thin_names(models.index.rows, min_evals)
    refine = by == "fingerprint" and isinstance(query, str)
    wanted = max(4 * k, BEHAVIOUR_CANDIDATES) if refine else k
    allowed = models.allowed_rows(where)
    if not refine:
        # as many more as there are thin models: ranked after the others, they must not shorten the k
        hits = models.index.neighbours(query, wanted + len(thin), metric=metric, allowed=allowed)
        return _thin_last([Neighbour(name=name, distance=dist, metric=metric, vector=by,
                                     metadata=models.records[name].metadata(), **_evidence(models, name))
                           for name, dist in hits], thin, k, left_out)
    evals = _evaluations(models, open_store)
    _, qids, scores = evals.read([query])  # the query model's recorded answers: both steps read them
    answers = (qids.tolist(), scores)
    hits, in_index = _candidates(models, evals, query, answers, wanted + len(thin), allowed, metric, open_store)
    candidates = [name for name, _ in hits]
    keys = _answer_keys(evals, models, answers, candidates, in_index)
    ranked = behaviour_order(hits, [keys.get(name) for name in candidates])
    kept = _thin_last([Neighbour(name=name, distance=dist, metric=metric, vector=by,
                                 metadata=models.records[name].metadata(),
                                 behaviour_distance=keys[name][2] if name in keys else None,
                                 same_model=keys[name][0] == 0 if name in keys else None,
                                 **_evidence(models, name))
                       for name, dist in ranked], thin, k, left_out)
    agreement = _agreement(evals, query, [hit.name for hit in kept])  # shown beside, for the shared queries
    return [hit.model_copy(update={"agreement_kappa": agreement[hit.name][0], "shared_queries": agreement[hit.name][1]})
            for hit in kept]


def _candidates(models: EmbeddedModels, evals, query: str, answers, n: int, allowed, metric: str,
                open_store) -> tuple[list[tuple[str, float]], dict[str, float] | None]:
    """The n models a search from `query` orders, with their distance in the fingerprint index, and their
    behaviour index distance: the nearest in the behaviour index (least expected disagreement with its
    recorded answers on the probe queries), else (no behaviour index of the active table holds it; None)
    the fingerprint index's own nearest."""
    table = _index_table(evals, models)
    among = None if allowed is None else {models.index.names[int(r)] for r in allowed}
    found = behaviour_neighbours(models.index.home, table, query, n, among=among, store=open_store,
                                 answers=answers) if table is not None else None
    if found is None:
        return models.index.neighbours(query, n, metric=metric, allowed=allowed), None
    printed = set(models.index.names)
    return ([(name, embedding_distance(models, query, name, metric)) for name, _ in found if name in printed],
            dict(found))


def _evidence(models: EmbeddedModels, name: str) -> dict:
    """A neighbour's evidence fields (registry.evidence): its n_evals and the low-evidence mark."""
    from registry.evidence import is_thin

    n = models.index.rows.get(name, {}).get("n_evals")
    return {"n_evals": n, "low_evidence": is_thin(n)}


def _thin_last(found: list, thin: set[str], k: int, left_out: list[str] | None) -> list:
    """The first k of `found` with the `thin` models after the others; those pushed out go to `left_out`."""
    from registry.evidence import demote_thin

    kept, pushed = demote_thin(found, lambda hit: hit.name in thin, k)
    if left_out is not None:
        left_out.extend(hit.name for hit in pushed)
    return kept


def embedding_distance(models: EmbeddedModels, a: str, b: str, metric: str) -> float:
    x, y = models.vector(a).astype(np.float64), models.vector(b).astype(np.float64)
    if metric == "cosine":
        return max(float(1.0 - x @ y / max(np.linalg.norm(x) * np.linalg.norm(y), 1e-12)), 0.0)  # >= 0 after rounding
    return float(np.linalg.norm(x - y))


_BEHAVIOUR_OPEN: dict[str, tuple[str, ModelIndex]] = {}  # home -> (generation token, its behaviour index)


def behaviour_index(source: "Store | str | Path", store: "Callable[[], Store] | None" = None) -> ModelIndex:
    """The behaviour index of a home, kept while the home's generation token stands (a service searching
    many times reads its files once per write, not once per search). ModelIndex itself: "behaviour" is
    also an old user-facing name of by="fingerprint" (BY_ALIASES)."""
    from indexing.home import as_path

    home = as_path(source) if not hasattr(source, "read") else source.home
    token = _stable_token(home)
    kept = _BEHAVIOUR_OPEN.get(str(home))
    if token is not None and kept is not None and kept[0] == token:
        return kept[1]
    index = ModelIndex.open(source, store=store, by="behaviour")
    _keep_behaviour(home, token, index)
    return index


def _stable_token(home) -> str | None:
    from indexing.home import generation, is_remote, transaction_open

    return None if is_remote(home) or transaction_open(home) else generation(home)


def _keep_behaviour(home, token: str | None, index: ModelIndex) -> None:
    """Keep `index` as the behaviour index of `home` at `token` (read before the index was opened)."""
    if token is not None:
        _BEHAVIOUR_OPEN.clear()  # one home at a time: a process serves one
        _BEHAVIOUR_OPEN[str(home)] = (token, index)


def open_indexes(store: "Store", previous: "dict[str, ModelIndex] | None" = None) -> dict[str, ModelIndex]:
    """Every vector kind's index (`VECTOR_KINDS`) as `ModelIndex.open_kinds` gives them (`previous`: the
    ones this process served last, a base to update from): the models table read once for the kinds whose
    saved index is not provably current, not three times (a service's reload after each write). The
    behaviour index is kept as `behaviour_index` keeps it. Not checked with `refuse_mixed`: the caller
    decides per kind."""
    token = _stable_token(store.home)  # before the read: a write landing after it only makes it stale
    indexes = ModelIndex.open_kinds(store, tuple(VECTOR_KINDS), previous=previous)
    _keep_behaviour(store.home, token, indexes["behaviour"])
    return indexes


def behaviour_neighbours(source: "Store | str | Path", table, name: str, k: int, *,
                         among: "set[str] | None" = None, index: "ModelIndex | None" = None,
                         store: "Callable[[], Store] | None" = None,
                         answers: "tuple[Sequence[str], np.ndarray] | None" = None) -> list[tuple[str, float]] | None:
    """The k models (of `among`, all without) nearest `name` in the behaviour index, nearest first, with
    their mean expected disagreement with it over the probe queries of its tasks (a probe of a task the
    other never answered counts 0.5; `ItemTable.behaviour_mean`): exact, in the index. With `answers`
    (name's recorded (query ids, scores)), over the probes it has answers on (`behaviour_queries`). None
    when the index is not of `table` (the active item table) or does not hold `name`; `index` an open one."""
    from indexing.vector_index import INNER

    behaviour = index if index is not None else behaviour_index(source, store)
    if table is None or behaviour.encoder_id != table.table_id or name not in behaviour.names:
        return None
    own = behaviour.vector(name).astype(np.float64)[None]
    if k <= 0 or len(behaviour.names) < 2:
        return []
    answered = None if answers is None else ~np.isnan(table.probe_answers(*answers))[None]
    query, read = table.behaviour_queries(own, answered)
    if among is not None and name not in among and len(among) == len(behaviour.names) - 1 \
            and among.issubset(behaviour.names):
        among = None  # every other model: the same as no restriction
    if among is None:  # the whole index less the model itself: no selector (a flat scan is faster without)
        return _named(behaviour, table, name, behaviour.search(query[0], k + 1, metric=INNER), read, k)
    rows = np.asarray([i for i, n in enumerate(behaviour.names) if n != name and n in among], dtype=np.int64)
    if not len(rows):
        return []
    return _named(behaviour, table, name, behaviour.search(query[0], k, metric=INNER, allowed=rows), read, k)


def _named(behaviour: ModelIndex, table, name: str, found, read: np.ndarray, k: int) -> list[tuple[str, float]]:
    """A behaviour search's answer for `name` ((row, -inner product) pairs) as its k nearest others with their
    mean expected disagreement (`ItemTable.behaviour_mean` over `read`, (1, S) the probes it reads)."""
    hits = [hit for hit in found if behaviour.names[hit[0]] != name][:k]
    mean = table.behaviour_mean(read, -np.asarray([[d for _, d in hits]], dtype=np.float64))[0]
    return [(behaviour.names[r], float(m)) for (r, _), m in zip(hits, mean)]


def behaviour_neighbours_many(source: "Store | str | Path", table, names: "Sequence[str]", k: int, *,
                              index: "ModelIndex | None" = None, store: "Callable[[], Store] | None" = None,
                              batch: int = 1024) -> dict[str, list[tuple[str, float]]] | None:
    """`behaviour_neighbours` of each of `names` from its stored vector, over the whole index, searched
    in batches (one matrix product each: an audit of every model would otherwise pay one scan per model).
    None when the index is not of `table`; a name the index does not hold is left out."""
    from indexing.vector_index import INNER

    behaviour = index if index is not None else behaviour_index(source, store)
    if table is None or behaviour.encoder_id != table.table_id:
        return None
    held = [n for n in names if n in behaviour.names]
    out: dict[str, list[tuple[str, float]]] = {}
    if k <= 0 or len(behaviour.names) < 2:
        return {n: [] for n in held}
    for lo in range(0, len(held), batch):
        chunk = held[lo:lo + batch]
        own = np.stack([behaviour.vector(n) for n in chunk]).astype(np.float64)
        query, read = table.behaviour_queries(own, None)
        for j, (name, found) in enumerate(zip(chunk, behaviour.search_many(query, k + 1, metric=INNER))):
            out[name] = _named(behaviour, table, name, found, read[j:j + 1], k)
    return out


def behaviour_order(hits: list, keys: list) -> list:
    """`hits` (nearest in the index first) re-ordered by their keys (answer distances), nearest first,
    ties in index order; hits without a key (no common task with the query model, or an item table that
    is not the active one) follow in their index order."""
    known = sorted((i for i, key in enumerate(keys) if key is not None), key=lambda i: (keys[i], i))
    return [hits[i] for i in known] + [hit for i, hit in enumerate(hits) if keys[i] is None]


def _as_store(store: "Store | str | Path") -> "Store":
    from indexing.store import Store

    return store if isinstance(store, Store) else Store(store, create=False)  # Store handles s3:// too


class _StoreEvaluations:
    """`SavedEvaluations`' reads, from the store itself (an s3 home, a transaction open, a large table)."""

    def __init__(self, store: "Store") -> None:
        self.store, self.home = store, store.home
        self._task_of: dict | None = None

    def read(self, names: list[str]):
        from registry.catalog.rows import read_evaluations

        return read_evaluations(self.store, names)

    def task_of(self) -> dict:
        # once per search (one instance each): its keys, task sets and agreement each ask for it
        if self._task_of is None:
            from indexing.store import QUERIES

            tasks = self.store.read(QUERIES, ["query_id", "task"])
            self._task_of = dict(zip(tasks.column("query_id").to_pylist(), tasks.column("task").to_pylist()))
        return self._task_of

    def task_sets(self, names: list[str]) -> dict[str, set]:
        owners, qids, _ = self.read(names)
        task_of = self.task_of()
        out: dict[str, set] = {n: set() for n in names}
        for owner, q in zip(owners.tolist(), qids.tolist()):
            out[owner].add(task_of.get(q) or "")
        return out

    def active_encoder(self) -> str | None:
        return self.store.config.get("active_encoder")


class _SavedEvaluations:
    """The evaluations saved beside the index (`indexing.model_index.SavedEvaluations`) for the home."""

    def __init__(self, saved, home: Path) -> None:
        self.read, self.task_of, self.task_sets, self.home = saved.read, saved.task_of, saved.task_sets, home

    def active_encoder(self) -> str | None:
        from indexing.home import read_config

        return read_config(self.home).get("active_encoder")


def _evaluations(models: EmbeddedModels, open_store: "Callable[[], Store]"):
    """What a refining search reads the evaluations from: the copy saved beside the index when it is
    of the store's current generation (no LanceDB import: `registry search` answers at once), else the
    store, saving that copy for the next search (see `SavedEvaluations`)."""
    from indexing.errors import RegistryError as _Error
    from indexing.model_index import SavedEvaluations

    home = models.index.home
    saved = SavedEvaluations.load(home)
    if saved is None:
        store = open_store()
        try:
            saved = SavedEvaluations.from_store(store)
        except (OSError, _Error):  # a read-only home, a full disk: read the store as before
            saved = None
        if saved is None:
            return _StoreEvaluations(store)
    return _SavedEvaluations(saved, home)


def _agreement(evals, query: str, names: list[str]) -> dict[str, tuple[float | None, int]]:
    """name -> (task_kappa with `query`, shared queries), from the evaluations of these models only."""
    from registry.analytics.audit_stats import task_kappa

    models, qids, scores = evals.read([query, *names])
    if not len(models):
        raise RegistryError("the registry holds no evaluations yet (registry import PATH)")
    task_of = evals.task_of()
    q_pos = {q: i for i, q in enumerate(sorted(set(qids.tolist())))}
    _, task = np.unique(np.asarray([str(task_of.get(q)) for q in q_pos], dtype=object).astype(str), return_inverse=True)

    def rows(name):
        sel = models == name
        idx = np.fromiter((q_pos[q] for q in qids[sel]), dtype=np.int64, count=int(sel.sum()))
        idx, first = np.unique(idx, return_index=True)  # a query scored twice: its first score
        return idx, scores[sel][first]

    own = rows(query)
    return {name: task_kappa(*own, *rows(name), task) for name in names}


def _answer_keys(evals, models: EmbeddedModels, answers, names: list[str],
                 in_index: dict[str, float] | None = None) -> dict[str, tuple]:
    """name -> its key (`answer_keys`): the query model's recorded `answers` (query ids, scores) against what
    the named model's fingerprint (from the index) predicts on those queries (`ItemTable.answer_evidence`).
    Empty when the index's item table is not the active one; without the names that share no task."""
    table = _index_table(evals, models)
    if table is None or not names:
        return {}
    thetas = table.thetas_of(np.stack([models.vector(n) for n in names]))
    q, scores = answers
    task_of, tasks = evals.task_of(), evals.task_sets(names)
    keys = answer_keys(table, thetas, q, scores, query_tasks=[task_of.get(x) for x in q],
                       other_tasks=[tasks[n] for n in names],
                       index_distances=None if in_index is None else np.asarray([in_index[n] for n in names]))
    return {n: key for n, key in zip(names, keys) if key is not None}


def answer_keys(table, others: np.ndarray, query_ids, scores, *, query_tasks, other_tasks,
                index_distances: np.ndarray | None = None) -> list[tuple | None]:
    """How a search from a model orders each of `others` ((N, r + 1) fingerprints), given the model's
    recorded answers (`ItemTable.answer_evidence`): (0, likelihood ratio, distance) for one whose
    fingerprint could have produced them (a copy: first, the likeliest first), else (1, distance,
    distance); None for one sharing no task with it (and no `index_distances`). The distance (reported
    as `behaviour_distance`) is the behaviour index's (`index_distances` (N,): expected disagreement with
    the other's answers on the probe queries the model answered) when given, else the answer distance.

    Why the index's distance when there is one: it reads the other's recorded answers where it has
    them, where the answer distance reads only its fingerprint's predictions, and a model the item table
    was not fitted on is predicted poorly (held out of the fit: NN among 3 behaviourally nearest 70-78%
    by answer distance, 88-100% by the index's; docs/results/scorecard.md)."""
    distance, ratio = table.answer_evidence(others, query_ids, scores, query_tasks=query_tasks,
                                            other_tasks=other_tasks)
    if index_distances is not None:
        distance = np.asarray(index_distances, np.float64)
        return [(0, float(r), float(d)) if np.isfinite(r) and r < table.same_model_ratio else (1, float(d), float(d))
                for d, r in zip(distance, ratio)]
    same_below = table.same_model_ratio
    return [None if not np.isfinite(d) else (0, float(r), float(d)) if r < same_below else (1, float(d), float(d))
            for d, r in zip(distance, ratio)]


def _index_table(evals, models: EmbeddedModels):
    """The active item table when it is the one the fingerprint index was written with, else None."""
    from registry.catalog.fingerprint_store import load_item_table

    active = evals.active_encoder()
    table = load_item_table(evals, active) if active else None  # reads only files under evals.home
    return table if table is not None and table.table_id == models.index.encoder_id else None


ANSWER_MATRIX_MAX = 500  # clusters by answer distance up to this many models (n^2 x 1,024 predictions)
ANSWER_MATRIX_ANSWERS = 1024  # answers per model in that matrix


def answer_distance_matrix(store: "Store", names: list[str]) -> np.ndarray | None:
    """(n, n) behaviour distances between the named models (all in the fingerprint index): for each pair
    the mean of its two answer distances (each model's recorded answers against the other's fingerprint,
    `ItemTable.answer_distances` on at most 1,024 of them), 1.0 (every answer different) for a pair with
    no task in common, 0 on the diagonal. None when the index's item table is not the active one or the
    pool is larger than ANSWER_MATRIX_MAX."""
    if len(names) > ANSWER_MATRIX_MAX:
        return None
    if not names:
        return np.zeros((0, 0))
    models = open_index(store, by="fingerprint")
    evals = _evaluations(models, lambda: _as_store(store))
    table = _index_table(evals, models)
    if table is None:
        return None
    thetas = table.thetas_of(np.stack([models.vector(n) for n in names]))
    task_of, tasks = evals.task_of(), evals.task_sets(names)
    held = [tasks[n] for n in names]

    def row(name: str) -> np.ndarray:
        _, qids, scores = evals.read([name])
        q = qids.tolist()
        return table.answer_distances(thetas, q, scores, query_tasks=[task_of.get(x) for x in q], other_tasks=held,
                                      max_answers=ANSWER_MATRIX_ANSWERS)

    return _symmetric(np.stack([row(name) for name in names]))


def _symmetric(d: np.ndarray) -> np.ndarray:
    """Directed distances (each row one model's view of the others; +inf for no task in common) as one
    symmetric matrix: the mean of both directions, 1.0 (every answer different) with nothing in common."""
    d = np.where(np.isfinite(d), d, 1.0)
    d = (d + d.T) / 2.0
    np.fill_diagonal(d, 0.0)
    return d


def behaviour_distance_matrix(store: "Store", names: list[str], *, batch: int = 1024) -> np.ndarray | None:
    """(n, n) behaviour distances between the named models from their stored behaviour vectors (the index's
    own measure, `ItemTable.behaviour_mean`: the expected disagreement over each one's probe queries of its
    tasks), the mean of both directions, 0 on the diagonal. For pools past ANSWER_MATRIX_MAX: one matrix
    product per batch of rows instead of reading every model's answers. None when the behaviour index is not
    of the active item table or lacks one of the names."""
    behaviour = behaviour_index(store)
    models = open_index(store, by="fingerprint")
    table = _index_table(_evaluations(models, lambda: _as_store(store)), models)
    position = {n: i for i, n in enumerate(behaviour.names)}
    if table is None or behaviour.encoder_id != table.table_id or any(n not in position for n in names):
        return None
    vectors = behaviour.vectors[[position[n] for n in names]].astype(np.float64)  # (n, S + T)
    d = np.empty((len(names), len(names)))
    for lo in range(0, len(names), batch):
        query, read = table.behaviour_queries(vectors[lo:lo + batch], None)
        d[lo:lo + batch] = table.behaviour_mean(read, query @ vectors.T)
    return _symmetric(d)


def fingerprint_distances(store: "Store", names: list[str], z: np.ndarray) -> tuple[np.ndarray, str]:
    """((n, n) distances, metric) between the named models by fingerprint, as `clusters` cuts them and `map`
    draws them (`z` their identity vectors, as `embedded_subset` gives them): the behaviour distance, from each
    pair's recorded answers up to ANSWER_MATRIX_MAX models (`answer_distance_matrix`), from the behaviour
    index's stored vectors beyond (`behaviour_distance_matrix`); the identity distance (metric "euclidean")
    only for a home whose indexes are not of its active item table."""
    d = answer_distance_matrix(store, names)
    if d is None and len(names) > ANSWER_MATRIX_MAX:
        d = behaviour_distance_matrix(store, names)
    if d is not None:
        return d, "behaviour"
    return pairwise_distances(z, "fingerprint"), "euclidean"


def distance(store: "Store | str | Path", a: str, b: str, *, metric: str | None = None, by: str = "locus") -> float:
    by = canonical_by(by) or "locus"
    metric = metric or DEFAULT_METRIC[by]
    if metric not in METRICS:
        raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}", field="metric")
    return embedding_distance(open_index(store, by=by), a, b, metric)


def unvectored_evaluated_queries(store: "Store") -> str | None:
    """A note when evaluated queries have no vector of the registry's query encoder (texts imported with
    --no-encode): not an inconsistency, but every reader of query vectors (embedding, the router's kNN,
    fingerprints of new models, drift) leaves their evaluations out."""
    import pyarrow.compute as pc

    from indexing.store import EVALUATIONS, QUERIES
    from registry.catalog.dataset import GETS_A_VECTOR

    evaluated = pc.unique(store.read(EVALUATIONS, ["query_id"]).column("query_id"))
    queries = store.read(QUERIES, ["query_id", "text_hash"])
    mine = queries.filter(pc.is_in(queries.column("query_id"), value_set=evaluated))
    if not mine.num_rows:
        return None
    rows, _ = store.vector_rows(store.query_encoder, mine.column("text_hash"))
    missing = int((rows < 0).sum())
    if not missing:
        return None
    first = mine.column("query_id")[int(np.flatnonzero(rows < 0)[0])].as_py()
    return (f"{missing:,} of {mine.num_rows:,} evaluated queries have no vector of the query encoder "
            f"{store.query_encoder} (e.g. {first!r}): their evaluations are left out wherever query vectors are "
            f"read; {GETS_A_VECTOR}")


def unembedded_notes(store: "Store") -> list[str]:
    """Notes on the models without a vector (search, audit and route leave them out), by what would embed
    them: `embed --all` where some evaluation is on a query with a vector; a vector for their queries first
    where none is; evaluations first where they have none (a triple import's models.csv can name one).
    Notes, not problems: an import before its `embed --all` is a state the tables agree on."""
    import pyarrow.compute as pc

    from indexing.store import EVALUATIONS, QUERIES
    from registry.catalog.dataset import GETS_A_VECTOR
    from registry.catalog.embedding import unembedded_models

    names = unembedded_models(store) if store.config.get("active_encoder") else []
    if not names:
        return []
    evals = store.read_in(EVALUATIONS, ["model", "query_id"], "model", names)
    queries = store.read(QUERIES, ["query_id", "text_hash"])
    queries = queries.filter(pc.is_in(queries.column("query_id"), value_set=pc.unique(evals.column("query_id"))))
    rows, _ = store.vector_rows(store.query_encoder, queries.column("text_hash"))
    vectored = {q for q, r in zip(queries.column("query_id").to_pylist(), rows) if r >= 0}
    evaluated, embeddable = set(), set()
    for model, query in zip(evals.column("model").to_pylist(), evals.column("query_id").to_pylist()):
        evaluated.add(model)
        if query in vectored:
            embeddable.add(model)
    groups = ([n for n in names if n in embeddable], [n for n in names if n in evaluated and n not in embeddable],
              [n for n in names if n not in evaluated])
    advice = ("have evaluations but no embedding{}: search, audit and route leave them out until `registry embed --all`",
              "have no embedding and no evaluation on a query with a vector of the query encoder{}: `embed --all` "
              f"cannot embed them; {GETS_A_VECTOR}",
              "have no evaluations{}: nothing to embed them from (import evaluations for them, or `registry remove` them)")
    out = []
    for group, words in zip(groups, advice):
        if group:
            named = ", ".join(group[:5]) + (f" and {len(group) - 5} more" if len(group) > 5 else "")
            out.append(f"{len(group)} model(s) " + words.format(f" ({named})"))
    return out


def check_consistency(store: "Store") -> list[str]:
    """Problems found (empty when all is well): the index agrees with the table, every evaluation
    names a stored query."""
    from indexing.store import EVALUATIONS, QUERIES
    from registry.catalog.embedding import active_predictor, models_on_other_encoders

    problems = []
    if store.config.get("active_encoder"):
        try:  # the checkpoint every embedding write loads: check passed with it gone, then refine failed
            active_predictor(store)
        except (RegistryError, OSError, ValueError) as err:
            problems.append(f"the active encoder cannot be loaded: {err} (add-model, refine and embed need it; "
                            "`registry train` makes a new one)")
    for by in ("locus", "fingerprint"):
        try:
            problems += open_index(store, by=by).index.problems(store)
        except RegistryError as err:  # models embedded by two encoders: a finding, not a failure of the check
            problems.append(str(err))
    active = store.config.get("active_encoder")
    if active:  # after a train: search reads the old vectors, and the next add-model mixes two encoders
        stale = models_on_other_encoders(store, active)
        if stale:
            problems.append(f"{stale} model(s) carry vectors of an encoder other than the active one ({active}): "
                            "run `registry embed --all`")
    evals = store.read(EVALUATIONS, ["model", "query_id"])
    known_q = set(store.read(QUERIES, ["query_id"]).column("query_id").to_pylist())
    orphans = set(evals.column("query_id").to_pylist()) - known_q
    if orphans:
        problems.append(f"{len(orphans)} evaluated query ids are not in the queries table")
    return problems
