"""Errors the registry raises for bad input or bad state.

Every input error names where the problem is (file, line, field) so that a user can fix the file
without guessing; the CLI prints the message and exits non-zero.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["RegistryError", "InputError", "NotFoundError"]


class RegistryError(Exception):
    """Base class: a problem the user can act on (as opposed to a bug)."""


class InputError(RegistryError):
    """Bad input data. The message says file, line or field, and what is wrong."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        where = []
        if self.file is not None:
            where.append(self.file)
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{', '.join(where)}: {problem}" if where else problem)


class NotFoundError(RegistryError):
    """A named thing (model, task, encoder) is not in the store."""

    @classmethod
    def model(cls, name: str, known: list[str]) -> "NotFoundError":
        """No model called `name`: the message names the closest existing names."""
        import difflib

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
        return cls(f"no model named {name!r} in the registry" + (f"; closest: {', '.join(close)}" if close else ""))
