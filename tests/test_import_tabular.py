"""JSON Lines / Parquet importer: fixture tables written into tmp_path, read without a store."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from registry.errors import InputError
from registry.importers._common import query_id_for_text
from registry.importers.tabular import looks_like, read_tabular

ROWS: list[dict[str, Any]] = [
    {"model": "org/a", "score": 1, "query": "What is 2+2?", "task": "math"},  # text only: derived id
    {"model": "org/b", "score": 0.25, "query": "What is 2+2?", "task": "math"},
    {"model": "org/a", "score": 0, "query_id": "mmlu:17"},  # id only: a query already stored
    {"model": "org/b", "score": 1, "query_id": "gsm:3", "query": "Tom has 3 apples.", "task": "gsm8k"},
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, columns: dict[str, Any]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def as_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    names = dict.fromkeys(name for row in rows for name in row)
    columns = {name: [row.get(name) for row in rows] for name in names}
    columns["score"] = [float(v) for v in columns["score"]]
    return columns


def evaluations(batch) -> list[tuple[str, str, float]]:
    return list(zip(batch.eval_models, batch.eval_queries, batch.eval_scores))


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_rows_become_queries_and_evaluations(tmp_path: Path, kind: str) -> None:
    if kind == "jsonl":
        path = write_jsonl(tmp_path / "evals.jsonl", ROWS)
    else:
        path = write_parquet(tmp_path / "evals.parquet", as_columns(ROWS))
    derived = "p:" + query_id_for_text("What is 2+2?")

    batch = read_tabular(path, id_prefix="p:")

    # The id-only row adds no Query: the store must already hold p:mmlu:17.
    assert [(q.id, q.text, q.task) for q in batch.queries] == [
        (derived, "What is 2+2?", "math"), ("p:gsm:3", "Tom has 3 apples.", "gsm8k"),
    ]
    assert batch.query_origins == [(str(path), 1), (str(path), 4)]
    assert evaluations(batch) == [
        ("org/a", derived, 1.0), ("org/b", derived, 0.25), ("org/a", "p:mmlu:17", 0.0), ("org/b", "p:gsm:3", 1.0),
    ]
    assert [m.name for m in batch.models] == ["org/a", "org/b"]
    assert batch.warnings == []
    assert batch.source.startswith(f"{kind}:")
    assert looks_like(path)


def test_repeated_pairs_keep_the_last_score(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", [
        {"model": "m", "score": 0, "query_id": "q"},
        {"model": "m", "score": 1, "query_id": "q"},
    ])

    batch = read_tabular(path)

    assert evaluations(batch) == [("m", "q", 1.0)]
    assert batch.eval_lines == [2]
    assert batch.warnings == [f"{path}: 1 repeated (model, query) rows; the last score of each was kept"]


def test_blank_lines_and_a_bom_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text('\ufeff{"model": "m", "score": 0.5, "query": "q"}\n\n{"model": "n", "score": 1, "query": "q"}\n')

    batch = read_tabular(path)

    assert batch.eval_lines == [1, 3]
    assert len(batch.queries) == 1


def test_parquet_bytes_columns_and_integer_ids(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "e.parquet", {
        "model": pa.array([b"m", b"n"], pa.binary()),
        "score": pa.array([1, 0], pa.int64()),
        "query_id": pa.array([10, 11], pa.int64()),
        "query": pa.array(["caf\u00e9".encode(), None], pa.large_binary()),
    })

    batch = read_tabular(path)

    assert evaluations(batch) == [("m", "10", 1.0), ("n", "11", 0.0)]
    assert [(q.id, q.text) for q in batch.queries] == [("10", "caf\u00e9")]


def test_same_id_with_two_texts_names_both_rows(tmp_path: Path) -> None:
    rows = [{"model": "m", "score": 1, "query_id": "q", "query": "one"}, {"model": "n", "score": 1, "query_id": "q", "query": "two"}]
    jsonl = write_jsonl(tmp_path / "e.jsonl", rows)
    parquet = write_parquet(tmp_path / "e.parquet", as_columns(rows))

    with pytest.raises(InputError) as from_jsonl:
        read_tabular(jsonl)
    with pytest.raises(InputError) as from_parquet:
        read_tabular(parquet)

    assert (from_jsonl.value.line, from_jsonl.value.field) == (2, "query")
    assert "line 1" in from_jsonl.value.problem
    assert (from_parquet.value.line, from_parquet.value.field) == (2, "query")
    # Parquet has rows: the message says "row" once, never "line"
    assert str(from_parquet.value).startswith(f"{parquet}, row 2, field 'query': ") and "row 1" in from_parquet.value.problem
    assert "line" not in str(from_parquet.value)


def test_the_format_named_is_the_format_read_whatever_the_suffix(tmp_path: Path) -> None:
    """`--format parquet` on a .jsonl file read it as JSON Lines by its suffix; .ndjson and .pq, which
    detect_format tells, were then refused by the reader as neither .jsonl nor .parquet."""
    from registry.importers import read_batch

    jsonl = write_jsonl(tmp_path / "e.jsonl", ROWS)
    with pytest.raises(InputError) as caught:
        read_batch(jsonl, format="parquet")
    assert caught.value.file == str(jsonl) and "not a readable Parquet file" in caught.value.problem

    expected = evaluations(read_tabular(jsonl))
    renamed = tmp_path / "e.data"
    renamed.write_bytes(jsonl.read_bytes())
    assert evaluations(read_batch(renamed, format="jsonl")) == expected
    ndjson = write_jsonl(tmp_path / "e.ndjson", ROWS)
    assert evaluations(read_batch(ndjson)) == expected
    pq_file = write_parquet(tmp_path / "e.pq", as_columns(ROWS))
    assert evaluations(read_batch(pq_file)) == expected
    with pytest.raises(InputError) as caught:
        read_batch(pq_file, format="jsonl")
    assert caught.value.file == str(pq_file) and caught.value.line is not None  # read as lines, refused


def test_looks_like(tmp_path: Path) -> None:
    samples = write_jsonl(tmp_path / "samples_boolq_2024-01-01T00-00-00.jsonl", [{"doc_id": 0, "acc": 1}])
    other = write_parquet(tmp_path / "other.parquet", {"a": [1]})
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")

    assert not looks_like(samples)  # lm-eval samples are .jsonl too
    assert not looks_like(other)
    assert not looks_like(tmp_path / "broken.parquet")
    assert not looks_like(tmp_path / "missing.jsonl")
    assert not looks_like(write_jsonl(tmp_path / "evals.csv", ROWS))


GOOD = json.dumps(ROWS[0]).encode() + b"\n"


def _jsonl(**row: Any) -> bytes:
    return json.dumps({"model": "m", "score": 1, "query": "q", **row}).encode() + b"\n"


@pytest.mark.parametrize(
    ("content", "line", "field", "problem"),
    [
        pytest.param(GOOD + b'{"score": 1, "query": "q"}\n', 2, "model", "missing field", id="model-missing"),
        pytest.param(b'{"model": "m", "query": "q"}\n', 1, "score", "missing field", id="score-missing"),
        pytest.param(GOOD + b'{"model": "m", "score": 1}\n', 2, "query", "query or query_id", id="query-missing"),
        pytest.param(_jsonl(query=" ", query_id=None), 1, "query", "no query text", id="query-blank"),
        pytest.param(_jsonl(model=""), 1, "model", "empty", id="model-empty"),
        pytest.param(_jsonl(query=["a"]), 1, "query", "expected text", id="query-not-text"),
        pytest.param(GOOD + _jsonl(score="high"), 2, "score", "not a number", id="score-not-number"),
        pytest.param(_jsonl(score=None), 1, "score", "not a number", id="score-null"),
        pytest.param(_jsonl(score=1.01), 1, "score", "outside [0, 1]", id="score-above-1"),
        pytest.param(_jsonl(score=-1), 1, "score", "outside [0, 1]", id="score-negative"),
        pytest.param(GOOD + b'{"model": "m", "score": NaN, "query": "q"}\n', 2, "score", "NaN", id="score-nan"),
        pytest.param(b"", None, None, "empty", id="empty-file"),
        pytest.param(b" \n\n", None, None, "empty", id="blank-file"),
        pytest.param(GOOD + b'{"model": "m", "score": 1, "query": "caf\xe9"}\n', 2, None, "not UTF-8", id="not-utf8"),
        pytest.param(GOOD + GOOD + b"model,score\n", 3, None, "not JSON", id="not-json"),
        pytest.param(b'"just a string"\n', 1, None, "JSON object", id="not-an-object"),
        # a number past float's range (OverflowError) and past Python's 4,300 digits (ValueError): tracebacks before
        pytest.param(GOOD + _jsonl(score=10 ** 400), 2, "score", "(401 digits) is outside [0, 1]", id="score-huge"),
        pytest.param(GOOD + b'{"model": "m", "query": "q", "score": 1' + b"0" * 5000 + b"}\n", 2, None,
                     "not JSON this reader takes: Exceeds the limit (4300 digits)", id="score-5000-digits"),
    ],
)
def test_bad_jsonl_is_refused_with_its_line(
    tmp_path: Path, content: bytes, line: int | None, field: str | None, problem: str
) -> None:
    path = tmp_path / "evals.jsonl"
    path.write_bytes(content)

    with pytest.raises(InputError) as caught:
        read_tabular(path)

    assert caught.value.file == str(path)
    assert caught.value.line == line
    assert caught.value.field == field
    assert problem in caught.value.problem


def _good_columns(**changes: Any) -> dict[str, Any]:
    columns: dict[str, Any] = {"model": ["m", "n"], "score": [1.0, 0.0], "query": ["q", "r"]}
    for name, values in changes.items():
        if values is None:
            del columns[name]
        else:
            columns[name] = values
    return columns


@pytest.mark.parametrize(
    ("columns", "line", "field", "problem"),
    [
        pytest.param(_good_columns(model=None), None, "model", "missing column", id="model-missing"),
        pytest.param(_good_columns(score=None), None, "score", "missing column", id="score-missing"),
        pytest.param(_good_columns(query=None), None, "query", "missing column", id="query-missing"),
        pytest.param(_good_columns(query=["q", None]), 2, "query", "no query text", id="query-null"),
        pytest.param(_good_columns(model=["m", None]), 2, "model", "empty", id="model-null"),
        # a string column is no score column, "1" on row 1 included (JSON Lines refuses "0.5" the same way)
        pytest.param(_good_columns(score=["1", "high"]), 1, "score", "not a number", id="score-not-number"),
        pytest.param(_good_columns(score=[1.0, None]), 2, "score", "not a number", id="score-null"),
        pytest.param(_good_columns(score=[1.5, 0.0]), 1, "score", "outside [0, 1]", id="score-above-1"),
        pytest.param(_good_columns(score=[0.0, float("nan")]), 2, "score", "NaN", id="score-nan"),
        pytest.param(_good_columns(query=pa.array([b"q", b"caf\xe9"], pa.binary())), 2, "query", "not UTF-8", id="bytes-not-utf8"),
        pytest.param(_good_columns(query=pa.array([b"q", b"\xff"], pa.binary()).view(pa.string())), 2, "query", "not UTF-8", id="string-not-utf8"),
        pytest.param({"model": pa.array([], pa.string()), "score": pa.array([], pa.float64()), "query": pa.array([], pa.string())},
                     None, None, "no rows", id="no-rows"),
    ],
)
def test_bad_parquet_is_refused_with_its_row(
    tmp_path: Path, columns: dict[str, Any], line: int | None, field: str | None, problem: str
) -> None:
    path = write_parquet(tmp_path / "evals.parquet", columns)

    with pytest.raises(InputError) as caught:
        read_tabular(path)

    assert caught.value.file == str(path)
    assert caught.value.line == line
    assert caught.value.field == field
    assert problem in caught.value.problem
    if line is not None:  # Parquet has rows, and says so
        assert f", row {line}" in str(caught.value) and "line" not in str(caught.value)  # said once, as rows


@pytest.mark.parametrize(("content", "problem"), [(b"", "file is empty"), (b"PAR1 but not really", "not a readable Parquet file")])
def test_unreadable_parquet_is_refused(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "evals.parquet"
    path.write_bytes(content)

    with pytest.raises(InputError, match=problem) as caught:
        read_tabular(path)

    assert caught.value.file == str(path)


def test_a_parquet_column_given_twice_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "twice.parquet"
    pq.write_table(pa.table([pa.array(["m"]), pa.array(["q"]), pa.array([1.0]), pa.array([0.0])],
                            names=["model", "query", "score", "score"]), path)
    with pytest.raises(InputError) as caught:
        read_tabular(path)
    assert caught.value.field == "score" and caught.value.problem == "column(s) 'score' appear more than once in the file"


def test_other_suffixes_are_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "evals.json", ROWS)

    with pytest.raises(InputError, match=".jsonl or .parquet"):
        read_tabular(path)


# ------------------------------------------------------------------ scores are numbers in typed formats
@pytest.mark.parametrize(("score", "problem"), [
    (True, "score true is a boolean, not a number"),
    (False, "score false is a boolean, not a number"),
    ("0.5", "score '0.5' is a string, not a number: write 0.5 without quotes"),
    ("1", "score '1' is a string, not a number"),
])
@pytest.mark.parametrize("reader", ["import", "add-model"])
def test_a_jsonl_boolean_or_string_score_is_refused_naming_the_line(tmp_path: Path, score: Any, problem: str,
                                                                  reader: str) -> None:
    from registry.importers.tabular import read_model_evaluations

    path = write_jsonl(tmp_path / "evals.jsonl", [
        {"model": "m", "score": 1, "query_id": "q1"}, {"model": "m", "score": score, "query_id": "q2"}])

    with pytest.raises(InputError) as caught:
        read_tabular(path) if reader == "import" else read_model_evaluations(path, "m")

    assert (caught.value.file, caught.value.line, caught.value.field) == (str(path), 2, "score")
    assert problem in caught.value.problem


@pytest.mark.parametrize("column", [pa.array([True, False]), pa.array(["1", "0"])], ids=["bool", "string"])
def test_a_parquet_bool_or_string_score_column_is_refused_naming_the_row(tmp_path: Path, column: Any) -> None:
    from registry.importers.tabular import read_model_evaluations

    path = write_parquet(tmp_path / "evals.parquet", {"score": column, "query_id": ["q1", "q2"]})

    with pytest.raises(InputError) as caught:
        read_model_evaluations(path, "m")

    assert (caught.value.line, caught.value.field) == (1, "score")
    assert str(caught.value).startswith(f"{path}, row 1, field 'score': score ") and "not a number" in caught.value.problem
    assert "line" not in str(caught.value)


def test_csv_score_cells_are_still_read_as_numbers(tmp_path: Path) -> None:
    from registry.importers.tabular import read_model_evaluations

    path = tmp_path / "evals.csv"
    path.write_text("query_id,score\nq1,1\nq2,0.5\nq3, 0 \n", encoding="utf-8")

    assert read_model_evaluations(path, "m").eval_scores == [1.0, 0.5, 0.0]


# ------------------------------------------------------------------ an add-model CSV without a query column
def test_a_csv_without_a_query_or_query_id_column_is_refused_on_line_1(tmp_path: Path) -> None:
    from registry.importers.tabular import read_model_evaluations

    path = tmp_path / "t.csv"
    path.write_text("qid,score\nsyn-math-0000,1\n", encoding="utf-8")

    with pytest.raises(InputError) as caught:
        read_model_evaluations(path, "m")

    assert (caught.value.file, caught.value.line, caught.value.field) == (str(path), 1, None)
    assert caught.value.problem == "no query or query_id column; the header has qid, score"


def _refused(path: Path, content: str) -> InputError:
    """The InputError that reading `content` as model m's evaluations file at `path` raises."""
    from registry.importers.tabular import read_model_evaluations

    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_model_evaluations(path, "m")
    return caught.value


