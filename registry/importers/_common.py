"""What every importer shares: the batch it returns and strict, line-numbered file reading."""
from __future__ import annotations

import csv
import hashlib
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping

import numpy as np

from registry.errors import InputError
from registry.limits import (MAX_NAME_CHARS, check_file_size, check_model_name, check_query_text, check_task_name,
                             check_utf8)
from registry.records import ModelRecord, Query, check_score

csv.field_size_limit(1 << 30)  # query texts with ten options and code blocks exceed the 128 KiB default


def text_hash(text: str) -> str:
    """Key of the query-vector cache: the same text is encoded once per encoder, whatever its id."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


TEXT_ID_PREFIX = "t:"  # the ids `query_id_for_text` makes


def query_id_for_text(text: str) -> str:
    """A stable id for formats whose rows carry a query text but no id."""
    return TEXT_ID_PREFIX + text_hash(text)[:16]


@dataclass
class ImportBatch:
    """Everything one import brings, validated in itself, not yet checked against the store.

    Evaluations are columns (one entry per evaluation) because real imports hold hundreds of
    thousands of them; `eval_files[eval_file_index[i]]`, line `eval_lines[i]`, is where evaluation i
    came from, so that a later check against the store can still name the file and line.
    """

    source: str
    queries: list[Query] = field(default_factory=list)
    query_origins: list[tuple[str, int]] = field(default_factory=list)  # (file, line) per query
    models: list[ModelRecord] = field(default_factory=list)
    eval_models: list[str] = field(default_factory=list)
    eval_queries: list[str] = field(default_factory=list)
    eval_scores: list[float] = field(default_factory=list)
    eval_lines: list[int] = field(default_factory=list)
    eval_file_index: list[int] = field(default_factory=list)
    eval_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # query id -> (task, file, line): the first task a row gives each query (rows without a task are not kept)
    given_tasks: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    row_files: set[str] = field(default_factory=set)  # files whose `line` counts rows (Parquet)

    def add_query(self, query: Query, *, file: str, line: int, field: str = "text") -> None:
        check_query_text(query.text, file=file, line=line, field=field)
        if query.task:
            check_task_name(query.task, file=file, line=line)
        self.queries.append(query)
        self.query_origins.append((file, line))

    def add_evaluation(self, model: str, query: str, score: float, *, file: str, line: int,
                       task: str | None = None) -> None:
        """One evaluation; `task`, when the row gives one, is remembered for `stored_task_warnings`."""
        if task is not None and str(task).strip():
            self.given_tasks.setdefault(query, (str(task).strip(), file, line))
        if len(model) > MAX_NAME_CHARS:
            check_model_name(model, file=file, line=line, field="model")
        if not self.eval_files or self.eval_files[-1] != file:
            if file in self.eval_files:
                index = self.eval_files.index(file)
            else:
                self.eval_files.append(file)
                index = len(self.eval_files) - 1
        else:
            index = len(self.eval_files) - 1
        self.eval_models.append(model)
        self.eval_queries.append(query)
        self.eval_scores.append(score)
        self.eval_lines.append(line)
        self.eval_file_index.append(index)

    def tag_models(self, metadata: dict[str, object]) -> None:
        """Give every model of this import the same metadata (e.g. `dataset=bfcl`), over what its
        file says: two datasets imported into one registry stay selectable with `--pool`/`--where`.
        Models that appear only in evaluation rows get a record carrying it too."""
        if not metadata:
            return
        listed = {record.name for record in self.models}
        tagged = []
        for record in self.models:
            try:
                tagged.append(ModelRecord.from_flat(record.name, {**record.metadata(), **metadata}))
            except ValueError as err:
                raise _meta_error(err) from None
        for name in dict.fromkeys(self.eval_models):
            if name not in listed:
                try:
                    tagged.append(ModelRecord.from_flat(name, dict(metadata)))
                except ValueError as err:
                    raise _meta_error(err) from None
        self.models = tagged

    def stored_task_warnings(self, stored_tasks: Mapping[str, str], renamed: Mapping[str, str] | None = None,
                             *, limit: int = 5) -> list[str]:
        """Warnings for the rows whose task differs from the task of the stored query they land on (a stored
        query keeps its task: the row's is not applied). `renamed` maps a batch query id to the stored id it
        lands on (a text already stored under another id). At most `limit` queries are named, then a count."""
        conflicts = []
        for query_id, (task, file, line) in self.given_tasks.items():
            target = (renamed or {}).get(query_id, query_id)
            stored = stored_tasks.get(target)
            if stored is not None and stored != task:
                where = f"{file}, {'row' if file in self.row_files else 'line'} {line}"
                conflicts.append(f"{where}: query {target!r} is stored with task {stored!r}; "
                                 f"the task {task!r} given here was not applied (a stored query keeps its task)")
        if len(conflicts) > limit:
            conflicts[limit:] = [f"{len(conflicts) - limit} more queries are given a task other than their "
                                 "stored one; their stored tasks were kept"]
        return conflicts

    def rename_file(self, old: str, new: str) -> None:
        """Name file `old` as `new` wherever the batch keeps it (an upload spooled by the service is named as
        its client sent it: warnings made from the batch later never show the server's path)."""
        self.eval_files = [new if f == old else f for f in self.eval_files]
        self.query_origins = [(new if f == old else f, line) for f, line in self.query_origins]
        self.given_tasks = {q: (task, new if f == old else f, line) for q, (task, f, line) in self.given_tasks.items()}
        self.row_files = {new if f == old else f for f in self.row_files}

    def where(self, i: int) -> tuple[str, int]:
        return self.eval_files[self.eval_file_index[i]], self.eval_lines[i]

    @property
    def n_evaluations(self) -> int:
        return len(self.eval_scores)

    def scores_array(self) -> np.ndarray:
        return np.asarray(self.eval_scores, dtype=np.float32)

    def refuse_conflicting_scores(self) -> None:
        """One model's evaluations given in one request or file: the same query twice with two
        different scores is refused naming both lines (which one is meant cannot be guessed); the same
        score twice is a harmless repeat, dropped by `drop_duplicate_evaluations`."""
        first: dict[tuple[str, str], int] = {}
        for i, key in enumerate(zip(self.eval_models, self.eval_queries)):
            j = first.setdefault(key, i)
            if j != i and self.eval_scores[j] != self.eval_scores[i]:
                file, line = self.where(i)
                _, earlier = self.where(j)
                raise InputError(f"query {self.as_given(key[1])} is given twice with different scores: line {earlier} "
                                 f"({self.eval_scores[j]:g}) and line {line} ({self.eval_scores[i]:g})",
                                 file=file, line=line, field="score")

    def as_given(self, query_id: str) -> str:
        """A query as the user gave it: its text (shortened) when it came by text and has only the id made
        from the text's hash, else its id."""
        if query_id.startswith(TEXT_ID_PREFIX):
            text = next((q.text for q in self.queries if q.id == query_id), None)
            if text is not None:
                return repr(text if len(text) <= 80 else text[:77] + "...")
        return repr(query_id)

    def land_texts_on_stored(self, stored_by_hash: Mapping[str, str]) -> dict[str, str]:
        """Queries given by text (ids from `query_id_for_text`) whose text is stored under another id: their
        evaluations move to that id, rather than make a second query of the same text (the audit and the
        item table compare by id). Returns batch id -> stored id; the caller stores none of those queries."""
        renamed = {}
        for query in self.queries:
            stored = stored_by_hash.get(text_hash(query.text)) if query.id.startswith(TEXT_ID_PREFIX) else None
            if stored is not None:
                renamed[query.id] = stored
        if renamed:
            self.eval_queries = [renamed.get(q, q) for q in self.eval_queries]
            self.drop_duplicate_evaluations()
        return renamed

    def drop_duplicate_evaluations(self) -> int:
        """Keep the last score of each (model, query) pair, as re-running an evaluation would;
        returns how many earlier rows were dropped."""
        last: dict[tuple[str, str], int] = {}
        for i, key in enumerate(zip(self.eval_models, self.eval_queries)):
            last[key] = i
        if len(last) == len(self.eval_scores):
            return 0
        keep = sorted(last.values())
        dropped = len(self.eval_scores) - len(keep)
        for name in ("eval_models", "eval_queries", "eval_scores", "eval_lines", "eval_file_index"):
            column = getattr(self, name)
            setattr(self, name, [column[i] for i in keep])
        return dropped


def read_utf8(path: Path) -> str:
    """The whole file as text; refuses non-UTF-8 bytes naming the line they are on."""
    check_file_size(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise InputError(
            f"text is not UTF-8 (byte 0x{raw[err.start]:02x} at offset {err.start})",
            file=path,
            line=line,
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise InputError("file is empty", file=path)
    return text


def read_csv(path: Path, required: tuple[str, ...], *,
             one_of: tuple[str, ...] = ()) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV file with a header, as (line number where the row starts, row).

    Refuses an empty file, a file with a header and no rows, missing columns (every one of
    `required`, at least one of `one_of`), rows whose field count differs from the header's, and
    broken quoting: a quoted field never closed, or closed and followed by more text (CSV readers
    otherwise swallow the rows after it into one field and go on with a valid-looking wrong row).
    """
    text = read_utf8(path)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    rows = _csv_rows(reader, path, lambda: start)
    header = next(rows)
    header = [column.strip() for column in header]
    repeated = sorted({column for column in header if header.count(column) > 1})
    if repeated:  # the last one read would win unseen (JSON Lines refuses a repeated key too)
        raise InputError(f"column(s) {', '.join(map(repr, repeated))} appear more than once in the header",
                         file=path, line=1)
    missing = [column for column in required if column not in header]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(missing)}; the header has {', '.join(header)}",
            file=path,
            line=1,
            field=missing[0],
        )
    if one_of and not set(one_of) & set(header):
        raise InputError(f"no {' or '.join(one_of)} column; the header has {', '.join(header)}", file=path, line=1)
    n_rows = 0
    start = reader.line_num + 1
    for row in rows:
        if not row or (len(row) == 1 and not row[0].strip()):
            start = reader.line_num + 1
            continue
        if len(row) != len(header):
            raise InputError(f"{len(row)} fields where the header has {len(header)}", file=path, line=start)
        n_rows += 1
        yield start, dict(zip(header, row))
        start = reader.line_num + 1
    if n_rows == 0:
        raise InputError("no data rows after the header", file=path)


def _csv_rows(reader, path: Path, start: Callable[[], int]) -> Iterator[list[str]]:
    """`reader`'s rows, its quoting errors as InputErrors at the line where the row starts (`start()`)."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            if "expected after" in str(err):
                problem = (f"a quoted field closes at line {reader.line_num} and more text follows the closing quote: "
                           'a quote inside a quoted field is written twice (""), and a quoted field ends at a comma '
                           "or the end of its line")
            elif "end of data" in str(err):
                problem = "a quoted field opened in this row is never closed (the file ends inside it)"
            else:
                problem = f"not CSV this reader takes ({err})"
            raise InputError(problem, file=path, line=start()) from None
        yield row


def parse_score(value: object, *, file: Path | str, line: int, field: str) -> float:
    """A score from text (a CSV cell) or a number; a bool counts as 0/1 (lm-eval logs some metrics as
    booleans: that importer is the one caller that passes them). An empty cell is said to be empty."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError("score is empty, not a number in [0, 1]", file=file, line=line, field=field)
    try:
        return check_score(value)
    except ValueError as err:
        raise InputError(str(err), file=file, line=line, field=field) from None


def parse_typed_score(value: object, *, file: Path | str, line: int, field: str) -> float:
    """A score from a typed format (a JSON Lines value, a Parquet cell): a number in [0, 1]. A boolean
    or a string is refused, as the HTTP API's JSON body refuses them: JSON `true` and `"0.5"` are not
    scores (CSV cells, text by nature, go through `parse_score`)."""
    if value is None:
        raise InputError("score is null, not a number in [0, 1]", file=file, line=line, field=field)
    if isinstance(value, (bool, np.bool_)):  # numpy's too: np.True_ is no number either
        raise InputError(f"score {str(value).lower()} is a boolean, not a number: write 1 or 0",
                         file=file, line=line, field=field)
    if isinstance(value, (str, bytes)):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        hint = ""
        try:
            float(text)
            hint = f": write {text.strip()} without quotes"
        except ValueError:
            pass
        kind = "bytes" if isinstance(value, bytes) else "a string"
        raise InputError(f"score {text!r} is {kind}, not a number{hint}", file=file, line=line, field=field)
    return parse_score(value, file=file, line=line, field=field)


def required_text(value: object, *, file: Path | str, line: int, field: str) -> str:
    """A name or id as text: a JSON Lines or Parquet integer id is written as one; an object, a list, true/false
    or a fraction is refused (`{"a": 1}` became a model named "{'a': 1}")."""
    if isinstance(value, (bool, float, dict, list, tuple)):
        kind = {bool: "true/false", float: "a fraction", dict: "an object"}.get(type(value), "a list")
        raise InputError(f"expected text, not {kind} ({str(value)[:40]})", file=file, line=line, field=field)
    text = "" if value is None else str(value).strip()
    if not text:
        raise InputError("empty value", file=file, line=line, field=field)
    return check_utf8(text, file=file, line=line, field=field)


class DuplicateKey(ValueError):
    """A JSON object that names one key twice (`unique_keys`)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r} appears more than once in one JSON object")
        self.key = key


def repeated_key(pairs) -> tuple[str, int] | None:
    """(the first key given more than once among (key, value) `pairs`, how many times), or None."""
    counts = Counter(key for key, _ in pairs)
    return next(((key, counts[key]) for key, _ in pairs if counts[key] > 1), None)


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """`json.loads(..., object_pairs_hook=unique_keys)`: `{"score": 1, "score": 0}` is valid JSON whose
    meaning no reader agrees on (RFC 8259: names SHOULD be unique), and Python's keeps the last value
    unsaid; it is refused instead (DuplicateKey)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise DuplicateKey(repeated_key(pairs)[0])
    return obj


def json_limit_problem(err: ValueError) -> str:
    """What a JSON reader says of a ValueError that is not a JSONDecodeError: Python's limit of 4,300 digits
    in an integer, without its advice to raise the limit (the reader's Python, not the writer's file)."""
    return f"not JSON this reader takes: {str(err).split(';')[0]}"


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Objects of a JSON Lines file as (line number, object); blank lines are skipped.

    Refuses non-UTF-8 text and an empty file (as read_utf8), a line that is not JSON, a line that is not
    a JSON object, and an object that names a key twice.
    """
    import json  # local: only the JSON Lines importers need it

    text = read_utf8(path)
    # Split on "\n" only: str.splitlines() also splits on U+2028 and friends, which JSON strings
    # written with ensure_ascii=False may hold raw.
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw, object_pairs_hook=unique_keys)
        except DuplicateKey as err:
            raise InputError(str(err), file=path, line=number, field=err.key) from None
        except json.JSONDecodeError as err:
            raise InputError(f"not JSON ({err.msg} at column {err.colno})", file=path, line=number) from None
        except RecursionError:
            raise InputError("not JSON this reader takes: nested too deeply", file=path, line=number) from None
        except ValueError as err:
            raise InputError(json_limit_problem(err), file=path, line=number) from None
        if not isinstance(value, dict):
            raise InputError(f"expected a JSON object, found {type(value).__name__}", file=path, line=number)
        yield number, value


def _meta_error(err: ValueError) -> InputError:
    """The import's metadata (`--meta`) refused, in one line naming the key (not pydantic's dump)."""
    from registry.records import validation_problem

    key, message = validation_problem(err)
    named = key is None or key == "extra" or message.startswith(f"{key}=")
    return InputError(message if named else f"{key}: {message}", field="meta")
