"""Where the registry lives: `--home DIR`, else `$LOCUS_HOME`, else `~/.locus`."""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["resolve_home", "HOME_ENV", "GENERATION_FILE", "JOURNAL_FILE"]

HOME_ENV = "LOCUS_HOME"
GENERATION_FILE = "generation"  # changes with every finished store transaction
JOURNAL_FILE = "journal.json"  # present while a transaction is open (or its writer died)


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    if home is not None:
        return Path(home).expanduser()
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    return Path.home() / ".locus"
