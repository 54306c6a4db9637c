"""Documented limits on what the registry stores (README, "Limits"). Each is checked where the data
enters (importers, `add-model`/`refine`, the query text of `route`), with an error naming the file, the
line and the field, before anything is written.

The numbers leave real data far inside them (MMLU-Pro's longest question is 5,276 characters, its
evaluations file 4 MB, 12,032 evaluations per model) and keep out what is surely a mistake: a name
that breaks every table it is printed in, a whole document pasted as one query, a file that would not
fit in memory.
"""
from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from registry.errors import InputError

__all__ = ["MAX_NAME_CHARS", "MAX_QUERY_CHARS", "MAX_ENDPOINT_CHARS", "MAX_METADATA_TEXT_CHARS", "MAX_FILE_BYTES", "MAX_EVALS_PER_MODEL", "MAX_WILLINGNESS_TO_PAY",
           "DEFAULT_TASK",
           "check_model_name", "check_query_text", "check_task_name", "check_utf8", "lone_surrogate",
           "check_file_size", "check_evaluations_file"]

MAX_NAME_CHARS = 200  # a model's name (Hugging Face repo ids are at most 96 characters)
MAX_QUERY_CHARS = 100_000  # one query's text; the query encoders read at most a few hundred tokens of it
# metadata text: family, provider, licence, access and each tag as long as a name (MAX_NAME_CHARS), and a key too
MAX_ENDPOINT_CHARS = 2_000  # an endpoint URL (browsers take about this much)
MAX_METADATA_TEXT_CHARS = 10_000  # a free-form metadata value (a note, a description)
MAX_FILE_BYTES = 2 * 1024**3  # one input file (CSV, JSON Lines, Parquet, .npy), read whole into memory
MAX_EVALS_PER_MODEL = 1_000_000  # stored evaluations of one model (an embedding reads them all)
# route's λ, in P(correct) per USD: past it every model's λ·cost dwarfs P(correct) anyway (at $1e-6 a call,
# 1e12 makes a millionth of a cent worth a whole P(correct)); below it, λ·cost stays finite for any stored price
MAX_WILLINGNESS_TO_PAY = 1e12
DEFAULT_TASK = "default"  # the task of a query whose file gives none


def check_model_name(name: str, *, file: str | Path | None = None, line: int | None = None,
                     field: str = "name") -> str:
    """A model name as given, or an InputError naming `field` (not text, empty, padded, too long, control
    characters, invisible format characters: zero-width, bidi overrides). The one check of a name: the CLI,
    the importers and every HTTP path use it."""
    if not isinstance(name, str):
        raise InputError(f"the model name must be text, not {type(name).__name__}", file=file, line=line, field=field)
    if not name.strip():
        raise InputError("the model name is empty", file=file, line=line, field=field)
    if name != name.strip():
        raise InputError(f"the model name {name[:60]!r} has leading or trailing spaces", file=file, line=line,
                         field=field)
    if len(name) > MAX_NAME_CHARS:
        raise InputError(f"model name of {len(name):,} characters (starting {name[:40]!r}); the limit is "
                         f"{MAX_NAME_CHARS}", file=file, line=line, field=field)
    check_utf8(name, file=file, line=line, field=field)
    if _first_of(name, LINE_BREAKING) is not None:  # line breaks (U+2028 too), tabs, NUL, escapes, DEL, C1
        raise InputError(f"model name {name[:60]!r} holds a control character (a line break, tab, NUL, ...)",
                         file=file, line=line, field=field)
    if name in (".", ".."):  # a URL path segment that clients normalise away: /v1/models/. is /v1/models/
        raise InputError(f"model name {name!r} is a path segment HTTP clients remove: choose another name",
                         file=file, line=line, field=field)
    # Format characters (Unicode category Cf): zero-width spaces and joiners, bidi overrides and isolates,
    # soft hyphens, BOMs. Invisible, they make two names that print alike differ (or one print reversed).
    invisible = _first_of(name, ("Cf",))
    if invisible is not None:
        what = unicodedata.name(invisible, "a format character")
        raise InputError(f"model name {name[:60]!r} holds the invisible formatting character U+{ord(invisible):04X} "
                         f"({what}) at position {name.index(invisible) + 1}: zero-width and bidirectional formatting "
                         "characters are refused in names", file=file, line=line, field=field)
    return name


