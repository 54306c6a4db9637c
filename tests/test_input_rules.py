"""Input rules end to end: the CLI, the Python API and the HTTP service refuse (or warn about) the same
things in the same words: JSON Lines/Parquet scores that are booleans or strings, filters whose ordering
value is not a number, an evaluations CSV without a query column, a task that contradicts the stored
one, and model names holding invisible format characters (zero-width, bidi overrides)."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import SMALL_TRAINED
from service_harness import TOKEN, copy_home

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CF_NAMES = {"zero\u200bwidth": "U+200B", "rtl\u202eevil": "U+202E", "joined\u200dname": "U+200D",
            "soft\u00adhyphen": "U+00AD", "\ufeffbom": "U+FEFF"}


@pytest.fixture(scope="module")
def base_home(synthetic_home) -> Path:
    return synthetic_home("input-rules", **SMALL_TRAINED)


@pytest.fixture
def home(base_home, tmp_path) -> Path:
    return copy_home(base_home, tmp_path / "home")


def _stored(home: Path) -> list[dict]:
    """The stored queries: query_id, text, task."""
    from registry import Registry

    return Registry.open(home).store.read("queries", ["query_id", "text", "task"]).to_pylist()


def _model_names(home: Path) -> set[str]:
    from registry import Registry

    return {m.name for m in Registry.open(home).list()}


def _cli(home: Path, *args: str, code: int = 0):
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result


def _app(home: Path):
    from registry.service.app import create_app
    from registry.service.settings import ServiceSettings

    return create_app(ServiceSettings(home=home, token=TOKEN, query_backend="fp32"))


def _conflict(home: Path) -> tuple[list[dict], dict, str]:
    """The stored queries, the first of them, and a stored task other than its own."""
    queries = _stored(home)
    first = queries[0]
    return queries, first, sorted({q["task"] for q in queries} - {first["task"]})[0]


# ------------------------------------------------------------------ 1. scores in JSON Lines are JSON numbers
@pytest.mark.parametrize("score, words", [(True, "score true is a boolean"), ("0.5", "score '0.5' is a string")])
def test_cli_add_model_refuses_a_jsonl_boolean_or_string_score(home, tmp_path, score, words):
    queries = _stored(home)
    evals = tmp_path / "e.jsonl"
    evals.write_text(json.dumps({"query_id": queries[0]["query_id"], "score": 1}) + "\n"
                     + json.dumps({"query_id": queries[1]["query_id"], "score": score}) + "\n", encoding="utf-8")

    result = _cli(home, "add-model", "typed-scores", "--evals", str(evals), code=2)

    assert f"{evals}, line 2, field 'score'" in result.output and words in result.output
    assert "typed-scores" not in _model_names(home)


@pytest.mark.parametrize("score, words", [(True, "score true is a boolean"), ("0.5", "score '0.5' is a string")])
def test_http_file_upload_refuses_a_jsonl_boolean_or_string_score_as_the_json_body_does(home, score, words):
    from fastapi.testclient import TestClient

    query = _stored(home)[0]
    upload = (json.dumps({"query_id": query["query_id"], "score": score}) + "\n").encode()
    with TestClient(_app(home)) as client:
        body = client.post("/v1/models", headers=AUTH,
                           json={"name": "typed", "evaluations": [{"query_id": query["query_id"], "score": score}]})
        assert body.status_code == 422 and body.json()["error"]["field"] == "evaluations.0.score", body.text
        r = client.post("/v1/models/typed/file", headers=AUTH, files={"file": ("mine.jsonl", upload)})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert (error["file"], error["line"], error["field"]) == ("mine.jsonl", 1, "score")
        assert words in error["message"]
        assert client.get("/v1/models/typed").status_code == 404


# ------------------------------------------------------------------ 2. params_b filters read 7B
def test_cli_models_list_where_params_b_reads_sizes_and_refuses_a_non_number(home):
    from registry import Registry

    sizes = {m.name: m.params_b for m in Registry.open(home).list()}
    above_7 = sorted(name for name, size in sizes.items() if size is not None and size > 7)
    assert above_7 and len(above_7) < len(sizes)  # the recipe has 1B, 7B and 13B models

    listed = json.loads(_cli(home, "models", "list", "--where", "params_b > 7B", "--json").stdout)
    assert sorted(m["name"] for m in listed) == above_7

    refused = _cli(home, "models", "list", "--where", "params_b > abc", code=2)
    assert "where" in refused.output and "params_b > 'abc'" in refused.output and "not a number" in refused.output


# ------------------------------------------------------------------ 3. a CSV without a query column
def test_cli_add_model_csv_without_a_query_column_is_refused_on_line_1(home, tmp_path):
    evals = tmp_path / "t.csv"
    evals.write_text(f"qid,score\n{_stored(home)[0]['query_id']},1\n", encoding="utf-8")

    result = _cli(home, "add-model", "t", "--evals", str(evals), code=2)

    assert f"{evals}, line 1: no query or query_id column; the header has qid, score" in result.output
    assert "t" not in _model_names(home)


# ------------------------------------------------------------------ 4. a task that contradicts the stored one
def test_cli_add_model_warns_when_a_row_gives_a_stored_query_another_task(home, tmp_path):
    queries, first, other = _conflict(home)
    evals = tmp_path / "t.csv"
    evals.write_text("query_id,score,task\n" + f"{first['query_id']},1,{other}\n"
                     + "".join(f"{q['query_id']},{i % 2},{q['task']}\n" for i, q in enumerate(queries[1:40])),
                     encoding="utf-8")

    result = _cli(home, "add-model", "t", "--evals", str(evals), "--json")

    warnings = json.loads(result.stdout)["warnings"]
    assert (f"{evals}, line 2: query {first['query_id']!r} is stored with task {first['task']!r}; the task {other!r} "
            "given here was not applied (a stored query keeps its task)") in warnings
    assert len([w for w in warnings if "stored with task" in w]) == 1  # the rows that agree are not named
    assert {q["query_id"]: q["task"] for q in _stored(home)}[first["query_id"]] == first["task"]


def test_http_add_and_refine_warn_when_a_row_gives_a_stored_query_another_task(home):
    from fastapi.testclient import TestClient

    queries, first, other = _conflict(home)
    evaluations = [{"query_id": q["query_id"], "score": i % 2, "task": q["task"]} for i, q in enumerate(queries[1:40])]
    with TestClient(_app(home)) as client:
        r = client.post("/v1/models", headers=AUTH, json={"name": "tasks", "evaluations": evaluations})
        assert r.status_code == 201, r.text
        assert not [w for w in r.json()["warnings"] if "stored with task" in w]
        r = client.post("/v1/models/tasks/refine", headers=AUTH, json={"evaluations": [
            {"query": first["text"], "score": 1, "task": other}]})
        assert r.status_code in (200, 201), r.text
        assert [w for w in r.json()["warnings"] if "stored with task" in w] == [
            f"evaluations, line 1: query {first['query_id']!r} is stored with task {first['task']!r}; the task {other!r} given "
            "here was not applied (a stored query keeps its task)"]


def test_an_uploaded_file_s_task_warning_names_it_as_the_client_sent_it(home):
    """The warning is made after the upload is parsed: it named the service's spool file, not the client's."""
    from fastapi.testclient import TestClient

    queries, first, other = _conflict(home)
    body = "query_id,score,task\n" + f"{first['query_id']},1,{other}\n" + "".join(
        f"{q['query_id']},{i % 2},{q['task']}\n" for i, q in enumerate(queries[1:40]))
    with TestClient(_app(home)) as client:
        r = client.post("/v1/models/uploaded/file", headers=AUTH, files={"file": ("mine.csv", body.encode())})
    assert r.status_code == 201, r.text
    assert [w for w in r.json()["warnings"] if "stored with task" in w] == [
        f"mine.csv, line 2: query {first['query_id']!r} is stored with task {first['task']!r}; the task {other!r} "
        "given here was not applied (a stored query keeps its task)"]


def test_a_parquet_file_s_task_warning_counts_rows(home, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    queries, first, other = _conflict(home)
    evals = tmp_path / "more.parquet"
    pq.write_table(pa.table({"model": ["importer"] * 3, "query_id": [q["query_id"] for q in queries[1:3]] + [first["query_id"]],
                             "score": [1.0, 0.0, 1.0], "task": [queries[1]["task"], queries[2]["task"], other]}), evals)
    report = json.loads(_cli(home, "import", str(evals), "--json").stdout)
    assert [w for w in report["warnings"] if "stored with task" in w] == [
        f"{evals}, row 3: query {first['query_id']!r} is stored with task {first['task']!r}; the task {other!r} "
        "given here was not applied (a stored query keeps its task)"]


# ------------------------------------------------------------------ 5. invisible characters in names
@pytest.mark.parametrize("name", list(CF_NAMES))
def test_a_name_with_an_invisible_format_character_is_refused_by_the_cli_the_api_and_http(home, tmp_path, name):
    from fastapi.testclient import TestClient

    from registry import Registry
    from registry.errors import InputError

    point = CF_NAMES[name]
    queries = _stored(home)
    before = _model_names(home)
    evals = tmp_path / "e.csv"
    evals.write_text("query_id,score\n" + "".join(f"{q['query_id']},{i % 2}\n" for i, q in enumerate(queries[:8])),
                     encoding="utf-8")

    cli_refusal = _cli(home, "add-model", "--evals", str(evals), "--", name, code=2).output
    assert point in cli_refusal and "argument NAME" in cli_refusal

    with pytest.raises(InputError) as api_refusal:
        Registry.open(home).add_model(name, evals)
    assert api_refusal.value.field == "name" and point in api_refusal.value.problem

    with TestClient(_app(home)) as client:
        body = client.post("/v1/models", headers=AUTH, json={"name": name, "evaluations": [
            {"query_id": q["query_id"], "score": 1} for q in queries[:2]]})
        assert body.status_code == 422 and body.json()["error"]["field"] == "name", body.text
        assert point in body.json()["error"]["message"]
        upload = client.post(f"/v1/models/{quote(name, safe='')}/file", headers=AUTH,
                             files={"file": ("e.csv", evals.read_bytes())})
        assert upload.status_code == 422 and upload.json()["error"]["field"] == "name", upload.text
        assert point in upload.json()["error"]["message"]

    assert _model_names(home) == before


def test_names_with_visible_unicode_are_still_accepted(home, tmp_path):
    queries = _stored(home)
    evals = tmp_path / "e.csv"
    evals.write_text("query_id,score\n" + "".join(f"{q['query_id']},{i % 2}\n" for i, q in enumerate(queries[:8])),
                     encoding="utf-8")

    _cli(home, "add-model", "--evals", str(evals), "--", "ünï cødé/β-עברית")

    assert "ünï cødé/β-עברית" in _model_names(home)


@pytest.mark.parametrize("name", [".", ".."])
def test_a_name_that_is_a_dot_path_segment_is_refused(home, tmp_path, name):
    """/v1/models/. and /v1/models/.. are normalised away by HTTP clients: such a model could not be reached."""
    from registry import Registry
    from registry.errors import InputError

    evals = tmp_path / "e.csv"
    evals.write_text("query_id,score\n" + "".join(f"{q['query_id']},{i % 2}\n" for i, q in enumerate(_stored(home)[:8])),
                     encoding="utf-8")
    before = _model_names(home)
    with pytest.raises(InputError) as refusal:
        Registry.open(home).add_model(name, evals)
    assert refusal.value.field == "name" and "path segment" in refusal.value.problem
    assert _model_names(home) == before


# ------------------------------------------------------------------ 6. metadata keys and values
@pytest.mark.parametrize("key", ["name", "accuracy", "version", "n_evals", "task:math"])
def test_a_metadata_key_that_shadows_a_column_is_refused_by_the_cli_the_api_and_http(home, tmp_path, key):
    from fastapi.testclient import TestClient

    from registry import Registry
    from registry.errors import InputError

    query = _stored(home)[0]
    evals = tmp_path / "e.jsonl"
    evals.write_text(json.dumps({"query_id": query["query_id"], "score": 1}) + "\n", encoding="utf-8")
    refused = _cli(home, "add-model", "shadow", "--evals", str(evals), "--meta", f"{key}=x", code=2)
    assert f"{key!r} is a column of its own, not a metadata key" in refused.output
    with pytest.raises(InputError) as err:
        Registry.open(home).add_model("shadow", [{"query_id": query["query_id"], "score": 1}], {key: "x"})
    assert err.value.field == "metadata" and "column of its own" in str(err.value)
    with TestClient(_app(home)) as client:
        r = client.post("/v1/models", headers=AUTH, json={
            "name": "shadow", "metadata": {key: "x"}, "evaluations": [{"query_id": query["query_id"], "score": 1}]})
        assert r.status_code == 422 and "column of its own" in r.json()["error"]["message"], r.text
    assert "shadow" not in _model_names(home)


def test_a_list_in_metadata_is_refused_naming_its_key(home):
    from fastapi.testclient import TestClient

    query = _stored(home)[0]
    with TestClient(_app(home)) as client:
        r = client.post("/v1/models", headers=AUTH, json={
            "name": "listy", "metadata": {"regions": ["eu", "us"]},
            "evaluations": [{"query_id": query["query_id"], "score": 1}]})
        assert r.status_code == 422, r.text
        assert "regions: a metadata value is text, a number, true/false or empty, not a list (only tags takes a list)" \
            in r.json()["error"]["message"]
        tagged = client.post("/v1/models", headers=AUTH, json={
            "name": "tagged", "metadata": {"tags": ["eu", "us"]},
            "evaluations": [{"query_id": query["query_id"], "score": 1}]})
        assert tagged.status_code == 201, tagged.text
    assert "listy" not in _model_names(home)


def test_metadata_text_past_its_length_limit_is_refused_naming_the_file_line_and_key(home, tmp_path):
    data = tmp_path / "tri"
    data.mkdir()
    query = _stored(home)[0]
    (data / "queries.csv").write_text(f"query_id,text,task\n{query['query_id']},{query['text']},{query['task']}\n",
                                      encoding="utf-8")
    (data / "models.csv").write_text("model_id,name,family\n1,long-family," + "x" * 201 + "\n", encoding="utf-8")
    (data / "evals.csv").write_text(f"model_id,query_id,score\n1,{query['query_id']},1\n", encoding="utf-8")
    before = _model_names(home)
    refused = _cli(home, "import", str(data), code=2)
    assert (f"{data / 'models.csv'}, line 2, field 'family': family has a value of 201 characters" in refused.output
            and "the limit for family is 200" in refused.output)
    evals = tmp_path / "e.jsonl"
    evals.write_text(json.dumps({"query_id": query["query_id"], "score": 1}) + "\n", encoding="utf-8")
    refused = _cli(home, "add-model", "long-note", "--evals", str(evals), "--meta", "note=" + "n" * 10_001, code=2)
    assert "note has a value of 10,001 characters" in refused.output and "the limit for note is 10,000" in refused.output
    _cli(home, "add-model", "long-note", "--evals", str(evals), "--meta", "note=" + "n" * 10_000,
         "--meta", "endpoint=https://" + "e" * 1_990)  # at the limits: stored
    assert _model_names(home) == before | {"long-note"}


def test_a_triple_import_keeps_a_reserved_models_csv_column_out_of_metadata(tmp_path):
    from registry import Registry

    data = tmp_path / "triple"
    data.mkdir()
    (data / "queries.csv").write_text("query_id,task,text\n0,math,What is two plus two?\n1,law,Is a contract binding?\n")
    (data / "models.csv").write_text("model_id,name,family,accuracy\n0,m-a,fa,0.5\n1,m-b,fb,0.5\n")
    (data / "evals.csv").write_text("model_id,query_id,score\n0,0,1\n0,1,0\n1,0,0\n1,1,1\n")
    reg = Registry.open(tmp_path / "home")
    report = reg.import_path(data, encode=False)
    assert any("column(s) accuracy not kept as metadata" in w for w in report.warnings)
    assert [m.extra for m in reg.list()] == [{}, {}] and {m.family for m in reg.list()} == {"fa", "fb"}


# ------------------------------------------------------------------ 7. Python scores are numbers too
@pytest.mark.parametrize("score, words", [(True, "score true is a boolean"), ("0.5", "score '0.5' is a string")])
def test_the_python_api_refuses_a_boolean_or_string_score_as_files_and_http_do(home, score, words):
    from registry import Registry
    from registry.errors import InputError

    query = _stored(home)[0]
    with pytest.raises(InputError) as err:
        Registry.open(home).add_model("typed-py", [(query["text"], 1), (query["text"] + " again?", score)])
    assert (err.value.file, err.value.line, err.value.field) == ("evaluations", 2, "score") and words in str(err.value)
    assert "typed-py" not in _model_names(home)


@pytest.mark.parametrize("evaluations, line, words", [
    (None, None, "not NoneType"),
    ({"What is 2+2?": 1}, None, "not dict"),  # a mapping of text to score: its keys would have been read as rows
    ([("What is 2+2?", 1), 7], 2, "expected (query, score)"),
    ([("What is 2+2?", 1), "ab"], 2, "expected (query, score)"),  # a string is not a (query, score) pair
])
def test_the_python_api_names_evaluations_that_are_not_rows(home, evaluations, line, words):
    from registry import Registry
    from registry.errors import InputError

    with pytest.raises(InputError) as err:
        Registry.open(home).add_model("shapeless", evaluations)
    assert (err.value.file, err.value.line) == ("evaluations", line) and words in str(err.value)
    assert "shapeless" not in _model_names(home)


# ------------------------------------------------------------------ 8. import says when a stored task is kept
def test_import_warns_when_a_file_gives_a_stored_query_another_task(home, tmp_path):
    queries, first, other = _conflict(home)
    evals = tmp_path / "more.jsonl"
    rows = [{"model": "importer", "query": first["text"], "score": 1, "task": other}]
    rows += [{"model": "importer", "query": q["text"], "score": i % 2, "task": q["task"]} for i, q in enumerate(queries[1:5])]
    evals.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report = json.loads(_cli(home, "import", str(evals), "--json").stdout)
    conflicts = [w for w in report["warnings"] if "stored with task" in w]
    assert conflicts == [f"{evals}, line 1: query {first['query_id']!r} is stored with task {first['task']!r}; the task "
                         f"{other!r} given here was not applied (a stored query keeps its task)"]
    assert {q["query_id"]: q["task"] for q in _stored(home)}[first["query_id"]] == first["task"]



def test_import_refuses_a_padded_model_name_as_add_model_and_http_do(home, tmp_path):
    """A reviewer's finding: `import` trimmed " sp " to "sp" without a word, where add-model and HTTP refuse
    the name; an integer model id is still written as text, as query ids are."""
    queries = _stored(home)
    evals = tmp_path / "padded.jsonl"
    rows = [{"model": "fine", "query": queries[0]["text"], "score": 1},
            {"model": " sp ", "query": queries[1]["text"], "score": 0}]
    evals.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    before = _cli(home, "stats", "--json").stdout
    out = _cli(home, "import", str(evals), code=2)
    assert f"{evals}, line 2, field 'model'" in out.output and "leading or trailing" in out.output
    assert _cli(home, "stats", "--json").stdout == before  # nothing of the file stored
    evals.write_text(json.dumps({"model": 123, "query": queries[0]["text"], "score": 1}) + "\n", encoding="utf-8")
    _cli(home, "import", str(evals))
    assert "123" in _cli(home, "models", "list").stdout

# ------------------------------------------------------------------ GET /v1/queries pages past its cap
def test_http_query_list_without_a_limit_refuses_more_than_one_answer_holds(home, monkeypatch):
    from dataclasses import replace

    from fastapi.testclient import TestClient

    import registry.service.routes.reads as reads

    every = sorted(q["query_id"] for q in _stored(home))
    monkeypatch.setattr(reads, "LIMITS", replace(reads.LIMITS, max_listed_queries=len(every) - 1))
    with TestClient(_app(home)) as client:
        r = client.get("/v1/queries")
        assert r.status_code == 422 and r.json()["error"]["field"] == "limit", r.text
        assert "page with offset and limit" in r.json()["error"]["message"]
        first = client.get("/v1/queries", params={"offset": 1})  # what is left fits
        assert first.status_code == 200 and [q["id"] for q in first.json()["queries"]] == every[1:]
        page = client.get("/v1/queries", params={"limit": 2, "offset": 3}).json()
        assert [q["id"] for q in page["queries"]] == every[3:5] and page["total"] == len(every)
        assert client.get("/v1/queries", params={"offset": -1}).status_code == 422


# ------------------------------------------------------------------ an evaluations "file" that is not a file
def test_a_pipe_or_directory_given_as_evaluations_is_named_as_such_not_as_missing(home, tmp_path):
    """A shell's `--evals <(...)` is a pipe: the readers tell the format by the suffix (Parquet seeks), so it is
    refused, saying what it is, from the CLI, the Python API and the client alike (it read "no such file")."""
    import os

    from registry import Registry
    from registry.client import RegistryClient
    from registry.errors import InputError

    pipe = tmp_path / "evals-pipe"
    os.mkfifo(pipe)
    result = _cli(home, "add-model", "p", "--evals", str(pipe), code=2)
    assert f"{pipe}: not a regular file (a pipe or a device); the evaluations are read from a .csv, .jsonl or " \
           ".parquet file" in result.output
    reg = Registry.open(home)
    with pytest.raises(InputError, match="a directory; the evaluations are read from"):
        reg.add_model("p", tmp_path)
    with pytest.raises(InputError, match="not a regular file"):
        reg.refine(sorted(_model_names(home))[0], pipe)
    client = RegistryClient("http://127.0.0.1:9", token=TOKEN)  # refused before any request is sent
    with pytest.raises(InputError, match="not a regular file"):
        client.add_model("p", pipe)
    with pytest.raises(InputError, match="no such file"):
        client.refine("p", tmp_path / "missing.csv")
    assert "p" not in _model_names(home)
