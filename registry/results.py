"""Typed results: one pydantic model per `Registry` operation.

`Registry` methods return these; the CLI's `--json` prints `model_dump_json()` of the same object and
the HTTP service serves the same schemas. Field names say what they are and, where there is one, the
unit: `distance_cosine` (1 - cosine similarity, in [0, 2]), `p_correct` (a probability), `params_b`
(billions of parameters), `n_...` (a count), `..._accuracy` (a fraction in [0, 1], real scores counting
as expected correctness), `seconds`.

Models are plain data (no behaviour beyond a convenience property), and refuse unknown fields, so a
renamed field fails loudly in a test rather than silently in a consumer.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_serializer, model_validator

from registry.evidence import MIN_EVALS, is_thin
from registry.records import ModelRecord, Query

__all__ = [
    "Result", "HomeInfo", "ImportReport", "Stats", "ListedModel", "ModelList", "ModelInfo", "HistoryEntry", "ModelHistory",
    "ModelChange", "RemoveResult", "RestoreResult", "CheckResult", "TrainReport", "EmbedReport", "FingerprintReport",
    "OnboardingRow", "BlendWeights", "EvaluationReport", "Neighbour", "SearchResult", "TaskSample", "ProfileResult",
    "RankedModel", "Fallback", "RouteDecision", "Kernel", "PortfolioResult", "Cluster", "Merge", "FamilyCut",
    "FamilySpread", "FamilyAgreement", "ClustersResult", "ExplainedVariance", "MapPoint", "MapResult",
    "TaskComparison", "Agreement", "Comparison", "DemoReport", "ErrorDetail", "ErrorResponse",
    "Alias",
    "AliasList",
    "MigrationReport",
    "QueryList",
    "AuditEvidence",
    "AuditPair",
    "AuditCalibration",
    "AuditReport",
    "TableCompaction",
    "CompactReport",
    "DriftTest",
    "DriftReport",
    "DriftRun",
    "SuggestedQuery",
    "QuerySuggestions",
    "RESULT_TYPES",
]

Metric = Literal["cosine", "euclidean"]


class Result(BaseModel):
    """Base of every result: unknown fields refused."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # schemas built at first use: the CLI starts faster


# ------------------------------------------------------------------------------- the home
class HomeInfo(Result):
    """`registry init`: where the registry lives and which encoders it uses."""

    home: str
    query_encoder: str = Field(description="sentence encoder of new query texts")
    active_encoder: str | None = Field(None, description="LOCUS encoder id new models are embedded with")


class ImportReport(Result):
    """`import`: what an import added (it lands whole or not at all; repeating it adds nothing)."""

    source: str
    new_queries: int = 0
    new_models: int = 0
    updated_models: int = 0
    new_evaluations: int = 0
    updated_evaluations: int = 0
    unchanged_evaluations: int = 0
    encoder: str | None = Field(None, description="query encoder new texts were encoded with (None: not encoded)")
    encoded_texts: int = 0
    stored_precomputed: int = Field(0, description="precomputed query vectors stored (--query-embeddings)")
    warnings: list[str] = Field(default_factory=list)
    query_encoder_set: str | None = Field(None, description="the first import into an empty registry named "
                                                            "its query encoder")

    @property
    def changed(self) -> bool:
        return bool(
            self.new_queries or self.new_models or self.updated_models or self.new_evaluations
            or self.updated_evaluations or self.encoded_texts or self.stored_precomputed
        )


class Alias(Result):
    """`alias set|delete|list`: a name that stands for a model (its live version, or one version)."""

    alias: str
    name: str
    version: int | None = Field(None, description="the pinned version (None: whatever version is live)")


class AliasList(RootModel[list[Alias]]):
    """`alias list`: every alias, by alias."""


class Stats(Result):
    """`stats`: what the registry holds."""

    home: str
    n_models: int
    n_queries: int
    n_evaluations: int = Field(description="evaluations of the live models")
    n_removed_evaluations: int = Field(0, description="evaluations of removed models, kept for `restore`")
    queries_per_task: dict[str, int]
    coverage: float = Field(description="evaluations of the live models / (n_models * n_queries), in [0, 1]")
    query_encoder: str
    active_encoder: str | None = None
    query_vectors: dict[str, int] = Field(description="stored query vectors per query encoder")


class TableCompaction(Result):
    """One table of the store before and after `compact`, each field [before, after]."""

    table: str
    fragments: list[int] = Field(description="data fragments: every write adds at least one; scans pay per fragment")
    versions: list[int] = Field(description="table versions kept: every write adds one; old ones keep their files")
    bytes: list[int | None] = Field(description="on disk (None on an s3 home)")


class CompactReport(Result):
    """`compact`: the store's tables merged into few fragments and their old versions removed."""

    tables: list[TableCompaction]
    keep_versions_for_seconds: float = Field(description="versions superseded longer ago than this were removed")
    seconds: float


GENERATION_HELP = ("the home's generation once this write landed: a service on the home answers "
                   "`X-Locus-Read: N` from a state holding it")
LOW_EVIDENCE_HELP = (f"embedded from fewer than the documented minimum of {MIN_EVALS} evaluations "
                     "(registry.evidence): its vector is ranked after well-evidenced ones unless min_evals=0")


