"""The public names, pinned (as httpx pins its `__all__`): adding or removing one is a decision made
here, not a side effect. And every public `Registry` method says what it returns."""
from __future__ import annotations

import inspect
import typing

import registry
from registry import results

PUBLIC = {
    "Registry", "Query", "Evaluation", "ModelRecord", "RegistryError", "InputError", "NotFoundError",
    "Agreement", "AuditReport", "CheckResult", "Cluster", "ClustersResult", "Comparison", "DemoReport", "EmbedReport",
    "FingerprintReport", "ErrorDetail", "ErrorResponse", "EvaluationReport", "Fallback", "FamilyAgreement", "HistoryEntry", "HomeInfo",
    "ImportReport", "MapResult", "ModelChange", "ModelHistory", "ModelInfo", "ModelList", "Neighbour",
    "PortfolioResult", "ProfileResult", "RankedModel", "RemoveResult", "RestoreResult", "RouteDecision",
    "SearchResult", "Stats", "TaskComparison", "TrainReport", "CompactReport",
}

RESULTS = {
    "Result", "HomeInfo", "ImportReport", "Stats", "ListedModel", "ModelList", "ModelInfo", "HistoryEntry", "ModelHistory",
    "ModelChange", "RemoveResult", "RestoreResult", "CheckResult", "TrainReport", "EmbedReport", "FingerprintReport", "OnboardingRow", "BlendWeights",
    "EvaluationReport", "Neighbour", "SearchResult", "TaskSample", "ProfileResult", "RankedModel", "Fallback",
    "RouteDecision", "Kernel", "PortfolioResult", "Cluster", "Merge", "FamilyCut", "FamilySpread",
    "FamilyAgreement", "ClustersResult", "ExplainedVariance", "MapPoint", "MapResult", "TaskComparison",
    "Agreement", "Comparison", "DemoReport", "ErrorDetail", "ErrorResponse", "RESULT_TYPES",
    "AuditEvidence", "AuditPair", "AuditCalibration", "AuditReport", "Alias", "AliasList", "MigrationReport",
    "QueryList",
    "DriftTest", "DriftReport", "DriftRun",
}
RESULTS |= {"CostPoint", "CostPolicy", "CostPair", "CostCurve"}  # evaluate --cost (issue 26, cost-aware routing)

RESULTS |= {"SuggestedQuery", "QuerySuggestions"}  # issue 26 part 3: suggest-queries
RESULTS |= {"TableCompaction", "CompactReport"}  # compact: fragments and old versions

# Registry's public methods and what they return.
RETURNS = {
    "open": "Registry", "info": "HomeInfo", "set_query_encoder": "None", "import_path": "ImportReport",
    "select_models": "list[str]", "train": "TrainReport", "embed_all": "EmbedReport", "fit_fingerprints": "FingerprintReport",
    "evaluate": "EvaluationReport", "add_model": "ModelChange", "refine": "ModelChange", "remove": "RemoveResult",
    "restore": "RestoreResult", "history": "ModelHistory", "list": "list[ListedModel]", "similar": "SearchResult",
    "distance": "float", "audit": "AuditReport", "profile": "ProfileResult", "portfolio": "PortfolioResult",
    "route": "RouteDecision | list[RouteDecision]", "clusters": "ClustersResult", "map": "MapResult",
    "compare": "Comparison", "check": "CheckResult", "stats": "Stats", "models": "list[ModelRecord]",
    "get": "ModelRecord", "show": "ModelInfo", "resolve": "str", "set_alias": "Alias", "delete_alias": "Alias",
    "aliases": "list[Alias]", "migrate": "MigrationReport", "queries": "QueryList",
    "drift": "DriftReport", "drift_refined": "DriftRun",
}
RETURNS["suggest_queries"] = "QuerySuggestions"  # issue 26 part 3
RETURNS["compact"] = "CompactReport"


def test_registry_all_is_pinned_and_every_name_resolves():
    assert set(registry.__all__) == PUBLIC
    assert len(registry.__all__) == len(set(registry.__all__))
    for name in registry.__all__:
        assert getattr(registry, name) is not None


def test_results_all_is_pinned_and_each_model_refuses_unknown_fields():
    assert set(results.__all__) == RESULTS
    for name in results.__all__:
        model = getattr(results, name)
        if isinstance(model, type) and issubclass(model, results.Result):
            assert model.model_config.get("extra") == "forbid", name


def test_every_command_has_a_result_model_and_every_model_a_json_schema():
    assert set(results.RESULT_TYPES) >= {"init", "import", "stats", "models list", "show", "history", "add-model",
                                         "remove", "restore", "check", "train", "embed", "evaluate", "search",
                                         "profile", "route", "portfolio", "clusters", "map", "compare", "demo"}
    for model in results.RESULT_TYPES.values():
        assert model.model_json_schema()["title"]


def test_every_public_registry_method_has_a_typed_return():
    public = {n for n, m in inspect.getmembers(registry.Registry) if not n.startswith("_") and callable(m)}
    assert public == set(RETURNS)
    for name in public:
        annotation = inspect.signature(getattr(registry.Registry, name)).return_annotation
        assert annotation is not inspect.Signature.empty, name
        assert str(annotation).replace("'", "") == RETURNS[name], (name, annotation)
    hints = typing.get_type_hints(registry.Registry.similar)  # the annotations resolve
    assert hints["return"] is results.SearchResult


# The encoder's training and inference modules, pinned too: inference (embed_models, predict) moved
# out of encoder.training into encoder.inference, and evals_by_model into encoder.data; training's
# __all__ no longer lists them (it imports them for validation, but the project imports them from
# their own modules).
ENCODER_MODULES = {
    "encoder.inference": {"embed_models", "predict", "MAX_BATCH_TOKENS"},
    "encoder.training": {"TrainConfig", "TrainResult", "TrainingError", "Validation", "Progress", "Selector",
                         "train_locus", "train_step", "validate", "noisy_projections", "recommended_config",
                         "embedding_spread", "collapse_warnings"},
}


def test_encoder_training_and_inference_all_are_pinned():
    import importlib

    for name, pinned in ENCODER_MODULES.items():
        module = importlib.import_module(name)
        assert set(module.__all__) == pinned, name
        for attr in module.__all__:
            assert getattr(module, attr) is not None
    assert "evals_by_model" in importlib.import_module("encoder.data").__all__


# What only the home's own process does: the client has every other public method of Registry.
LOCAL_ONLY = {"check", "compact", "distance", "embed_all", "evaluate", "fit_fingerprints", "home", "import_path",
              "info", "map", "migrate", "open", "query_encoder", "resolve", "select_models", "set_query_encoder",
              "store", "train"}


def test_the_client_has_registrys_methods_but_the_local_ones():
    from registry.api import Registry
    from registry.client import AsyncRegistryClient, RegistryClient

    public = {name for name in dir(Registry) if not name.startswith("_")}
    for client, close in ((RegistryClient, "close"), (AsyncRegistryClient, "aclose")):
        mine = {name for name in dir(client) if not name.startswith("_")}
        assert public - mine == LOCAL_ONLY, client.__name__
        assert mine - public == {close, "health", "job", "generation"}, client.__name__  # generation: reads after writes
