"""The one error hierarchy of locus-registry.

It lives at the bottom of the layering (cli -> registry -> encoder / indexing) so that every layer can
raise it without importing a layer above: `encoder/` and `indexing/` import this module, `registry`
re-exports it (`registry.RegistryError`, ...). The module imports nothing of the project, and
`indexing/__init__.py` is empty, so importing it costs nothing (no LanceDB, no FAISS, no torch).

Every error names where the problem is (file, line, field, or the option as the user typed it) so
that a user can act without guessing; the CLI prints the message (or, under `--json`, `to_dict()`) and
exits non-zero. Errors that are not these (a ValueError, a KeyError) are bugs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["RegistryError", "InputError", "NotFoundError"]


class RegistryError(Exception):
    """Base class: a problem the user can act on (as opposed to a bug): bad state, a refused operation."""

    # Set by registry.client on an error the service answered: its HTTP status, its error type ("StateBehind",
    # "Conflict", ...) and Retry-After in seconds when it gave one. None for an error raised here.
    status: int | None = None
    error_type: str | None = None
    retry_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The error as the CLI's `--json` prints it (under "error") and the HTTP service serves it."""
        return {"type": type(self).__name__, "message": str(self)}


class InputError(RegistryError):
    """Bad input: an argument, a file, a row. The message says file, line, field or option, and what is
    wrong. `field` is the argument as the Python caller spelled it (`targets`, `k`, `where`); the CLI
    re-labels it with the option the user typed (`--task`, `-k`, `--where`) through `for_option`."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        option: str | None = None,
        unit: str = "line",
    ) -> None:
        self.problem = problem
        self.unit = unit  # what `line` counts: "row" in a Parquet file, which has no lines
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        self.option = option
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.file is not None:
            where.append(self.file)
        if self.line is not None:
            where.append(f"{self.unit} {self.line}")
        if self.option is not None:
            where.append(f"option {self.option}" if self.option.startswith("-") else f"argument {self.option}")
        elif self.field is not None:
            where.append(f"field '{self.field}'")
        return f"{', '.join(where)}: {self.problem}" if where else self.problem

    def for_option(self, option: str) -> "InputError":
        """The same error, named by the command-line option the user typed instead of the field (a
        message that begins with the field's name drops it: "--draws: must be ...", not "random_draws must")."""
        problem = self.problem
        if self.field and problem.startswith(self.field + " "):
            problem = problem[len(self.field) + 1:]
        return InputError(problem, file=self.file, line=self.line, field=self.field, option=option, unit=self.unit)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        for key in ("option", "field", "file", "line"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


class NotFoundError(RegistryError):
    """A named thing (model, task, encoder, version) is not in the store. `field`, when known, is the
    argument the name came in (`exclude`, `b`); the CLI then names the option the user typed."""

    def __init__(self, problem: str, *, field: str | None = None, option: str | None = None) -> None:
        self.problem, self.field, self.option = problem, field, option
        super().__init__(f"{'option' if option.startswith('-') else 'argument'} {option}: {problem}"
                         if option else problem)

    def for_option(self, option: str) -> "NotFoundError":
        return NotFoundError(self.problem, field=self.field, option=option)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.update({k: getattr(self, k) for k in ("option", "field") if getattr(self, k) is not None})
        return out

    @classmethod
    def model(cls, name: str, known: list[str], *, field: str | None = None) -> "NotFoundError":
        """No model called `name`: the message names the closest existing names."""
        import difflib

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.4) if isinstance(name, str) else []
        return cls(f"no model named {name!r} in the registry" + (f"; closest: {', '.join(close)}" if close else ""),
                   field=field)

    @classmethod
    def removed(cls, name: str, *, field: str | None = None) -> "NotFoundError":
        """`name` was a model and was removed: the message says how to bring it back."""
        import shlex

        return cls(f"model {name!r} was removed (`registry restore {shlex.quote(name)}` brings it back)", field=field)