class ListedModel(ModelRecord):
    """A model record as `models list` shows it: its metadata, and the evidence behind its embedding."""

    n_evals: int | None = Field(None, description="evaluations the embedding was built from (None: not embedded)")
    low_evidence: bool = Field(False, description=LOW_EVIDENCE_HELP)

    @model_validator(mode="after")
    def _mark(self) -> "ListedModel":
        self.low_evidence = is_thin(self.n_evals)  # always from the constant, never a stale stored flag
        return self

    def metadata(self) -> dict[str, Any]:
        flat = super().metadata()
        flat.pop("n_evals", None)
        flat.pop("low_evidence", None)
        return flat

    def record(self) -> ModelRecord:
        return ModelRecord.model_validate(self.model_dump(exclude={"n_evals", "low_evidence"}))


class ModelList(RootModel[list[ListedModel]]):
    """`models list`: the model records, by name, each with the evidence behind its embedding."""


class QueryList(Result):
    """`queries`: stored queries (id, text, task), by id; `total` counts every match, `queries` holds
    `limit` of them from `offset`. The ids are what `query_id` means in an add-model file or a POST /v1/models."""

    task: str | None = Field(None, description="the task filter, None: every task")
    total: int = Field(description="queries matching the filter (before the offset and the limit)")
    offset: int = Field(0, description="matching queries skipped before the first one listed")
    queries: list[Query]


class ModelInfo(Result):
    """`show`: a model's record with its embedding state."""

    record: ModelRecord
    version: int | None = Field(None, description="1 on add, +1 on every refine, replace or restore")
    encoder_id: str | None = Field(None, description="LOCUS encoder of the embedding (None: not embedded)")
    n_evals: int | None = Field(None, description="evaluations the embedding was built from")
    low_evidence: bool = Field(False, description=LOW_EVIDENCE_HELP)
    embedded: bool
    embedded_at: datetime | None = None
    added: datetime | None = None

    @model_validator(mode="after")
    def _mark(self) -> "ModelInfo":
        self.low_evidence = is_thin(self.n_evals)
        return self


class HistoryEntry(Result):
    version: int
    event: Literal["add", "refine", "replace", "embed", "remove", "restore"]
    time: datetime
    encoder_id: str | None = None
    n_evals: int | None = None
    record: ModelRecord


class ModelHistory(Result):
    """`history`: every version of a model, oldest first."""

    name: str
    versions: list[HistoryEntry]


class ModelChange(Result):
    """`add-model`, `refine`: a model stored and embedded (one forward pass, no training)."""

    name: str
    version: int
    event: Literal["add", "replace", "refine", "unchanged"] = Field(
        description="'unchanged': a refine that brought nothing new (no new version; `version` is the current one)")
    encoder_id: str
    n_evals: int = Field(description="evaluations the embedding was built from")
    new_evaluations: int
    encoded_texts: int = Field(description="query texts encoded now (the rest were stored)")
    low_evidence: bool = Field(False, description=LOW_EVIDENCE_HELP)
    warnings: list[str] = Field(default_factory=list, description="e.g. embedded from fewer evaluations than "
                                                                  "the documented minimum")
    generation: int | None = Field(None, description=GENERATION_HELP)

    @model_validator(mode="after")
    def _mark(self) -> "ModelChange":
        self.low_evidence = is_thin(self.n_evals)
        return self


class RemoveResult(Result):
    name: str
    removed: bool
    version: int | None = Field(None, description="the version removed (restore brings it back)")
    aliases: list[str] = Field(default_factory=list, description="the aliases pointing at the model: kept, and "
                               "answering 'removed' until the model is restored or they are re-pointed")
    generation: int | None = Field(None, description=GENERATION_HELP)


class RestoreResult(Result):
    name: str
    restored_version: int = Field(description="the history version brought back")
    version: int = Field(description="the model's version now")
    restored: bool = Field(True, description="false when the live version already was that version, or a restore "
                           "of it: nothing was written")
    generation: int | None = Field(None, description=GENERATION_HELP)


class CheckResult(Result):
    """`check`: consistency of the index, the tables and the evaluations."""

    ok: bool
    problems: list[str]
    notes: list[str] = Field(default_factory=list, description="what is not wrong but leaves something out "
                             "(evaluated queries without a vector of the query encoder) or wants maintenance (tables "
                             "of many fragments: `compact`)")


# ------------------------------------------------------------------------------ the encoder
class TrainReport(Result):
    """`train`: the LOCUS encoder trained and made active."""

    encoder_id: str
    models: list[str]
    n_train_queries: int
    n_val_queries: int
    evals_per_model: int | None = Field(description="training evaluations per model (None: all)")
    best_epoch: int
    epochs_run: int
    stopped: str = Field(description="why training ended: epochs, patience, patience_seconds or max_seconds")
    val_routing_accuracy: float
    val_loss: float = Field(description="validation BCE at the best epoch")
    val_chance_loss: float = Field(description="BCE of predicting the training base rate everywhere")
    val_auc: float
    embedding_spread: float = Field(description="median distance between models / median distance between two "
                                                "samples of one model")
    warnings: list[str] = Field(description="the encoder collapsed: validation loss at chance, or embeddings "
                                            "within noise of each other")
    seconds: float
    checkpoint: str


class EmbedReport(Result):
    """`embed --all`: models embedded with the active encoder."""

    encoder_id: str
    n_embedded: int
    unchanged: int = Field(0, description="of those, models whose stored vectors were already these (no new "
                                          "history row)")
    n_evals: dict[str, int] = Field(description="per model, the evaluations its embedding was built from")
    engine: str = Field("local", description="'local' (this process) or 'ray'")
    workers: int | None = Field(None, description="Ray actors that embedded (the ray engine)")
    seconds: float | None = Field(None, description="wall time of the embedding pass, reads included, write excluded")
    worker_seconds: float | None = Field(None, description="ray: time inside the workers' forward passes, summed over workers")
    low_evidence: list[str] = Field(default_factory=list, description=f"models embedded from fewer than {MIN_EVALS} "
                                                                      "evaluations (the documented minimum)")
    warnings: list[str] = Field(default_factory=list)


