"""Plain evaluation tables: JSON Lines (.jsonl) or Parquet (.parquet), one evaluation per row.

    model     the model's name, its key in the registry
    score     a number in [0, 1]: a JSON number, a numeric Parquet column. A boolean (`true`) or a
              string (`"0.5"`) is refused naming the line (row) and `score`, as the HTTP API's JSON
              body refuses it; only CSV cells (add-model), text by nature, are parsed as numbers
    query     the query's text     } at least one of the two per row
    query_id  the query's id       }
    task      optional

A row with text and no id gets the id query_id_for_text(text) ("t:" and a hash of the text), so the
same text always lands on the same query. A row with an id and no text refers to a query already in
the store: the batch carries no Query for it, and the store-level check (elsewhere) refuses ids it
does not hold. A row with both adds the Query. Every id, given or derived, is prefixed with
id_prefix.

JSON Lines: one object per line, blank lines skipped; errors name the line. Parquet: errors name the
row, counted from 1 and passed as `line`. Text columns may be strings or bytes (bytes must be
UTF-8). The same query id with two different texts is refused naming both rows; the same (model,
query) twice keeps the last score and says so in batch.warnings.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from registry.errors import InputError
from registry.limits import check_evaluations_file, check_file_size, check_model_name, check_utf8
from registry.importers._common import (
    ImportBatch, parse_score, parse_typed_score, query_id_for_text, read_jsonl, required_text,
)
from registry.records import ModelRecord, Query

SUFFIXES = (".jsonl", ".parquet")
KIND_OF_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}  # detect_format reads it too
_TEXT_COLUMNS = ("model", "query", "query_id", "task")
_EVALS_COLUMNS = ("query", "query_id", "score", "task")  # what add-model reads of a file
_NAMED = 5  # queries a warning names before it counts the rest


def looks_like(path: Path) -> bool:
    """A .jsonl or .parquet file whose first row (or schema) has `model` and `score`.

    The columns are checked, not only the suffix, because lm-eval's samples files are .jsonl too.
    """
    if not path.is_file() or path.suffix.lower() not in SUFFIXES:
        return False
    if path.suffix.lower() == ".parquet":
        columns = _parquet_columns(path)
    else:
        columns = _first_jsonl_keys(path)
    return columns is not None and {"model", "score"} <= columns and bool({"query", "query_id"} & columns)


def read_tabular(path: Path, *, id_prefix: str = "", kind: str | None = None) -> ImportBatch:
    """Rows of model, query/query_id, score[, task] from a JSON Lines or Parquet file: `kind` "jsonl" or
    "parquet" as the user named it (`--format`), else told by the file's suffix."""
    check_evaluations_file(path, expected=" or ".join(SUFFIXES))
    kind = kind or KIND_OF_SUFFIX.get(path.suffix.lower())
    if kind == "jsonl":
        rows = _jsonl_rows(path)
    elif kind == "parquet":
        rows = _parquet_rows(path)
    else:
        raise InputError(f"expected a {' or '.join(SUFFIXES)} file (or name the format: --format jsonl or "
                         "--format parquet)", file=path)

    batch = ImportBatch(source=f"{kind}:{path.resolve()}")
    task_conflicts = len(_add_rows(batch, rows, path=path, id_prefix=id_prefix, kind=kind))

    for name in dict.fromkeys(batch.eval_models):
        batch.models.append(ModelRecord(name=name))
    if task_conflicts:
        batch.warnings.append(
            f"{path}: {task_conflicts} rows give a query another task than its first row; the first task was kept"
        )
    dropped = batch.drop_duplicate_evaluations()
    if dropped:
        batch.warnings.append(f"{path}: {dropped} repeated (model, query) rows; the last score of each was kept")
    return batch


