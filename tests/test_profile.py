"""Hypothetical task profiles (appendix E.1): a profile -> synthetic evaluations -> nearest real models."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import synthetic_registry

from cli.main import cli
from registry import InputError, Registry, RegistryError
from registry.analytics.profile import ProfileSpace, _allocate

TASKS = ("math", "law", "biology", "code")


@pytest.fixture(scope="module")
def reg(tmp_path_factory) -> Registry:
    """A synthetic registry (3 families x 3 sizes, 4 tasks) with a briefly trained encoder, all embedded.
    Profiling only reads, so the tests share it."""
    home = tmp_path_factory.mktemp("profile") / "home"
    return synthetic_registry(home, train_epochs=60, n_families=3, models_per_family=3, queries_per_task=25,
                              tasks=TASKS, n_duplicates=0, seed=3)


@pytest.fixture(scope="module")
def accuracies(reg) -> dict[str, dict[str, float]]:
    """Each model's empirical accuracy per task, from its stored evaluations."""
    task_of = {r["query_id"]: r["task"] for r in reg.store.read("queries").to_pylist()}
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in reg.store.read("evaluations").to_pylist():
        scores[r["model"]][task_of[r["query_id"]]].append(r["score"])
    return {m: {t: float(np.mean(v)) for t, v in by_task.items()} for m, by_task in scores.items()}


def test_a_models_own_task_profile_finds_that_model(reg, accuracies):
    space = ProfileSpace(reg.store)  # loaded once, as the report does; profile() is the same path
    ranks = []
    for name, targets in accuracies.items():
        found = [r.name for r in space.profile(targets, k=9, evals=512, seed=0).neighbours]
        ranks.append(found.index(name) + 1)
    assert np.mean(np.array(ranks) <= 3) >= 7 / 9, ranks  # measured: all 9 in the top 2
    assert np.mean(np.array(ranks) == 1) >= 5 / 9, ranks


def test_result_shape_seed_and_realised_accuracies(reg):
    targets = {"math": 0.9, "law": 0.1, "code": 0.5}
    result = reg.profile(targets, k=4, evals=300, seed=1)
    assert result.targets == targets and result.n_evals == 300
    assert len(result.neighbours) == 4 and {r.metric for r in result.neighbours} == {"cosine"}
    distances = [r.distance for r in result.neighbours]
    assert distances == sorted(distances)
    assert result.neighbours[0].metadata["family"].startswith("synfam")
    per_task = result.per_task
    assert sum(p.n_evals for p in per_task.values()) == 300 and set(per_task) == set(targets)
    assert per_task["math"].sampled_accuracy > 0.75 and per_task["law"].sampled_accuracy < 0.25  # around targets
    assert reg.profile(targets, k=4, evals=300, seed=1) == result  # seeded
    assert reg.profile(targets, k=4, evals=300, seed=2).per_task != per_task


def test_raising_one_tasks_target_changes_the_result(reg, accuracies):
    weak = min(accuracies, key=lambda m: np.mean(list(accuracies[m].values())))
    low = reg.profile(accuracies[weak], k=3, evals=512)
    high = reg.profile({**accuracies[weak], "math": 1.0}, k=3, evals=512)
    assert low.neighbours[0].name != high.neighbours[0].name
    assert accuracies[high.neighbours[0].name]["math"] > accuracies[low.neighbours[0].name]["math"]


def test_where_restricts_the_results(reg, accuracies):
    result = reg.profile(accuracies["syn-synfam0-7b"], k=3, where="family == synfam1")
    assert {r.metadata["family"] for r in result.neighbours} == {"synfam1"}
    assert result.pool_size == 3 and len(result.neighbours) == 3
    fewer = reg.profile(accuracies["syn-synfam0-7b"], k=5, where="family == synfam1")  # like search: what matches
    assert [r.name for r in fewer.neighbours] == [r.name for r in result.neighbours]