class MigrationReport(Result):
    """`migrate`: the store format migrations run on a home (none when it was current)."""

    home: str
    from_format: int
    to_format: int
    applied: list[str] = Field(default_factory=list, description="'N: what' per migration run, in order")
    fingerprints: int | None = Field(None, description="models given a behaviour fingerprint by the format-2 "
                                                       "migration (None: it did not run)")

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


class FingerprintReport(Result):
    """`fit-fingerprints`: the item table fitted beside the active encoder (behaviour fingerprints)."""

    encoder_id: str
    table_id: str
    rank: int = Field(description="item factors per query")
    queries: int = Field(description="queries with a row in the table (the encoder's test queries never have one)")
    models: int = Field(description="models whose evaluations fitted it")
    seconds: float


class OnboardingRow(Result):
    correctness_accuracy: float = Field(description="of the held-out models, on the test queries")
    routing_accuracy: float = Field(description="of the whole pool with the held-out models in it")
    evals_used: int


class KNNSettings(Result):
    """The kNN router's (encoder/knn.py): neighbourhoods of k training queries (null: all), `pooled` over every
    model's queries or `per_model` over each model's own, shrunk toward the model's mean by `pseudo_count`."""

    mode: Literal["pooled", "per_model"]
    k: int | None
    pseudo_count: float


class BlendWeights(Result):
    """A blend of predictors (encoder/blend.py): P = sigmoid(intercept + sum_k weight_k * logit p_k
    [+ sum_k query_weight_k * mean over models of logit p_k]); `fit` is "logistic" (cell-wise) or
    "routing" (mixed for routing, then calibrated)."""

    weights: dict[str, float]
    intercept: float
    fit: str = "logistic"
    query_weights: dict[str, float] = {}
    settings: dict[str, KNNSettings] = Field(
        {}, description="the settings of a component that has any: knn's, chosen on the validation queries "
                        "(router_blend.json records the same)")


class EvaluationReport(Result):
    """`evaluate`: LOCUS against the baselines on held-out test queries."""

    pool: list[str]
    held_out: list[str]
    evals_per_model: int | None
    seed: int
    n_train_queries: int
    n_val_queries: int
    n_test_queries: int
    routing_accuracy: dict[str, float] = Field(description="per method")
    correctness_accuracy: dict[str, float] = Field(description="per method that predicts P(correct)")
    seconds: dict[str, float] = Field(description="training wall time per method")
    locus_best_epoch: int
    locus_stopped: str = Field(description="why LOCUS training ended: epochs, patience, patience_seconds or max_seconds")
    blend: dict[str, BlendWeights] | None = Field(
        None, description="per blended method (registry: LOCUS + item table + kNN, the router `route` uses): its "
                          "weights on each component's logit, fitted on the validation queries")
    onboarding: dict[str, OnboardingRow] | None = Field(None, description="per number of evaluations embedded from")
    cost_curve: "CostCurve | None" = Field(None, description="`evaluate --cost`: the quality/cost curve "
                                                             "(registry.lab.cost_curve)")

    @model_serializer(mode="wrap")
    def _without_curve(self, handler):
        out = handler(self)  # a plain evaluate answers as before: no cost_curve key
        if self.cost_curve is None:
            out.pop("cost_curve", None)
        return out


# ------------------------------------------------------------------------- evaluate --cost
class CostPoint(Result):
    """One operating point of the registry's router on the test queries: P(correct) - lam * cost."""

    lam: float | None = Field(description="λ, per USD (None: every query to its cheapest scored model)")
    cost_usd: float = Field(description="mean cost per call, USD")
    cost_share: float | None = Field(description="cost_usd / always-best's")
    routing_accuracy: float
    gap_recovered: float | None = Field(description="(accuracy - always-cheapest) / (always-best - always-cheapest)")
    random_mix_accuracy: float = Field(description="random mixing of always-best and always-cheapest at this cost")


class CostPolicy(Result):
    model: str
    routing_accuracy: float
    cost_usd: float


class CostPair(Result):
    """RouteLLM's setting: the router between always-best's and always-cheapest's models only."""

    strong: str
    weak: str
    n_queries: int = Field(description="test queries scored for both")
    strong_accuracy: float | None = None
    weak_accuracy: float | None = None
    gap: float | None
    at_share: dict[str, float | None] = Field(description="gap recovered with 20/50/80% of the calls to strong")
    apgr: float | None
    cpt: dict[str, float | None] = Field(description="smallest share of calls to strong recovering 50/80% of the gap")


class CostCurve(Result):
    """`evaluate --cost`: the registry's router swept over λ against always-best, always-cheapest and
    random mixing, with RouteLLM-style figures (registry.lab.cost_curve)."""

    models: list[str]
    costs_usd: dict[str, float] = Field(description="cost per call of each model, USD (registry.analytics.cost)")
    costed_by_proxy: list[str] = Field(description="models without a price, costed by the params_b proxy")
    excluded_unpriced: list[str] = Field(default_factory=list, description="left out: no price and no params_b")
    n_test_queries: int
    always_best: CostPolicy
    always_cheapest: CostPolicy
    gap: float = Field(description="always-best's routing accuracy - always-cheapest's")
    router: CostPoint = Field(description="λ = 0: P(correct) alone")
    points: list[CostPoint]
    at_share: dict[str, CostPoint | None] = Field(description="at the cost of random mixing with 20/50/80% to always-best")
    apgr: float | None = Field(description="mean gap recovered over shares 0..1 of the calls (random mixing: 0.5)")
    half_cost: CostPoint | None = Field(description="at half always-best's cost")
    half_cost_gap_recovered: float | None
    target: float
    target_met: bool | None
    pair: CostPair