def read_model_evaluations(path: Path, model: str, *, id_prefix: str = "") -> ImportBatch:
    """One model's evaluations (`registry add-model NAME --evals FILE`): CSV, JSONL or Parquet with
    columns `query` and/or `query_id`, `score`, optional `task`; every row belongs to `model`."""
    check_evaluations_file(path)
    suffix = path.suffix.lower()
    columns: dict[str, None] = {}  # every column (JSON Lines: key) the file has, in order
    if suffix == ".csv":
        from registry.importers._common import read_csv

        rows, kind = ((line, {k: (v if v != "" else None) for k, v in row.items()}) for line, row in
                      read_csv(path, ("score",), one_of=("query", "query_id"))), "csv"
    elif suffix == ".jsonl":
        rows, kind = _jsonl_rows(path, required=("score",)), "jsonl"
    elif suffix == ".parquet":
        rows, kind = _parquet_rows(path, required=("score",)), "parquet"
        columns.update(dict.fromkeys(_parquet_columns(path) or ()))
    else:
        raise InputError("expected a .csv, .jsonl or .parquet file of query/query_id, score[, task]", file=path)
    batch = ImportBatch(source=f"add-model:{path.resolve()}")

    def owned():
        for line, row in rows:
            columns.update(dict.fromkeys(row))
            yield line, {**row, "model": model}

    conflicts = _add_rows(batch, owned(), path=path, id_prefix=id_prefix, kind=kind)
    if not batch.n_evaluations:
        raise InputError("no evaluations", file=path)
    batch.refuse_conflicting_scores()
    unread = [column for column in columns if column not in _EVALS_COLUMNS]
    if unread:
        batch.warnings.append(f"{path.name}: column(s) {', '.join(map(str, unread))} not read; "
                              f"add-model reads {', '.join(_EVALS_COLUMNS)}")
    where = _where(kind)
    named = [f"{path.name} {where} {line}: query {batch.as_given(query_id)} is given task {task!r} here and "
             + (f"task {first!r}" if first else "no task") + f" on {where} {first_line}; the first is kept"
             for query_id, task, line, first, first_line in conflicts[:_NAMED]]
    if len(conflicts) > _NAMED:
        named.append(f"{path.name}: {len(conflicts) - _NAMED} more rows give a query another task than its "
                     "first row; the first is kept")
    batch.warnings.extend(named)
    dropped = batch.drop_duplicate_evaluations()
    if dropped:
        batch.warnings.append(f"{path.name}: {dropped} repeated queries with the same score; one of each was kept")
    return batch


def _add_rows(
    batch: ImportBatch, rows: Iterator[tuple[int, dict[str, Any]]], *, path: Path, id_prefix: str, kind: str
) -> list[tuple[str, str, int, str, int]]:
    """Adds every row's query and evaluation. Returns the rows that give a query of this file a task other
    than the one it got (its first row with text), as (query id, task, line, that task or "", that line); a
    query known only by id keeps its stored task (the landing warns, `ImportBatch.stored_task_warnings`).

    Scores: CSV cells are text, parsed as numbers; JSON Lines values and Parquet cells must be numbers
    (a boolean or a string is refused, see parse_typed_score)."""
    try:
        return _add_each_row(batch, rows, path=path, id_prefix=id_prefix, kind=kind)
    except InputError as err:
        if kind == "parquet" and err.line is not None and err.unit != "row":
            # Parquet has rows, not lines: say so, as the rest of the Parquet errors do.
            raise InputError(err.problem, file=err.file, line=err.line, field=err.field, unit="row") from None
        raise


def _add_each_row(
    batch: ImportBatch, rows: Iterator[tuple[int, dict[str, Any]]], *, path: Path, id_prefix: str, kind: str
) -> list[tuple[str, str, int, str, int]]:
    file_name = str(path)
    if kind == "parquet":
        batch.row_files.add(file_name)
    firsts: dict[str, tuple[str, str, int]] = {}  # query id -> (text, task, line) of its first row with text
    tasked: list[tuple[str, str, int]] = []  # (query id, task, line) of every row that gives a task
    score_of = parse_score if kind == "csv" else parse_typed_score
    for line, row in rows:
        raw = row.get("model")
        # a name as text is checked as given (add-model and HTTP refuse " sp ", so must an import: the
        # strip of required_text silently renamed it); an integer id is written as text, as for queries
        model = check_model_name(raw if isinstance(raw, str) and raw.strip() else
                                 required_text(raw, file=path, line=line, field="model"), file=path,
                                 line=line, field="model")  # here, where the line is known
        score = score_of(row.get("score"), file=path, line=line, field="score")
        text = _optional_text(row.get("query"), file=path, line=line, field="query")
        given_id = _optional_text(row.get("query_id"), file=path, line=line, field="query_id")
        task = _optional_text(row.get("task"), file=path, line=line, field="task") or ""
        if given_id is not None:
            query_id = id_prefix + given_id.strip()
        elif text is not None:
            query_id = id_prefix + query_id_for_text(text)
        else:
            raise InputError("no query text and no query_id", file=path, line=line, field="query")

        if text is not None:  # an id alone names a query already in the store: no Query for it
            first = firsts.get(query_id)
            if first is None:
                firsts[query_id] = (text, task, line)
                batch.add_query(Query(id=query_id, text=text, task=task), file=file_name, line=line, field="query")
            elif first[0] != text:
                raise InputError(
                    f"query_id {query_id!r} has a different text on {_where(kind)} {first[2]}",
                    file=path, line=line, field="query",
                )
        if task:
            tasked.append((query_id, task, line))
        batch.add_evaluation(model, query_id, score, file=file_name, line=line, task=task or None)
    return [(q, task, line, firsts[q][1], firsts[q][2]) for q, task, line in tasked
            if q in firsts and task != firsts[q][1]]


