"""What a person browsing the registry looks at (the web UI served by `registry serve`): the model
table with each model's measured accuracy per task, and the map's points.

The table is built from one pass over the evaluations (`evaluation_summary`, cached by the service
per generation of the store) and the models table; filtering uses the registry's `where` language
(`registry.filters`), so a filter means the same here as on the command line. Paging, sorting and
the name search happen on that summary, so a page of a 10,000-model registry costs a sort, not a
scan of the evaluations.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from registry.errors import InputError, NotFoundError
from registry.evidence import MIN_EVALS, is_thin
from registry.records import ModelRecord

if TYPE_CHECKING:
    from indexing.store import Store

__all__ = ["LOW_EVIDENCE_EVALS", "TaskAccuracy", "ModelRow", "ModelTable", "MapPointView", "MapView",
           "TableData", "evaluation_summary", "table_data", "model_table", "model_row", "map_view"]

# A task accuracy measured on fewer evaluations than this is marked "low evidence", and so is a model whose
# embedding was built from fewer: the registry's one documented minimum (registry.evidence,
# docs/results/evidence.md). At n < 64 a binomial accuracy's standard error exceeds 0.06 (at p = 0.5).
LOW_EVIDENCE_EVALS = MIN_EVALS
MAX_PAGE = 500


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskAccuracy(_Result):
    accuracy: float = Field(description="mean score over the model's stored evaluations in the task")
    n: int = Field(description="evaluations behind it")


class ModelRow(_Result):
    """One model as the table shows it."""

    name: str
    record: ModelRecord
    version: int | None
    embedded: bool
    n_evals: int = Field(description="stored evaluations")
    accuracy: float | None = Field(description="mean score over every stored evaluation")
    tasks: dict[str, TaskAccuracy]
    low_evidence: list[str] = Field(description=f"tasks measured on fewer than {LOW_EVIDENCE_EVALS} evaluations")
    low_evidence_below: int = LOW_EVIDENCE_EVALS
    embedded_from: int | None = Field(None, description="evaluations the embedding was built from (None: not embedded)")
    thin_evidence: bool = Field(False, description=f"embedded from fewer than {LOW_EVIDENCE_EVALS} evaluations: "
                                                   "ranked after well-evidenced models unless min_evals=0")


class ModelTable(_Result):
    """A page of the model table: `rows` are `matched` models' [offset, offset + limit) after sorting."""

    total: int = Field(description="models in the registry")
    matched: int = Field(description="models the filter and the search keep")
    offset: int
    limit: int
    sort: str
    descending: bool
    where: str | None
    q: str | None
    tasks: list[str] = Field(description="every task with evaluations, for the accuracy columns")
    fields: list[str] = Field(description="metadata fields at least one model has a value for")
    low_evidence_below: int = LOW_EVIDENCE_EVALS
    suggestions: list[str] = Field(description="names close to `q` when it matches none (did you mean)")
    rows: list[ModelRow]


class MapPointView(_Result):
    name: str
    x: float
    y: float
    value: str | float | int | bool | None = Field(None, description="the colour field's value")


class MapView(_Result):
    """The map's points, as `registry map` lays them out, without drawing them."""

    n_models: int
    by: str = Field("locus", description="the vector mapped: locus or fingerprint")
    projection: str
    explained_variance: dict[str, float]
    share_of: str = Field("the variance", description="what explained_variance is a share of (as `map`)")
    note: str | None = Field(None, description="models left out of the map, and how to include them (as `map`)")
    distance_correlation: float | None
    color_by: str | None
    fields: list[str] = Field(description="metadata fields a point can be coloured by")
    points: list[MapPointView]


