"""Importing the triple format: counts, metadata, idempotency, the encoding cache, and every refusal."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import MODELS, QUERIES, write_rows, write_triple
from registry import InputError, Registry


def _stats(home) -> dict:
    result = CliRunner().invoke(cli, ["--home", str(home), "stats", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


class CountingEncoder:
    """Wraps the real small encoder and remembers which texts it was asked to encode."""

    def __init__(self, calls: list[str]) -> None:
        from encoder.query_encoder import load_query_encoder

        self._inner = load_query_encoder("all-MiniLM-L6-v2")
        self._calls = calls

    def encode(self, texts):
        self._calls.extend(texts)
        return self._inner.encode(texts)


@pytest.fixture
def counting(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr("registry.api._load_query_encoder", lambda name: CountingEncoder(calls))
    return calls


def test_import_counts_metadata_and_vectors(home, tmp_path, counting):
    report = Registry.open(home).import_path(write_triple(tmp_path / "d"))
    assert (report.new_models, report.new_queries, report.new_evaluations) == (2, 5, 10)
    stats = _stats(home)
    assert stats["n_models"] == 2 and stats["n_queries"] == 5 and stats["n_evaluations"] == 10
    assert stats["queries_per_task"] == {"biology": 1, "law": 2, "math": 2}
    assert stats["coverage"] == 1.0
    assert stats["query_vectors"] == {"all-MiniLM-L6-v2": 5}
    beta = Registry.open(home).get("beta-13b")
    assert (beta.family, beta.params_b, beta.access) == ("beta", 13.0, "api")
    assert sorted(counting) == sorted(q[2] for q in QUERIES)


def test_repeating_an_import_changes_nothing(home, tmp_path, counting):
    reg = Registry.open(home)
    reg.import_path(write_triple(tmp_path / "d"))
    versions = reg.store.versions()
    again = reg.import_path(write_triple(tmp_path / "d"))
    assert not again.changed and again.unchanged_evaluations == 10
    assert reg.store.versions() == versions  # not one table was written


def test_second_import_encodes_only_new_texts(home, tmp_path, counting):
    Registry.open(home).import_path(write_triple(tmp_path / "a"))
    counting.clear()
    shared_and_new = QUERIES[:3] + [("n1", "math", "What is the derivative of x squared?")]
    # Another process, another import: ids differ, texts overlap; only the new text is encoded.
    renamed = [(f"other-{i}", task, text) for i, task, text in shared_and_new]
    Registry.open(home).import_path(write_triple(tmp_path / "b", queries=renamed))
    assert counting == ["What is the derivative of x squared?"]


def test_changed_score_replaces_the_old_one(home, tmp_path, counting):
    reg = Registry.open(home)
    reg.import_path(write_triple(tmp_path / "a"))
    flipped = [("0", "q1", 1), ("0", "q2", 1)]  # alpha had 0 on q1 and 1 on q2
    report = reg.import_path(write_triple(tmp_path / "b", evals=flipped))
    assert (report.updated_evaluations, report.unchanged_evaluations, report.new_evaluations) == (1, 1, 0)
    table = reg.store.read("evaluations").to_pylist()
    scores = {(r["model"], r["query_id"]): r["score"] for r in table}
    assert scores[("alpha-7b", "q1")] == 1.0 and len(table) == 10


def _bad_triple(tmp_path, case: str):
    d = write_triple(tmp_path / case)
    evals_header = ["model_id", "query_id", "score"]
    if case == "missing-column":
        write_rows(d / "evals.csv", ["model_id", "query_id"], [("0", "q1")])
        return d, "evals.csv, line 1, field 'score'", "missing column(s) score"
    if case == "not-a-number":
        write_rows(d / "evals.csv", evals_header, [("0", "q1", 1), ("0", "q2", "yes")])
        return d, "evals.csv, line 3, field 'score'", "'yes' is not a number"
    if case == "full-width-digit":
        write_rows(d / "evals.csv", evals_header, [("0", "q1", 1), ("0", "q2", "\uff11")])
        return d, "evals.csv, line 3, field 'score'", "'\uff11' is not a number"
    if case == "out-of-range":
        write_rows(d / "evals.csv", evals_header, [("0", "q1", 1.5)])
        return d, "evals.csv, line 2, field 'score'", "outside [0, 1]"
    if case == "nan":
        write_rows(d / "evals.csv", evals_header, [("0", "q1", "nan")])
        return d, "evals.csv, line 2, field 'score'", "NaN"
    if case == "unknown-query":
        write_rows(d / "evals.csv", evals_header, [("0", "q1", 1), ("0", "q99", 0)])
        return d, "evals.csv, line 3, field 'query_id'", "'q99' is not in queries.csv"
    if case == "unknown-model":
        write_rows(d / "evals.csv", evals_header, [("7", "q1", 1)])
        return d, "evals.csv, line 2, field 'model_id'", "'7' is not in models.csv"
    if case == "empty-file":
        (d / "queries.csv").write_text("")
        return d, "queries.csv", "file is empty"
    if case == "header-only":
        write_rows(d / "models.csv", ["model_id", "name"], [])
        return d, "models.csv", "no data rows"
    if case == "not-utf8":
        (d / "queries.csv").write_bytes("query_id,task,text\nq1,math,caf\xe9\n".encode("latin-1"))
        return d, "queries.csv, line 2", "not UTF-8"
    if case == "bad-params":
        write_rows(d / "models.csv", ["model_id", "name", "params_b"], [("0", "alpha-7b", "seven")])
        return d, "models.csv, line 2, field 'params_b'", "params_b 'seven' is not a number"
    raise AssertionError(case)


BAD_CASES = ["missing-column", "not-a-number", "full-width-digit", "out-of-range", "nan", "unknown-query", "unknown-model",
             "empty-file", "header-only", "not-utf8", "bad-params"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_refused_and_nothing_changes(home, tmp_path, counting, case):
    Registry.open(home).import_path(write_triple(tmp_path / "good", queries=QUERIES[:2], models=MODELS[:1]))
    before = _stats(home)
    path, where, problem = _bad_triple(tmp_path, case)
    result = CliRunner().invoke(cli, ["--home", str(home), "import", str(path)])
    assert result.exit_code == 2
    assert where in result.output and problem in result.output, result.output
    assert _stats(home) == before


def test_query_id_reused_for_another_text_is_refused(home, tmp_path, counting):
    Registry.open(home).import_path(write_triple(tmp_path / "a"))
    changed = [("q1", "math", "A different question entirely")] + QUERIES[1:]
    with pytest.raises(InputError, match=r"queries.csv, line 2, field 'query_id'.*different text"):
        Registry.open(home).import_path(write_triple(tmp_path / "b", queries=changed))
    Registry.open(home).import_path(write_triple(tmp_path / "c", queries=changed), id_prefix="v2:")
    assert _stats(home)["n_queries"] == 10


def _npy(tmp_path, name, array):
    path = tmp_path / name
    np.save(path, array)
    return path


def test_precomputed_vectors_are_stored_and_not_reencoded(home, tmp_path, counting):
    vectors = np.eye(5, 8, dtype=np.float16)
    report = Registry.open(home).import_path(
        write_triple(tmp_path / "d"), encoder="all-MiniLM-L6-v2",
        query_embeddings=_npy(tmp_path, "v.npy", vectors),
        query_ids=_npy(tmp_path, "i.npy", np.array(["q1", "q2", "q3", "q4", "q5"])),
    )
    # The stored dimension belongs to this encoder from now on; nothing was encoded.
    assert report.stored_precomputed == 5 and report.encoded_texts == 0 and counting == []
    assert Registry.open(home).store.vector_dim("all-MiniLM-L6-v2") == 8


@pytest.mark.parametrize("case", ["row-count", "unknown-ids", "dimension", "pickled"])
def test_bad_precomputed_vectors_are_refused(home, tmp_path, counting, case):
    reg = Registry.open(home)
    reg.import_path(write_triple(tmp_path / "good", queries=QUERIES[:2], models=MODELS[:1]))  # 384-d vectors
    before = _stats(home)
    ids = np.array(["q1", "q2", "q3", "q4", "q5"])
    vectors = np.ones((5, 384), dtype=np.float32)
    expect = {"row-count": "5 ids for 4 vector rows", "unknown-ids": "not known queries",
              "dimension": "already stores 384-d vectors; these are 16-d", "pickled": "not a plain .npy"}[case]
    if case == "row-count":
        vectors = vectors[:4]
    if case == "unknown-ids":
        ids = np.array(["q1", "q2", "q3", "q4", "nope"])
    if case == "dimension":
        vectors = np.ones((5, 16), dtype=np.float32)
    vec_path = _npy(tmp_path, "v.npy", vectors)
    if case == "pickled":
        np.save(vec_path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    args = ["--home", str(home), "import", str(write_triple(tmp_path / "d")), "--encoder", "all-MiniLM-L6-v2",
            "--query-embeddings", str(vec_path), "--query-ids", str(_npy(tmp_path, "i.npy", ids))]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and expect in result.output, result.output
    assert _stats(home) == before
