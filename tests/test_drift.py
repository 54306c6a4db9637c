"""Drift: the decision on synthetic pools (evaluations alone), and `registry drift` / `audit --drift`
over a registry, through the library, the CLI and HTTP."""
from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import POOL_TRAINED_NO_COPY, own_evaluations
from registry import Registry
from registry.analytics.audit_stats import PoolEvals, calibrate, evidence, label
from registry.analytics.drift import judge


# ------------------------------------------------------------------ the decision, from evaluations alone
def _pool(n_models: int = 12, n_queries: int = 2000, tasks: int = 4, seed: int = 0):
    """(scores (M, Q), task (Q,), P(right) (M, Q)): distinct models with their own task profiles."""
    rng = np.random.default_rng(seed)
    abilities = np.linspace(-1.5, 1.5, n_models)
    difficulty = rng.normal(0, 1.5, n_queries)
    task = rng.integers(0, tasks, n_queries)
    bias = rng.normal(0, 0.6, (n_models, tasks))
    p = 1 / (1 + np.exp(-(abilities[:, None] + bias[:, task] - difficulty[None, :])))
    return (rng.random(p.shape) < p).astype(float), task, p


def _resample(y, p, rate, rng):
    """`y` with about `rate` of its answers re-drawn as re-running the model would (where it is unsure,
    both ways alike): right->wrong with probability c (1 - p), wrong->right with c p."""
    change = y * (1 - p) + (1 - y) * p
    c = min(1.0, rate * len(y) / change.sum())
    return np.where(rng.random(len(y)) < c * change, 1.0 - y, y)


@pytest.fixture(scope="module")
def pool():
    scores, task, p = _pool()
    names = [f"m{i}" for i in range(len(scores))]
    return scores, task, p, calibrate(PoolEvals.from_dense(names, scores, task))


def _judge(cal, before, after):
    idx = np.arange(len(before))
    return judge(cal, "m5", (idx, before), (idx, after), calibrated_rows={"m5": (idx, before)})


def test_a_planted_swap_to_another_model_moves(pool):
    scores, task, p, cal = pool
    rng = np.random.default_rng(1)
    after = scores[5].copy()
    swap = rng.random(len(after)) < 0.25  # a quarter of the answers now come from m11 (stronger, another profile)
    after[swap] = scores[11][swap]
    out = _judge(cal, scores[5], after)
    assert out["status"] == "moved" and out["moved"] is True and out["method"] == "shared queries"
    assert out["p_value"] <= out["level"] == pytest.approx(0.01 / len(out["tests"]))
    assert out["wrong_to_right"] > out["right_to_wrong"]  # the stronger model's answers
    assert "moved" in out["sentence"] and out["shared_queries"] == len(after)


def test_an_unchanged_resample_does_not_alarm(pool):
    scores, task, p, cal = pool
    after = _resample(scores[5], p[5], 0.04, np.random.default_rng(7))
    assert 0.02 < np.abs(after - scores[5]).mean() < 0.06  # the re-run really changed answers
    out = _judge(cal, scores[5], after)
    assert out["status"] == "not moved" and out["moved"] is False
    assert {t.test for t in out["tests"]} == {"symmetry", "noise"}
    assert min(t.p_value for t in out["tests"]) > out["level"]
    assert "did not move:" in out["sentence"]  # no resampling spread: that is the fingerprint test's, not run here


def test_one_task_answered_by_another_model_is_no_duplicate(pool):
    """40% of one task's answers changed and none elsewhere: the pooled noise and symmetry tests passed it (the
    audit called it a duplicate); by task it is more than one model answering twice. Drift keeps its two pooled
    tests (a third cost power elsewhere and alarmed on an honest re-run: docs/cli.md, drift)."""
    scores, task, p, cal = pool
    after = scores[5].copy()
    on = np.flatnonzero(task == 0)
    swap = on[np.random.default_rng(3).random(len(on)) < 0.8]
    after[swap] = scores[11][swap]  # task 0's answers mostly from m11
    assert np.abs(after - scores[5]).mean() < 0.12  # under max noise over all the tasks
    idx = np.arange(len(after))
    d = evidence(cal, "m5", idx, scores[5], "m5-copy", idx, after, max_noise=0.12)
    labelled = label(cal, d, "m5", "m5-copy", level=0.01, alpha=0.01, max_noise=0.12)
    assert labelled.label == "same product line?" and f"on task {cal.task_names[0]}" in labelled.reason


