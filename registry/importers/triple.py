"""The triple format: a directory with queries.csv, models.csv and evals.csv.

queries.csv  query_id, text, task            (other columns ignored)
models.csv   model_id, name, <metadata...>   (every other column becomes model metadata)
evals.csv    model_id, query_id, score       (ids refer to the two files above)

This is the layout of ../shared/data/mmlu-pro; `model_id` is local to the directory, the model's
`name` is its key in the registry.
"""
from __future__ import annotations

from pathlib import Path

from registry.errors import InputError
from registry.importers._common import ImportBatch, parse_score, read_csv, required_text
from registry.limits import check_model_name
from registry.records import ModelRecord, Query, is_reserved_key, validation_problem

FILES = ("queries.csv", "models.csv", "evals.csv")


def looks_like(path: Path) -> bool:
    return path.is_dir() and all((path / name).is_file() for name in FILES)


def read_triple(path: Path, *, id_prefix: str = "") -> ImportBatch:
    for name in FILES:
        if (path / name).exists() and not (path / name).is_file():
            raise InputError(f"{name} is not a file (the triple format needs the files {', '.join(FILES)})",
                             file=path / name)
        if not (path / name).is_file():
            raise InputError(f"missing {name} (the triple format needs {', '.join(FILES)})", file=path)
    batch = ImportBatch(source=f"triple:{path.resolve()}")

    queries_file = path / "queries.csv"
    known_queries: dict[str, int] = {}
    for line, row in read_csv(queries_file, ("query_id", "text", "task")):
        query_id = id_prefix + required_text(row["query_id"], file=queries_file, line=line, field="query_id")
        if query_id in known_queries:
            raise InputError(
                f"query_id {query_id!r} already appears on line {known_queries[query_id]}",
                file=queries_file, line=line, field="query_id",
            )
        text = row["text"]
        if not text.strip():
            raise InputError("empty query text", file=queries_file, line=line, field="text")
        known_queries[query_id] = line
        batch.add_query(Query(id=query_id, text=text, task=row["task"].strip()), file=str(queries_file), line=line)

    models_file = path / "models.csv"
    model_names: dict[str, str] = {}
    seen_names: dict[str, int] = {}
    reserved: list[str] = []
    for line, row in read_csv(models_file, ("model_id", "name")):
        model_id = required_text(row.pop("model_id"), file=models_file, line=line, field="model_id")
        name = check_model_name(required_text(row.pop("name"), file=models_file, line=line, field="name"),
                                file=models_file, line=line, field="name")
        # a column the registry computes itself (accuracy from the evaluations, say) is not metadata: kept,
        # it would shadow the registry's own in tables and filters
        for key in [k for k in row if is_reserved_key(k)]:
            row.pop(key)
            if key not in reserved:
                reserved.append(key)
        if model_id in model_names:
            raise InputError(f"model_id {model_id!r} appears twice", file=models_file, line=line, field="model_id")
        if name in seen_names:
            raise InputError(
                f"model name {name!r} already appears on line {seen_names[name]}",
                file=models_file, line=line, field="name",
            )
        try:
            record = ModelRecord.from_flat(name, row)
        except ValueError as err:  # pydantic's ValidationError is one: say it in words, with the column
            column, problem = validation_problem(err)
            raise InputError(problem, file=models_file, line=line, field=column) from None
        model_names[model_id] = name
        seen_names[name] = line
        batch.models.append(record)

    if reserved:
        batch.warnings.append(f"{models_file}: column(s) {', '.join(reserved)} not kept as metadata: the registry "
                              "has columns of those names (accuracy is computed from the evaluations); rename a "
                              "column to keep it")

    evals_file = path / "evals.csv"
    evals_name = str(evals_file)
    for line, row in read_csv(evals_file, ("model_id", "query_id", "score")):
        model_id = row["model_id"].strip()
        name = model_names.get(model_id)
        if name is None:
            raise InputError(f"model_id {model_id!r} is not in models.csv", file=evals_file, line=line, field="model_id")
        query_id = id_prefix + row["query_id"].strip()
        if query_id not in known_queries:
            raise InputError(
                f"query_id {row['query_id'].strip()!r} is not in queries.csv", file=evals_file, line=line, field="query_id"
            )
        score = parse_score(row["score"], file=evals_file, line=line, field="score")
        batch.add_evaluation(name, query_id, score, file=evals_name, line=line)

    dropped = batch.drop_duplicate_evaluations()
    if dropped:
        batch.warnings.append(f"{evals_file}: {dropped} repeated (model, query) rows; the last score of each was kept")
    return batch