def test_by_fingerprint_searches_the_sets_fingerprint_in_the_fingerprint_index(reg, accuracies):
    """--by fingerprint: the same synthetic set, fingerprinted under the item table and searched in the
    fingerprint index (Euclidean); `where` narrows it as for LOCUS; a bad `by` is refused."""
    from registry.analytics.search import open_index

    targets = accuracies["syn-synfam1-7b"]
    result = reg.profile(targets, k=4, evals=300, seed=1, by="fingerprint")
    assert result.by == "fingerprint" and {(h.metric, h.vector) for h in result.neighbours} == {("euclidean", "fingerprint")}
    space = ProfileSpace(reg.store)
    rows, scores = space.synthetic_set(targets, 300, 1)
    prints = open_index(reg.store, by="fingerprint").index
    expected = prints.search(space.fingerprint(rows, scores), 4, metric="euclidean")
    assert [(h.name, pytest.approx(h.distance, abs=1e-5)) for h in result.neighbours] == \
        [(prints.names[r], d) for r, d in expected]
    assert reg.profile(targets, k=4, evals=300, seed=1).by == "locus"  # the default: skill, LOCUS
    narrowed = reg.profile(targets, k=3, by="behaviour", where="family == synfam2")
    assert {h.metadata["family"] for h in narrowed.neighbours} == {"synfam2"} and narrowed.pool_size == 3
    with pytest.raises(InputError, match="field 'by'"):
        reg.profile(targets, by="colour")
    out = CliRunner().invoke(cli, ["--home", str(reg.home), "profile", "--task", "math=0.9", "--by", "fingerprint",
                                   "-k", "2"])
    assert out.exit_code == 0 and "euclidean d" in out.output, out.output


def test_allocation_proportional_equal_and_at_least_one_each():
    assert _allocate({"a": 100, "b": 300}, 40, "proportional") == {"a": 10, "b": 30}
    assert _allocate({"a": 100, "b": 300}, 40, "equal") == {"a": 20, "b": 20}
    assert _allocate({"a": 1, "b": 1000, "c": 10}, 3, "proportional") == {"a": 1, "b": 1, "c": 1}
    counts = _allocate({"a": 7, "b": 5, "c": 3}, 101, "proportional")
    assert sum(counts.values()) == 101 and min(counts.values()) >= 1


def test_a_task_share_larger_than_its_queries_repeats_whole_passes(reg):
    space = ProfileSpace(reg.store)
    rows, scores = space.synthetic_set({"law": 0.5}, 60, seed=0)  # 25 law queries
    assert len(rows) == 60 and {space.query_tasks[r] for r in rows} == {"law"}
    assert np.bincount(rows).max() == 3 and len(set(rows.tolist())) == 25
    assert set(np.unique(scores).tolist()) <= {0.0, 1.0}