def test_a_quantised_like_copy_moves_by_the_symmetry_test(pool):
    scores, task, p, cal = pool
    rng = np.random.default_rng(3)
    after = _resample(scores[5], p[5], 0.02, rng)
    right = np.flatnonzero(after > 0.5)
    after[rng.choice(right, size=int(0.03 * len(after)), replace=False)] = 0.0  # 3 points lost, one way
    out = _judge(cal, scores[5], after)
    assert out["moved"] is True
    deciding = min(out["tests"], key=lambda t: t.p_value)
    assert deciding.test == "symmetry" and out["right_to_wrong"] > 2 * out["wrong_to_right"]


@pytest.fixture(scope="module")
def items(pool):
    """The pool's item table (random query vectors: every query is known to it) as drift reads it."""
    from encoder.fingerprint import FingerprintConfig, fit_item_table
    from registry.analytics.drift import FingerprintItems

    scores, task, p, cal = pool
    m, q = scores.shape
    mi, qi = np.repeat(np.arange(m), q), np.tile(np.arange(q), m)
    vectors = np.random.default_rng(0).normal(size=(q, 8)).astype(np.float32)
    table = fit_item_table([str(i) for i in range(q)], vectors, mi, qi, scores.ravel(), models=cal.names,
                           config=FingerprintConfig(rank=4, steps=200))
    f, b = table.item_params([str(i) for i in range(q)])
    return FingerprintItems(table, np.arange(q), f, b)


def test_disjoint_queries_are_judged_by_the_fingerprint_against_the_models_own_splits(pool, items):
    scores, task, p, cal = pool
    half = np.random.default_rng(2).random(scores.shape[1]) < 0.5
    first, second = np.flatnonzero(half), np.flatnonzero(~half)
    same = judge(cal, "m5", (first, scores[5][first]), (second, scores[5][second]), items=items, permutations=99)
    other = judge(cal, "m5", (first, scores[5][first]), (second, scores[9][second]), items=items, permutations=99)
    assert same["method"] == other["method"] == "fingerprint" and same["shared_queries"] == 0
    assert same["moved"] is False and same["fingerprint_distance"] < 3 * same["fingerprint_null_median"]
    assert other["moved"] is True and other["fingerprint_distance"] > same["fingerprint_distance"]
    assert {t.test for t in other["tests"]} == {"fingerprint", "homogeneity"}


def test_versions_on_other_tasks_are_split_within_tasks_not_alarmed_by_the_task_mix(pool, items):
    """A refine on tasks the model had not answered: splits that ignored tasks flagged unchanged models
    (p = 0.0025 of 399 splits), since fingerprints fitted on two task mixes differ for one model."""
    scores, task, p, cal = pool
    rng = np.random.default_rng(4)
    low = task < 2
    # mostly the first two tasks before, mostly the other two after; some of each on both sides
    before = np.flatnonzero(np.where(low, rng.random(len(task)) < 0.9, rng.random(len(task)) < 0.1))
    after = np.setdiff1d(np.arange(len(task)), before)
    for m in (2, 4, 6, 8):  # a split ignoring tasks called m6 moved (p = 0.003 of 399 splits)
        same = judge(cal, f"m{m}", (before, scores[m][before]), (after, scores[m][after]), items=items, permutations=399)
        assert same["method"] == "fingerprint" and same["moved"] is False, same["sentence"]
    assert "within tasks" in next(t.detail for t in same["tests"] if t.test == "fingerprint")
    other = judge(cal, "m5", (before, scores[5][before]), (after, scores[9][after]), items=items, permutations=99)
    assert other["moved"] is True, other["sentence"]
    # no task in common: nothing to split within, said, not a verdict
    a, b = np.flatnonzero(low), np.flatnonzero(~low)
    apart = judge(cal, "m5", (a, scores[5][a]), (b, scores[5][b]), items=items, permutations=99)
    assert apart["status"] == "untested" and apart["moved"] is None
    assert "cannot tell a change from the task mix" in apart["sentence"]


def test_too_little_evidence_is_untested_not_a_verdict(pool):
    scores, task, p, cal = pool
    idx = np.arange(10)
    out = judge(cal, "m5", (idx, scores[5][:10]), (idx, scores[11][:10]))
    assert out["status"] == "untested" and out["moved"] is None and "needs 30" in out["sentence"]


# ------------------------------------------------------------------ over a registry: API, CLI, HTTP
@pytest.fixture
def reg(synthetic_home) -> Registry:
    return Registry.open(synthetic_home("drift", **POOL_TRAINED_NO_COPY))


def _run(home, *args, code=0):
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result.output


