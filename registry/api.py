"""`Registry`: the public Python API over one registry home."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from indexing.home import resolve_home
from indexing.store import EVALUATIONS, MODELS, QUERIES, Store
from registry.errors import NotFoundError, RegistryError
from registry.ingest import ImportReport, ingest, load_precomputed
from registry.importers import read_batch
from registry.records import ModelRecord

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
        log=None,
        **options: Any,
    ) -> ImportReport:
        """Import evaluations from a file or directory (see `registry.importers` for formats).

        New query texts are encoded with `encoder` (default: the registry's query encoder) unless
        `encode=False`; `query_embeddings` + `query_ids` (.npy) supply vectors for that encoder so
        that nothing is re-encoded. The first import into an empty registry with `encoder` makes it
        the registry's query encoder (as `registry init --encoder` would). `log(line)` hears each stage
        (reading, checking, encoding with counts, writing). The tables get the import whole or not
        at all; texts encoded before an interruption stay in the vector cache.
        """
        import time

        from encoder.query_encoder import canonical_encoder_name

        log = log or (lambda message: None)
        encoder_name = canonical_encoder_name(encoder) if encoder else self.query_encoder
        precomputed = None
        if (query_embeddings is None) != (query_ids is None):
            from registry.errors import InputError

            raise InputError("--query-embeddings and --query-ids go together")
        started = time.monotonic()
        log(f"reading {path} ...")
        batch = read_batch(Path(path), format=format, id_prefix=id_prefix, **options)
        log(f"  read {batch.n_evaluations:,} evaluations, {len(batch.queries):,} queries, "
            f"{len(set(batch.eval_models)):,} models ({time.monotonic() - started:.1f} s)")
        if query_embeddings is not None:
            precomputed = load_precomputed(
                Path(query_embeddings), Path(query_ids), encoder=encoder_name, id_prefix=id_prefix
            )
        adopt = encoder is not None and encoder_name != self.query_encoder and self._is_empty()
        report = ingest(
            self._store,
            batch,
            encoder=encoder_name if encode else None,
            load_encoder=_load_query_encoder,
            precomputed=precomputed,
            log=log,
        )
        if adopt:
            # The first import names the encoder its texts belong to: make it the registry's, or the
            # next `train` would look for vectors from the default encoder and find none.
            self._store.update_config(query_encoder=encoder_name)
            report.query_encoder_set = encoder_name
        log(f"done in {time.monotonic() - started:.1f} s")
        return report

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

        return refine(self._store, self.resolve(name), more_evaluations, max_evals=max_evals)

    def remove(self, name: str) -> dict[str, Any]:
        """Remove a model (its history stays: `restore` brings it back)."""
        from registry.catalog import remove

        return remove(self._store, self.resolve(name))

    def restore(self, name: str, version: int | None = None) -> dict[str, Any]:
        from registry.catalog import restore

        return restore(self._store, self.resolve(name), version)

    def history(self, name: str) -> list[dict[str, Any]]:
        """Every version of a model, oldest first (add, refine, replace, embed, remove, restore)."""
        from registry.catalog import history

        return history(self._store, self.resolve(name))

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

        return similar(self._store, self.resolve(name_or_vector), k=k, metric=metric, where=where)

    def distance(self, a: str, b: str, *, metric: str = "cosine") -> float:
        from registry.search import distance

        return distance(self._store, self.resolve(a), self.resolve(b), metric=metric)

    def audit(self, *, model: str | None = None, metric: str = "cosine", quantile: float = 0.99,
              tolerance: float = 0.10, alpha: float = 0.01) -> dict[str, Any]:
        """Flag pairs of models whose embeddings sit within a model's own self-spread and whose
        evaluations do not show them to differ (see `registry.audit`)."""
        from registry.audit import audit

        return audit(self._store, model=self.resolve(model), metric=metric, quantile=quantile, tolerance=tolerance,
                     alpha=alpha)

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

        exclude = [self.resolve(n) for n in ([exclude] if isinstance(exclude, str) else exclude)]
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

        return compare(self._store, self.resolve(a), self.resolve(b))

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
        name = self.resolve(name)
        for record in self.models():
            if record.name == name:
                return record
        raise NotFoundError.model(name, [r.name for r in self.models()])

    # ==============================================================================================
    # Aliases and name resolution (MLflow-style: `production -> NAME[@VERSION]`). One place turns what
    # a user typed (a model name or an alias) into a stored model name: `resolve`.
    # ==============================================================================================
    def resolve(self, name: str) -> str:
        """The stored model name that `name` (a model name or an alias) stands for; a pinned alias whose
        version is no longer live is refused, saying what to do. Unknown names pass through unchanged so
        that the operation's own "no model named ..." error (with suggestions) still speaks."""
        from registry.aliases import read_aliases, resolve

        if not isinstance(name, str) or name not in read_aliases(self.home):
            return name
        return resolve(self.home, name, live=_live_versions(self._store))

    def set_alias(self, alias: str, target: str) -> dict[str, Any]:
        """Point `alias` at `NAME` (whatever version is live) or `NAME@VERSION` (that version, which must
        be in the model's history). Setting an existing alias re-points it."""
        from registry.aliases import check_alias_name, split_version
        from registry.catalog import history

        check_alias_name(alias)
        live = _live_versions(self._store)
        if alias in live:
            raise RegistryError(f"{alias!r} is a model's name; an alias must not hide a model")
        name, version = split_version(target, set(live))
        past = history(self._store, name)  # "no model named ..." with suggestions
        versions = sorted({int(r["version"]) for r in past})
        if version is not None and version not in versions:
            raise NotFoundError(f"model {name!r} has no version {version} (versions: "
                                f"{', '.join(map(str, versions))})")
        entry = {"name": name, "version": version}

        def change(config: dict[str, Any]) -> None:
            aliases = dict(config.get("aliases") or {})
            aliases[alias] = entry
            config["aliases"] = dict(sorted(aliases.items()))

        self._store.modify_config(change)
        return {"alias": alias, **entry}

    def delete_alias(self, alias: str) -> dict[str, Any]:
        """Remove an alias (the model is untouched); returns what it pointed to."""
        def change(config: dict[str, Any]) -> dict[str, Any]:
            aliases = dict(config.get("aliases") or {})
            if alias not in aliases:
                import difflib

                close = difflib.get_close_matches(alias, list(aliases), n=3, cutoff=0.4)
                raise NotFoundError(f"no alias named {alias!r}" + (f"; closest: {', '.join(close)}" if close else ""))
            entry = aliases.pop(alias)
            config["aliases"] = aliases
            return {"alias": alias, **entry}

        return self._store.modify_config(change)

    def _is_empty(self) -> bool:
        """No queries and no query vectors yet: a first import may still choose the query encoder."""
        return self._store.count(QUERIES) == 0 and not self._store.vector_encoders()

    def aliases(self) -> list[dict[str, Any]]:
        """Every alias and its target ({"alias", "name", "version"}), by alias."""
        from registry.aliases import read_aliases

        return [{"alias": a, **entry} for a, entry in sorted(read_aliases(self.home).items())]


def _vector_table(encoder: str) -> str:
    from indexing.store import vector_table_name

    return vector_table_name(encoder)


def _load_query_encoder(name: str):
    from encoder.query_encoder import load_query_encoder

    return load_query_encoder(name)


def _live_versions(store: Store) -> dict[str, int]:
    rows = store.read(MODELS, ["name", "version"]).to_pylist()
    return {r["name"]: int(r["version"] or 1) for r in rows}