__all__ += ["CostPoint", "CostPolicy", "CostPair", "CostCurve"]


# --------------------------------------------------------------------------------- search
class Neighbour(Result):
    """One model near another (search, profile), nearest first."""

    name: str
    distance: float = Field(description="in `metric`: cosine (1 - cosine similarity) or Euclidean")
    metric: Metric
    vector: Literal["locus", "fingerprint"] = Field(
        "locus", description="the index that answered: the LOCUS embedding or the behaviour fingerprint")
    metadata: dict[str, Any]
    agreement_kappa: float | None = Field(
        None, description="by='fingerprint' from a model only: excess agreement with the query model on shared queries "
                          "(1 - observed / expected disagreement of independent models of their per-task accuracies)")
    shared_queries: int | None = Field(None, description="by='fingerprint' from a model only: queries both answered")
    behaviour_distance: float | None = Field(
        None, description="by='fingerprint' from a model only: expected disagreement of the query model's recorded "
                          "answers with this model's, from the behaviour index: over the item table's probe queries "
                          "the query model answered, this model's recorded answer where it has one, else its "
                          "fingerprint's prediction, a probe of a task it was never evaluated on counting 0.5 (a home "
                          "without behaviour vectors: its fingerprint's predictions on all the query model's answered "
                          "queries of its tasks); the neighbours are ranked by it after those with same_model")
    same_model: bool | None = Field(
        None, description="by='fingerprint' from a model only: this model's fingerprint could have produced the query "
                          "model's recorded answers (a likelihood-ratio test at 1%: a copy, a re-served endpoint); "
                          "such models come first, the most likely first")
    n_evals: int | None = Field(None, description="evaluations its embedding was built from")
    low_evidence: bool = Field(False, description=LOW_EVIDENCE_HELP)


class SearchResult(Result):
    """`search`: the models nearest to a model (itself excluded) or to a vector."""

    query: str | None = Field(description="the model searched from (None: a vector)")
    metric: Metric
    where: str | None = None
    by: Literal["locus", "fingerprint"] = Field(
        "locus", description="the vector that answered: locus (LOCUS embedding) or fingerprint (behaviour "
                             "fingerprint index; from a model, its nearest re-ranked by agreement on shared queries)")
    neighbours: list[Neighbour]
    min_evals: int = Field(MIN_EVALS, description="models embedded from fewer evaluations are ranked after the others")
    evidence_note: str | None = Field(None, description="thin models that ranking after the others pushed out of "
                                                        "these k, and how to include them (None: none)")


class TaskSample(Result):
    n_evals: int
    n_queries: int = Field(description="distinct stored queries among them: fewer than n_evals when the task's "
                           "share exceeds its queries, which are then drawn again, each time with its own score")
    sampled_accuracy: float = Field(description="mean of the synthetic scores drawn for the task")


class ProfileResult(Result):
    """`profile`: real models nearest to a hypothetical one with these task accuracies."""

    targets: dict[str, float] = Field(description="target accuracy per task")
    n_evals: int = Field(description="synthetic evaluations in the hypothetical set")
    seed: int
    allocation: Literal["proportional", "equal"]
    per_task: dict[str, TaskSample]
    encoder_id: str
    pool_size: int = Field(description="embedded models the answer was chosen from (after --where)")
    by: Literal["locus", "fingerprint"] = Field(
        "locus", description="the vector the hypothetical set was made into and searched by: its LOCUS embedding "
                             "(cosine) or its behaviour fingerprint (Euclidean)")
    neighbours: list[Neighbour] = Field(description="nearest first")


class RankedModel(Result):
    name: str
    p_correct: float = Field(description="predicted probability of answering the query correctly")
    low_evidence: bool = Field(False, description=LOW_EVIDENCE_HELP)
    # set only under a cost trade-off (route's max_cost / willingness_to_pay; registry.analytics.cost)
    cost_usd: float | None = Field(None, description="cost of one call, USD (from price_call, price_in/price_out "
                                                     "for the assumed tokens per call, or the params_b proxy)")
    cost_source: Literal["price", "price_call", "params_b"] | None = Field(
        None, description="where cost_usd came from; params_b: the size proxy, the model has no price")
    latency_ms: float | None = Field(None, description="the latency_ms of its metadata, if any")
    utility: float | None = Field(None, description="p_correct - willingness_to_pay * cost_usd: what it is ranked by")

    @model_serializer(mode="wrap")
    def _without_cost(self, handler):
        # a route without a trade-off answers exactly as before: no cost keys at all
        out = handler(self)
        if self.cost_usd is None:
            for key in _COST_KEYS:
                out.pop(key, None)
        return out


_COST_KEYS = ("cost_usd", "cost_source", "latency_ms", "utility")
_TRADE_OFF_KEYS = ("max_cost", "willingness_to_pay", "cost_note")


