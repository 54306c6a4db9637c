"""`Registry`: the public Python API over one registry home.

Every operation returns a typed result from `registry.results` (the CLI's `--json` prints the same
objects) and raises only the errors of `registry.errors`. Opening a registry is cheap: the LanceDB store
is opened on first use, so a search answered by the saved index never opens it.
"""
from __future__ import annotations

import os
import shlex
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from indexing.home import as_path, is_remote, resolve_home
from registry.checks import check_count, check_flag, check_seed
from registry.defaults import (AUDIT_ALPHA, AUDIT_MAX_NOISE, CLUSTER_LINKAGE, DRIFT_PERMUTATIONS, KEEP_VERSIONS_FOR,
                               MAX_KEEP_VERSIONS_FOR)
from registry.errors import InputError, NotFoundError, RegistryError
from registry.records import ModelRecord
from registry.results import (
    Alias,
    AuditReport,
    CheckResult,
    ClustersResult,
    Comparison,
    CompactReport,
    DriftReport,
    DriftRun,
    EmbedReport,
    FingerprintReport,
    MigrationReport,
    EvaluationReport,
    HomeInfo,
    ImportReport,
    ListedModel,
    MapResult,
    ModelChange,
    ModelHistory,
    ModelInfo,
    PortfolioResult,
    ProfileResult,
    QueryList,
    QuerySuggestions,
    RemoveResult,
    RestoreResult,
    RouteDecision,
    SearchResult,
    Stats,
    TrainReport,
)

if TYPE_CHECKING:
    from indexing.store import Store

__all__ = ["Registry"]


