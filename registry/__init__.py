"""locus-registry: a registry of language models embedded with LOCUS (arXiv 2601.21082).

Names are resolved on first use (PEP 562): the storage layer imports `registry.errors`, and a lazy
package keeps that from being a cycle, and keeps `import registry` cheap for the CLI.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = [
    "Registry",
    "ImportReport",
    "Query",
    "Evaluation",
    "ModelRecord",
    "RegistryError",
    "InputError",
    "NotFoundError",
]

_WHERE = {
    "Registry": "registry.api",
    "ImportReport": "registry.ingest",
    "Query": "registry.records",
    "Evaluation": "registry.records",
    "ModelRecord": "registry.records",
    "RegistryError": "registry.errors",
    "InputError": "registry.errors",
    "NotFoundError": "registry.errors",
}

if TYPE_CHECKING:
    from registry.api import Registry
    from registry.errors import InputError, NotFoundError, RegistryError
    from registry.ingest import ImportReport
    from registry.records import Evaluation, ModelRecord, Query


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'registry' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