def _optional_text(value: Any, *, file: Path, line: int, field: str) -> str | None:
    """A text cell: None when absent or blank; anything but a string (or an id number) is refused."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"expected text, found {type(value).__name__}", file=file, line=line, field=field)
    if isinstance(value, int):
        if field != "query_id":
            raise InputError("expected text, found a number", file=file, line=line, field=field)
        return str(value)
    check_utf8(value, file=file, line=line, field=field)  # a lone surrogate escape: not storable text
    return value if value.strip() else None


def _where(kind: str) -> str:
    return "row" if kind == "parquet" else "line"


def _jsonl_rows(path: Path, required=("model", "score")) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, row in read_jsonl(path):
        for column in required:
            if column not in row:
                raise InputError(
                    f"missing field; the line has {', '.join(row) or 'no fields'}", file=path, line=line, field=column
                )
        if "query" not in row and "query_id" not in row:
            raise InputError("missing field (query or query_id)", file=path, line=line, field="query")
        yield line, row


def _parquet_rows(path: Path, required=("model", "score")) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a Parquet file as (row number from 1, row); text cells decoded strictly."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.stat().st_size == 0:
        raise InputError("file is empty", file=path)
    check_file_size(path)
    try:
        names = pq.read_schema(path).names
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # pyarrow's own refusal dumps its scanner's schema
            raise InputError(f"column(s) {', '.join(map(repr, twice))} appear more than once in the file",
                             file=path, field=twice[0])
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"not a readable Parquet file ({err})", file=path) from None
    names = table.column_names
    for column in required:
        if column not in names:
            raise InputError(
                f"missing column; the file has {', '.join(names) or 'no columns'}", file=path, field=column
            )
    if "query" not in names and "query_id" not in names:
        raise InputError(
            f"missing column (query or query_id); the file has {', '.join(names)}", file=path, field="query"
        )
    if table.num_rows == 0:
        raise InputError("no rows", file=path)

    columns = {
        name: _column_values(table.column(name), path=path, name=name)
        for name in ("model", "score", "query", "query_id", "task")
        if name in names
    }
    for index in range(table.num_rows):
        yield index + 1, {name: values[index] for name, values in columns.items()}


def _column_values(column: Any, *, path: Path, name: str) -> list[Any]:
    """A column as Python values. String columns are read as bytes and decoded here, because
    pyarrow reads invalid UTF-8 into a string column without complaint and only fails, without a
    row number, when converting it."""
    import pyarrow as pa

    kind = column.type
    if name not in _TEXT_COLUMNS or not (
        pa.types.is_string(kind) or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
    ):
        return column.to_pylist()
    if pa.types.is_string(kind):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(kind):
        column = column.cast(pa.large_binary())
    values = column.to_pylist()
    for index, raw in enumerate(values):
        if raw is None:
            continue
        try:
            values[index] = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(
                f"text is not UTF-8 (byte 0x{raw[err.start]:02x} at offset {err.start})",
                file=path, line=index + 1, field=name, unit="row",
            ) from None
    return values


def _parquet_columns(path: Path) -> set[str] | None:
    try:
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 - any unreadable file simply is not this format
        return None


def _first_jsonl_keys(path: Path) -> set[str] | None:
    import json

    try:
        with path.open("rb") as handle:
            for raw in handle:
                if raw.strip():
                    value = json.loads(raw.decode("utf-8"))
                    return set(value) if isinstance(value, dict) else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return None
