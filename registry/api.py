"""`Registry`: the public Python API over one registry home."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexing.home import resolve_home
from indexing.store import EVALUATIONS, MODELS, QUERIES, Store
from registry.errors import NotFoundError, RegistryError
from registry.ingest import ImportReport, ingest, load_precomputed
from registry.importers import read_batch
from registry.records import ModelRecord

if TYPE_CHECKING:
    from registry.audit import AuditReport

__all__ = ["Registry"]


class Registry:
    """A registry of language models stored in an embedded LanceDB directory.

    >>> reg = Registry.open("~/.locus")           # or Registry.open() for $LOCUS_HOME / ~/.locus
    >>> reg.import_path("data/mmlu-pro")          # evaluations in, texts encoded once
    >>> reg.stats()["models"]
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    @classmethod
    def open(cls, home: str | os.PathLike[str] | None = None, *, create: bool = True) -> "Registry":
        return cls(Store(resolve_home(home), create=create))

    @property
    def home(self) -> Path:
        return self._store.home

    @property
    def store(self) -> Store:
        return self._store

    @property
    def query_encoder(self) -> str:
        """Name of the query encoder new texts are encoded with (default all-mpnet-base-v2)."""
        return self._store.query_encoder

    def set_query_encoder(self, name: str) -> None:
        from encoder.query_encoder import canonical_encoder_name

        self._store.update_config(query_encoder=canonical_encoder_name(name))

    # ------------------------------------------------------------------ import
    def import_path(
        self,
        path: str | os.PathLike[str],
        *,
        format: str = "auto",
        id_prefix: str = "",
        encoder: str | None = None,
        encode: bool = True,
        query_embeddings: str | os.PathLike[str] | None = None,
        query_ids: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> ImportReport:
        """Import evaluations from a file or directory (see `registry.importers` for formats).

        New query texts are encoded with `encoder` (default: the registry's query encoder) unless
        `encode=False`; `query_embeddings` + `query_ids` (.npy) supply vectors for that encoder so
        that nothing is re-encoded. The import lands whole or not at all.
        """
        from encoder.query_encoder import canonical_encoder_name

        encoder_name = canonical_encoder_name(encoder) if encoder else self.query_encoder
        precomputed = None
        if (query_embeddings is None) != (query_ids is None):
            from registry.errors import InputError

            raise InputError("--query-embeddings and --query-ids go together")
        batch = read_batch(Path(path), format=format, id_prefix=id_prefix, **options)
        if query_embeddings is not None:
            precomputed = load_precomputed(
                Path(query_embeddings), Path(query_ids), encoder=encoder_name, id_prefix=id_prefix
            )
        return ingest(
            self._store,
            batch,
            encoder=encoder_name if encode else None,
            load_encoder=_load_query_encoder,
            precomputed=precomputed,
        )

    # ------------------------------------------------------------ LOCUS encoder
    def select_models(self, pool: str | None) -> list[str]:
        """Model names for a pool: None/"all", "open" (metadata access == open), or a filter
        expression (see `registry.filters`). Refuses a pool that is empty."""
        from registry.filters import parse_filter

        records = self.models()
        if pool in (None, "all"):
            chosen = records
        else:
            text = "access == open" if pool == "open" else pool
            chosen = parse_filter(text, records).select(records)
        if not chosen:
            raise RegistryError(f"the pool {pool!r} matches no model in the registry ({len(records)} models)")
        return [r.name for r in chosen]

    def train(
        self,
        *,
        models: str | None = None,
        evals_per_model: int | None = 1024,
        seed: int = 0,
        epochs: int | None = None,
        progress: bool = True,
        **options: Any,
    ):
        """Train the LOCUS encoder and predictor on the training split; the checkpoint becomes the
        active encoder. `models` is a pool ("all", "open" or a filter)."""
        from registry.embedding import train_encoder

        return train_encoder(self._store, query_encoder=self.query_encoder, models=self.select_models(models),
                             evals_per_model=evals_per_model, seed=seed, epochs=epochs, progress=progress,
                             **options)

    def embed_all(self, *, max_evals: int | None = None) -> dict[str, Any]:  # noqa: A003
        """Embed every model with the active encoder (one forward pass each, no training)."""
        from registry.embedding import embed_all

        return embed_all(self._store, max_evals=max_evals)

    def evaluate(
        self,
        *,
        pool: str | None = "all",
        evals_per_model: int | None = 1024,
        seed: int = 0,
        holdout_models: int = 0,
        onboard_evals: tuple[int, ...] = (),
        progress: bool = False,
        log=lambda message: None,
        **locus_options: Any,
    ) -> dict[str, Any]:
        """LOCUS against the baselines on this registry's evaluations (see `registry.evaluation`)."""
        from registry.dataset import load_eval_data
        from registry.evaluation import run_evaluation

        names = self.select_models(pool)
        data = load_eval_data(self._store, self.query_encoder, models=names)
        return run_evaluation(data, evals_per_model=evals_per_model, seed=seed, holdout_models=holdout_models,
                              onboard_evals=onboard_evals, progress=progress, log=log,
                              locus_options=locus_options or None)

    # ------------------------------------------------------------ the catalog
    def add_model(self, name: str, evaluations, metadata=None, *, replace: bool = False,
                  max_evals: int | None = None) -> dict[str, Any]:
        """Onboard a model: store its evaluations (query texts or known query ids with scores; a
        CSV/JSONL/Parquet path or an iterable) and embed it with the active encoder in one forward
        pass, no training. An existing name is refused unless `replace`."""
        from registry.catalog import add_model

        return add_model(self._store, name, evaluations, metadata, replace=replace, max_evals=max_evals)

    def refine(self, name: str, more_evaluations, *, max_evals: int | None = None) -> dict[str, Any]:
        """Add evaluations to a model and re-embed it as a new version (old versions are kept)."""
        from registry.catalog import refine

        return refine(self._store, name, more_evaluations, max_evals=max_evals)

    def remove(self, name: str) -> dict[str, Any]:
        """Remove a model (its history stays: `restore` brings it back)."""
        from registry.catalog import remove

        return remove(self._store, name)

    def restore(self, name: str, version: int | None = None) -> dict[str, Any]:
        from registry.catalog import restore

        return restore(self._store, name, version)

    def history(self, name: str) -> list[dict[str, Any]]:
        """Every version of a model, oldest first (add, refine, replace, embed, remove, restore)."""
        from registry.catalog import history

        return history(self._store, name)

    def list(self, where: str | None = None) -> list[ModelRecord]:
        """Model records, optionally filtered (see `registry.filters`)."""
        records = self.models()
        if where is None:
            return records
        from registry.filters import parse_filter

        return parse_filter(where, records).select(records)

    def similar(self, name_or_vector, k: int = 5, *, metric: str = "cosine", where: str | None = None):
        """The k nearest models (name, distance, metadata), nearest first, the model itself excluded."""
        from registry.search import similar

        return similar(self._store, name_or_vector, k=k, metric=metric, where=where)

    def distance(self, a: str, b: str, *, metric: str = "cosine") -> float:
        from registry.search import distance

        return distance(self._store, a, b, metric=metric)

    def audit(self, *, model: str | None = None, metric: str = "cosine", k: int = 10, alpha: float = 0.01,
              max_noise: float = 0.12) -> "AuditReport":
        """Pairs of models likely to be one model behind two names: each model's k nearest neighbours
        in the index, judged on their evaluations against the pool's own distinct pairs (see
        `registry.audit`). Returns a typed `AuditReport`."""
        from registry.audit import audit

        return audit(self._store, model=model, metric=metric, k=k, alpha=alpha, max_noise=max_noise)

    # --------------------------------------------------------------- analytics
    def profile(self, targets: dict[str, float], *, k: int = 5, evals: int = 512, seed: int = 0,
                where: str | None = None) -> dict[str, Any]:
        """Real models nearest to a hypothetical one with these task accuracies (paper, appendix E.1):
        `evals` stored queries are sampled over the named tasks, given synthetic scores whose task
        means match `targets` in expectation, and embedded. Returns {"results": [{"name", "distance"}], ...}."""
        from registry.profile import profile

        return profile(self._store, targets, k=k, evals=evals, seed=seed, where=where)

    def portfolio(self, *, k: int | None = None, budget_b: float | None = None, method: str | None = None,
                  where: str | None = None, include_unknown_params: bool = False, seed: int = 0,
                  random_draws: int = 200) -> dict[str, Any]:
        """A small set of models that covers the pool (appendix E.4): k-center, k-medoids, or greedy
        under a parameter budget in billions (the default method: greedy-budget with a budget, else
        kmedoids); with routing accuracies on held-out test queries."""
        from registry.portfolio import portfolio

        return portfolio(self._store, k=k, budget_b=budget_b, method=method, where=where,
                         include_unknown_params=include_unknown_params, seed=seed, random_draws=random_draws)

    def route(self, queries, *, k: int = 3, exclude=(), where: str | None = None, fallback: int = 3):
        """Rank models by predicted P(correct) for a query text (a dict) or a list of texts (a list of
        dicts, one batched pass); excluded models never appear; `fallback` lists the top model's
        nearest available neighbours (appendix E.2)."""
        from registry.routing import route

        return route(self._store, queries, k=k, exclude=exclude, where=where, fallback=fallback)

    def clusters(self, *, where: str | None = None, plot=None, linkage: str = "average",
                 k: int | None = None) -> dict[str, Any]:
        """Model families: hierarchical clustering of embedding distances (dendrogram + heatmap to `plot`);
        the number of clusters by silhouette unless `k` is given."""
        from registry.families import clusters

        return clusters(self._store, where=where, plot=plot, linkage=linkage, k=k)

    def map(self, plot, *, color_by: str | None = None, where: str | None = None) -> dict[str, Any]:
        """A labelled 2-D map of the embeddings saved to `plot`, coloured by a metadata field."""
        from registry.families import embedding_map

        return embedding_map(self._store, plot, color_by=color_by, where=where)

    def compare(self, a: str, b: str) -> dict[str, Any]:
        """How two models differ: distance, and per task their accuracies and the evidence behind them."""
        from registry.families import compare

        return compare(self._store, a, b)

    def check(self) -> list[str]:
        """Consistency problems (empty when the table, the index and the evaluations agree)."""
        from registry.search import check_consistency

        return check_consistency(self._store)

    # ------------------------------------------------------------------- reads
    def stats(self) -> dict[str, Any]:
        n_models = self._store.count(MODELS)
        tasks = Counter(self._store.read(QUERIES, ["task"]).column("task").to_pylist())
        n_queries = sum(tasks.values())
        n_evals = self._store.count(EVALUATIONS)
        return {
            "models": n_models,
            "queries": n_queries,
            "evaluations": n_evals,
            "tasks": dict(sorted(tasks.items())),
            "coverage": round(n_evals / (n_models * n_queries), 6) if n_models and n_queries else 0.0,
            "query_encoder": self.query_encoder,
            "query_vectors": {
                name: self._store.count(_vector_table(name)) for name in self._store.vector_encoders()
            },
        }

    def models(self) -> list[ModelRecord]:
        from registry.catalog import record_of

        rows = self._store.read(MODELS).to_pylist()
        return sorted((record_of(row) for row in rows), key=lambda r: r.name)

    def get(self, name: str) -> ModelRecord:
        for record in self.models():
            if record.name == name:
                return record
        raise NotFoundError.model(name, [r.name for r in self.models()])


def _vector_table(encoder: str) -> str:
    from indexing.store import vector_table_name

    return vector_table_name(encoder)


def _load_query_encoder(name: str):
    from encoder.query_encoder import load_query_encoder

    return load_query_encoder(name)