class Fallback(Result):
    name: str
    distance_cosine: float = Field(description="cosine distance to the top-ranked model's LOCUS embedding")
    by: Literal["locus", "fingerprint"] = Field("locus", description="the index that found it")
    distance: float | None = Field(None, description="how far from the top model, in `metric`")
    metric: Literal["behaviour", "euclidean", "cosine"] | None = Field(
        None, description="what `distance` is: behaviour (by fingerprint, from the behaviour index: the mean expected "
                          "disagreement with the top model's answers over its tasks), euclidean (by fingerprint on a "
                          "home without behaviour vectors: the identity distance) or cosine (by locus)")
    low_evidence: bool = Field(False, description=LOW_EVIDENCE_HELP)


# what RouteDecision.predictor names, in words: the CLI's text output and the web UI show this
PREDICTOR_DESCRIPTIONS = {
    "locus": "LOCUS",
    "locus+item": "LOCUS blended with the item table",
    "locus+item+knn": "LOCUS blended with the item table and kNN over the stored queries",
}


class RouteDecision(Result):
    """`route`: models ranked by P(correct) for one query, and the top model's nearest fallbacks."""

    query: str
    ranking: list[RankedModel]
    fallbacks: list[Fallback]
    min_evals: int = Field(MIN_EVALS, description="models embedded from fewer evaluations come after the others, "
                                                  "in the ranking and among the fallbacks")
    evidence_note: str | None = Field(None, description="thin models pushed out of the ranking or the fallbacks, "
                                                        "and how to include them (None: none)")
    predictor: Literal["locus", "locus+item", "locus+item+knn"] = Field(
        "locus", description="what P(correct) came from: LOCUS alone, LOCUS blended with the item table, or those "
                             "and kNN over the stored queries' evaluations, by the encoder's router blend (fitted on "
                             "validation queries at training)")
    predictor_description: str = Field("", description="`predictor` in words (set from it)")
    max_cost: float | None = Field(None, description="the cost ceiling asked for, USD per call (only with a trade-off)")
    willingness_to_pay: float | None = Field(None, description="λ in p_correct - λ * cost_usd (only with a trade-off)")
    cost_note: str | None = Field(None, description="models costed by the params_b proxy, or left out as unpriced")

    @model_validator(mode="after")
    def _describe_predictor(self):
        self.predictor_description = PREDICTOR_DESCRIPTIONS[self.predictor]
        return self

    @model_serializer(mode="wrap")
    def _without_trade_off(self, handler):
        out = handler(self)
        if self.max_cost is None and self.willingness_to_pay is None:
            for key in _TRADE_OFF_KEYS:
                out.pop(key, None)
        return out


# ------------------------------------------------------------------------------- portfolio
class Kernel(Result):
    type: Literal["rbf"] = "rbf"
    distance: Literal["euclidean"] = "euclidean"
    sigma: float
    sigma_rule: str


class PortfolioResult(Result):
    """`portfolio`: models that cover the pool, and their routing accuracy on held-out test queries."""

    models: list[str]
    method: Literal["kcenter", "kmedoids", "greedy-budget", "answers"]
    by: Literal["locus", "fingerprint"] = Field(
        "locus", description="the vectors the models were compared by (routing accuracy predicts with LOCUS either way)")
    k: int = Field(description="models chosen")
    budget_b: float | None = Field(None, description="parameter budget, billions")
    params_b: dict[str, float | None] = Field(description="size of each chosen model, billions (None: unknown)")
    total_params_b: float | None
    total_params_b_is_lower_bound: bool
    routing_accuracy: float | None
    full_pool_routing_accuracy: float | None
    random_routing_accuracy_mean: float | None
    random_routing_accuracy_sd: float | None
    random_below_fraction: float | None = Field(description="share of random subsets routing strictly worse")
    random_draws: int
    random_mean_size: float
    random_mean_params_b: float = Field(description="mean total params_b of the random subsets (a model of "
                                        "unknown size counted as 0)")
    random_mean_params_b_is_lower_bound: bool = Field(False, description="some random subset held a model of "
                                                                         "unknown size")
    seed: int
    coverage: float = Field(description="facility-location coverage J(S) / pool size, in [0, 1]")
    kernel: Kernel
    pool_size: int
    pool_total_params_b: float | None
    where: str | None
    excluded_unknown_params: list[str]
    n_test_queries: int = Field(description="held-out test queries counted")
    n_test_queries_scored: int = Field(description="held-out test queries some pool model has a score for")
    scoring: Literal["common", "scored-members"] | None
    accuracy_reason: str | None = Field(description="why no accuracy was measured, when none was")
    warnings: list[str]
    greedy_variant: str | None = None
    kcenter_start: list[str] | None = None
    kcenter_coverage: float | None = None
    answer_coverage: float | None = Field(None, description="method answers: the mean over the stored queries "
                                          "outside the test queries of the best score a chosen model recorded")
    answer_queries: int | None = Field(None, description="method answers: the queries that coverage counts")


# -------------------------------------------------------------------------------- families
class Cluster(Result):
    id: int
    size: int
    members: list[str] = Field(description="in dendrogram leaf order")
    mean_distance: float = Field(description="mean pairwise distance within the cluster, in the clustered metric "
                                             "(`metric`)")
    mean_distance_cosine: float = Field(description="deprecated: the same number as `mean_distance` (the name is "
                                                    "from when clusters were always cosine); kept for old clients")
    families: dict[str, int] = Field(description="members per `family`, most common first")


class Merge(Result):
    """One row of the linkage: clusters `left` and `right` (a model name, or the index of an earlier
    merge) joined at `height`."""

    left: Union[str, int]
    right: Union[str, int]
    height: float
    size: int


class FamilyCut(Result):
    k: int
    adjusted_rand: float
    purity: float


