"""Every import format through `registry import` into the store, with auto-detection."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli.main import cli
from test_import_lm_eval import sample, write_run


def run(home, *args, ok=True):
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def stats(home):
    return json.loads(run(home, "stats", "--json").output)


def test_jsonl_then_ids_only_then_unknown_id(home, tmp_path):
    rows = [{"model": "m1", "query": "What is 2+2?", "score": 1, "task": "math"},
            {"model": "m2", "query": "What is 2+2?", "score": 0.5, "task": "math"},
            {"model": "m1", "query": "Capital of Peru?", "score": 0, "task": "geo"}]
    first = tmp_path / "a.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run(home, "import", str(first))
    assert (stats(home)["n_models"], stats(home)["n_queries"], stats(home)["n_evaluations"]) == (2, 2, 3)

    from registry import Registry

    stored = Registry.open(home).store.read("queries").to_pylist()
    known = next(q["query_id"] for q in stored if q["text"] == "Capital of Peru?")
    table = pa.table({"model": ["m2"], "query_id": [known], "score": [1.0]})
    pq.write_table(table, tmp_path / "b.parquet")
    run(home, "import", str(tmp_path / "b.parquet"))
    assert stats(home)["n_evaluations"] == 4

    before = stats(home)
    bad = tmp_path / "c.jsonl"
    bad.write_text(json.dumps({"model": "m3", "query_id": "nope", "score": 1}) + "\n")
    result = run(home, "import", str(bad), ok=False)
    assert result.exit_code == 2 and "c.jsonl, line 1, field 'query_id'" in result.output
    assert "neither in this import nor in the store" in result.output
    assert stats(home) == before


def test_lm_eval_run_directory(home, tmp_path):
    results = {"model_name": "EleutherAI/pythia-160m", "config": {"model_args": "pretrained=EleutherAI/pythia-160m"}}
    lines = [sample(i, f"Question {i}: what is {i} + {i}?", acc=float(i % 2)) for i in range(4)]
    write_run(tmp_path / "out" / "pythia", results, {"arith": lines})
    out = run(home, "import", str(tmp_path / "out"), "--json").stdout  # a thin-model warning goes to stderr
    assert json.loads(out)["new_evaluations"] == 4
    listed = json.loads(run(home, "models", "list", "--json").output)
    assert [m["name"] for m in listed] == ["EleutherAI/pythia-160m"]
    assert stats(home)["queries_per_task"] == {"arith": 4}


def test_embedllm_csv(home, tmp_path):
    header = "prompt_id,model_id,model_name,label,prompt,category_id,category\n"
    body = ("0,0,m-a,1,What is DNA?,0,bio\n0,1,m-b,0,What is DNA?,0,bio\n"
            "1,0,m-a,0,Define tort.,1,law\n1,0,m-a,1,Define tort.,1,law\n")
    (tmp_path / "train.csv").write_text(header + body)
    result = run(home, "import", str(tmp_path / "train.csv"), "--format", "embedllm")
    assert "1 repeated (model, query) rows; the last score of each was kept" in result.output
    assert (stats(home)["n_models"], stats(home)["n_evaluations"]) == (2, 3)


def test_an_import_adds_to_a_stored_models_metadata_and_erases_none_of_it(home, tmp_path):
    """`import rows.jsonl --meta dataset=x` of a stored model's evaluation rows kept only `dataset` (a
    reviewer's data loss: family, size and access gone, no version to restore); a second models.csv with
    fewer columns erased the rest likewise. An import now adds or changes the fields it gives."""
    from helpers import write_rows, write_triple
    from registry import Registry

    run(home, "import", str(write_triple(tmp_path / "t")))
    rows = tmp_path / "more.jsonl"
    rows.write_text(json.dumps({"model": "alpha-7b", "query": "What is 12 times 7?", "score": 0}) + "\n")
    out = run(home, "import", str(rows), "--meta", "dataset=extra")
    assert "(1 stored models' metadata updated)" in out.output
    alpha = Registry.open(home).show("alpha-7b").record
    assert (alpha.family, alpha.params_b, alpha.access, alpha.extra) == ("alpha", 7.0, "open", {"dataset": "extra"})

    poorer = write_triple(tmp_path / "t2")
    write_rows(poorer / "models.csv", ["model_id", "name", "licence", "family"],
               [("0", "alpha-7b", "mit", "alpha-renamed"), ("1", "beta-13b", "", "")])
    run(home, "import", str(poorer))
    stored = {name: Registry.open(home).show(name).record for name in ("alpha-7b", "beta-13b")}
    assert (stored["alpha-7b"].family, stored["alpha-7b"].licence, stored["alpha-7b"].params_b) == \
        ("alpha-renamed", "mit", 7.0)  # given fields change, the others stay
    assert (stored["beta-13b"].family, stored["beta-13b"].params_b, stored["beta-13b"].access) == ("beta", 13.0, "api")
    assert stored["alpha-7b"].extra == {"dataset": "extra"}


@pytest.mark.parametrize("meta, said", [
    (("price_in=1e308", "price_out=1"), "option --meta: price_in=1e+308: a metadata number must be finite and within"),
    (("params_b=1e308",), "option --meta: params_b: Input should be less than or equal to 100000"),
])
def test_an_import_refuses_metadata_numbers_out_of_range_in_one_line(home, tmp_path, meta, said):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"model": "m1", "query": "What is 2+2?", "score": 1}) + "\n")
    out = run(home, "import", str(rows), *(a for m in meta for a in ("--meta", m)), ok=False)
    error = out.output.strip().splitlines()[-1]
    assert out.exit_code != 0 and error == next(l for l in out.output.splitlines() if l.startswith("Error")), out.output
    assert said in error and "pydantic" not in out.output and "validation error" not in out.output, out.output
    assert stats(home)["n_models"] == 0


def test_a_near_miss_of_a_format_says_what_it_lacks_not_cannot_tell(home, tmp_path):
    """A reviewer's five directories and files that auto-detection answered with 'cannot tell the format'."""
    from helpers import write_triple

    short = write_triple(tmp_path / "short")
    (short / "models.csv").unlink()
    evals_dir = write_triple(tmp_path / "evals-dir")
    (evals_dir / "evals.csv").unlink()
    (evals_dir / "evals.csv").mkdir()
    no_samples = tmp_path / "run"
    no_samples.mkdir()
    (no_samples / "results_2026-01-01T00-00-00.json").write_text("{}")
    typo = tmp_path / "typo.csv"
    typo.write_text("prompt_id,model_id,model_name,lable,prompt\n1,0,m,1,What?\n")
    before = stats(home)
    for path, says in [(short, "missing models.csv"), (evals_dir, "evals.csv is not a file"),
                       (no_samples, "without samples_<task>_*.jsonl files"),
                       (typo, "this header is 'prompt_id,model_id,model_name,lable,prompt'")]:
        out = run(home, "import", str(path), ok=False)
        assert out.exit_code == 2 and says in out.output and "cannot tell" not in out.output, out.output
        assert "Traceback" not in out.output
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "cannot tell the format" in run(home, "import", str(empty), ok=False).output
    assert stats(home) == before
