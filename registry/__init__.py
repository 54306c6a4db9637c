"""locus-registry: a registry of language models embedded with LOCUS (arXiv 2601.21082).

The public API: `Registry`, the typed results its operations return (`registry.results`), the data
model (`Query`, `Evaluation`, `ModelRecord`) and the errors (`RegistryError` and its subclasses). A plain
package: importing it loads pydantic and these small modules, not LanceDB, FAISS or torch (those load
when an operation needs them).
"""
from __future__ import annotations

from registry.api import Registry
from registry.errors import InputError, NotFoundError, RegistryError
from registry.records import Evaluation, ModelRecord, Query
from registry.results import (
    AuditReport,
    Agreement,
    CheckResult,
    Cluster,
    CompactReport,
    ClustersResult,
    Comparison,
    DemoReport,
    EmbedReport,
    FingerprintReport,
    ErrorDetail,
    ErrorResponse,
    EvaluationReport,
    Fallback,
    FamilyAgreement,
    HistoryEntry,
    HomeInfo,
    ImportReport,
    MapResult,
    ModelChange,
    ModelHistory,
    ModelInfo,
    ModelList,
    Neighbour,
    PortfolioResult,
    ProfileResult,
    RankedModel,
    RemoveResult,
    RestoreResult,
    RouteDecision,
    SearchResult,
    Stats,
    TaskComparison,
    TrainReport,
)

__all__ = [
    # the API
    "Registry",
    # the data model
    "Query",
    "Evaluation",
    "ModelRecord",
    # errors
    "RegistryError",
    "InputError",
    "NotFoundError",
    # results
    "Agreement",
    "AuditReport",
    "CheckResult",
    "CompactReport",
    "Cluster",
    "ClustersResult",
    "Comparison",
    "DemoReport",
    "EmbedReport",
    "FingerprintReport",
    "ErrorDetail",
    "ErrorResponse",
    "EvaluationReport",
    "Fallback",
    "FamilyAgreement",
    "HistoryEntry",
    "HomeInfo",
    "ImportReport",
    "MapResult",
    "ModelChange",
    "ModelHistory",
    "ModelInfo",
    "ModelList",
    "Neighbour",
    "PortfolioResult",
    "ProfileResult",
    "RankedModel",
    "RemoveResult",
    "RestoreResult",
    "RouteDecision",
    "SearchResult",
    "Stats",
    "TaskComparison",
    "TrainReport",
]