class FamilySpread(Result):
    n_models: int
    clusters: list[int]


class FamilyAgreement(Result):
    field: str
    n_models: int = Field(description="models with a value for `field`")
    n_families: int
    n_clusters: int
    adjusted_rand: float = Field(description="adjusted Rand index: 0 chance, 1 the same partition")
    p_value: float = Field(description="permutation p of the adjusted Rand index")
    permutations: int
    purity: float
    at_family_count: FamilyCut | None = Field(None, description="the tree cut into as many clusters as families")
    by_family: dict[str, FamilySpread]


class ClustersResult(Result):
    """`clusters`: hierarchical clusters of the models (behaviour distances by fingerprint, cosine by LOCUS)."""

    n_models: int
    by: Literal["locus", "fingerprint"] = Field("locus", description="the vector clustered")
    metric: Literal["cosine", "euclidean", "behaviour"] = Field(
        "cosine", description="the distance clustered: cosine (LOCUS), behaviour (fingerprints: each pair's answer "
                              "distances up to 500 models, the behaviour index's stored vectors beyond) or euclidean "
                              "(the fingerprint identity distance, for a home whose indexes are not of its item table)")
    linkage: Literal["average", "complete", "single", "ward"]
    heights: str = Field(description="what the merge heights measure")
    k: int
    k_rule: str
    silhouette: float | None = Field(description="mean silhouette on the clustered distances (None: 1 or n clusters)")
    structure: Literal["strong", "reasonable", "weak", "none", "undefined"]
    silhouette_by_k: dict[str, float]
    cophenetic_correlation: float | None
    cut_height: float
    clusters: list[Cluster]
    order: list[str] = Field(description="models in dendrogram leaf order")
    merges: list[Merge]
    family_agreement: FamilyAgreement | None
    plot: str | None = None
    plot_layout: str | None = None
    min_evals: int = Field(MIN_EVALS, description="models embedded from fewer evaluations are left out of the clustering")
    left_out: list[str] = Field(default_factory=list, description="models left out as thin evidence")
    without_vector: list[str] = Field(default_factory=list, description="models that match but have no vector of "
                                      "`by` (no fingerprint: too few evaluations; or not embedded): not clustered")
    evidence_note: str | None = Field(None, description="what was left out and how to include it (None: nothing)")


class ExplainedVariance(Result):
    x: float
    y: float
    total: float


class MapPoint(Result):
    name: str
    x: float
    y: float


class MapResult(Result):
    """`map`: a labelled 2-D map of the embeddings."""

    plot: str
    n_models: int
    by: Literal["locus", "fingerprint"] = Field("locus", description="the vector mapped")
    projection: str
    explained_variance: ExplainedVariance = Field(
        description="each axis's share: of the variance (by locus), of classical MDS's positive eigenvalues "
                    "(by fingerprint)")
    share_of: str = Field("the variance", description="what explained_variance is a share of: \"the variance\" "
                          "(by locus) or \"the positive eigenvalues\" (by fingerprint)")
    without_vector: list[str] = Field(default_factory=list, description="models that match but have no vector of "
                                      "`by` (no fingerprint: too few evaluations; or not embedded): not drawn")
    note: str | None = Field(None, description="what was left out of the map and how to include it (None: nothing)")
    distance_correlation: float | None = Field(
        description="Pearson r of the map's distances vs the distances it draws (chord distances by locus, "
                    "behaviour distances by fingerprint)")
    color_by: str | None
    colouring: dict[str, Any]
    coordinates: list[MapPoint]


class TaskComparison(Result):
    task: str
    a_accuracy: float | None
    b_accuracy: float | None
    a_n: int
    b_n: int
    shared_n: int
    difference: float | None = Field(description="a_accuracy - b_accuracy, each over all its evaluations")
    test: Literal["paired", "two-proportion", "none"] = Field(
        description="paired: on the shared queries (the difference tested is shared_difference); two-proportion: "
                    "unpaired over each one's evaluations of the task; none: untested (one of them has no evaluation "
                    "in the task; overall: fewer than 10 shared queries)")
    shared_difference: float | None = Field(description="a - b on the shared queries, for a paired test")
    disagreement_rate: float | None
    z: float | None = Field(description="None when untested")
    p_value: float | None = Field(description="None when untested")
    p_adjusted: float | None = Field(None, description="Holm over the tasks tested (None for the overall row and "
                                                       "an untested task)")
    a_predicted: float | None = None
    b_predicted: float | None = None


class Agreement(Result):
    shared_queries: int
    disagreement_rate: float | None
    both_correct: int
    only_a: int
    only_b: int
    both_wrong: int


class Comparison(Result):
    """`compare`: how two models differ."""

    a: str
    b: str
    by: Literal["locus", "fingerprint"] = Field("locus", description="the vector of `distance` and the ranks")
    distance: float | None = Field(None, description="from a to b in `distance_metric`")
    distance_metric: Literal["cosine", "euclidean", "behaviour"] | None = Field(
        None, description="cosine (LOCUS); behaviour (fingerprint: the behaviour index's expected disagreement "
                          "of b with a over a's probe queries, as search and route's fallbacks rank), or euclidean "
                          "(the identity distance, a home without behaviour vectors)")
    distance_cosine: float = Field(description="of the LOCUS embeddings")
    rank_of_b_among_a_neighbours: int = Field(description="by `distance_metric`, from a (1: a's nearest)")
    rank_of_a_among_b_neighbours: int = Field(description="by `distance_metric`, from b")
    n_neighbours: int
    overall: TaskComparison
    tasks: list[TaskComparison] = Field(description="largest difference first")
    agreement: Agreement
    test: str
    predicted_from: str | None
    predicted_note: str | None