@pytest.mark.parametrize("call, message", [
    (lambda r: r.profile({"astrology": 0.5}), "unknown task(s) 'astrology'; known tasks: biology, code, law, math"),
    (lambda r: r.profile({"math": 1.5}), "task 'math' must be an accuracy in [0, 1], not 1.5"),
    (lambda r: r.profile({"math": -0.1}), "must be an accuracy in [0, 1]"),
    (lambda r: r.profile({"math": "high"}), "must be a number in [0, 1], not 'high'"),
    (lambda r: r.profile({}), "no targets"),
    (lambda r: r.profile({"math": 0.5}, k=0), "k must be an integer of at least 1, not 0"),
    (lambda r: r.profile({"math": 0.5}, k=2.5), "k must be an integer of at least 1, not 2.5"),
    (lambda r: r.profile({"math": 0.5, "law": 0.5, "code": 0.1}, evals=2),
     "evals must be an integer from the number of tasks named (3) to 1,000,000 (a model's most evaluations), not 2"),
    (lambda r: r.profile({"math": 0.5}, where="family == nobody"), "matches none of the 9 embedded models"),
    (lambda r: r.profile({"math": 0.5}, where="colour == red"), "unknown field 'colour'"),
])
def test_bad_input_is_refused_with_a_clear_message(reg, call, message):
    with pytest.raises(RegistryError) as err:
        call(reg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_k_larger_than_the_pool_gives_the_whole_pool_as_search_does(reg):
    every = reg.profile({"math": 0.5}, k=1000)
    assert len(every.neighbours) == every.pool_size == 9
    assert [n.name for n in every.neighbours[:3]] == [n.name for n in reg.profile({"math": 0.5}, k=3).neighbours]
    one_family = reg.profile({"math": 0.5}, k=1000, where="family == synfam0")
    assert len(one_family.neighbours) == one_family.pool_size < 9


def test_bad_targets_are_input_errors(reg):
    with pytest.raises(InputError):
        reg.profile({"math": float("nan")})


# ------------------------------------------------------------------------------------------- CLI
def run(home: Path, *args: str):
    return CliRunner().invoke(cli, ["--home", str(home), "profile", *args])


def test_cli_profile_json_and_text(reg, accuracies):
    targets = accuracies["syn-synfam2-13b"]
    args = [f"--task={t}={a}" for t, a in targets.items()]
    result = run(reg.home, *args, "-k", "3", "--evals", "256", "--seed", "4", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload == reg.profile(targets, k=3, evals=256, seed=4).model_dump(mode="json")
    assert len(payload["neighbours"]) == 3 and {"name", "distance"} <= set(payload["neighbours"][0])
    text = run(reg.home, "--task", "math=0.8", "--task", "law=0.3", "--where", "family == synfam0")
    assert text.exit_code == 0, text.output
    assert "hypothetical model from 512 synthetic evaluations" in text.output and "syn-synfam0" in text.output
    # 256 evaluations per task over its 25 stored queries: each query is drawn about 10 times, and said so
    assert "math 0.80 (sampled" in text.output and "over 256 of 25 queries, drawn again" in text.output
    fewer = run(reg.home, "--task", "math=0.8", "--task", "law=0.3", "--evals", "40")
    assert fewer.exit_code == 0 and "over 20)" in fewer.output and "drawn again" not in fewer.output


def test_each_task_says_how_many_distinct_queries_its_sample_drew(reg):
    many = reg.profile({"math": 0.8, "law": 0.3}, k=3, evals=512)
    assert {t: (s.n_evals, s.n_queries) for t, s in many.per_task.items()} == {"math": (256, 25), "law": (256, 25)}
    few = reg.profile({"math": 0.8, "law": 0.3}, k=3, evals=40)
    assert {t: (s.n_evals, s.n_queries) for t, s in few.per_task.items()} == {"math": (20, 20), "law": (20, 20)}


@pytest.mark.parametrize("args, message", [
    (["--task", "math"], "'math' is not TASK=ACCURACY"),
    (["--task", "math=abc"], "the accuracy 'abc' is not a number"),
    (["--task", "math=1.2"], "must be in [0, 1]"),
    (["--task", "math=0.2", "--task", "math=0.3"], "task 'math' is given twice"),
    ([], "name at least one task"),
    (["math=0.8"], "unexpected extra argument (math=0.8)"),  # not swallowed by "name at least one task"
    (["--task", "astrology=0.5"], "unknown task(s) 'astrology'; known tasks: biology, code, law, math"),
    (["--task", "math=0.5", "-k", "0"], "option -k: must be an integer of at least 1, not 0"),
    (["--task", "math=0.5", "--task", "law=0.5", "--evals", "1"], "option --evals: must be an integer from the number of tasks named (2)"),
    (["--task", "math=0.5", "--where", "family == nobody"], "matches none of the 9 embedded models"),
])
def test_cli_bad_input_exits_non_zero_and_names_the_problem(reg, args, message):
    result = run(reg.home, *args)
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output