class Registry:
    """A registry of language models stored in an embedded LanceDB directory.

    >>> reg = Registry.open("~/.locus")           # or Registry.open() for $LOCUS_HOME / ~/.locus
    >>> reg.import_path("data/mmlu-pro")          # evaluations in, texts encoded once
    >>> reg.stats().n_models
    """

    def __init__(self, store: "Store | None" = None, *, home: Path | None = None) -> None:
        if store is None and home is None:
            raise TypeError("Registry needs a store or a home (Registry.open(home) opens one)")
        from registry.operations import StoreView

        # every operation reads through this view (registry.operations): the store, opened on first use
        self._view = StoreView(as_path(home) if home is not None else store.home, store)

    @classmethod
    def open(cls, home: str | os.PathLike[str] | None = None, *, create: bool = True) -> "Registry":
        """The registry at `home` ($LOCUS_HOME, else ~/.locus), created when missing unless `create=False`."""
        from registry.checks import check_path

        create = check_flag(create, "create")
        if type(home).__name__ != "ObjectPath":  # an s3 home already parsed (indexing.home.as_path) is one too
            check_path(home, "home", optional=True)
        path = resolve_home(home)
        if is_remote(path) and not create:  # one HEAD instead of exists() and is_dir() (a HEAD and two LISTs)
            if not (path / "config.json").is_file():
                raise RegistryError(f"no registry at {path} (run `registry init`)")
            return cls(home=path)
        if create or not path.exists():
            from indexing.store import Store

            return cls(Store(path, create=create))
        if not path.is_dir():
            raise RegistryError(f"registry home {path} is not a directory")
        return cls(home=path)

    @property
    def home(self) -> Path:
        return self._view.home

    @property
    def store(self) -> "Store":
        """The LanceDB store (opened on first use). For scripts and tests; the API is the contract."""
        return self._view.store

    @property
    def query_encoder(self) -> str:
        """Name of the query encoder new texts are encoded with (default all-mpnet-base-v2)."""
        return self.store.query_encoder

    def set_query_encoder(self, name: str) -> None:
        from encoder.query_encoder import DEFAULT_ENCODER, SMALL_ENCODER, canonical_encoder_name, load_query_encoder

        if not isinstance(name, str) or not name.strip():
            raise InputError("the query encoder name is empty", field="encoder")
        name = canonical_encoder_name(name)
        if name != self.query_encoder:
            self._refuse_other_encoder(name, "registry init --encoder")
            if name not in (DEFAULT_ENCODER, SMALL_ENCODER):
                # a name only a load can check (a hub name, a directory): load it now, not at the first import
                try:
                    load_query_encoder(name)
                except RegistryError as err:
                    raise InputError(str(err), field="encoder") from None
        self.store.update_config(query_encoder=name)

    def _refuse_other_encoder(self, name: str, what: str) -> None:
        """A home that holds queries (or an encoder trained on them) keeps the query encoder it has: texts
        encoded by another would have no vector the active encoder reads, and their evaluations would be
        left out of every embedding."""
        if self._is_empty() and not self.store.config.get("active_encoder"):
            return
        raise InputError(f"this registry's query encoder is {self.query_encoder} (its queries have its vectors and "
                         f"its LOCUS encoder reads them); {what} {name} would give new texts vectors nothing reads. "
                         "Use a new home for another query encoder", field="encoder")

    def info(self) -> HomeInfo:
        """Where the registry lives and which encoders it uses."""
        return HomeInfo(home=str(self.home), query_encoder=self.query_encoder,
                        active_encoder=self.store.config.get("active_encoder"))

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
        metadata: dict[str, Any] | None = None,
        log=None,
        **options: Any,
    ) -> ImportReport:
        """Import evaluations from a file or directory (see `registry.importers` for formats).

        New query texts are encoded with `encoder` (default: the registry's query encoder) unless
        `encode=False`; `query_embeddings` + `query_ids` (.npy) supply vectors for that encoder so
        that nothing is re-encoded. `metadata` (e.g. {"dataset": "bfcl"}) is set on every model
        of this import, over what the file says. The first import into an empty registry with
        `encoder` makes it the registry's query encoder (as `registry init --encoder` would).
        `log(line)` hears each stage (reading, checking, encoding with counts, writing). The tables
        get the import whole or not at all; texts encoded before an interruption stay in the vector
        cache.
        """
        import time

        from encoder.query_encoder import canonical_encoder_name
        from registry.catalog.ingest import ingest, load_precomputed
        from registry.checks import check_mapping, check_path, check_text
        from registry.importers import read_batch

        check_path(path, "path")
        encode = check_flag(encode, "encode")
        check_path(query_embeddings, "query_embeddings", optional=True)
        check_path(query_ids, "query_ids", optional=True)
        check_text(id_prefix, "id_prefix")
        check_mapping(metadata, "metadata")
        log = log or (lambda message: None)
        encoder_name = canonical_encoder_name(encoder) if encoder else self.query_encoder
        if encoder_name != self.query_encoder:
            self._refuse_other_encoder(encoder_name, "import --encoder")
        precomputed = None
        if (query_embeddings is None) != (query_ids is None):
            raise InputError("query embeddings and their query ids go together: give both or neither",
                             field="query_embeddings" if query_embeddings is None else "query_ids")
        started = time.monotonic()
        log(f"reading {path} ...")
        batch = read_batch(Path(path), format=format, id_prefix=id_prefix, **options)
        batch.tag_models(metadata or {})
        log(f"  read {batch.n_evaluations:,} evaluations, {len(batch.queries):,} queries, "
            f"{len(set(batch.eval_models)):,} models ({time.monotonic() - started:.1f} s)")
        if query_embeddings is not None:
            precomputed = load_precomputed(
                Path(query_embeddings), Path(query_ids), encoder=encoder_name, id_prefix=id_prefix
            )
        adopt = encoder is not None and encoder_name != self.query_encoder and self._is_empty()
        report = ingest(
            self.store,
            batch,
            encoder=encoder_name if encode else None,
            load_encoder=_load_query_encoder,
            precomputed=precomputed,
            log=log,
        )
        if adopt:
            # The first import names the encoder its texts belong to: make it the registry's, or the
            # next `train` would look for vectors from the default encoder and find none.
            self.store.update_config(query_encoder=encoder_name)
            report.query_encoder_set = encoder_name
        thin = _thin_import_warning(self.store, sorted(set(batch.eval_models)))
        if thin:
            report.warnings.append(thin)
        log(f"done in {time.monotonic() - started:.1f} s")
        return report

    # ------------------------------------------------------------ LOCUS encoder
    def select_models(self, pool: str | None, *, field: str = "pool") -> list[str]:
        """Model names for a pool: None/"all", "open" (metadata access == open), or a filter
        expression (see `registry.filters`). Refuses a pool that is empty; errors name `field`."""
        from registry.filters import matching

        records = self.models()
        text = None if pool in (None, "all") else "access == open" if pool == "open" else pool
        chosen = matching(text, records, field=field)
        if not chosen:
            raise InputError(f"the pool {pool!r} matches no model in the registry ({len(records)} models)",
                             field=field)
        return chosen

    def train(
        self,
        *,
        models: str | None = None,
        evals_per_model: int | None = 1024,
        seed: int = 0,
        config=None,
        progress=None,
        nproc: int | None = None,
    ) -> TrainReport:
        """Train the LOCUS encoder and predictor on the training split; the checkpoint becomes the
        active encoder. `models` is a pool ("all", "open" or a filter); `config` an
        encoder.training.TrainConfig (None: the defaults); `progress` a callback per validation
        (registry.catalog.embedding.progress_printer writes lines); `nproc` training processes
        (torch.distributed; None: the config's, 1 by default)."""
        import dataclasses

        from encoder.training import TrainConfig
        from registry.catalog.embedding import train_encoder

        nproc = check_count(nproc, "nproc", 1, optional=True)
        seed = check_seed(seed)
        evals_per_model = check_count(evals_per_model, "evals_per_model", 1, optional=True)
        config = config or TrainConfig()
        if nproc is not None:
            config = dataclasses.replace(config, nproc=nproc)
        return train_encoder(self.store, query_encoder=self.query_encoder,
                             models=self.select_models(models, field="models"), evals_per_model=evals_per_model,
                             seed=seed, config=config, progress=progress)

    def migrate(self) -> MigrationReport:
        """Upgrade the home to this version's store format in place (`registry.catalog.migrations`); a
        `MigrationReport` (empty `applied` when it was current)."""
        from registry.catalog.migrations import migrate

        return migrate(self.store)

    def fit_fingerprints(self) -> FingerprintReport:
        """Fit the item table of the active encoder on the current pool (its test queries left out), for
        behaviour fingerprints, and rewrites every model's fingerprint column with it in one transaction
        (`similar(..., by="fingerprint")` reads it); `train` does this itself, so this is for an encoder
        trained before item tables, or after the pool has grown."""
        import time

        from registry.analytics.fingerprints import fit_item_table

        started = time.perf_counter()
        table = fit_item_table(self.store)
        return FingerprintReport(encoder_id=self.store.config["active_encoder"], table_id=table.table_id,
                                 rank=table.rank, queries=len(table.query_ids), models=len(table.models),
                                 seconds=time.perf_counter() - started)

    def embed_all(self, *, max_evals: int | None = None, engine: str = "local", address: str | None = None,
                  workers: int = 2) -> EmbedReport:  # noqa: A003
        """Embed every model with the active encoder (one forward pass each, no training), in this
        process (`engine="local"`) or on Ray (`engine="ray"`: a local cluster of `workers` actors, or
        the cluster at `address`); the same vectors either way."""
        max_evals = check_count(max_evals, "max_evals", 1, optional=True)
        workers = check_count(workers, "workers", 1)  # checked for either engine: a 0 is a mistake either way
        if engine == "ray":
            from registry.catalog.batch_embed import embed_all_ray

            return embed_all_ray(self.store, address=address, num_workers=workers, max_evals=max_evals)
        if engine != "local":
            raise InputError(f"unknown engine {engine!r}; choose local or ray", field="engine")
        if address is not None:
            raise InputError("an address is for the ray engine (--engine ray)", field="address")
        from registry.catalog.embedding import embed_all

        return embed_all(self.store, max_evals=max_evals)

    def evaluate(
        self,
        *,
        pool: str | None = "all",
        evals_per_model: int | None = 1024,
        seed: int = 0,
        holdout_models: int = 0,
        onboard_evals: tuple[int, ...] = (),
        progress=None,
        log: Callable[[str], None] = lambda message: None,
        train_config=None,
        cost: bool = False,
        unpriced: str = "error",
    ) -> EvaluationReport:
        """LOCUS against the baselines on this registry's evaluations (see `registry.lab.evaluation`).
        `cost`: also the quality/cost curve of the pool (`registry.lab.cost_curve`; each model's cost per
        call from its metadata, registry.analytics.cost), from the same predictions; models with no price
        and no params_b are an error naming them, or left out of the pool with `unpriced="exclude"`."""
        from registry.catalog.dataset import load_eval_data
        from registry.lab.evaluation import run_evaluation

        evals_per_model = check_count(evals_per_model, "evals_per_model", 1, optional=True)
        holdout_models = check_count(holdout_models, "holdout_models", 0)
        seed = check_seed(seed)
        cost = check_flag(cost, "cost")
        # before any training: a count of 0 or less failed minutes in, or "onboarded from 0 evals" scored chance
        if isinstance(onboard_evals, (str, bytes)) or not isinstance(onboard_evals, (tuple, list)):
            raise InputError(f"onboard_evals must be a list of counts, not {type(onboard_evals).__name__}",
                             field="onboard_evals")
        onboard_evals = tuple(check_count(n, "onboard_evals", 1) for n in onboard_evals)
        if onboard_evals and not holdout_models:
            raise InputError("onboard_evals applies only when models are held out (holdout_models, --holdout-models)",
                             field="onboard_evals")
        from registry.analytics.cost import check_unpriced

        check_unpriced(unpriced)
        if unpriced != "error" and not cost:
            raise InputError("unpriced applies to the cost curve only (cost, --cost)", field="unpriced")
        names = self.select_models(pool, field="pool")
        if cost:
            from registry.analytics.cost import pool_costs

            records = {r.name: r for r in self.models()}
            costs = pool_costs(records, names, unpriced=unpriced, field="cost")
            excluded, names = [n for n in names if n not in costs], [n for n in names if n in costs]
        data = load_eval_data(self.store, self.query_encoder, models=names)
        result = run_evaluation(data, evals_per_model=evals_per_model, seed=seed, holdout_models=holdout_models,
                                onboard_evals=onboard_evals, progress=progress, log=log, train_config=train_config,
                                keep_predictions=cost)
        if cost:
            from registry.lab.cost_curve import pool_curve

            trained = [m for m in data.models if m not in result["held_out"]]
            result["cost_curve"] = pool_curve(result.pop("predictions"), trained, costs, excluded)
        return EvaluationReport.model_validate(result)

    # ------------------------------------------------------------ the catalog
    def add_model(self, name: str, evaluations, metadata=None, *, replace: bool = False,
                  max_evals: int | None = None) -> ModelChange:
        """Onboard a model: store its evaluations (query texts or known query ids with scores; a
        CSV/JSONL/Parquet path or an iterable) and embed it with the active encoder in one forward
        pass, no training. An existing name is refused unless `replace`."""
        from registry.evidence import warn_if_thin
        from registry.operations import add_model

        max_evals = check_count(max_evals, "max_evals", 1, optional=True)
        replace = check_flag(replace, "replace")
        return warn_if_thin(add_model(self._view, name, evaluations, metadata, replace=replace, max_evals=max_evals))

    def refine(self, name: str, more_evaluations, *, max_evals: int | None = None) -> ModelChange:
        """Add evaluations to a model and re-embed it as a new version (old versions are kept); when every
        evaluation given is already stored with that score, nothing changes (event "unchanged", no version)."""
        from registry.evidence import warn_if_thin
        from registry.operations import refine

        max_evals = check_count(max_evals, "max_evals", 1, optional=True)
        return warn_if_thin(refine(self._view, name, more_evaluations, max_evals=max_evals))

    def remove(self, name: str) -> RemoveResult:
        """Remove a model (its history stays: `restore` brings it back)."""
        from registry.operations import remove

        return remove(self._view, name)

    def restore(self, name: str, version: int | None = None) -> RestoreResult:
        """Bring back a removed model, or an older version of a live one, from its history."""
        from registry.operations import restore

        return restore(self._view, name, version)

    def history(self, name: str) -> ModelHistory:
        """Every version of a model, oldest first (add, refine, replace, embed, remove, restore)."""
        from registry.catalog.models import history

        return history(self.store, self.resolve(name))

    def list(self, where: str | None = None) -> list[ListedModel]:  # noqa: A003
        """Model records, optionally filtered (see `registry.filters`), each with the evaluations its
        embedding was built from and the low-evidence mark (registry.evidence)."""
        from indexing.store import HEAVY_MODEL_COLUMNS, MODELS
        from registry.filters import matching
        from registry.catalog.rows import record_of

        rows = self.store.read(MODELS, without=HEAVY_MODEL_COLUMNS).to_pylist()
        listed = sorted((ListedModel(**record_of(row).model_dump(), n_evals=row.get("n_evals")) for row in rows),
                        key=lambda r: r.name)
        keep = set(matching(where, listed))
        return [r for r in listed if r.name in keep]

    def similar(self, name_or_vector, k: int = 5, *, metric: str | None = None, where: str | None = None,
                by: str | None = None, min_evals: int | None = None) -> SearchResult:
        """The k nearest models to a model (itself excluded) or to a vector, nearest first. A current
        saved index answers without opening the store. by: "fingerprint" (behaviour fingerprint index,
        the default for a model that has one; its nearest re-ranked by agreement on shared queries) or
        "locus" (the LOCUS embedding; the default for a vector); "embedding"/"behaviour" are accepted
        as the old names. The result's `by` says which vector answered. Models embedded from fewer than
        `min_evals` evaluations (default: the documented minimum, registry.evidence.MIN_EVALS) come after
        the others; 0 ranks every model by distance."""
        from registry.operations import similar

        return similar(self._view, name_or_vector, k=k, metric=metric, where=where, by=by, min_evals=min_evals)

    def distance(self, a: str, b: str, *, metric: str = "cosine") -> float:
        """The distance between two models' embeddings in `metric`."""
        from registry.analytics.search import distance

        return distance(self.store, self._named(a, "a"), self._named(b, "b"), metric=metric)

    def audit(self, *, model: str | None = None, metric: str = "cosine", k: int = 10, alpha: float = AUDIT_ALPHA,
              max_noise: float = AUDIT_MAX_NOISE, by: str | None = None) -> AuditReport:
        """Pairs of models likely to be one model behind two names: each model's k nearest neighbours
        in the index, judged on their evaluations against the pool's own distinct pairs (see
        `registry.analytics.audit`). by: the index proposing candidates, "locus", "fingerprint" or None (both).
        Returns a typed `AuditReport`."""
        from registry.analytics.audit import audit

        try:
            return audit(self.store, model=None if model is None else self._named(model, "model"), metric=metric,
                         k=k, alpha=alpha, max_noise=max_noise, by=by)
        except NotFoundError as err:
            if model is None or err.field is not None:
                raise
            raise NotFoundError(err.problem, field="model") from None  # the model asked for (--model)

    def drift(self, name: str, *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE,
              permutations: int = DRIFT_PERMUTATIONS, seed: int = 0) -> DriftReport:
        """Whether the newest version of a model behaves like its earlier ones: the audit's calibrated
        tests on the queries both answered, else the behaviour-fingerprint distance against the model's
        own resampling spread (see `registry.analytics.drift`). One version: "nothing to compare"."""
        from registry.analytics.drift import drift

        return drift(self.store, self.resolve(name), alpha=alpha, max_noise=max_noise, permutations=permutations,
                     seed=check_seed(seed))

    def drift_refined(self, *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE,
                      permutations: int = DRIFT_PERMUTATIONS, seed: int = 0) -> DriftRun:
        """`drift` of every model given a version since the last such run (`audit --drift`, for CI); the
        evaluation_log rows the run read are kept as `last_drift_log_rows` (and its time as `last_drift_run`)
        in the home's config.json."""
        from registry.analytics.drift import drift_refined

        return drift_refined(self.store, alpha=alpha, max_noise=max_noise, permutations=permutations,
                             seed=check_seed(seed))

    # --------------------------------------------------------------- analytics
    def profile(self, targets: dict[str, float], *, k: int = 5, evals: int = 512, seed: int = 0,
                where: str | None = None, by: str | None = None) -> ProfileResult:
        """Real models nearest to a hypothetical one with these task accuracies (paper, appendix E.1):
        `evals` stored queries are sampled over the named tasks, given synthetic scores whose task
        means match `targets` in expectation, and embedded (`by`: LOCUS by default, or fingerprinted)."""
        from registry.analytics.profile import profile

        return profile(self.store, targets, k=k, evals=evals, seed=check_seed(seed), where=where, by=by)

    def portfolio(self, *, k: int | None = None, budget_b: float | None = None, method: str | None = None,
                  where: str | None = None, include_unknown_params: bool = False, seed: int = 0,
                  random_draws: int = 200, by: str | None = None) -> PortfolioResult:
        """A small set of models that covers the pool: the greedy cover of the recorded answers
        ("answers", the default with k), k-center or k-medoids on the vectors (appendix E.4), or greedy
        under a parameter budget in billions (the default with a budget); with routing accuracies on
        held-out test queries. `by`: the vector methods compare the models by their LOCUS embeddings
        (default) or behaviour fingerprints."""
        from registry.analytics.portfolio import portfolio

        return portfolio(self.store, k=k, budget_b=budget_b, method=method, where=where,
                         include_unknown_params=check_flag(include_unknown_params, "include_unknown_params"),
                         seed=check_seed(seed),
                         random_draws=random_draws, by=by)

    def route(self, queries, *, k: int = 3, exclude=(), where: str | None = None,
              fallback: int = 3, by: str | None = None,
              min_evals: int | None = None, max_cost: float | None = None, willingness_to_pay: float | None = None,
              unpriced: str = "error") -> RouteDecision | list[RouteDecision]:
        """Rank models by predicted P(correct) (the router: LOCUS blended with the item table and kNN over
        the stored queries by `registry train`, fewer parts for an older encoder) for a query text (one decision) or a list of texts
        (a list of decisions, one batched pass); excluded models never appear; `fallback` lists the top
        model's nearest available neighbours (appendix E.2) by `by`: fingerprint (default when it has
        one) or locus; in both, models embedded from fewer than `min_evals` evaluations (default: the
        documented minimum) come after the others. A cost trade-off (registry.analytics.cost: each model's
        USD per call from its price metadata, else the params_b proxy): `max_cost` keeps the models costing at
        most that; `willingness_to_pay` λ ranks by P(correct) - λ·cost; each ranked model then carries its
        cost. Models with no price and no params_b are an error naming them, or left out with
        `unpriced="exclude"`."""
        from registry.operations import route

        return route(self._view, queries, k=k, exclude=exclude, where=where, fallback=fallback, by=by,
                     min_evals=min_evals, max_cost=max_cost, willingness_to_pay=willingness_to_pay,
                     unpriced=unpriced)[0]

    def clusters(self, *, where: str | None = None, plot=None, linkage: str = CLUSTER_LINKAGE,
                 k: int | None = None, by: str | None = None, min_evals: int | None = None) -> ClustersResult:
        """Model families: hierarchical clustering of the models' likeness distances (dendrogram + heatmap to
        `plot`): by behaviour fingerprint by default, `by="locus"` for the LOCUS embeddings; the number of
        clusters by silhouette unless `k` is given. Models embedded from fewer than `min_evals` evaluations
        (default: the documented minimum) are left out and named (0: none), as are models without the vector."""
        from registry.analytics.clusters import clusters

        return clusters(self.store, where=where, plot=plot, linkage=linkage, k=k, by=by, min_evals=min_evals)

    def map(self, plot, *, color_by: str | None = None, where: str | None = None,  # noqa: A003
            by: str | None = None) -> MapResult:
        """A labelled 2-D map of the models saved to `plot`, coloured by a metadata field: from their
        behaviour distances by default, `by="locus"` for the LOCUS embeddings; models it cannot place are named."""
        from registry.analytics.embedding_map import embedding_map

        return embedding_map(self.store, plot, color_by=color_by, where=where, by=by)

    def compare(self, a: str, b: str, *, by: str | None = None) -> Comparison:
        """How two models differ: distance, and per task their accuracies and the evidence behind them."""
        from registry.analytics.compare import compare

        return compare(self.store, self._named(a, "a"), self._named(b, "b"), by=by)

    def check(self) -> CheckResult:
        """Consistency problems (none when the table, the index and the evaluations agree)."""
        from registry.analytics.search import check_consistency, unembedded_notes, unvectored_evaluated_queries

        from registry.defaults import FRAGMENTS_TO_COMPACT

        problems = check_consistency(self.store)
        notes = [note] if (note := unvectored_evaluated_queries(self.store)) else []
        notes += unembedded_notes(self.store)
        piled = [t for t in self.store.storage(sizes=False) if t["fragments"] >= FRAGMENTS_TO_COMPACT]
        if piled:
            notes.append("; ".join(f"{t['table']} holds {t['fragments']:,} fragments and {t['versions']:,} versions"
                                   for t in piled)
                         + " (every write leaves one of each): reads and writes slow down as they pile up and disk "
                           "grows; `registry compact` merges them and removes the old versions")
        return CheckResult(ok=not problems, problems=problems, notes=notes)

    def compact(self, *, keep_versions_for: timedelta = KEEP_VERSIONS_FOR) -> CompactReport:
        """Merge the store's tables into few fragments and remove the versions superseded more than
        `keep_versions_for` ago (every write leaves a fragment and a version in each table it writes:
        reads, and writes, slow down with them and disk grows); the rows are unchanged. Takes the writer
        lock: writes wait. A reader that opened a version within the window can still read it."""
        import time

        from registry.results import TableCompaction

        if not isinstance(keep_versions_for, timedelta):
            raise InputError(f"keep_versions_for must be a timedelta, not {type(keep_versions_for).__name__}",
                             field="keep_versions_for")
        if not timedelta(0) <= keep_versions_for <= MAX_KEEP_VERSIONS_FOR:
            raise InputError(f"keep_versions_for must be from 0 to {MAX_KEEP_VERSIONS_FOR.days:,} days, not "
                             f"{keep_versions_for.total_seconds() / 86400:,g} days", field="keep_versions_for")
        started = time.perf_counter()
        tables = self.store.compact(keep_versions_for=keep_versions_for)
        return CompactReport(tables=[TableCompaction(**t) for t in tables],
                             keep_versions_for_seconds=keep_versions_for.total_seconds(),
                             seconds=time.perf_counter() - started)

    # ------------------------------------------------------------------- reads
    def stats(self) -> Stats:
        """Counts of models, queries (per task), evaluations (of the live models; a removed model's are kept for
        `restore` and counted apart) and query vectors."""
        from indexing.store import EVALUATIONS, MODELS, QUERIES, vector_table_name

        store = self.store
        n_models = store.count(MODELS)
        tasks = Counter(store.read(QUERIES, ["task"]).column("task").to_pylist())
        n_queries = sum(tasks.values())
        n_evals = store.count(EVALUATIONS)
        # Coverage is of the live models: a removed model keeps its evaluations (for restore), which
        # must not count (coverage read 6.39 after removals).
        live_evals = 0
        if n_models and n_evals:
            import pyarrow as pa
            import pyarrow.compute as pc

            live = pa.array(store.read(MODELS, ["name"]).column("name").to_pylist(), pa.string())
            owners = store.read(EVALUATIONS, ["model"]).column("model")
            live_evals = int(pc.sum(pc.is_in(owners, value_set=live)).as_py() or 0)
        return Stats(
            home=str(self.home), n_models=n_models, n_queries=n_queries, n_evaluations=live_evals,
            n_removed_evaluations=n_evals - live_evals,
            queries_per_task=dict(sorted(tasks.items())),
            coverage=round(live_evals / (n_models * n_queries), 6) if n_models and n_queries else 0.0,
            query_encoder=store.query_encoder, active_encoder=store.config.get("active_encoder"),
            query_vectors={name: store.count(vector_table_name(name)) for name in store.vector_encoders()},
        )

    def models(self) -> list[ModelRecord]:
        """Every model record, by name."""
        from indexing.store import HEAVY_MODEL_COLUMNS, MODELS
        from registry.catalog.rows import record_of

        rows = self.store.read(MODELS, without=HEAVY_MODEL_COLUMNS).to_pylist()
        return sorted((record_of(row) for row in rows), key=lambda r: r.name)

    def queries(self, *, task: str | None = None, limit: int | None = None, offset: int = 0) -> QueryList:
        """Stored queries (id, text, task) by id, of one task or all; the first `offset` are skipped and
        `limit` caps how many are returned (None: all; 0: none, `total` alone; `total` always counts every
        match; the CLI's `--limit 0` means all). Where the ids a `query_id` column or POST /v1/models refers
        to come from."""
        from indexing.store import QUERIES
        from registry.records import Query

        limit = check_count(limit, "limit", 0, optional=True)
        offset = check_count(offset, "offset", 0)
        rows = self.store.read(QUERIES, ["query_id", "text", "task"]).to_pylist()
        if task is not None:
            tasks = sorted({row["task"] for row in rows})
            if task not in tasks:
                raise InputError(f"no task {task!r} in the registry; tasks: {', '.join(tasks) or '(none yet)'}",
                                 field="task")
            rows = [row for row in rows if row["task"] == task]
        rows.sort(key=lambda row: row["query_id"])
        shown = rows[offset:] if limit is None else rows[offset:offset + limit]
        return QueryList(task=task, total=len(rows), offset=offset,
                         queries=[Query(id=row["query_id"], text=row["text"], task=row["task"]) for row in shown])

    def get(self, name: str) -> ModelRecord:
        """One model's record."""
        return self.show(name).record

    def show(self, name: str) -> ModelInfo:
        """One model's record with its version and embedding state."""
        from registry.catalog.rows import model_rows, record_of

        name = self.resolve(name)
        rows = model_rows(self.store, light=True)
        if name not in rows:
            from registry.catalog.models import not_live

            raise not_live(self.store, name, list(rows))
        from registry.catalog.rows import info_of_row

        return info_of_row(record_of(rows[name]), rows[name])

    # ==============================================================================================
    # Aliases and name resolution (MLflow-style: `production -> NAME[@VERSION]`). One place turns what
    # a user typed (a model name or an alias) into a stored model name: `resolve`.
    # ==============================================================================================
    def resolve(self, name: str) -> str:
        """The stored model name that `name` (a model name or an alias) stands for; a pinned alias whose
        version is no longer live is refused, saying what to do. Unknown names pass through unchanged so
        that the operation's own "no model named ..." error (with suggestions) still speaks."""
        return self._view.resolve(name)

    def _named(self, name, field: str) -> str:
        """`resolve(name)` for the argument `field`: a name that is not text is refused naming that argument."""
        from registry.checks import check_text

        return self.resolve(check_text(name, field))

    def set_alias(self, alias: str, target: str) -> Alias:
        """Point `alias` at `NAME` (whatever version is live) or `NAME@VERSION` (that version, which must
        be in the model's history). Setting an existing alias re-points it."""
        from registry.catalog.aliases import check_alias_name, split_version
        from registry.catalog.models import history

        check_alias_name(alias)
        from registry.operations import live_versions

        live = live_versions(self.store)
        if alias in live:
            raise RegistryError(f"{alias!r} is a model's name; an alias must not hide a model")
        from indexing.store import VERSIONS

        if self.store.read_in(VERSIONS, ["name"], "name", [alias]).num_rows:  # a removed model's history holds it
            # `restore NAME` would then act on the alias's model, and the removed one could not come back
            raise RegistryError(f"{alias!r} is a removed model's name (`registry restore {shlex.quote(alias)}` brings it back); "
                                "an alias must not hide it: choose another alias")
        if not isinstance(target, str) or not target:
            raise InputError(f"an alias points at NAME or NAME@VERSION (text), not {target!r}", field="target")
        name, version = split_version(target, set(live))
        pointed = (self.store.config.get("aliases") or {}).get(name)
        if name not in live and pointed is not None:  # one hop only: an alias names a model
            shown = pointed["name"] + ("" if pointed.get("version") is None else f"@{pointed['version']}")
            raise InputError(f"{name!r} is an alias (of {shown}); an alias points at a model, not at another alias: "
                             f"point {alias!r} at {shown}", field="target")
        try:
            past = history(self.store, name)  # "no model named ..." with suggestions
        except NotFoundError as err:
            raise NotFoundError(err.problem, field="target") from None
        if name not in live:  # it would answer "removed" from the start
            raise NotFoundError(f"model {name!r} is removed: `registry restore {shlex.quote(name)}` brings it back, "
                                "then point the alias at it", field="target")
        versions = sorted({int(entry.version) for entry in past.versions})
        if version is not None and version not in versions:
            raise NotFoundError(f"model {name!r} has no version {version} (versions: "
                                f"{', '.join(map(str, versions))})", field="target")
        entry = {"name": name, "version": version}

        def change(config: dict[str, Any]) -> None:
            aliases = dict(config.get("aliases") or {})
            aliases[alias] = entry
            config["aliases"] = dict(sorted(aliases.items()))

        self.store.modify_config(change)
        return Alias(alias=alias, **entry)

    def delete_alias(self, alias: str) -> Alias:
        """Remove an alias (the model is untouched); returns what it pointed to."""
        if not isinstance(alias, str):
            raise InputError(f"an alias is text, not {type(alias).__name__}", field="alias")

        def change(config: dict[str, Any]) -> dict[str, Any]:
            aliases = dict(config.get("aliases") or {})
            if alias not in aliases:
                import difflib

                close = difflib.get_close_matches(alias, list(aliases), n=3, cutoff=0.4)
                raise NotFoundError(f"no alias named {alias!r}" + (f"; closest: {', '.join(close)}" if close else ""),
                                    field="alias")
            entry = aliases.pop(alias)
            config["aliases"] = aliases
            return {"alias": alias, **entry}

        return Alias.model_validate(self.store.modify_config(change))

    def _is_empty(self) -> bool:
        """No queries and no query vectors yet: a first import may still choose the query encoder."""
        from indexing.store import QUERIES

        return self.store.count(QUERIES) == 0 and not self.store.vector_encoders()

    def aliases(self) -> list[Alias]:
        """Every alias and its target, by alias."""
        from registry.catalog.aliases import read_aliases

        return [Alias(alias=a, **entry) for a, entry in sorted(read_aliases(self.home).items())]

    # ------------------------------------------------------------ onboarding
    def suggest_queries(self, name: str | None = None, n: int = 64, *, task: str | None = None,
                        from_pool: bool = False, answered: dict[str, float] | None = None) -> QuerySuggestions:
        """The n stored queries whose answers would tell the most about a model, to evaluate it on first
        (`registry.analytics.suggest`): for model `name` (NAME may be an alias) at its fingerprint, its
        answered queries left out; with no name or `from_pool`, for a model not yet added, at the pool's
        prior; `answered` (query id -> score) gives such a model's answers so far. `task`: one task's queries."""
        from registry.analytics.suggest import suggest_queries

        return suggest_queries(self.store, name=self.resolve(name) if name is not None else None, n=n, task=task,
                               from_pool=check_flag(from_pool, "from_pool"), answered=answered)


def _thin_import_warning(store: "Store", names: list[str]) -> str | None:
    """The thin-evidence warning of an import: its models holding fewer than MIN_EVALS evaluations
    after it (counted in the store, so an import that tops up a model counts what it had)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from indexing.store import EVALUATIONS
    from registry.evidence import thin_models_warning

    if not names:
        return None
    owners = store.read(EVALUATIONS, ["model"]).column("model")
    owners = owners.filter(pc.is_in(owners, value_set=pa.array(names, pa.string())))
    counts = {n: 0 for n in names}
    for entry in pc.value_counts(owners).to_pylist():
        counts[entry["values"]] = int(entry["counts"])
    return thin_models_warning(counts)


def _load_query_encoder(name: str):
    from encoder.query_encoder import load_query_encoder

    return load_query_encoder(name)