# ------------------------------------------------------------------------------------ demo
class DemoReport(Result):
    """`demo`: every step of the tour, each as its own command reports it."""

    home: str
    synthetic: bool
    imported: ImportReport
    stats: Stats
    trained: TrainReport | None
    embedded: EmbedReport
    added: ModelChange | None
    nearest: SearchResult
    audit: "AuditReport"
    profile: ProfileResult
    portfolio: PortfolioResult
    route: RouteDecision
    route_without_top: RouteDecision
    clusters: ClustersResult
    map: MapResult


# ---------------------------------------------------------------------------------- errors
class ErrorDetail(Result):
    type: str = Field(description="the error class: InputError, NotFoundError, RegistryError, UsageError")
    message: str
    option: str | None = Field(None, description="the command-line option at fault, as typed")
    field: str | None = Field(None, description="the argument or field at fault")
    file: str | None = None
    line: int | None = None


class ErrorResponse(Result):
    """What `--json` prints (and the service answers) on an error."""

    error: ErrorDetail


# Every command's --json output, by command (tests validate the CLI against these).
# --------------------------------------------------------------------------------- audit
AuditLabel = Literal["duplicate", "same product line?", "cleared", "untested"]


class AuditEvidence(BaseModel):
    """What the two models' evaluations say. Rates are shares of queries (0..1)."""

    shared_queries: int = Field(description="queries both models answered")
    disagreement_rate: float | None = Field(None, description="share of shared queries scored differently")
    expected_disagreement_rate: float | None = Field(
        None, description="the same for two distinct, conditionally independent models of their abilities")
    excess_agreement_kappa: float | None = Field(None, description="1 - observed / expected disagreement")
    kappa_standard_error: float | None = None
    null_kappa_median: float | None = Field(None, description="kappa of the pool's pairs of similar accuracy")
    null_kappa_scale: float | None = Field(None, description="1.4826 x their median absolute deviation")
    null_pairs: int = 0
    z_excess: float | None = None
    p_excess: float | None = Field(None, description="one-sided p of kappa under the pool's distinct pairs")
    p_above_max_noise: float | None = Field(None, description="p of 'disagreement rate <= max_noise'")
    accuracy_a: float | None = Field(None, description="on the shared queries")
    accuracy_b: float | None = None
    a_right_b_wrong: int = 0
    b_right_a_wrong: int = 0
    symmetry_p: float | None = Field(None, description="stratified McNemar by task: disagreements lean one way")
    only_a_queries: int = 0
    only_b_queries: int = 0
    homogeneity_p: float | None = Field(None, description="equal accuracy by task x difficulty, non-shared queries")
    homogeneity_strata: int = 0
    split_pass_rate: float | None = Field(
        None, description="share of the pool's distinct pairs that pass the homogeneity test on disjoint halves")
    relatives_kappa: float | None = Field(
        None, description="kappa of the pool's closest pair of provably distinct models (asymmetric "
                          "disagreements), neither of a and b: a duplicate must agree more")
    relatives_pair: list[str] | None = Field(None, description="that pair's two models")


class AuditPair(BaseModel):
    a: str
    b: str
    label: AuditLabel
    reason: str
    distance: float = Field(description="embedding distance in the report's metric (cosine: 1 - cos)")
    neighbour_rank: int = Field(description="b's best rank among a's nearest neighbours by embedding or by "
                                            "fingerprint (1 = nearest)")
    proposed_by: Literal["embedding", "fingerprint", "both"] = Field(
        default="embedding", description="which nearest-neighbour list proposed the pair")
    evidence: AuditEvidence


class AuditCalibration(BaseModel):
    models: int
    queries: int
    reference_pairs: int
    reference_kappa_median: float | None
    encoder_id: str | None
    generation: str | None
    cached: bool = Field(description="read from <home>/audit/ rather than fitted in this run")
    stale: bool = Field(description="fitted on an older generation of the registry than the current one")


class AuditReport(BaseModel):
    models: int = Field(description="embedded models in the index")
    model: str | None = Field(None, description="the one model audited (audit --model), else every model")
    metric: str
    k: int = Field(description="nearest neighbours proposed as candidates per model")
    by_fingerprint: bool = Field(False, description="whether the k nearest by behaviour fingerprint were proposed "
                                                    "too (the encoder has an item table)")
    alpha: float = Field(description="chance of any false flag in this run (Holm over its candidates); level of the other tests")
    max_noise: float = Field(description="largest disagreement rate one model re-run or re-served may show")
    candidates: int
    flag_level_p: float = Field(description="Holm's step-down level reached: the largest p of the excess-agreement "
                                            "test that was flagged (0.0 when none was); pairs at or below it pass "
                                            "that test")
    flags: list[AuditPair] = Field(description="pairs labelled duplicate or same product line?")
    cleared: list[AuditPair]
    untested: list[AuditPair] = Field(description="candidates with no comparable evaluations")
    calibration: AuditCalibration
    seconds: float

    @property
    def duplicates(self) -> list[AuditPair]:
        return [f for f in self.flags if f.label == "duplicate"]

    @property
    def related(self) -> list[AuditPair]:
        return [f for f in self.flags if f.label == "same product line?"]


