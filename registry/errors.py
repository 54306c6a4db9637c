"""The registry's errors: defined once, in `indexing.errors` (the bottom layer, so that `encoder/` and
`indexing/` raise them without importing `registry`), and re-exported here and from `registry`."""
from __future__ import annotations

from indexing.errors import InputError, NotFoundError, RegistryError

__all__ = ["RegistryError", "InputError", "NotFoundError"]
