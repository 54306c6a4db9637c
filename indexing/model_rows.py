"""`ModelRows`: the models table's rows without their vectors, by name, kept as columns.

A model index carries every model's row (metadata, `n_evals`, what made its vectors) beside the vectors.
Made into one dict per row and saved as JSON of those, they were most of a reload after one write at
100,000 models (`scripts/bench_index.py --updates`, docs/results/benchmarks.md). Most readers want a few
rows (a search's hits, a route's top k) or one column (`n_evals` for the thin-evidence rule), so the rows
stay columns (Python lists, no pyarrow needed to load them: a cold CLI search does not import it) and a
row becomes a dict when first read.
Timestamps are kept as microseconds since the epoch and read as ISO 8601 text, as the dicts had them.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

__all__ = ["ModelRows"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_FORMAT = "locus-model-rows/1"


def _iso(micros: int | None) -> str | None:
    return None if micros is None else (_EPOCH + timedelta(microseconds=micros)).isoformat()


class ModelRows(Mapping):
    """name -> row (a dict of the table's columns but the vectors, timestamps as ISO 8601 text), read only.
    `names` in table order; `column(c)` one column for every row; rows are made when first read."""

    def __init__(self, names: list[str], columns: dict[str, list], timestamps: tuple[str, ...] = ()) -> None:
        if any(len(values) != len(names) for values in columns.values()):
            raise ValueError("every column needs one value per row")
        self.names = names
        self._columns = columns
        self._timestamps = frozenset(timestamps)
        self._at = {name: i for i, name in enumerate(names)}
        self._made: dict[str, dict[str, Any]] = {}
        self._by_column: dict[str, dict[str, Any]] = {}

    @classmethod
    def from_arrow(cls, table, *, leave_out=()) -> "ModelRows":
        """From a pyarrow table of the models table (a `name` column), without the columns in `leave_out`."""
        import pyarrow as pa

        columns, timestamps = {}, []
        for name in table.column_names:
            if name in leave_out:
                continue
            column = table.column(name)
            if pa.types.is_timestamp(column.type):  # as integers: a datetime per row is the slow part
                column = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
                timestamps.append(name)
            columns[name] = column.to_pylist()
        return cls(columns["name"], columns, tuple(timestamps))

    # ------------------------------------------------------------------ the mapping
    def __getitem__(self, name: str) -> dict[str, Any]:
        row = self._made.get(name)
        if row is None:
            i = self._at[name]
            row = {c: (_iso(v[i]) if c in self._timestamps else v[i]) for c, v in self._columns.items()}
            self._made[name] = row
        return row

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._at

    def column(self, name: str) -> dict[str, Any]:
        """name -> this column's value for every row (None for every row when the table has no such column);
        timestamps as ISO 8601 text. Made once (every route and search reads `n_evals`): read only."""
        made = self._by_column.get(name)
        if made is None:
            values = self._columns.get(name)
            if values is None:
                made = dict.fromkeys(self.names)
            else:
                made = dict(zip(self.names, [_iso(v) for v in values] if name in self._timestamps else values))
            self._by_column[name] = made
        return made

    # ------------------------------------------------------------------ saved form
    def to_json(self) -> str:
        return json.dumps({"format": _FORMAT, "timestamps": sorted(self._timestamps), "columns": self._columns})

    @classmethod
    def from_json(cls, text: str) -> "ModelRows":
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
            raise ValueError(f"not saved model rows (expected format {_FORMAT!r})")
        columns = raw["columns"]
        return cls(columns["name"], columns, tuple(raw["timestamps"]))
