"""Where the registry lives (`--home DIR`, else `$LOCUS_HOME`, else `~/.locus`), and the two files
through which readers learn about writers without opening LanceDB.

The store's multi-table journal (`indexing.store.Store.transaction`) writes both: `journal.json` while a
transaction is open (or its writer died), and a new `generation` token when one finishes. Whatever is
derived from the tables and cached beside them (the FAISS index, `indexing.model_index`) is current
when no transaction is open and the token has not changed since it was saved.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["resolve_home", "HOME_ENV", "GENERATION_FILE", "JOURNAL_FILE", "generation", "transaction_open"]

HOME_ENV = "LOCUS_HOME"
GENERATION_FILE = "generation"  # changes with every finished store transaction
JOURNAL_FILE = "journal.json"  # present while a transaction is open (or its writer died)


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    if home is not None:
        return Path(home).expanduser()
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    return Path.home() / ".locus"


def generation(home: Path) -> str | None:
    """The token of the last finished transaction (None before the first one)."""
    try:
        return (Path(home) / GENERATION_FILE).read_text()
    except OSError:
        return None


def transaction_open(home: Path) -> bool:
    """A writer is inside a transaction, or died inside one (the next open of the store rolls it back)."""
    return (Path(home) / JOURNAL_FILE).exists()
