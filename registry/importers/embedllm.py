"""EmbedLLM's correctness CSVs (huggingface.co/datasets/RZ412/EmbedLLM), one row per evaluation:

    prompt_id, model_id, model_name, label, prompt, category_id, category

PATH is one such CSV, or a directory holding any of train.csv, val.csv and test.csv (read in that
order) and optionally model_order.csv (model_id, model_name). question_order.csv is not read:
every row carries its prompt text. A single CSV also uses a model_order.csv lying beside it.

Query id = id_prefix + prompt_id, text = prompt, task = category (empty when there is no category
column). The model's key in the registry is model_name; model_id only serves to name rows whose
model_name is empty. `label` is the score: 0/1, or a real in [0, 1].

Quirks of the published files, handled here:
- the same (prompt, model) pair on several rows: the last row wins (a later split file wins over
  an earlier one) and the count is reported in batch.warnings;
- an empty model_id: the row is keyed by its model_name, as every row is;
- an empty model_name: it is taken from another row with the same model_id, or from
  model_order.csv; a row whose model cannot be named this way is refused (file, line, field);
- the same prompt_id with two different prompt texts is refused, naming both lines; the same
  prompt_id with two categories keeps the first and says so in a warning.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from registry.errors import InputError
from registry.importers._common import ImportBatch, parse_score, read_csv, required_text
from registry.limits import check_model_name
from registry.records import ModelRecord, Query

SPLITS = ("train.csv", "val.csv", "test.csv")
MODEL_ORDER = "model_order.csv"
_REQUIRED = ("prompt_id", "label", "prompt")
_MODEL_COLUMNS = ("model_name", "model_id")

# Where a value was first seen: (file, line).
_Origin = tuple[str, int]


def looks_like(path: Path) -> bool:
    """An EmbedLLM CSV, or a directory holding one of its split files."""
    if path.is_dir():
        return any(_is_embedllm_csv(path / name) for name in SPLITS)
    return path.suffix.lower() == ".csv" and _is_embedllm_csv(path)


def read_embedllm(path: Path, *, id_prefix: str = "") -> ImportBatch:
    files, model_order = _input_files(path)
    batch = ImportBatch(source=f"embedllm:{path.resolve()}")
    names_by_id: dict[str, tuple[str, _Origin]] = {}
    checked_names: set[str] = set()
    if model_order is not None:
        _read_model_order(model_order, names_by_id)

    prompts: dict[str, tuple[str, str, _Origin]] = {}  # query id -> (text, category, origin)
    pending: list[tuple[int, str, _Origin]] = []  # (evaluation index, model_id, origin) of unnamed rows
    category_conflicts = 0
    for file in files:
        _check_header(file)
        file_name = str(file)
        for line, row in read_csv(file, _REQUIRED):
            prompt_id = required_text(row["prompt_id"], file=file, line=line, field="prompt_id")
            query_id = id_prefix + prompt_id
            text = row["prompt"]
            if not text.strip():
                raise InputError("empty prompt text", file=file, line=line, field="prompt")
            category = row.get("category", "").strip()
            seen = prompts.get(query_id)
            if seen is None:
                prompts[query_id] = (text, category, (file_name, line))
                batch.add_query(Query(id=query_id, text=text, task=category), file=file_name, line=line,
                                field="prompt")
            else:
                seen_text, seen_category, (seen_file, seen_line) = seen
                if text != seen_text:
                    raise InputError(
                        f"prompt_id {prompt_id!r} has a different prompt text on {seen_file} line {seen_line}",
                        file=file, line=line, field="prompt",
                    )
                category_conflicts += category != seen_category

            score = parse_score(row["label"], file=file, line=line, field="label")
            model_id = row.get("model_id", "").strip()
            model_name = row.get("model_name", "").strip()
            if model_name:
                if model_name not in checked_names:  # once per name: a file has a few names on many rows
                    checked_names.add(check_model_name(model_name, file=file, line=line, field="model_name"))
                if model_id:
                    _remember_name(names_by_id, model_id, model_name, file=file_name, line=line)
                batch.add_evaluation(model_name, query_id, score, file=file_name, line=line)
            elif model_id:
                # Named once every file is read: a later row or file may carry the name.
                pending.append((batch.n_evaluations, model_id, (file_name, line)))
                batch.add_evaluation("", query_id, score, file=file_name, line=line)
            else:
                raise InputError("both model_id and model_name are empty", file=file, line=line, field="model_name")

    for index, model_id, (file_name, line) in pending:
        known = names_by_id.get(model_id)
        if known is None:
            raise InputError(
                f"model_name is empty and model_id {model_id!r} is named neither on another row"
                f" nor in {MODEL_ORDER}",
                file=file_name, line=line, field="model_name",
            )
        batch.eval_models[index] = known[0]

    for name in dict.fromkeys(batch.eval_models):  # first-seen order, once each
        batch.models.append(ModelRecord(name=name))

    where = str(path)
    if pending:
        batch.warnings.append(
            f"{where}: {len(pending)} rows with an empty model_name were named from their model_id"
        )
    if category_conflicts:
        batch.warnings.append(
            f"{where}: {category_conflicts} rows give a prompt another category than its first row;"
            " the first category was kept"
        )
    dropped = batch.drop_duplicate_evaluations()
    if dropped:
        batch.warnings.append(f"{where}: {dropped} repeated (model, query) rows; the last score of each was kept")
    return batch


def _input_files(path: Path) -> tuple[list[Path], Path | None]:
    """The CSVs to read, in order, and the model_order.csv to use (None when there is none)."""
    if path.is_dir():
        files = [path / name for name in SPLITS if (path / name).is_file()]
        if not files:
            raise InputError(f"no {', '.join(SPLITS)} in this directory", file=path)
        order = path / MODEL_ORDER
    elif path.is_file():
        files = [path]
        order = path.parent / MODEL_ORDER
        if path.name == MODEL_ORDER:
            raise InputError(f"{MODEL_ORDER} holds no evaluations; give the split CSV or its directory", file=path)
    else:
        raise InputError("no such file or directory", file=path)
    return files, (order if order.is_file() else None)


def _read_model_order(path: Path, names_by_id: dict[str, tuple[str, _Origin]]) -> None:
    for line, row in read_csv(path, ("model_id", "model_name")):
        model_id = required_text(row["model_id"], file=path, line=line, field="model_id")
        name = required_text(row["model_name"], file=path, line=line, field="model_name")
        _remember_name(names_by_id, model_id, name, file=str(path), line=line)


def _remember_name(
    names_by_id: dict[str, tuple[str, _Origin]], model_id: str, name: str, *, file: str, line: int
) -> None:
    """Records model_id -> name; one id naming two models would silently merge two models' scores."""
    known = names_by_id.get(model_id)
    if known is None:
        names_by_id[model_id] = (name, (file, line))
    elif known[0] != name:
        known_file, known_line = known[1]
        raise InputError(
            f"model_id {model_id!r} is {name!r} here but {known[0]!r} on {known_file} line {known_line}",
            file=file, line=line, field="model_name",
        )


def _check_header(path: Path) -> None:
    """Refuses missing columns naming the column (read_csv would name the line only)."""
    header = _header(path)
    if header is None:  # unreadable or empty: read_csv reports it with the line
        return
    for column in _REQUIRED:
        if column not in header:
            raise InputError(f"missing column; the header has {', '.join(header)}", file=path, line=1, field=column)
    if not any(column in header for column in _MODEL_COLUMNS):
        raise InputError(
            f"missing column (model_name or model_id); the header has {', '.join(header)}",
            file=path, line=1, field="model_name",
        )


def _header(path: Path) -> list[str] | None:
    """The CSV header's column names, or None when the first line is not readable text."""
    try:
        with path.open("rb") as handle:
            first = handle.readline()
        text = first.decode("utf-8").removeprefix("\ufeff")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.strip():
        return None
    return [column.strip() for column in next(csv.reader(io.StringIO(text)))]


def _is_embedllm_csv(path: Path) -> bool:
    header = _header(path) if path.is_file() else None
    return (
        header is not None
        and all(column in header for column in _REQUIRED)
        and any(column in header for column in _MODEL_COLUMNS)
    )
