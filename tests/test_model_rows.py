"""ModelRows: an index's rows kept as columns read as the per-row dicts they replaced."""
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from indexing.model_rows import ModelRows
from indexing.store import MODEL_SCHEMA


def _table():
    added = [datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)]
    given = {"name": ["b-model", "a-model"], "family": ["fam", None], "params_b": [7.0, None],
             "tags": [["x", "y"], []], "extra": ['{"price_in": 0.5}', None], "added": added,
             "vector": [[0.1, 0.2], None], "encoder_id": ["enc", None], "n_evals": [12, None],
             "embedded_at": [added[0], None], "version": [2, 1]}
    return pa.table({f.name: pa.array(given.get(f.name, [None, None]), f.type) for f in MODEL_SCHEMA}, schema=MODEL_SCHEMA)


def _dicts(table, leave_out):
    """The per-row form the index held before: every column but the vectors, timestamps as ISO text."""
    out = {}
    for row in table.to_pylist():
        out[row["name"]] = {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in row.items()
                            if k not in leave_out}
    return out


def test_rows_read_as_the_dicts_they_replace_and_survive_their_saved_form():
    leave_out = {"vector", "fingerprint", "behaviour"}
    table = _table()
    rows = ModelRows.from_arrow(table, leave_out=leave_out)
    expected = _dicts(table, leave_out)
    assert rows.names == ["b-model", "a-model"]  # table order
    assert dict(rows) == expected and rows == expected
    assert rows["a-model"]["added"] == "2026-05-06T07:08:09.123456+00:00"
    assert rows.column("n_evals") == {"b-model": 12, "a-model": None}
    assert rows.column("embedded_at") == {"b-model": "2026-01-02T03:04:05+00:00", "a-model": None}
    assert rows.column("not-a-column") == {"b-model": None, "a-model": None}
    assert "vector" not in rows["b-model"] and "c-model" not in rows and rows.get("c-model") is None
    with pytest.raises(KeyError):
        rows["c-model"]
    again = ModelRows.from_json(rows.to_json())
    assert again == expected and again.names == rows.names and again.column("added") == rows.column("added")


def test_saved_rows_of_another_form_are_refused():
    with pytest.raises(ValueError, match="not saved model rows"):
        ModelRows.from_json('{"a-model": {"name": "a-model"}}')  # the per-row JSON of format 3
    with pytest.raises(ValueError, match="one value per row"):
        ModelRows(["a", "b"], {"name": ["a", "b"], "n_evals": [1]})