def test_a_blank_csv_score_is_said_to_be_empty(tmp_path: Path) -> None:
    error = _refused(tmp_path / "t.csv", "query_id,score\nq1,1\nq2,\n")
    assert (error.line, error.field) == (3, "score")
    assert "empty" in error.problem and "None" not in error.problem


@pytest.mark.parametrize("content, line, said", [
    # the quote swallows the rest of the file
    ('query,score\nWho wrote it?,0\n"What is 2+2?,1\nx,1\n', 3, "never closed (the file ends inside it)"),
    # it closes at a later row's quote, and a plain reader goes on with one wrong row of the right width
    ('query,score\nWho wrote it?,0\n"What is 2+2?,1\n"Who wrote Hamlet?",0\n', 3,
     "closes at line 4 and more text follows the closing quote"),
    ('query,score\n"A ""quoted"" word" ,1\n', 2, "more text follows the closing quote"),
    ('query,score\n"A ""quoted"" word",1\nx,1,2\n', 3, "3 fields where the header has 2"),  # doubled quotes close
    ('query,score\nWhat "is" this,1\nx,1,2\n', 3, "3 fields where the header has 2"),  # a quote mid-field is text
    ('"query,score\nx,1\n', 1, "never closed"),  # in the header
])
def test_a_csv_with_broken_quoting_is_refused_at_the_row_it_starts(tmp_path: Path, content: str, line: int,
                                                                   said: str) -> None:
    error = _refused(tmp_path / "t.csv", content)
    assert error.line == line and said in error.problem, error.problem