# ---------------------------------------------------------------- drift (registry.analytics.drift)
class DriftTest(Result):
    """One test of "the newest version is the model its earlier versions were"."""

    test: Literal["symmetry", "noise", "homogeneity", "fingerprint"] = Field(
        description="symmetry: stratified McNemar within tasks on shared queries (the audit's); noise: more "
                    "changed answers than max_noise (the audit's); homogeneity: task x difficulty on queries only "
                    "one side answered (the audit's); fingerprint: behaviour-fingerprint distance against the "
                    "distances of random splits of the model's own evaluations (permutation test)")
    statistic: float = Field(description="chi-square (symmetry, homogeneity), changed-answer rate (noise), "
                                         "or identity distance in RMS logits (fingerprint)")
    p_value: float
    detail: str


class DriftReport(Result):
    """`registry drift NAME`: does the newest version behave like the earlier ones?"""

    name: str
    status: Literal["moved", "not moved", "nothing to compare", "untested"]
    moved: bool | None = Field(description="None when there was nothing to compare or no test could run")
    newest_version: int | None = None
    earlier_versions: list[int] = Field(default_factory=list)
    method: Literal["shared queries", "fingerprint"] | None = Field(
        None, description="shared queries (at least 30 both answered) or fingerprint distance (queries differ)")
    shared_queries: int = 0
    newest_evaluations: int = 0
    earlier_evaluations: int = 0
    alpha: float = Field(description="chance of a false alarm on an unchanged model (split over the tests run)")
    level: float | None = Field(None, description="p threshold of each test: alpha / tests run (Bonferroni)")
    statistic: float | None = Field(None, description="the deciding (smallest-p) test's statistic")
    p_value: float | None = Field(None, description="the deciding test's p-value")
    tests: list[DriftTest] = Field(default_factory=list)
    changed_rate: float | None = Field(None, description="share of shared queries whose score changed")
    right_to_wrong: int = 0
    wrong_to_right: int = 0
    kappa: float | None = Field(None, description="excess agreement of the two sides (the audit's kappa)")
    accuracy_before: float | None = Field(None, description="earlier versions' accuracy on the shared queries")
    accuracy_after: float | None = None
    fingerprint_distance: float | None = None
    fingerprint_null_median: float | None = Field(None, description="median distance between random splits "
                                                                      "of the model's own evaluations")
    sentence: str
    seconds: float = 0.0


class DriftRun(Result):
    """`registry audit --drift`: drift of every model given a version since the last run."""

    since: datetime | None = Field(None, description="the previous run's marker (None: first run, every model)")
    marker: datetime = Field(description="this run's marker, kept in the home's config.json as last_drift_run")
    log_rows: int = Field(0, description="evaluation_log rows this run read, kept in config.json as "
                                         "last_drift_log_rows: the next run checks the rows after them")
    checked: list[DriftReport]
    moved: list[str]
    seconds: float = 0.0


# ---------------------------------------------------------------- reading the store


# ------------------------------------------------------------------- onboarding (issue 26, part 3)
class SuggestedQuery(Result):
    """One query `suggest-queries` picked, in the order picked."""

    rank: int = Field(description="1 for the first pick")
    query_id: str
    task: str
    text: str = Field(description="the whole query text")
    gain: float = Field(description="why it was chosen: how far it brings the sample (with the earlier picks and the "
                                    "queries already answered) closer to the stored queries as a whole, its kernel "
                                    "herding score (registry.analytics.suggest)")
    information: float = Field(description="its Fisher information alone, p(1 - p) ||[F_i, 1]||^2 (for the pool "
                               "basis: its mean over the pool's fingerprints)")
    p_correct: float = Field(description="predicted P(correct) at the basis (for the pool basis: the mean over the "
                             "pool's fingerprints, what a model drawn from the pool gets)")


class QuerySuggestions(Result):
    """`suggest-queries`: the stored queries whose answers would tell the most about a model
    (registry.analytics.suggest)."""

    model: str | None = Field(None, description="the model asked about; None: a model not yet added")
    basis: Literal["model", "pool", "answers"] = Field(
        description="model: its fingerprint from its stored evaluations; pool: the pool's prior (a model not "
                    "yet added); answers: the fingerprint fitted from the answers given")
    table_id: str = Field(description="the item table the information is computed under")
    task: str | None = None
    n_requested: int
    n_answered: int = Field(description="queries the model already has answers to (never suggested)")
    n_candidates: int = Field(description="stored queries it could be asked (with an item-table row, of the task)")
    pool_models: int = Field(description="models whose fingerprints set the pool's prior")
    total_gain: float = Field(description="sum of the picks' gains")
    queries: list[SuggestedQuery]


RESULT_TYPES: dict[str, type[BaseModel]] = {
    "init": HomeInfo, "import": ImportReport, "stats": Stats, "models list": ModelList, "show": ModelInfo,
    "history": ModelHistory, "add-model": ModelChange, "refine": ModelChange, "remove": RemoveResult,
    "restore": RestoreResult, "check": CheckResult, "train": TrainReport, "embed": EmbedReport,
    "fit-fingerprints": FingerprintReport,
    "evaluate": EvaluationReport, "search": SearchResult, "profile": ProfileResult, "route": RouteDecision,
    "portfolio": PortfolioResult, "clusters": ClustersResult, "map": MapResult, "compare": Comparison,
    "demo": DemoReport, "audit": AuditReport,
    "alias set": Alias, "alias delete": Alias, "alias list": AliasList, "queries": QueryList,
}

RESULT_TYPES.update({"drift": DriftReport, "audit --drift": DriftRun})
RESULT_TYPES["suggest-queries"] = QuerySuggestions

DemoReport.model_rebuild()  # its audit field names AuditReport, defined after it