def test_one_version_is_nothing_to_compare_and_an_unknown_name_is_named(reg):
    name = reg.models()[0].name
    report = reg.drift(name)
    assert report.status == "nothing to compare" and report.moved is None and report.newest_version == 1
    assert "one version" in report.sentence
    home = reg.store.home
    assert json.loads(_run(home, "drift", name, "--json"))["status"] == "nothing to compare"
    from registry.errors import NotFoundError

    with pytest.raises(NotFoundError, match="no-such-model"):
        reg.drift("no-such-model")
    result = CliRunner().invoke(cli, ["--home", str(home), "drift", "no-such-model"])
    assert result.exit_code != 0 and "no-such-model" in result.output
    assert CliRunner().invoke(cli, ["--home", str(home), "drift", name, "--alpha", "2"]).exit_code == 2
    reg.remove(name)  # a removed model: said so, with how to bring it back, by drift and by audit --model
    for args in (["drift", name], ["audit", "--model", name]):
        result = CliRunner().invoke(cli, ["--home", str(home), *args])
        assert result.exit_code == 2 and f"model {name!r} was removed (`registry restore {name}`" in result.output, \
            result.output
    reg.restore(name)


def test_refine_with_another_models_answers_moves_and_a_rerun_does_not(reg):
    a, b, c = "syn-synfam0-13b", "syn-synfam2-1b", "syn-synfam1-7b"
    before = {r["query_id"]: r["score"] for r in reg.store.read("evaluations").to_pylist() if r["model"] == a}
    reg.refine(a, own_evaluations(reg, b))  # the endpoint now serves another model
    rerun = reg.refine(c, own_evaluations(reg, c))  # re-evaluated, same answers: nothing new, no version
    assert (rerun.event, rerun.version) == ("unchanged", 1)
    reg.refine(c, [{**e, "score": 1 - e["score"]} if i == 0 else e  # re-evaluated again, one answer of many
                   for i, e in enumerate(own_evaluations(reg, c))])  # changed: a new version, not a move
    moved, same = reg.drift(a), reg.drift(c)
    assert (moved.status, moved.newest_version, moved.earlier_versions) == ("moved", 2, [1])
    assert moved.shared_queries == len(before) and moved.changed_rate > 0.12
    # the refine replaced the scores in the evaluations table; the log kept v1's
    log = [r for r in reg.store.read("evaluation_log").to_pylist() if r["model"] == a and r["version"] == 1]
    assert {r["query_id"]: r["score"] for r in log} == before
    assert same.status == "not moved" and same.changed_rate < 0.05
    # drift fits its own calibration rather than caching one without the audit's index-neighbour pairs
    assert not (reg.store.home / "audit" / "calibration.json").exists()