def test_csv_quoting_that_is_valid_reads_as_written(tmp_path: Path) -> None:
    from registry.importers._common import read_csv

    path = tmp_path / "t.csv"
    path.write_text('query,score\n"two\nlines, one comma",1\n"A ""quoted"" word",0\nWhat "is" this,1\n', "utf-8")
    assert [(n, r["query"]) for n, r in read_csv(path, ("query", "score"))] == [
        (2, "two\nlines, one comma"), (4, 'A "quoted" word'), (5, 'What "is" this')]


def test_a_jsonl_key_given_twice_in_one_object_is_refused_naming_the_line(tmp_path: Path) -> None:
    error = _refused(tmp_path / "t.jsonl", '{"query_id": "q1", "score": 1}\n{"query_id": "q2", "score": 1, "score": 0}\n')
    assert (error.line, error.field) == (2, "score") and "'score' appears more than once" in error.problem


def test_columns_add_model_does_not_read_are_named_in_a_warning(tmp_path: Path) -> None:
    from registry.importers.tabular import read_model_evaluations

    path = tmp_path / "t.csv"
    path.write_text("query_id,score,qid,model\nq1,1,x,other\n", encoding="utf-8")

    batch = read_model_evaluations(path, "m")

    assert batch.eval_models == ["m"]
    assert batch.warnings == ["t.csv: column(s) qid, model not read; add-model reads query, query_id, score, task"]


