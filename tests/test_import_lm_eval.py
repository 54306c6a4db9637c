"""lm-evaluation-harness --log_samples importer: run directories written into tmp_path."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from registry.errors import InputError
from registry.importers.lm_eval import looks_like, read_lm_eval

STAMP = "2024-05-01T12-30-45.123456"
LATER = "2024-06-02T08-00-00.000001"


def sample(
    doc_id: int,
    prompt: str,
    *,
    shape: str = "dict",
    doc_hash: str | None = None,
    filter: str = "none",
    **metrics: Any,
) -> dict[str, Any]:
    """One samples line as the harness writes it; `shape` picks the `arguments` layout."""
    if shape == "dict":  # what EvaluationTracker.save_results_samples writes
        arguments: Any = {"gen_args_0": {"arg_0": prompt, "arg_1": " A"}, "gen_args_1": {"arg_0": prompt, "arg_1": " B"}}
    else:  # the evaluator's own list of [context, continuation] requests, as older files hold
        arguments = [[prompt, " A"], [prompt, " B"]]
    line = {
        "doc_id": doc_id,
        "doc": {"question": prompt},
        "target": "0",
        "arguments": arguments,
        "resps": [[["-1.0", "False"]], [["-2.0", "False"]]],
        "filtered_resps": [["-1.0", "False"], ["-2.0", "False"]],
        "filter": filter,
        "metrics": list(metrics),
        "doc_hash": doc_hash if doc_hash is not None else default_hash(doc_id),
        "prompt_hash": "p" * 64,
        "target_hash": "t" * 64,
    }
    if doc_hash == "":
        del line["doc_hash"]
    line.update(metrics)
    return line


def default_hash(doc_id: int) -> str:
    return f"{doc_id:016x}" + "e" * 48  # sha256-long; its first 16 characters are the id's key


def key(task: str, doc_id: int) -> str:
    return f"{task}:{doc_id:016x}"


def write_run(
    folder: Path, results: dict[str, Any] | None, tasks: dict[str, list[dict]], *, stamp: str = STAMP
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if results is not None:
        (folder / f"results_{stamp}.json").write_text(json.dumps(results), encoding="utf-8")
    for task, lines in tasks.items():
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        (folder / f"samples_{task}_{stamp}.jsonl").write_text(text, encoding="utf-8")
    return folder


def evaluations(batch) -> list[tuple[str, str, float]]:
    return sorted(zip(batch.eval_models, batch.eval_queries, batch.eval_scores))


def test_a_run_gives_one_query_per_document_and_the_acc_score(tmp_path: Path) -> None:
    few_shot = "Q: 1+1?\nA: 2\n\nQ: 2+3?\nA:"
    write_run(tmp_path / "org__m", {"model_name": "org/m", "config": {"model_args": "pretrained=other"}}, {
        "arc_easy": [
            sample(0, few_shot, doc_hash="ab" * 32, acc=1.0, acc_norm=0.0),
            sample(1, "Q: 7-5?\nA:", shape="list", doc_hash="", acc=False, acc_norm=True),
        ],
        "mmlu_high_school_biology": [sample(3, "Which organelle?", acc=True)],
    })

    batch = read_lm_eval(tmp_path, id_prefix="h:")

    assert [(q.id, q.text, q.task) for q in batch.queries] == [
        ("h:arc_easy:" + "ab" * 8, few_shot, "arc_easy"),  # few-shot examples are part of the text
        ("h:arc_easy:1", "Q: 7-5?\nA:", "arc_easy"),  # no doc_hash: the doc_id
        ("h:" + key("mmlu_high_school_biology", 3), "Which organelle?", "mmlu_high_school_biology"),
    ]
    assert [m.name for m in batch.models] == ["org/m"]
    assert evaluations(batch) == sorted([
        ("org/m", "h:arc_easy:" + "ab" * 8, 1.0),
        ("org/m", "h:arc_easy:1", 0.0),
        ("org/m", "h:" + key("mmlu_high_school_biology", 3), 1.0),
    ])
    assert batch.warnings == []
    assert looks_like(tmp_path)


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        pytest.param({"model_name": "", "config": {"model_args": "pretrained=EleutherAI/pythia-160m,dtype=float32"}},
                     "EleutherAI/pythia-160m", id="model_args-string"),
        pytest.param({"config": {"model_args": {"pretrained": "org/dict-model", "dtype": "auto"}}},
                     "org/dict-model", id="model_args-dict"),
        pytest.param({"config": {"model_args": "model=gpt-4o-mini,base_url=x"}}, "gpt-4o-mini", id="model_args-api"),
        pytest.param({"config": {"model_args": ""}, "model_name_sanitized": "org__sanitized"},
                     "org__sanitized", id="model_name_sanitized"),
    ],
)
def test_model_name_fallbacks(tmp_path: Path, results: dict, expected: str) -> None:
    write_run(tmp_path, results, {"boolq": [sample(0, "Is it?", acc=1)]})

    batch = read_lm_eval(tmp_path)

    assert [m.name for m in batch.models] == [expected]


def test_model_name_argument_overrides_the_results_file(tmp_path: Path) -> None:
    write_run(tmp_path, {"model_name": "org/m"}, {"boolq": [sample(0, "Is it?", acc=1)]})

    batch = read_lm_eval(tmp_path, model_name="my-finetune")

    assert batch.eval_models == ["my-finetune"]


def test_samples_without_results_need_a_model_name(tmp_path: Path) -> None:
    run = write_run(tmp_path, None, {"boolq": [sample(0, "Is it?", acc=1)]})

    with pytest.raises(InputError, match="pass model_name") as caught:
        read_lm_eval(tmp_path)
    assert caught.value.file == str(run / f"samples_boolq_{STAMP}.jsonl")

    assert read_lm_eval(tmp_path, model_name="x").eval_models == ["x"]


def test_results_naming_no_model_is_refused(tmp_path: Path) -> None:
    write_run(tmp_path, {"config": {}}, {"boolq": [sample(0, "Is it?", acc=1)]})

    with pytest.raises(InputError) as caught:
        read_lm_eval(tmp_path)

    assert caught.value.field == "model_name"
    assert caught.value.file.endswith(f"results_{STAMP}.json")


def test_several_runs_import_every_model_and_pair_files_by_timestamp(tmp_path: Path) -> None:
    write_run(tmp_path / "org__a", {"model_name": "org/a"}, {"boolq": [sample(0, "Is it?", acc=1)]})
    write_run(tmp_path / "org__b", {"model_name": "org/b"}, {"boolq": [sample(0, "Is it?", acc=0)]})
    # Two runs in one directory: each samples file goes with the results of its own timestamp.
    write_run(tmp_path / "shared", {"model_name": "org/c"}, {"boolq": [sample(1, "Or not?", acc=1)]})
    write_run(tmp_path / "shared", {"model_name": "org/d"}, {"boolq": [sample(1, "Or not?", acc=0)]}, stamp=LATER)
    key0, key1 = key("boolq", 0), key("boolq", 1)

    batch = read_lm_eval(tmp_path)

    assert evaluations(batch) == [("org/a", key0, 1.0), ("org/b", key0, 0.0), ("org/c", key1, 1.0), ("org/d", key1, 0.0)]
    assert sorted(m.name for m in batch.models) == ["org/a", "org/b", "org/c", "org/d"]
    assert [q.id for q in batch.queries] == [key0, key1]  # one query per document, whatever the model


def test_model_name_argument_over_runs_of_several_models_is_refused(tmp_path: Path) -> None:
    write_run(tmp_path / "a", {"model_name": "org/a"}, {"boolq": [sample(0, "Is it?", acc=1)]})
    write_run(tmp_path / "b", {"model_name": "org/b"}, {"boolq": [sample(0, "Is it?", acc=0)]})

    with pytest.raises(InputError, match="2 models"):
        read_lm_eval(tmp_path, model_name="one")


def test_a_rerun_of_the_same_model_wins(tmp_path: Path) -> None:
    write_run(tmp_path, {"model_name": "org/m"}, {"boolq": [sample(0, "Is it?", acc=0)]})
    write_run(tmp_path, {"model_name": "org/m"}, {"boolq": [sample(0, "Is it?", acc=1)]}, stamp=LATER)

    batch = read_lm_eval(tmp_path)

    assert batch.eval_scores == [1.0]
    assert any("1 repeated (model, query)" in w for w in batch.warnings)


def test_one_filter_per_task_is_kept(tmp_path: Path) -> None:
    lines = [
        sample(0, "Q0", filter="strict-match", exact_match=0.0),
        sample(0, "Q0", filter="flexible-extract", exact_match=1.0),
        sample(1, "Q1", filter="strict-match", exact_match=1.0),
        sample(1, "Q1", filter="flexible-extract", exact_match=1.0),
    ]
    write_run(tmp_path, {"model_name": "m"}, {"gsm8k": lines})

    first = read_lm_eval(tmp_path)
    chosen = read_lm_eval(tmp_path, filter="flexible-extract")

    assert first.eval_scores == [0.0, 1.0]
    assert first.warnings == ["task gsm8k: kept filter 'strict-match', skipped the lines of filter(s) 'flexible-extract' (2 lines)"]
    assert chosen.eval_scores == [1.0, 1.0]
    assert "kept filter 'flexible-extract'" in chosen.warnings[0]
    with pytest.raises(InputError, match="no line has filter 'other'") as caught:
        read_lm_eval(tmp_path, filter="other")
    assert caught.value.field == "filter"


def test_metric_choice(tmp_path: Path) -> None:
    write_run(tmp_path, {"model_name": "m"}, {
        "hellaswag": [sample(0, "ctx", acc=0.0, acc_norm=1.0)],
        "triviaqa": [sample(1, "Q:", exact_match=1)],  # no acc: exact_match is next in line
    })

    default = read_lm_eval(tmp_path)
    by_name = read_lm_eval(tmp_path / f"samples_hellaswag_{STAMP}.jsonl", metric="acc_norm")

    assert dict(zip(default.eval_queries, default.eval_scores)) == {
        key("hellaswag", 0): 0.0, key("triviaqa", 1): 1.0,
    }
    assert by_name.eval_scores == [1.0]


def test_missing_metric_lists_the_fields_present(tmp_path: Path) -> None:
    write_run(tmp_path, {"model_name": "m"}, {"squad": [sample(0, "ctx", f1=["pred", "ref"], bleu=0.3)]})

    with pytest.raises(InputError) as default:
        read_lm_eval(tmp_path)
    with pytest.raises(InputError) as named:
        read_lm_eval(tmp_path, metric="acc_norm")
    with pytest.raises(InputError) as not_a_score:
        read_lm_eval(tmp_path, metric="f1")

    assert default.value.line == 1 and "f1, bleu" in default.value.problem
    assert (named.value.line, named.value.field) == (1, "acc_norm")
    assert "f1, bleu" in named.value.problem
    assert (not_a_score.value.field, "not a number" in not_a_score.value.problem) == ("f1", True)


def test_differently_prompted_documents_keep_the_first_prompt(tmp_path: Path) -> None:
    write_run(tmp_path / "a", {"model_name": "a"}, {"arc": [sample(0, "zero-shot prompt", acc=1)]})
    write_run(tmp_path / "b", {"model_name": "b"}, {"arc": [sample(0, "five-shot prompt", acc=1)]}, stamp=LATER)

    batch = read_lm_eval(tmp_path)

    assert [q.text for q in batch.queries] == ["zero-shot prompt"]
    assert any("1 documents were prompted differently" in w for w in batch.warnings)


def test_looks_like(tmp_path: Path) -> None:
    run = write_run(tmp_path / "out" / "org__m", {"model_name": "m"}, {"boolq": [sample(0, "q", acc=1)]})
    (tmp_path / "plain.jsonl").write_text('{"model": "a", "score": 1, "query": "q"}\n')

    assert looks_like(tmp_path / "out")
    assert looks_like(run / f"samples_boolq_{STAMP}.jsonl")
    assert not looks_like(tmp_path / "plain.jsonl")
    assert not looks_like(tmp_path / "nothing")


def test_a_directory_without_samples_is_refused(tmp_path: Path) -> None:
    (tmp_path / f"results_{STAMP}.json").write_text("{}")

    with pytest.raises(InputError, match="--log_samples"):
        read_lm_eval(tmp_path)


def _line(**changes: Any) -> bytes:
    line = sample(0, "prompt", acc=1.0)
    for key, value in changes.items():
        if value is _DROP:
            del line[key]
        else:
            line[key] = value
    return json.dumps(line).encode() + b"\n"


_DROP = object()
_GOOD = _line()


@pytest.mark.parametrize(
    ("content", "line", "field", "problem"),
    [
        pytest.param(_GOOD + _line(acc=1.5), 2, "acc", "outside [0, 1]", id="score-above-1"),
        pytest.param(_line(acc=-0.5), 1, "acc", "outside [0, 1]", id="score-negative"),
        pytest.param(_GOOD + b'{"doc_id": 1, "filter": "none", "arguments": [["p", " a"]], "acc": NaN}\n', 2, "acc", "NaN", id="score-nan"),
        pytest.param(_line(acc="1"), 1, "acc", "not a number", id="score-string"),
        pytest.param(_line(acc=None), 1, "acc", "not a number", id="score-null"),
        pytest.param(_GOOD + _line(acc=_DROP), 2, "acc", "missing score field", id="score-missing"),
        pytest.param(_line(doc_id=_DROP, doc_hash=_DROP), 1, "doc_id", "missing doc_id", id="doc_id-missing"),
        pytest.param(_line(arguments=_DROP), 1, "arguments", "missing", id="arguments-missing"),
        pytest.param(_line(arguments={"gen_args_0": {"arg_0": ""}}), 1, "arguments", "no prompt", id="prompt-empty"),
        pytest.param(_line(arguments=[]), 1, "arguments", "no prompt", id="arguments-empty"),
        pytest.param(_GOOD + b"{not json\n", 2, None, "not JSON", id="not-json"),
        pytest.param(b"[1, 2]\n", 1, None, "JSON object", id="not-an-object"),
        pytest.param(b"", None, None, "empty", id="empty-file"),
        pytest.param(b"\n  \n", None, None, "empty", id="blank-file"),
        pytest.param(_GOOD + _line(arguments=[["caf\u00e9", " a"]]).replace("\\u00e9".encode(), b"\xe9"), 2, None, "not UTF-8", id="not-utf8"),
    ],
)
def test_bad_samples_are_refused_with_their_place(
    tmp_path: Path, content: bytes, line: int | None, field: str | None, problem: str
) -> None:
    (tmp_path / f"results_{STAMP}.json").write_text(json.dumps({"model_name": "m"}))
    path = tmp_path / f"samples_boolq_{STAMP}.jsonl"
    path.write_bytes(content)

    with pytest.raises(InputError) as caught:
        read_lm_eval(tmp_path)

    assert caught.value.file == str(path)
    assert caught.value.line == line
    assert caught.value.field == field
    assert problem in caught.value.problem


@pytest.mark.parametrize("content, line, field, said", [
    ('{\n  "model_name": "m",\n  oops\n}', 3, None, "not JSON"),
    # Python keeps the last of a repeated key unsaid: which model the run was is not for us to guess
    ('{"model_name": "org/first", "model_name": "org/second"}', None, "model_name",
     "'model_name' appears more than once"),
])
def test_bad_results_file_is_refused_naming_where(tmp_path: Path, content: str, line, field, said: str) -> None:
    write_run(tmp_path, None, {"boolq": [sample(0, "q", acc=1)]})
    results = tmp_path / f"results_{STAMP}.json"
    results.write_text(content)

    with pytest.raises(InputError) as caught:
        read_lm_eval(tmp_path)

    assert (caught.value.file, caught.value.line, caught.value.field) == (str(results), line, field)
    assert said in caught.value.problem


def test_a_model_name_the_registry_refuses_is_refused_with_its_results_file(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", {"model_name": "theta\tbad"}, {"boolq": [sample(0, "Is it?", acc=1)]})
    with pytest.raises(InputError) as caught:
        read_lm_eval(tmp_path)
    assert caught.value.file == str(run / f"results_{STAMP}.json") and caught.value.field == "model_name"
    assert "control character" in caught.value.problem
    with pytest.raises(InputError) as given:
        read_lm_eval(tmp_path, model_name="a\tb")  # the --model-name option, named as such by the CLI
    assert given.value.field == "model_name" and "control character" in given.value.problem


def test_a_task_with_results_but_no_samples_file_is_named_in_a_warning(tmp_path: Path) -> None:
    results = {"model_name": "org/m", "results": {"arc_easy": {}, "hellaswag": {}, "mmlu": {}, "mmlu_bio": {}},
               "groups": {"mmlu": {}}, "group_subtasks": {"mmlu": ["mmlu_bio"], "arc_easy": [], "hellaswag": []}}
    write_run(tmp_path, results, {"arc_easy": [sample(0, "Q?", acc=1)], "mmlu_bio": [sample(1, "Cell?", acc=0)]})
    batch = read_lm_eval(tmp_path)
    assert {q.task for q in batch.queries} == {"arc_easy", "mmlu_bio"}
    warned = [w for w in batch.warnings if "no samples file" in w]
    assert len(warned) == 1 and "1 task(s) with results but no samples file beside it, not imported: hellaswag" in warned[0]
    write_run(tmp_path, {**results, "results": {"arc_easy": {}, "mmlu": {}, "mmlu_bio": {}}}, {})
    assert not [w for w in read_lm_eval(tmp_path).warnings if "no samples file" in w]  # a group has none of its own