def check_query_text(text: str, *, file: str | Path | None = None, line: int | None = None,
                     field: str = "text") -> str:
    if len(text) > MAX_QUERY_CHARS:
        raise InputError(f"query text of {len(text):,} characters; the limit is {MAX_QUERY_CHARS:,}",
                         file=file, line=line, field=field)
    check_utf8(text, file=file, line=line, field=field)
    return text


def check_task_name(task: str, *, file: str | Path | None = None, line: int | None = None,
                    field: str = "task") -> str:
    """A query's task as given, or an InputError naming `field`: the rules of a model name's characters
    (no control or invisible format character, storable text) and its length. A task is printed in tables
    and compared as a key: a line break broke `stats`, a trailing NUL made it unequal to itself in numpy."""
    if len(task) > MAX_NAME_CHARS:
        raise InputError(f"task name of {len(task):,} characters; the limit is {MAX_NAME_CHARS}",
                         file=file, line=line, field=field)
    check_utf8(task, file=file, line=line, field=field)
    bad = _first_of(task, UNPRINTABLE)
    if bad is not None:
        raise InputError(f"task {task[:60]!r} holds U+{ord(bad):04X} ({unicodedata.name(bad, 'a control character')}), "
                         "a control or invisible formatting character", file=file, line=line, field=field)
    return task


# Unicode categories refused in names: Cc (controls: line breaks, tabs, NUL, escapes), Zl and Zp (the line and
# paragraph separators U+2028 and U+2029, line breaks to str.splitlines and JavaScript); UNPRINTABLE adds Cf
# (invisible format characters: zero-width, bidi overrides)
LINE_BREAKING = ("Cc", "Zl", "Zp")
UNPRINTABLE = ("Cc", "Cf", "Zl", "Zp")


def first_unprintable(text: str, *, breaks_ok: bool = False) -> str | None:
    """The first control, line-separator or invisible format character of `text`, or None; `breaks_ok`: line
    breaks, tabs and format characters pass (free text), NUL, escapes and the other controls do not."""
    if breaks_ok:
        return next((c for c in text if unicodedata.category(c) == "Cc" and c not in "\n\r\t"), None)
    return _first_of(text, UNPRINTABLE)


def _first_of(text: str, categories: tuple[str, ...]) -> str | None:
    """The first character of `text` in these Unicode categories (Cc control, Cf invisible format), or None."""
    return next((c for c in text if unicodedata.category(c) in categories), None)


LONE_SURROGATE = "a lone surrogate (half of a UTF-16 pair), which is not a character"


def lone_surrogate(text: str) -> int | None:
    """The position of the first lone surrogate in `text` (a JSON escape such as \\udfff with no pair: no
    character, and no UTF-8 can hold it), or None when the text can be stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return err.start
    return None


def check_utf8(text: str, *, file: str | Path | None = None, line: int | None = None, field: str = "text") -> str:
    """Text that can be stored, or an InputError naming the field, before anything is written."""
    at = lone_surrogate(text)
    if at is not None:
        raise InputError(f"holds U+{ord(text[at]):04X}, {LONE_SURROGATE}", file=file, line=line, field=field)
    return text


EVALUATION_FILES = ".csv, .jsonl or .parquet"  # what `add-model` / `refine --evals` read


def check_evaluations_file(path: str | Path, *, expected: str = EVALUATION_FILES) -> None:
    """An InputError unless `path` is a regular file: none there, a directory, or a pipe (a shell's `<(...)`)
    or device, which the readers cannot take (the format is told by the file's suffix; Parquet seeks)."""
    path = Path(path)
    if not path.exists():
        raise InputError("no such file", file=path)
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file (a pipe or a device)"
        raise InputError(f"{kind}; the evaluations are read from a {expected} file", file=path)


def check_file_size(path: str | Path) -> None:
    try:
        size = os.stat(path).st_size
    except OSError:
        return  # the reader says "no such file" in its own words
    if size > MAX_FILE_BYTES:
        raise InputError(f"file of {size / 1024**3:.1f} GiB; the limit is {MAX_FILE_BYTES / 1024**3:.0f} GiB "
                         "per file (split it and import the parts)", file=path)
