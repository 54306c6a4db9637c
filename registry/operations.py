"""The registry's operations, written once: add, refine, remove, restore, route and search.

`Registry` (the Python API and so the CLI) and the service run the same functions here; what differs is
the *view* they pass: what an operation reads besides the store (the active encoder, the indexes, query
vectors) and how it finds names. `StoreView` reads everything afresh from the home (a CLI process lives
for one command); the service's `WarmState` is a `StoreView` that keeps them loaded between requests
(a snapshot of the encoder and the indexes, an LRU of encoded texts). Aliases are resolved by the view,
here, for every operation that takes a model name, so a name means the same thing on every path.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from registry.errors import InputError, RegistryError

if TYPE_CHECKING:
    import numpy as np

    from indexing.store import Store
    from registry.catalog.landing import Change
    from registry.results import ModelChange, RemoveResult, RestoreResult, RouteDecision, SearchResult

__all__ = ["StoreView", "add_change", "refine_change", "add_model", "refine", "remove", "restore", "route",
           "similar", "live_versions"]


def router_knn_key(query_encoder: str, names, settings: dict, pool) -> tuple:
    """What the router's kNN is built from besides the store's state (`StoreView.build_router_knn`): views
    that keep one compare this."""
    return query_encoder, tuple(names), json.dumps(settings, sort_keys=True), frozenset(pool)


def router_knn_args(active, models) -> tuple | None:
    """What `StoreView.router_knn` is asked for by a route on this encoder and index (the query encoder, the
    index's names, the blend's kNN settings, the encoder's pool), or None when its blend has no kNN; a
    route reads it only where the encoder has an item table too."""
    blend = getattr(active, "blend", None)
    if blend is None or "knn" not in blend.components:
        return None
    return active.query_encoder, models.index.names, blend.settings["knn"], active.pool


class KNNSource(NamedTuple):
    """What a router's kNN was built from, for `StoreView.extend_router_knn` to go on from it."""

    version: int | None  # of the evaluations table (None: not a committed state, it cannot go on)
    evaluated_models: frozenset  # every model with evaluations then, in the kNN or not
    unvectored_queries: frozenset  # the queries evaluated then that had no vector


class StoreView:
    """What operations read, read afresh from the home: the store (opened on first use, so that a search
    answered by the saved index never opens it), the active encoder, the indexes, query vectors (stored
    ones by text hash, the rest encoded now), and aliases."""

    def __init__(self, home: Path, store: "Store | None" = None) -> None:
        self.home = home
        self._store = store
        self._active = None
        self._knn = None  # (key, the router's kNN): router_knn's last

    @property
    def store(self) -> "Store":
        if self._store is None:
            from indexing.store import Store

            self._store = Store(self.home, create=False)
        return self._store

    @property
    def source(self) -> "Store | Path":
        """The store when it is open, else the home (readers of the saved index need no store)."""
        return self._store if self._store is not None else self.home

    # -------------------------------------------------------------- encoders and indexes
    def active(self):
        """The active encoder (registry.catalog.embedding.ActiveEncoder); RegistryError when there is none.
        Kept while the home's config names it (an encoder is content-addressed: its id is verified from its
        files when loaded): loading and verifying it again cost each add-model ~20 ms."""
        from registry.catalog.embedding import active_encoder

        kept = self._active
        if kept is not None and self.store.config.get("active_encoder") == kept.encoder_id:
            return kept
        self._active = active_encoder(self.store)
        return self._active

    def predictor(self):
        """The active encoder with only what a route reads: the predictor G, in numpy (no torch import)."""
        from registry.catalog.embedding import active_predictor

        return active_predictor(self.store)

    def index(self, by: str = "locus"):
        """The index of one vector kind with the models' records (registry.analytics.search.EmbeddedModels)."""
        from registry.analytics.search import open_index

        return open_index(self.source, store=lambda: self.store, by=by)

    def item_table(self, encoder_id: str):
        """The item table beside an encoder (encoder.fingerprint.ItemTable), or None."""
        from registry.catalog.fingerprint_store import load_item_table

        return load_item_table(self.store, encoder_id)

    def fingerprints(self):
        """The fingerprint index, or None when no model has a fingerprint."""
        try:
            prints = self.index("fingerprint")
        except RegistryError:
            return None
        return prints if prints.index.names else None

    def behaviour(self):
        """The behaviour index (indexing.model_index.ModelIndex), or None when no model has a behaviour vector."""
        from registry.analytics.search import behaviour_index

        try:
            index = behaviour_index(self.source, lambda: self.store)
        except RegistryError:
            return None
        return index if index.names else None

    def router_knn(self, query_encoder: str, names: list[str], settings: dict, pool: "Iterable[str]" = ()):
        """The router's kNN over the stored queries (`build_router_knn`), kept while the home's generation
        (the last finished write) is the same: a Python caller routing one text at a time would otherwise
        read every stored evaluation per call (~0.2 s on 385k)."""
        from indexing.home import generation, transaction_open

        key = (generation(self.home), router_knn_key(query_encoder, names, settings, pool))
        if self._knn is not None and self._knn[0] == key:
            return self._knn[1]
        knn = self.build_router_knn(query_encoder, names, settings, pool)
        # before the first write there is no generation, and a write in progress may still change the store
        self._knn = (key, knn) if key[0] is not None and not transaction_open(self.home) else None
        return knn

    def build_router_knn(self, query_encoder: str, names: list[str], settings: dict, pool: "Iterable[str]" = ()):
        """The router's kNN over the stored queries: encoder.knn.KNNRouter with the blend's `settings`,
        fitted on every stored evaluation of `names` (rows in that order) on a query with a vector from
        `query_encoder`, its pooled neighbourhoods drawn from the queries of the models in `pool` (the
        encoder's training pool: a model added later moves no other model's P(correct)); None when there
        is none. Its `stored_from` says what `extend_router_knn` goes on from."""
        import numpy as np
        import pyarrow.compute as pc

        from encoder.knn import KNNRouter
        from indexing.store import EVALUATIONS
        from registry.catalog.dataset import EVAL_COLUMNS, load_eval_data, load_query_vectors

        version, evaluations = self.store.read_committed(EVALUATIONS, EVAL_COLUMNS)
        try:
            vectors = load_query_vectors(self.store, query_encoder)
            data = load_eval_data(self.store, query_encoder, models=list(names), evaluations=evaluations,
                                  query_vectors=vectors)
        except RegistryError:
            return None
        pool = set(pool)
        knn = KNNRouter(tune=False, **settings).fit(data, np.arange(len(data.scores)), []).pool_neighbourhoods(
            [i for i, name in enumerate(data.models) if name in pool])
        vectored = set(vectors.query_ids)
        knn.stored_from = KNNSource(version, frozenset(pc.unique(evaluations.column("model")).to_pylist()),
                                    frozenset(q for q in pc.unique(evaluations.column("query_id")).to_pylist()
                                              if q not in vectored))
        return knn

    def extend_router_knn(self, previous, query_encoder: str, names: list[str], pool: "Iterable[str]" = ()):
        """`build_router_knn(query_encoder, names, settings, pool)` from `previous`, the one built with the same
        encoder, settings and pool before, from what the evaluations table gained since, on queries it already
        holds (models added, or refined), with models removed since left out and the models that lost rows
        (a refine that replaced scores) read anew: the same router, exactly (KNNRouter.with_models), reading
        only those rows; a model that comes with rows from before it joined (removed and added again,
        restored, imported then embedded) has all its rows read. Across a compaction every model written since
        has its rows read. None when it cannot be told or is not so (the versions before a compaction removed,
        `changed_since`; a query only removed models were evaluated on)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from indexing.store import EVALUATIONS
        from registry.catalog.dataset import EVAL_COLUMNS, load_query_vectors, positions_in

        source = getattr(previous, "stored_from", None)
        if source is None or source.version is None:
            return None
        change = self.store.changed_since(EVALUATIONS, source.version, EVAL_COLUMNS, "model")
        if change is None:
            return None
        version, rows = change.version, change.gained
        # a model that lost rows has them all read again, in the table's order, in place of what it had; one
        # new here with rows from before (removed and added again, imported then refined) has them all read:
        # the new ones are not all of them
        refreshed = sorted(change.lost & set(names) & set(previous._data.models))
        returning = sorted((set(names) - set(previous._data.models)) & source.evaluated_models)
        if refreshed or returning:
            theirs = pc.is_in(rows.column("model"), value_set=pa.array(refreshed + returning))
            rows = pa.concat_tables([rows.filter(pc.invert(theirs)), change.rows_of(refreshed + returning)])
        queries = previous._data.query_ids
        model = positions_in(rows.column("model"), list(names))
        query = positions_in(rows.column("query_id"), queries)
        # The queries a full build would hold: those with a vector, in stored order, that a model was evaluated
        # on. Only the same ones in the same order will do: a held query that lost its vector or moved, one
        # evaluated before that has a vector now (its stored rows come in), a row of `names` on a query with
        # a vector that none held (a new column) each make it another router.
        vectored = load_query_vectors(self.store, query_encoder).query_ids
        held, has_vector = set(queries), set(vectored)
        ids = rows.column("query_id").to_pylist()
        if ([q for q in vectored if q in held] != list(queries) or source.unvectored_queries & has_vector
                or {ids[i] for i in np.flatnonzero((query < 0) & (model >= 0))} & has_vector):
            return None
        keep = (model >= 0) & (query >= 0)
        knn = previous.with_models(list(names), model[keep], query[keep],
                                   rows.column("score").to_numpy(zero_copy_only=False)[keep].astype(np.float32),
                                   refreshed=refreshed)
        if knn is not None:
            pool = set(pool)
            knn.pool_neighbourhoods([i for i, name in enumerate(names) if name in pool])  # as build_router_knn
            knn.stored_from = KNNSource(version,
                                        source.evaluated_models | set(pc.unique(rows.column("model")).to_pylist()),
                                        source.unvectored_queries | (set(ids) - has_vector))
        return knn

    # ----------------------------------------------------------------------- query vectors
    def query_vectors(self, encoder: str, texts: list[str]) -> tuple[np.ndarray, int]:
        """(len(texts), D) float32 vectors of these texts, and how many had to be encoded now."""
        import numpy as np

        from registry.importers._common import text_hash

        hashes = [text_hash(t) for t in texts]
        found, encoded = self.text_vectors(encoder, dict(zip(hashes, texts)))
        return np.stack([found[h] for h in hashes]).astype(np.float32, copy=False), len(encoded)

    def text_vectors(self, encoder: str, wanted: Mapping[str, str | None], *, bulk: bool = False
                     ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Vectors by text hash for `wanted` (hash -> text, or None for a stored query's text): from the
        store's cache, the rest encoded now. Returns (all found, those encoded now); nothing is written.
        `bulk`: a write's many texts (the service encodes those apart from its routes)."""
        import numpy as np

        found = self.store.cached_vectors(encoder, list(wanted))
        todo = [h for h in wanted if h not in found]
        encoded: dict[str, np.ndarray] = {}
        if todo:
            texts = {h: wanted[h] for h in todo if wanted[h] is not None}
            unknown = [h for h in todo if h not in texts]
            if unknown:  # a stored query never encoded with this encoder: read its text
                from indexing.store import QUERIES

                stored = self.store.read_in(QUERIES, ["text_hash", "text"], "text_hash", unknown)
                texts.update(zip(stored.column("text_hash").to_pylist(), stored.column("text").to_pylist()))
            lost = [h for h in todo if h not in texts]
            if lost:
                raise RegistryError(f"{len(lost)} stored queries have no text to encode (text hash {lost[0]})")
            vectors = self.encode(encoder, [texts[h] for h in todo], bulk=bulk)
            encoded = {h: np.asarray(v, dtype=np.float32) for h, v in zip(todo, vectors)}
            found.update(encoded)
        return found, encoded

    def unstored_vectors(self, encoder: str, hashes) -> set[str]:
        """Those of `hashes` whose vectors this view holds and the store may lack: none here (every vector
        `text_vectors` gives is the store's or encoded now); a service's routes encode texts and keep
        them in memory only, and a write that lands such a text stores its vector."""
        return set()

    def vectors_stored(self, encoder: str, hashes) -> None:
        """A write has committed the vectors of `hashes`: nothing to forget here (see `unstored_vectors`)."""

    def encode(self, encoder: str, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        from encoder.query_encoder import load_query_encoder

        # a few texts (a route) in a fresh process: the exported copy, no torch import (encoder.query_encoder)
        return load_query_encoder(encoder, exported=not bulk).encode(texts, progress=False)

    # ----------------------------------------------------------------------------- names
    def resolve(self, name: Any) -> Any:
        """The stored model name that `name` (a model name or an alias) stands for; a pinned alias whose
        version is no longer live is refused, saying what to do. Anything else passes through unchanged,
        so that the operation's own "no model named ..." error (with suggestions) still speaks."""
        from registry.catalog.aliases import read_aliases, resolve

        if not isinstance(name, str):
            raise InputError(f"a model name is text, not {type(name).__name__} ({_short(name)})", field="name")
        if name not in read_aliases(self.home):
            return name
        return resolve(self.home, name, live=live_versions(self.store), same=self._same_content)

    def _same_content(self, name: str, live: int, pinned: int) -> bool:
        """Whether live version `live` of `name` is a restore of version `pinned` (a restore gets a new
        number, MLflow's rule, but holds the pinned version's record and vector)."""
        from registry.catalog.models import history_rows, is_restore_of

        return is_restore_of(history_rows(self.store, name), live, pinned)


def live_versions(store: "Store") -> dict[str, int]:
    """name -> its live version number."""
    from indexing.store import MODELS

    rows = store.read(MODELS, ["name", "version"]).to_pylist()
    return {r["name"]: int(r["version"] or 1) for r in rows}


# ================================================================================================ writes
def add_change(name: str, evaluations, metadata=None, *, replace: bool = False, max_evals: int | None = None,
               id: str = "add", source: str | None = None) -> "Change":  # noqa: A002
    """The change that adds model `name`: its name and metadata checked, its evaluations parsed (a
    CSV/JSONL/Parquet path, or an iterable: see registry.catalog.models.evaluations_batch)."""
    from registry.catalog.models import evaluations_batch, record_from_metadata
    from registry.catalog.landing import Change
    from registry.limits import check_model_name
    from registry.records import ModelRecord

    name = check_model_name(name)
    if isinstance(metadata, ModelRecord):
        record = metadata.model_copy(update={"name": name})
    else:
        record = record_from_metadata(name, metadata)
    batch = evaluations_batch(name, evaluations)
    return Change(id=id, kind="add", name=name, batch=batch, record=record, replace=replace, max_evals=max_evals,
                  source=source)


def refine_change(view: StoreView, name: str, evaluations, *, max_evals: int | None = None, id: str = "refine",
                  source: str | None = None) -> "Change":  # noqa: A002
    """The change that adds evaluations to model `name` (or the model an alias names)."""
    from registry.catalog.aliases import read_aliases
    from registry.catalog.landing import Change
    from registry.catalog.models import evaluations_batch

    pinned = read_aliases(view.home).get(name) if isinstance(name, str) else None
    if pinned is not None and pinned.get("version") is not None:  # the refine's new version would strand it
        raise InputError(f"alias {name!r} is pinned to {pinned['name']}@{pinned['version']}: a refine makes a new "
                         f"version, which the alias would not follow; refine {pinned['name']} itself (and re-point "
                         "the alias if it should follow)", field="name")
    name = view.resolve(name)
    return Change(id=id, kind="refine", name=name, batch=evaluations_batch(name, evaluations),
                  max_evals=max_evals, source=source)


def add_model(view: StoreView, name: str, evaluations, metadata=None, *, replace: bool = False,
              max_evals: int | None = None) -> "ModelChange":
    from registry.catalog.landing import land_one

    return land_one(view, add_change(name, evaluations, metadata, replace=replace, max_evals=max_evals))


def refine(view: StoreView, name: str, evaluations, *, max_evals: int | None = None) -> "ModelChange":
    from registry.catalog.landing import land_one

    return land_one(view, refine_change(view, name, evaluations, max_evals=max_evals))


def remove(view: StoreView, name: str) -> "RemoveResult":
    from registry.catalog.models import remove as remove_model

    return remove_model(view.store, view.resolve(name))


def restore(view: StoreView, name: str, version: int | None = None) -> "RestoreResult":
    from registry.checks import check_count
    from registry.catalog.models import restore as restore_model

    version = None if version is None else check_count(version, "version", 1)
    return restore_model(view.store, view.resolve(name), version)


# ================================================================================================= reads
def similar(view: StoreView, query: "str | np.ndarray | Sequence[float]", *, k: int = 5, metric: str | None = None,
            where: str | None = None, by: str | None = None, min_evals: int | None = None,
            warm: Callable[[str | None, Any], Any] | None = None) -> "SearchResult":
    """The k nearest models to a model (itself excluded; an alias names its model) or to a LOCUS vector,
    nearest first (registry.analytics.search.search_result). `warm(by, query)`: an index the view holds loaded
    for this search, or None (search_result then opens the saved one)."""
    import numpy as np

    from registry.analytics.search import search_result
    from registry.evidence import MIN_EVALS, check_min_evals

    min_evals = check_min_evals(MIN_EVALS if min_evals is None else min_evals)
    if query is None:
        raise InputError("search from a model name or a vector, not None", field="query")
    try:
        query = view.resolve(query) if isinstance(query, str) else np.asarray(query, dtype=np.float32)
    except (TypeError, ValueError):  # a list of names, a ragged list: neither a name nor a vector
        raise InputError(f"search from a model name or a vector of numbers, not {_short(query)}",
                         field="query") from None
    return search_result(view.source, query, k=k, metric=metric, where=where, by=by,
                         open_store=lambda: view.store, warm=warm(by, query) if warm else None,
                         min_evals=min_evals)


def route(view: StoreView, queries: "str | Sequence[str]", *, k: int = 3, exclude: Iterable[str] = (),
          where: str | None = None, fallback: int = 3, by: str | None = None, min_evals: int | None = None,
          max_cost: float | None = None, willingness_to_pay: float | None = None, unpriced: str = "error"
          ) -> "tuple[RouteDecision | list[RouteDecision], int]":
    """For one text a decision, for a list of texts a list of decisions (one batched prediction), and how
    many texts were encoded now: the top k models by P(correct) (LOCUS, blended with the item table and kNN
    over the stored queries when the encoder has a router blend: skill on an unseen query) and the top
    model's nearest candidates
    (registry.analytics.routing.decide). Excluded names may be aliases. `max_cost` /
    `willingness_to_pay`: a cost trade-off (registry.analytics.cost); neither: P(correct) alone."""
    from registry.evidence import MIN_EVALS, check_min_evals
    from registry.analytics.cost import trade_off
    from registry.analytics.routing import candidate_rows, decide, query_texts
    from registry.analytics.search import canonical_by
    from registry.checks import check_count

    texts, single = query_texts(queries)
    k = check_count(k, "k", 1)
    fallback = check_count(fallback, "fallback", 0)
    min_evals = check_min_evals(MIN_EVALS if min_evals is None else min_evals)
    by = canonical_by(by)
    if exclude is not None and not isinstance(exclude, (str, list, tuple, set, frozenset)):
        raise InputError(f"exclude must be a model name or a list of them, not {type(exclude).__name__}",
                         field="exclude")
    exclude = [view.resolve(n) for n in ([exclude] if isinstance(exclude, str) else exclude or ())]
    models = view.index("locus")
    active = view.predictor()
    rows = candidate_rows(models, active, exclude, where)
    cost = trade_off(models.records, models.index.names, rows, max_cost=max_cost,
                     willingness_to_pay=willingness_to_pay, unpriced=unpriced)
    rows = rows if cost is None else cost.restrict(models.index.names, rows)
    phi, encoded = view.query_vectors(active.query_encoder, texts)  # (Q, D)
    blended = getattr(active, "blend", None) is not None
    prints = view.fingerprints() if blended or (fallback and by != "locus") else None
    behaviour = view.behaviour() if fallback and by != "locus" and prints is not None else None
    table = view.item_table(active.encoder_id) if (blended or behaviour is not None) and prints is not None else None
    knn_args = router_knn_args(active, models) if table is not None else None
    knn = view.router_knn(*knn_args) if knn_args is not None else None
    out = decide(models, active, rows, phi, texts, k=k, fallback=fallback, by=by, prints=prints, min_evals=min_evals,
                 table=table, rank=None if cost is None else cost.rank, behaviour=behaviour, knn=knn)
    out = out if cost is None else cost.annotate(out)
    return (out[0] if single else out), encoded


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