# ------------------------------------------------------------------ tasks that disagree within a file
def test_a_query_given_two_tasks_in_one_add_model_file_is_warned_naming_both(tmp_path: Path) -> None:
    from registry.importers.tabular import read_model_evaluations

    path = tmp_path / "t.csv"
    path.write_text("query,query_id,score,task\nWhat is 2+2?,q1,1,math\nWhat is 2+2?,q1,1,law\n", encoding="utf-8")

    batch = read_model_evaluations(path, "m")

    assert [q.task for q in batch.queries] == ["math"]
    assert batch.given_tasks == {"q1": ("math", str(path), 2)}
    assert ("t.csv line 3: query 'q1' is given task 'law' here and task 'math' on line 2; the first is kept"
            in batch.warnings)


def test_stored_task_warnings_name_the_query_and_both_tasks() -> None:
    from registry.importers._common import ImportBatch

    batch = ImportBatch(source="test")
    batch.add_evaluation("m", "syn-math-0000", 1.0, file="t.csv", line=2, task="law")
    batch.add_evaluation("m", "t:abc", 1.0, file="t.csv", line=3, task="math")  # lands on stored id q9
    batch.add_evaluation("m", "q-new", 1.0, file="t.csv", line=4, task="law")  # not stored: no warning
    batch.add_evaluation("m", "q-same", 1.0, file="t.csv", line=5, task="math")

    warnings = batch.stored_task_warnings({"syn-math-0000": "math", "q9": "law", "q-same": "math"}, {"t:abc": "q9"})

    assert warnings == [
        "t.csv, line 2: query 'syn-math-0000' is stored with task 'math'; the task 'law' given here was not applied "
        "(a stored query keeps its task)",
        "t.csv, line 3: query 'q9' is stored with task 'law'; the task 'math' given here was not applied "
        "(a stored query keeps its task)",
    ]


def test_a_query_given_by_text_twice_with_two_scores_is_named_by_its_text(tmp_path: Path) -> None:
    """It was named by the id made from the text's hash ('t:52cb6b5e...'), which the user never wrote."""
    from registry.importers.tabular import read_model_evaluations

    path = tmp_path / "t.csv"
    long = "Which of these " + "very " * 30 + "long options?"
    path.write_text(f'query,score\nWhat is 2+2?,1\n"{long}",1\nWhat is 2+2?,0\n"{long}",1\n', encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_model_evaluations(path, "m")
    assert caught.value.line == 4 and caught.value.field == "score"
    assert "query 'What is 2+2?' is given twice with different scores: line 2 (1) and line 4 (0)" in str(caught.value)
    path.write_text(f'query,score\n"{long}",1\n"{long}",0\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"query 'Which of these very very .{50,}\.\.\.' is given twice"):
        read_model_evaluations(path, "m")
    path.write_text("query,score,task\nWhat is 2+2?,1,math\nWhat is 2+2?,1,law\n", encoding="utf-8")
    assert ("t.csv line 3: query 'What is 2+2?' is given task 'law' here and task 'math' on line 2; the first is kept"
            in read_model_evaluations(path, "m").warnings)