def test_a_refine_on_tasks_the_model_had_not_answered_is_not_called_a_move(reg):
    """A model added with its answers on some tasks and refined with its own answers on the others: the
    fingerprint test split the pooled answers ignoring tasks and called 4 of 8 such models moved (p = 0.0025)."""
    texts = {r["query_id"]: (r["text"], r["task"]) for r in reg.store.read("queries").to_pylist()}
    tasks = sorted({task for _, task in texts.values()})
    first = set(tasks[: len(tasks) // 2])
    rows = reg.store.read("evaluations").to_pylist()
    verdicts = {}
    for name in [m.name for m in reg.models()][:8]:
        own = [(texts[r["query_id"]], r["score"]) for r in rows if r["model"] == name]
        reg.add_model(f"{name}-split", [{"query": t, "task": k, "score": s} for (t, k), s in own if k in first])
        reg.refine(f"{name}-split", [{"query": t, "task": k, "score": s} for (t, k), s in own if k not in first])
        verdicts[name] = reg.drift(f"{name}-split")
    assert not [n for n, d in verdicts.items() if d.status == "moved"], {n: d.sentence for n, d in verdicts.items()}
    for d in verdicts.values():  # no task in common: said, not judged
        assert d.status == "untested" and "cannot tell a change from the task mix" in d.sentence, d.sentence


def test_audit_drift_exits_1_when_one_moved_and_checks_only_what_is_new(reg, tmp_path):
    import shutil

    home = reg.store.home
    a, b = "syn-synfam0-13b", "syn-synfam2-1b"
    # the first run's text on a copy (it records the run): the single-version models in one line, not one each
    shutil.copytree(home, tmp_path / "copy")
    lines = _run(tmp_path / "copy", "audit", "--drift").splitlines()
    assert lines[0] == f"drift of {len(reg.models())} model(s) (the first run: every model)"
    assert lines[1] == f"NOTHING TO COMPARE {len(reg.models())} model(s) with one version with evaluations: " + \
        ", ".join(sorted(m.name for m in reg.models())) and lines[2:] == ["0 moved"]
    first = json.loads(_run(home, "audit", "--drift", "--json"))  # first run: every model, none moved
    assert first["since"] is None and first["moved"] == [] and len(first["checked"]) == len(reg.models())
    assert json.loads((home / "config.json").read_text())["last_drift_run"]
    reg.refine(a, own_evaluations(reg, b))
    out = _run(home, "audit", "--drift", code=1)
    assert f"MOVED {a}" in out and "1 moved" in out
    again = json.loads(_run(home, "audit", "--drift", "--json"))  # nothing new since: passes
    assert again["checked"] == [] and again["moved"] == []


def test_http_answers_as_the_library_does(synthetic_home, tmp_path):
    from registry.client import RegistryClient
    from registry.errors import NotFoundError
    from service_harness import TOKEN, Server

    home = synthetic_home("drift-http", **POOL_TRAINED_NO_COPY)
    reg = Registry.open(home)
    a, b = "syn-synfam0-13b", "syn-synfam2-1b"
    reg.refine(a, own_evaluations(reg, b))
    server = Server(home)
    try:
        client = RegistryClient(server.url, token=TOKEN)
        local, remote = reg.drift(a), client.drift(a)
        drop = {"seconds"}
        assert remote.model_dump(exclude=drop) == local.model_dump(exclude=drop)
        assert remote.moved is True
        with pytest.raises(NotFoundError, match="no-such-model"):
            client.drift("no-such-model")
        import httpx

        assert httpx.get(f"{server.url}/v1/models/{a}/drift", params={"alpha": 2}).status_code == 422
        assert httpx.post(f"{server.url}/v1/drift/run").status_code == 401  # the run writes its marker
        run = client.drift_refined()
        assert run.moved == [a]
    finally:
        server.stop()


def test_a_refine_stamped_before_the_marker_but_landing_after_it_is_checked_by_the_next_run(reg, monkeypatch):
    """The race a time marker loses: a refine stamps its rows, a run starts and reads the log, then the
    refine commits. Its log rows carry a time before the run's marker; the next run must still check it."""
    import registry.catalog.landing as landing

    a, b = "syn-synfam0-13b", "syn-synfam2-1b"
    first = reg.drift_refined()
    assert first.since is None and len(first.checked) == len(reg.models())
    stamped = first.marker - timedelta(seconds=5)  # taken before that run started
    monkeypatch.setattr(landing, "now_utc", lambda: stamped)
    reg.refine(a, own_evaluations(reg, b))
    logged = [r["time"] for r in reg.store.read("evaluation_log").to_pylist() if r["model"] == a and r["version"] == 2]
    assert logged and all(t < first.marker for t in logged)  # the row a time marker skips
    second = reg.drift_refined()
    assert [r.name for r in second.checked] == [a] and second.moved == [a]
    assert second.log_rows == first.log_rows + len(logged)
    assert json.loads((reg.store.home / "config.json").read_text())["last_drift_log_rows"] == second.log_rows
    assert reg.drift_refined().checked == []  # and only once


def test_a_home_with_only_the_time_marker_is_read_by_time_once(reg):
    home = reg.store.home
    a, b = "syn-synfam0-13b", "syn-synfam2-1b"
    reg.drift_refined()
    config = json.loads((home / "config.json").read_text())
    del config["last_drift_log_rows"]  # as a run before the row marker left it
    (home / "config.json").write_text(json.dumps(config))
    reg.refine(a, own_evaluations(reg, b))
    run = reg.drift_refined()
    assert [r.name for r in run.checked] == [a]
    assert json.loads((home / "config.json").read_text())["last_drift_log_rows"] == run.log_rows > 0
    assert reg.drift_refined().checked == []


def test_evaluations_on_queries_without_a_vector_are_said_to_be_left_out(reg, tmp_path):
    """Texts imported with --no-encode have no query vector, so the fingerprint test cannot place them:
    the report says how many it left out rather than counting fewer evaluations than the versions hold."""
    name = "imported-unencoded"
    path = tmp_path / "unencoded.jsonl"
    path.write_text("".join(json.dumps({"model": name, "query": f"Unencoded question {i}: what is {i} plus {i}?",
                                        "task": "math", "score": i % 2}) + "\n" for i in range(40)))
    reg.import_path(path, encode=False)
    reg.add_model(name, own_evaluations(reg, "syn-synfam1-7b")[:40], replace=True)  # stored, encoded queries
    report = reg.drift(name)
    assert report.status == "untested" and report.newest_evaluations == 40 and report.earlier_evaluations == 0
    assert "40 evaluated queries were left out" in report.sentence, report.sentence