def evaluation_summary(store: "Store") -> dict[str, dict[str, Any]]:
    """{model: {"n": evaluations, "sum": sum of scores, "tasks": {task: (n, sum)}}} in one scan of
    the evaluations, grouped by model and by their query's task in pyarrow (each query id is looked up
    in the queries' ids, which costs less than a join: 2 million evaluations in well under a second)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from indexing.store import EVALUATIONS, QUERIES

    evals = store.read(EVALUATIONS, ["model", "query_id", "score"])
    queries = store.read(QUERIES, ["query_id", "task"])
    out: dict[str, dict[str, Any]] = {}
    if evals.num_rows == 0:
        return out
    tasks = pc.dictionary_encode(pc.fill_null(queries.column("task").cast(pa.string()), "")).combine_chunks()
    row = pc.index_in(evals.column("query_id"), value_set=queries.column("query_id").combine_chunks())
    # An evaluation whose query is missing (check reports it) counts under the task "".
    code = pc.fill_null(pc.take(tasks.indices, row), -1)
    names = tasks.dictionary.to_pylist()
    grouped = pa.table({"model": evals.column("model"), "task": code, "score": evals.column("score").cast(pa.float64())}
                       ).group_by(["model", "task"]).aggregate([("score", "count"), ("score", "sum")])
    for model, task, n, total in zip(grouped.column("model").to_pylist(), grouped.column("task").to_pylist(),
                                     grouped.column("score_count").to_pylist(), grouped.column("score_sum").to_pylist()):
        entry = out.setdefault(model, {"n": 0, "sum": 0.0, "tasks": {}})
        entry["n"] += n
        entry["sum"] += total
        name = names[task] if task >= 0 else ""
        prior = entry["tasks"].get(name, (0, 0.0))
        entry["tasks"][name] = (prior[0] + n, prior[1] + total)
    return out


@dataclass(frozen=True, slots=True)
class _Entry:
    """One model in the table, as plain data: a ModelRow is made only for the rows a page shows."""

    name: str
    record: ModelRecord
    version: int | None
    embedded: bool
    n_evals: int
    accuracy: float | None
    tasks: dict[str, tuple[float, int]]  # task -> (accuracy, evaluations)
    embedded_from: int | None = None

    def row(self) -> ModelRow:
        tasks = {t: TaskAccuracy(accuracy=a, n=n) for t, (a, n) in self.tasks.items()}
        return ModelRow(name=self.name, record=self.record, version=self.version, embedded=self.embedded,
                        n_evals=self.n_evals, accuracy=self.accuracy, tasks=tasks,
                        low_evidence=[t for t, (_, n) in self.tasks.items() if n < LOW_EVIDENCE_EVALS],
                        embedded_from=self.embedded_from,
                        thin_evidence=self.embedded and is_thin(self.embedded_from))


@dataclass(frozen=True)
class TableData:
    """Everything a table page is cut from: the models (by name), their records in name order, the tasks."""

    rows: dict[str, _Entry]
    records: list[ModelRecord]
    tasks: list[str]
    fields: list[str]


def table_data(store: "Store") -> TableData:
    """The whole table, unsorted and unpaged (the service keeps it per generation of the store)."""
    import pyarrow.compute as pc

    from indexing.store import MODELS
    from registry.analytics.embedding_map import available_fields
    from registry.catalog.rows import record_of

    summary = evaluation_summary(store)
    models = store.read(MODELS)
    # Whether a model is embedded, without turning every vector into Python lists.
    embedded = pc.is_valid(models.column("vector")).to_pylist()
    models = models.drop_columns(["vector"])
    rows: dict[str, _Entry] = {}
    tasks: set[str] = set()
    for row, is_embedded in sorted(zip(models.to_pylist(), embedded), key=lambda pair: pair[0]["name"]):
        name = row["name"]
        got = summary.get(name, {"n": 0, "sum": 0.0, "tasks": {}})
        per_task = {t: (total / n, n) for t, (n, total) in sorted(got["tasks"].items()) if n}
        tasks.update(per_task)
        rows[name] = _Entry(name=name, record=record_of(row), version=row.get("version"), embedded=is_embedded,
                            n_evals=got["n"], accuracy=(got["sum"] / got["n"]) if got["n"] else None, tasks=per_task,
                            embedded_from=row.get("n_evals") if is_embedded else None)
    records = [r.record for r in rows.values()]
    return TableData(rows=rows, records=records, tasks=sorted(tasks), fields=available_fields(records))


def _sort_key(sort: str, tasks: list[str], fields: list[str]):
    """A key function for a table entry, or an InputError naming `sort` with the columns there are."""
    if sort == "name":
        return lambda r: r.name.lower()
    if sort in ("version", "n_evals", "accuracy"):
        return lambda r: getattr(r, sort)
    if sort.startswith("task:"):
        task = sort[len("task:"):]
        if task not in tasks:
            raise InputError(f"no task {task!r} to sort by; tasks: {', '.join(tasks) or '(none)'}", field="sort")
        return lambda r: r.tasks[task][0] if task in r.tasks else None
    if sort in fields:
        def value(r: _Entry):
            v = r.record.metadata().get(sort)
            if isinstance(v, list):
                return ", ".join(sorted(map(str, v))) or None
            return v
        return value
    columns = ["name", "version", "n_evals", "accuracy", *fields, *(f"task:{t}" for t in tasks)]
    raise InputError(f"cannot sort by {sort!r}; columns: {', '.join(columns)}", field="sort")


def _ordered(rows: list[_Entry], key, descending: bool) -> list[_Entry]:
    """Sorted by key with unknown values (None) last in either direction; mixed kinds (numbers and
    text in one extra field) compare as text after the numbers."""
    known = [(key(r), r) for r in rows]
    missing = [r for v, r in known if v is None]
    present = [(v, r) for v, r in known if v is not None]

    def rank(item):
        v = item[0]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (0, max(min(v, 1e308), -1e308), "")  # an int beyond float (an older home's) sorts at the end
        return (1, 0.0, str(v).lower())

    present.sort(key=rank, reverse=descending)
    return [r for _, r in present] + missing


def model_table(data: TableData, *, where: str | None = None, q: str | None = None, sort: str = "name",
                descending: bool = False, offset: int = 0, limit: int = 50) -> ModelTable:
    """One page of the model table: filtered by `where` (the registry's filter language), searched by
    `q` (a case-insensitive part of the name; names close to it when none contains it), sorted by a
    column (name, version, n_evals, accuracy, a metadata field, or task:NAME), then cut."""
    from registry.filters import matching

    if offset < 0:
        raise InputError("offset must be >= 0", field="offset")
    if not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    key = _sort_key(sort, data.tasks, data.fields)
    names = matching(where, data.records) if where else list(data.rows)
    suggestions: list[str] = []
    if q:
        needle = q.strip().lower()
        found = [n for n in names if needle in n.lower()]
        if not found:
            suggestions = difflib.get_close_matches(q.strip(), names, n=5, cutoff=0.4)
        names = found
    ordered = _ordered([data.rows[n] for n in names], key, descending)
    return ModelTable(total=len(data.rows), matched=len(ordered), offset=offset, limit=limit, sort=sort,
                      descending=descending, where=where, q=q, tasks=data.tasks, fields=data.fields,
                      suggestions=suggestions, rows=[entry.row() for entry in ordered[offset:offset + limit]])


def model_row(data: TableData, name: str) -> ModelRow:
    """One model's row (its per-task accuracies), or "no model named ..." with the closest names."""
    if name not in data.rows:
        raise NotFoundError.model(name, list(data.rows))
    return data.rows[name].row()


def map_view(store: "Store", *, color_by: str | None = None, where: str | None = None,
             by: str | None = None) -> MapView:
    """The points `registry map` draws (same projection, same colour values), as data."""
    from registry.analytics.embedding_map import map_layout

    layout = map_layout(store, color_by=color_by, where=where, by=by)
    values = layout["values"] or [None] * len(layout["names"])
    return MapView(
        n_models=len(layout["names"]), by=layout["by"], projection=layout["projection"], explained_variance=layout["explained"],
        share_of=layout["share_of"], note=layout["note"], distance_correlation=layout["fidelity"], color_by=color_by, fields=layout["fields"],
        points=[MapPointView(name=n, x=float(x), y=float(y), value=v)
                for n, (x, y), v in zip(layout["names"], layout["coords"], values)])

