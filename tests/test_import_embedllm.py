"""EmbedLLM CSV importer: fixture files written into tmp_path, read without a store."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from registry.errors import InputError
from registry.importers.embedllm import looks_like, read_embedllm

HEADER = ("prompt_id", "model_id", "model_name", "label", "prompt", "category_id", "category")


def write_csv(path: Path, rows: list[tuple], header: tuple[str, ...] = HEADER) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def evaluations(batch) -> list[tuple[str, str, float]]:
    return list(zip(batch.eval_models, batch.eval_queries, batch.eval_scores))


def test_one_file_gives_queries_models_and_scores(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "train.csv", [
        (0, 0, "org/alpha", 1, "What is 2+2?", 3, "math"),
        (0, 1, "org/beta", 0, "What is 2+2?", 3, "math"),
        (7, 0, "org/alpha", 0.25, "Name a cell organelle,\nplease.", 5, "biology"),
    ])

    batch = read_embedllm(path, id_prefix="emb:")

    assert [(q.id, q.text, q.task) for q in batch.queries] == [
        ("emb:0", "What is 2+2?", "math"),
        ("emb:7", "Name a cell organelle,\nplease.", "biology"),
    ]
    assert [m.name for m in batch.models] == ["org/alpha", "org/beta"]
    assert evaluations(batch) == [
        ("org/alpha", "emb:0", 1.0), ("org/beta", "emb:0", 0.0), ("org/alpha", "emb:7", 0.25),
    ]
    assert batch.where(2) == (str(path), 4)  # the multi-line prompt starts on line 4
    assert batch.warnings == []
    assert batch.source.startswith("embedllm:")


def test_directory_reads_splits_in_order_and_repairs_model_columns(tmp_path: Path) -> None:
    write_csv(tmp_path / "model_order.csv", [(0, "org/alpha"), (1, "org/beta")], header=("model_id", "model_name"))
    write_csv(tmp_path / "train.csv", [
        (0, 0, "org/alpha", 1, "q zero", 0, "math"),
        (1, 1, "org/beta", 1, "q one", 0, "math"),
    ])
    write_csv(tmp_path / "val.csv", [
        (2, 1, "", 0, "q two", 1, "law"),  # empty model_name: from model_order.csv
        (2, "", "org/alpha", 1, "q two", 1, "law"),  # empty model_id: keyed by model_name anyway
    ])
    write_csv(tmp_path / "test.csv", [
        (0, 0, "org/alpha", 0, "q zero", 0, "math"),  # repeats train's pair: the later file wins
    ])
    (tmp_path / "question_order.csv").write_text("not read\n")

    assert looks_like(tmp_path)
    batch = read_embedllm(tmp_path)

    assert [(q.id, q.task) for q in batch.queries] == [("0", "math"), ("1", "math"), ("2", "law")]
    assert sorted(evaluations(batch)) == [
        ("org/alpha", "0", 0.0), ("org/alpha", "2", 1.0), ("org/beta", "1", 1.0), ("org/beta", "2", 0.0),
    ]
    assert [m.name for m in batch.models] == ["org/alpha", "org/beta"]
    assert len(batch.warnings) == 2
    assert "1 rows with an empty model_name were named from their model_id" in batch.warnings[0]
    assert "1 repeated (model, query) rows; the last score of each was kept" in batch.warnings[1]


def test_empty_model_name_is_taken_from_a_later_row(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "evals.csv", [
        (0, 4, "", 1, "q", 0, "c"),
        (1, 4, "org/gamma", 0, "r", 0, "c"),
    ])

    batch = read_embedllm(path)

    assert evaluations(batch) == [("org/gamma", "0", 1.0), ("org/gamma", "1", 0.0)]


@pytest.mark.parametrize("model_id, model_name, says", [
    (9, "", "'9'"),  # no name anywhere
    (1, "eps\u200b7b", "invisible formatting character U+200B"),  # a name the registry refuses
], ids=["no-name", "refused-name"])
def test_a_model_without_a_usable_name_is_refused_with_its_file_and_line(tmp_path: Path, model_id, model_name,
                                                                           says) -> None:
    path = write_csv(tmp_path / "train.csv", [(0, 0, "org/a", 1, "q", 0, "c"), (1, model_id, model_name, 1, "r", 0, "c")])

    with pytest.raises(InputError) as caught:
        read_embedllm(path)

    assert (caught.value.file, caught.value.line, caught.value.field) == (str(path), 3, "model_name")
    assert says in caught.value.problem


def test_prompt_id_with_two_texts_names_both_lines(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "train.csv", [(5, 0, "a", 1, "first text", 0, "c"), (5, 1, "b", 1, "second text", 0, "c")])

    with pytest.raises(InputError) as caught:
        read_embedllm(path)

    assert (caught.value.line, caught.value.field) == (3, "prompt")
    assert f"{path} line 2" in caught.value.problem


def test_prompt_id_with_two_texts_across_split_files_names_both_files(tmp_path: Path) -> None:
    write_csv(tmp_path / "train.csv", [(5, 0, "a", 1, "first text", 0, "c")])
    val = write_csv(tmp_path / "val.csv", [(5, 0, "a", 1, "other text", 0, "c")])

    with pytest.raises(InputError) as caught:
        read_embedllm(tmp_path)

    assert (caught.value.file, caught.value.line) == (str(val), 2)
    assert f"{tmp_path / 'train.csv'} line 2" in caught.value.problem


def test_one_model_id_with_two_names_is_refused(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "train.csv", [(0, 3, "org/a", 1, "q", 0, "c"), (1, 3, "org/b", 1, "r", 0, "c")])

    with pytest.raises(InputError) as caught:
        read_embedllm(path)

    assert (caught.value.line, caught.value.field) == (3, "model_name")


def test_prompt_with_two_categories_keeps_the_first_and_warns(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "train.csv", [(0, 0, "a", 1, "q", 0, "math"), (0, 1, "b", 1, "q", 1, "logic")])

    batch = read_embedllm(path)

    assert [q.task for q in batch.queries] == ["math"]
    assert any("another category" in w for w in batch.warnings)


def test_looks_like(tmp_path: Path) -> None:
    good = write_csv(tmp_path / "mine.csv", [(0, 0, "a", 1, "q", 0, "c")])
    triple = write_csv(tmp_path / "evals.csv", [(0, 0, 1)], header=("model_id", "query_id", "score"))

    assert looks_like(good)
    assert not looks_like(triple)
    assert not looks_like(tmp_path / "missing.csv")
    assert not looks_like(tmp_path)  # a directory without split files


def test_directory_without_split_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="train.csv"):
        read_embedllm(tmp_path)


HEAD = ",".join(HEADER) + "\n"
GOOD_ROW = "0,0,org/a,1,What?,0,c\n"


@pytest.mark.parametrize(
    ("content", "line", "field", "problem"),
    [
        pytest.param(b"model_id,model_name,label,prompt\n0,a,1,q\n", 1, "prompt_id", "missing column", id="missing-prompt_id"),
        pytest.param(b"prompt_id,model_id,model_name,prompt\n0,0,a,q\n", 1, "label", "missing column", id="missing-label"),
        pytest.param(b"prompt_id,model_id,model_name,label\n0,0,a,1\n", 1, "prompt", "missing column", id="missing-prompt"),
        pytest.param(b"prompt_id,label,prompt\n0,1,q\n", 1, "model_name", "missing column", id="missing-model"),
        pytest.param((HEAD + GOOD_ROW + "1,0,a,yes,q,0,c\n").encode(), 3, "label", "not a number", id="score-not-number"),
        pytest.param((HEAD + "1,0,a,1.5,q,0,c\n").encode(), 2, "label", "outside [0, 1]", id="score-above-1"),
        pytest.param((HEAD + "1,0,a,-1,q,0,c\n").encode(), 2, "label", "outside [0, 1]", id="score-negative"),
        pytest.param((HEAD + GOOD_ROW + "1,0,a,nan,q,0,c\n").encode(), 3, "label", "NaN", id="score-nan"),
        pytest.param((HEAD + "1,0,a,,q,0,c\n").encode(), 2, "label", "not a number", id="score-empty"),
        pytest.param((HEAD + ",0,a,1,q,0,c\n").encode(), 2, "prompt_id", "empty", id="empty-prompt_id"),
        pytest.param((HEAD + "1,0,a,1, ,0,c\n").encode(), 2, "prompt", "empty", id="empty-prompt"),
        pytest.param((HEAD + "1,,,1,q,0,c\n").encode(), 2, "model_name", "empty", id="no-model"),
        pytest.param(b"", None, None, "empty", id="empty-file"),
        pytest.param(HEAD.encode(), None, None, "no data rows", id="header-only"),
        pytest.param((HEAD + GOOD_ROW).encode() + b"1,0,a,1,caf\xe9,0,c\n", 3, None, "not UTF-8", id="not-utf8"),
    ],
)
def test_bad_input_is_refused_with_its_place(
    tmp_path: Path, content: bytes, line: int | None, field: str | None, problem: str
) -> None:
    path = tmp_path / "train.csv"
    path.write_bytes(content)

    with pytest.raises(InputError) as caught:
        read_embedllm(path)

    assert caught.value.file == str(path)
    assert caught.value.line == line
    assert caught.value.field == field
    assert problem in caught.value.problem
