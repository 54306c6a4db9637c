"""A power user's review of the CLI and the Python API (bad numbers, wrong types, files that cannot be
read or written, a bug under --json): each case is refused with the registry's own error naming what was
given, and nothing is written. One small trained synthetic registry, copied per test."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import SMALL_TRAINED, own_evaluations
from service_harness import copy_home


@pytest.fixture(scope="module")
def base_home(synthetic_home) -> Path:
    return synthetic_home("review-inputs", **SMALL_TRAINED)


@pytest.fixture
def home(base_home, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return copy_home(base_home, tmp_path / "home")


def _cli(home: Path, *args: str, code: int = 2):
    result = CliRunner().invoke(cli, ["--home", str(home), *map(str, args)])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


@pytest.mark.parametrize("args, words", [
    (["profile", "--task", "math=0.8", "--seed", "-1"], "option --seed: must be an integer of at least 0"),
    (["portfolio", "-k", "2", "--seed", "-1"], "option --seed: must be an integer of at least 0"),
    (["train", "--seed", "-1", "--epochs", "1"], "option --seed: must be an integer of at least 0"),
    (["train", "--evals-per-model", "0", "--epochs", "1"], "option --evals-per-model"),
    (["profile", "--task", "math=0.8", "--evals", "100000000"], "option --evals: must be an integer from"),
    # the option as typed, not the API's name for it (random_draws)
    (["portfolio", "-k", "2", "--draws", "0"], "option --draws: must be an integer of at least 1, not 0"),
    # tracebacks a review found: numbers past what the libraries below take, and options checked only after training
    (["compact", "--keep-versions-for", "99999999d"], "option --keep-versions-for: must be from 0 to 36,500 days"),
    (["compact", "--keep-versions-for", "9" * 25], "is too long a duration"),
    (["drift", "x", "--permutations", "9" * 20], "option --permutations: must be at most 100,000"),
    (["train", "--seed", "9" * 20, "--epochs", "1"], "option --seed: must be at most 4,294,967,295"),
    (["train", "--view-weight", "inf", "--epochs", "1"], "--view-weight: must be a finite number, not inf"),
    (["train", "--max-seconds", "nan", "--epochs", "1"], "--max-seconds: must be a finite number, not nan"),
    (["evaluate", "--holdout-models", "2", "--onboard-evals", "0,16"], "option --onboard-evals: must be an integer of at least 1"),
    (["evaluate", "--onboard-evals", "16"], "option --onboard-evals: applies only when models are held out"),
    (["evaluate", "--unpriced", "exclude"], "option --unpriced: applies to the cost curve only"),
])
def test_numbers_out_of_range_are_refused_naming_the_option(home, args, words):
    assert words in _cli(home, *args, code=2).output  # a usage error, as click's own range checks


def test_demo_checks_its_numbers_before_it_makes_a_home(tmp_path):
    target = tmp_path / "demo-home"
    for args in (["--seed", "-1"], ["--epochs", "0"]):
        out = CliRunner().invoke(cli, ["--home", str(target), "demo", *args])
        assert out.exit_code == 2 and "must be an integer of at least" in out.output and "Traceback" not in out.output
    assert not target.exists()


def test_max_evals_of_add_model_and_refine_is_checked(home):
    from registry import Registry
    from registry.errors import InputError

    reg = Registry.open(home)
    query = reg.store.read("queries", ["query_id"]).column("query_id")[0].as_py()
    for bad in (0, -1, 1.5, "all"):
        with pytest.raises(InputError) as err:
            reg.add_model("capped", [{"query_id": query, "score": 1}], max_evals=bad)
        assert err.value.field == "max_evals"
        with pytest.raises(InputError):
            reg.refine(reg.models()[0].name, [{"query_id": query, "score": 1}], max_evals=bad)
    assert "capped" not in [m.name for m in reg.models()]


def test_add_model_and_refine_take_max_evals_on_the_command_line(home, tmp_path):
    from registry import Registry

    ids = Registry.open(home).store.read("queries", ["query_id"]).column("query_id").to_pylist()[:6]
    evals = tmp_path / "e.csv"
    evals.write_text("query_id,score\n" + "".join(f"{q},{i % 2}\n" for i, q in enumerate(ids)))
    added = json.loads(_cli(home, "add-model", "capped", "--evals", evals, "--max-evals", "3", "--json", code=0).stdout)
    assert added["n_evals"] == 3 and added["version"] == 1  # embedded from a sample of 3 of its 6
    refined = json.loads(_cli(home, "refine", "capped", "--evals", evals, "--max-evals", "all", "--json", code=0).stdout)
    assert refined["n_evals"] == 6 and refined["version"] == 2
    assert ("capped: no new evaluations; the new version re-embeds the stored ones from 6 of its 6 evaluations "
            "(the stored vector read 3)") in refined["warnings"]
    assert "option --max-evals: must be an integer of at least 1, not 0" in _cli(
        home, "add-model", "other", "--evals", evals, "--max-evals", "0", code=2).output
    assert "'x' is not a number or 'all'" in _cli(home, "refine", "capped", "--evals", evals, "--max-evals", "x",
                                                  code=2).output
    assert [m.name for m in Registry.open(home).models()].count("other") == 0


def test_wrong_types_in_the_python_api_are_input_errors(home):
    from registry import Registry
    from registry.errors import InputError

    reg = Registry.open(home)
    name = reg.models()[0].name
    calls = [lambda: reg.similar([name]), lambda: reg.similar(None), lambda: reg.similar(name, where=123),
             lambda: reg.list(where=123), lambda: reg.route("a question?", exclude=[1]),
             lambda: reg.audit(model=[name]), lambda: reg.history(None), lambda: reg.show([name]),
             lambda: reg.remove(None), lambda: reg.restore(None), lambda: reg.drift(None),
             lambda: reg.compare(name, None), lambda: reg.set_alias("a1", None), lambda: reg.delete_alias(None),
             lambda: reg.refine(None, [("a question?", 1)])]
    for call in calls:
        with pytest.raises(InputError):
            call()
    assert reg.route("a question?", exclude=None, k=1).ranking  # None: nothing excluded


@pytest.mark.parametrize("call, field, says", [
    # a reviewer's calls that raised TypeError, pydantic's ValidationError or Python's own words
    (lambda reg, f: reg.add_model("m1", [("a brand new question?", 1, 5)]), "task", "task must be text, not int"),
    (lambda reg, f: reg.route("a question?", exclude=5), "exclude", "exclude must be a model name or a list"),
    (lambda reg, f: reg.clusters(plot=3), "plot", "plot must be a path (str or os.PathLike), not int"),
    (lambda reg, f: type(reg).open(123), "home", "home must be a path"),
    (lambda reg, f: type(reg).open(""), "home", "home is empty"),
    (lambda reg, f: reg.import_path(None), "path", "path must be a path"),
    (lambda reg, f: reg.import_path(f, metadata=["a"]), "metadata", "metadata must be a mapping"),
    (lambda reg, f: reg.import_path(f, id_prefix=None), "id_prefix", "id_prefix must be text"),
    (lambda reg, f: reg.import_path(f, modelname="x"), "modelname", "unknown import option(s) modelname"),
    (lambda reg, f: reg.import_path(f, model_name="x"), "model_name", "model_name applies to lm-eval results only"),
    (lambda reg, f: reg.portfolio(budget_b=-5), "budget_b", "budget_b must be a positive number"),
    (lambda reg, f: reg.compare(None, "x"), "a", "a must be text"),
    (lambda reg, f: reg.distance("x", None), "b", "b must be text"),
    (lambda reg, f: reg.audit(model=["x"]), "model", "model must be text"),
    (lambda reg, f: reg.add_model("m1", [("q?", 1)], {5: "x"}), "metadata", "a metadata key must be text, not int"),
    (lambda reg, f: reg.add_model("m1", [("q?", 1)], ["a"]), "metadata", "metadata must be a mapping"),
    (lambda reg, f: reg.audit(alpha="0.01"), "alpha", "alpha must be a number in (0, 1); got '0.01'"),
    (lambda reg, f: reg.add_model("m1", [("q?", np.bool_(True))]), "score", "is a boolean, not a number"),
    # a string is true to Python: replace="no" replaced, create="no" created
    (lambda reg, f: reg.add_model(reg.models()[0].name, [("q?", 1)], replace="no"), "replace",
     "replace must be True or False, not 'no'"),
    (lambda reg, f: type(reg).open(f.parent / "new-home", create="no"), "create", "create must be True or False"),
    (lambda reg, f: reg.import_path(f, encode="false"), "encode", "encode must be True or False"),
    (lambda reg, f: reg.evaluate(cost="yes"), "cost", "cost must be True or False"),
    (lambda reg, f: reg.portfolio(k=2, include_unknown_params=1), "include_unknown_params", "must be True or False"),
    (lambda reg, f: reg.suggest_queries(n=4, from_pool="yes"), "from_pool", "from_pool must be True or False"),
])
def test_the_python_api_names_the_argument_it_refuses(home, tmp_path, monkeypatch, call, field, says):
    from registry import Registry
    from registry.errors import InputError

    reg = Registry.open(home)
    cwd = tmp_path / "cwd"  # Registry.open("") made a registry here
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"model": "from-a-file", "query": "a question from a file?", "score": 1}) + "\n")
    before = reg.stats().model_dump()
    with pytest.raises(InputError) as caught:
        call(reg, rows)
    assert caught.value.field == field and says in str(caught.value), str(caught.value)
    assert reg.stats().model_dump() == before and not list(cwd.iterdir())
    assert not (tmp_path / "new-home").exists()


def test_a_model_cannot_take_an_alias_s_name_and_history_reads_the_model_first(home, tmp_path):
    from registry import Registry
    from registry.errors import RegistryError

    reg = Registry.open(home)
    target = reg.models()[0].name
    reg.set_alias("prod", target)
    query = reg.store.read("queries", ["query_id"]).column("query_id")[0].as_py()
    with pytest.raises(RegistryError, match="is an alias"):
        reg.add_model("prod", [{"query_id": query, "score": 1}])
    assert "prod" not in [m.name for m in reg.models()]
    assert json.loads(_cli(home, "history", "prod", "--json", code=0).stdout)["name"] == target  # the alias's
    # an alias of an alias: refused naming the model to point at (it said "no model named 'prod'")
    error = json.loads(_cli(home, "alias", "set", "prod2", "prod", "--json").stdout)["error"]
    assert error["field"] == "target" and f"'prod' is an alias (of {target})" in error["message"]
    assert f"point 'prod2' at {target}" in error["message"] and "prod2" not in [a.alias for a in reg.aliases()]


def test_a_pinned_alias_of_a_restored_version_is_shown_by_the_cli_as_by_the_api(home, tmp_path):
    from registry import Registry

    reg = Registry.open(home)
    name = reg.models()[0].name
    reg.set_alias("pin", f"{name}@1")
    table = reg.store.read_in("evaluations", ["query_id", "score"], "model", [name])
    reg.refine(name, [{"query_id": q, "score": 1 - s} for q, s in zip(table.column("query_id").to_pylist()[:3],
                                                                       table.column("score").to_pylist()[:3])])
    assert "live version is 2" in _cli(home, "show", "pin").output
    reg.restore(name, 1)
    shown = json.loads(_cli(home, "show", "pin", "--json", code=0).stdout)
    assert shown["record"]["name"] == name and shown["version"] == 3 == reg.show("pin").version


def test_files_that_cannot_be_written_or_read_are_named(home, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = _cli(home, "clusters", "--plot", str(blocker / "x.png"), code=2)
    assert "option --plot: cannot write the plot" in out.output and str(blocker) in out.output
    binary = tmp_path / "answers.csv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n")
    out = _cli(home, "suggest-queries", "--from-pool", "--answered", str(binary))
    assert f"{binary}, line 1: text is not UTF-8" in out.output
    out = _cli(home, "serve", "--token-file", str(binary), code=2)
    assert "is not UTF-8 text" in out.output


def test_a_bug_under_json_still_answers_an_error_object(home, monkeypatch):
    from registry import Registry

    def broken(self):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(Registry, "stats", broken)
    monkeypatch.setattr("registry.snapshot.stats", lambda home: broken(None))
    out = CliRunner().invoke(cli, ["--home", str(home), "stats", "--json"])
    assert out.exit_code == 2
    assert json.loads(out.stdout) == {"error": {"type": "InternalError", "message": "ZeroDivisionError: a bug"}}
    out = CliRunner().invoke(cli, ["--home", str(home), "stats"])  # as text: the traceback, and an error's exit
    assert out.exit_code == 2 and "Traceback" in out.stderr and "ZeroDivisionError: a bug" in out.stderr
    assert "internal error: ZeroDivisionError: a bug (a bug; the traceback is above)" in out.output


def test_audit_reports_the_k_it_could_use(home):
    from registry import Registry

    reg = Registry.open(home)
    assert reg.audit(k=10**20).k == len(reg.models()) - 1  # a model has that many neighbours at most


def test_a_bad_alias_is_named_as_the_argument_the_user_typed(home):
    out = json.loads(_cli(home, "alias", "set", "1bad", "x", "--json", code=2).stdout)["error"]
    assert (out["option"], out["field"]) == ("ALIAS", "alias") and out["message"].startswith("argument ALIAS: '1bad'")


def test_a_name_not_found_is_named_by_the_option_it_came_in(home):
    error = json.loads(_cli(home, "route", "a question?", "--exclude", "nosuch", "--json").stdout)["error"]
    assert error == {"type": "NotFoundError", "message": "option --exclude: no model named 'nosuch' in the registry",
                     "option": "--exclude", "field": "exclude"}
    name = json.loads(_cli(home, "models", "list", "--json", code=0).stdout)[0]["name"]
    error = json.loads(_cli(home, "restore", name, "--version", "99", "--json").stdout)["error"]
    assert error["option"] == "--version" and "has no version 99" in error["message"]
    for args, label in (((name, "nosuch"), "argument B"), (("nosuch", name), "argument A")):
        out = _cli(home, "compare", *args).output
        assert f"{label}: no model named 'nosuch' in the registry" in out


def test_a_directory_that_is_no_registry_stays_untouched_by_reads_and_by_a_refused_first_import(tmp_path):
    """A read of a directory that holds no registry wrote config.json and db/ into it (and `--home ""` did so
    to the current directory); a first import that was refused left the home it had made behind."""
    plain = tmp_path / "plain"
    plain.mkdir()
    for command in (["stats"], ["models", "list"], ["search", "x"]):
        assert "no registry at" in _cli(plain, *command).output
    assert list(plain.iterdir()) == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"model": "m", "query": "What is 2 + 2?", "score": 7}\n')
    fresh = tmp_path / "fresh"
    assert "outside [0, 1]" in _cli(fresh, "import", bad).output
    assert not fresh.exists()
    bad.write_text('{"model": "m", "query": "What is 2 + 2?", "score": 1}\n')
    _cli(fresh, "import", bad, "--no-encode", code=0)
    assert (fresh / "config.json").is_file()


@pytest.mark.parametrize("row, field, words", [
    ('{"model": {"a": 1}, "query": "q?", "score": 1}', "model", "expected text, not an object"),
    ('{"model": true, "query": "q?", "score": 1}', "model", "expected text, not true/false"),
    ('{"model": "a\\tb", "query": "q?", "score": 1}', "model", "control character"),  # with its line now
])
def test_a_json_lines_model_that_is_no_name_is_refused_at_its_line(home, tmp_path, row, field, words):
    path = tmp_path / "rows.jsonl"
    path.write_text(row + "\n")
    error = json.loads(_cli(home, "import", path, "--json").stdout)["error"]
    assert (error["field"], error["line"], error["file"]) == (field, 1, str(path)) and words in error["message"]


@pytest.mark.parametrize("text, words", [
    ("model,query,score,score\nm,q?,1,0\n", "'score' appear more than once in the header"),
    ("model,query,score\nm,q?,0_1\n", "score '0_1' is not a number"),  # float() read it as 1
])
def test_csv_cells_python_reads_leniently_are_refused(home, tmp_path, text, words):
    path = tmp_path / "evals.csv"
    path.write_text(text)
    assert words in _cli(home, "add-model", "lenient", "--evals", path).output


def test_an_alias_cannot_hide_a_removed_model_nor_be_refined_past_its_pin(home):
    from registry import Registry
    from registry.errors import InputError, RegistryError

    reg = Registry.open(home)
    gone, other = [m.name for m in reg.models()[:2]]
    reg.remove(gone)
    with pytest.raises(RegistryError, match="removed model's name"):
        reg.set_alias(gone, other)  # `restore` would then have restored the alias's model
    assert reg.restore(gone).name == gone
    reg.set_alias("pinned", f"{other}@1")
    query = reg.store.read("queries", ["query_id"]).column("query_id")[0].as_py()
    with pytest.raises(InputError, match="pinned to") as caught:
        reg.refine("pinned", [{"query_id": query, "score": 1}])
    assert caught.value.field == "name" and reg.show(other).version == 1
    assert "registry drift" in _cli(home, "audit", "--drift", "--model", other).output  # it ran every model
    for extra in (["--fail-on-flag"], ["-k", "3"], ["--by", "locus"], ["--fail-on-related", "--metric", "euclidean"]):
        refused = _cli(home, "audit", "--drift", *extra, "--json")  # a green build must not hide the duplicates
        assert refused.exit_code == 2 and "to the duplicate audit, which --drift does not run" in refused.output
        assert ("belongs" if sum(a.startswith("-") for a in extra) == 1 else "belong to") in refused.output
        assert extra[0] in refused.output
    rows = home.parent / "under-an-alias.jsonl"  # import made a model of an alias's name, as add-model does not
    rows.write_text(json.dumps({"model": "pinned", "query_id": query, "score": 1}) + "\n")
    assert "'pinned' points to " + other in _cli(home, "import", rows).output
    assert "pinned" not in [m.name for m in reg.models()]


def _unshare_works() -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _unshare_works(), reason="a read-only bind mount needs `unshare -m` (a mount namespace)")
def test_a_home_on_a_read_only_file_system_answers_reads_and_refuses_writes_as_such(home, tmp_path):
    """Reads keep caches in the home (the index, the snapshot, the audit's calibration); on a read-only mount
    each of them ended in a traceback, and a write in one about `.lock`. Its caches are removed first, so
    every read has one to write."""
    import shutil
    import subprocess
    import sys

    for cache in ("index", "audit", "fingerprints"):
        shutil.rmtree(home / cache, ignore_errors=True)
    mount = tmp_path / "ro"
    mount.mkdir()
    cli_call = f"{sys.executable} -c 'from cli.main import cli; cli()' --home {mount}"
    from registry import Registry

    name = Registry.open(home).models()[0].name
    # a cache each, and writes: fit-fingerprints fitted the whole table and then failed in a traceback, as map
    # did writing its plot
    commands = ["stats", f"search {name}", "audit", f"alias set foo {name}", "fit-fingerprints",
                f"map --plot {mount}/m.png", "train --epochs 1"]
    script = [f"mount --bind {home} {mount} && mount -o remount,ro,bind {mount} || exit 99"]
    script += [f"echo '@@ {i}'; {cli_call} {c} 2>&1; echo \"rc=$?\"" for i, c in enumerate(commands)]
    done = subprocess.run(["unshare", "-m", "sh", "-c", "\n".join(script)], capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode == 99:
        pytest.skip("this machine refuses a read-only bind mount")
    answers = {commands[int(i)]: out for i, out in (part.split("\n", 1) for part in done.stdout.split("@@ ")[1:])}
    assert set(answers) == set(commands), done.stdout[-2000:]
    for command, output in answers.items():
        assert "Traceback" not in output and "internal error" not in output, (command, output)
        if command.startswith(("alias", "fit-fingerprints", "map", "train")):
            assert "rc=2" in output and "Read-only file system" in output, output
        else:
            assert output.rstrip().endswith("rc=0"), (command, output)


@pytest.mark.parametrize("content", ["{bad", "[1, 2]", "\udcff"], ids=["not-json", "not-an-object", "not-utf8"])
def test_a_damaged_config_json_is_named_by_every_command_and_never_written_over(home, content):
    """stats read it as defaults (naming the default query encoder), search and check answered a
    JSONDecodeError traceback, and compact wrote to the home."""
    path = home / "config.json"
    if content == "\udcff":
        path.write_bytes(b"\xff\xfe{")
    else:
        path.write_text(content, encoding="utf-8")
    before = path.read_bytes()
    from registry import Registry

    name = "syn-synfam0-13b"
    for command in (["stats"], ["check"], ["search", name], ["show", name], ["alias", "list"], ["compact"],
                    ["models", "list"]):
        result = _cli(home, *command, "--json")
        assert f"{path}" in json.loads(result.stdout)["error"]["message"], (command, result.output)
    assert path.read_bytes() == before
    with pytest.raises(Exception, match="config.json"):
        Registry.open(home).stats()


def test_check_finds_an_active_encoder_that_cannot_load_and_models_of_two_encoders(home):
    """It said "consistent" with the encoder's checkpoint gone (refine then failed), and exited 2, as a
    failure of its own, when a new encoder had not yet re-embedded the models."""
    import shutil

    from encoder.training import TrainConfig
    from registry import Registry

    reg = Registry.open(home)
    active = reg.store.config["active_encoder"]
    shutil.move(home / "encoders" / active, home / "aside")
    out = _cli(home, "check", "--json", code=1)
    assert any("active encoder cannot be loaded" in p for p in json.loads(out.stdout)["problems"]), out.output
    shutil.move(home / "aside", home / "encoders" / active)
    _cli(home, "check", code=0)
    report = reg.train(config=TrainConfig(epochs=2, max_seconds=None))  # a new active encoder; the models keep the old vectors
    assert f"{len(reg.models())} model(s) keep the previous encoder's vectors until `registry embed --all`" in report.warnings
    out = _cli(home, "check", "--json", code=1)
    stale = len(reg.models())
    assert f"{stale} model(s) carry vectors of an encoder other than the active one" in out.stdout, out.output
    own = own_evaluations(reg, reg.models()[0].name)
    reg.add_model("new-encoder-copy", own)  # embedded by the new encoder: two encoders in the index
    problems = json.loads(_cli(home, "check", "--json", code=1).stdout)["problems"]
    assert any("vectors from 2 encoders" in p and "embed --all" in p for p in problems), problems
    _cli(home, "embed", "--all", code=0)
    _cli(home, "check", code=0)


def test_commands_the_registry_suggests_are_quoted_to_paste_into_a_shell(home):
    name = "new model/\u00fc"
    reg = __import__("registry").Registry.open(home)
    reg.add_model(name, own_evaluations(reg, reg.models()[0].name))
    _cli(home, "alias", "set", "latest", name, code=0)
    removed = _cli(home, "remove", name, code=0)
    assert "registry restore 'new model/\u00fc' brings it back" in removed.output, removed.output
    refused = _cli(home, "show", "latest")
    assert "`registry restore 'new model/\u00fc'`" in refused.output, refused.output


def test_ctrl_c_under_json_answers_a_json_error(home, monkeypatch):
    """It printed click's "Aborted!" on stderr and nothing on stdout."""
    from registry import Registry

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Registry, "stats", interrupted)
    result = _cli(home, "stats", "--json", code=130)
    assert json.loads(result.stdout)["error"]["type"] == "Interrupted"
    plain = _cli(home, "stats", code=1)  # without --json, click's own words
    assert "Aborted!" in plain.output


def test_stats_counts_a_removed_model_s_evaluations_apart(home):
    """`stats` said 14 models and 5,400 evaluations at coverage 1.0 (14 x 360 = 5,040): the count took in a
    removed model's evaluations, kept for restore, and the coverage did not."""
    from registry import Registry

    reg = Registry.open(home)
    before = reg.stats()
    gone = reg.models()[0].name
    own = len(reg.store.read_in("evaluations", ["model"], "model", [gone]))
    reg.remove(gone)
    after = reg.stats()
    assert (after.n_evaluations, after.n_removed_evaluations) == (before.n_evaluations - own, own)
    shown = json.loads(_cli(home, "stats", "--json", code=0).stdout)
    assert (shown["n_evaluations"], shown["n_removed_evaluations"]) == (after.n_evaluations, own)
    assert f"{own:,} more of removed models" in _cli(home, "stats", code=0).output


def test_a_restore_keeps_when_the_model_was_added_and_embedded(home):
    """A restore gave `added` and `embedded_at` the removal's time (the "remove" history row is a snapshot made
    then): an imported and embedded model, and one added by add-model."""
    from registry import Registry

    reg = Registry.open(home)
    imported = reg.models()[0].name
    query = reg.store.read("queries", ["query_id"]).column("query_id")[0].as_py()
    reg.add_model("added-then-removed", [{"query_id": query, "score": 1}])
    for name in (imported, "added-then-removed"):
        before = reg.show(name)
        reg.remove(name)
        reg.restore(name)
        after = reg.show(name)
        assert (after.added, after.embedded_at) == (before.added, before.embedded_at), name


def test_history_of_a_never_embedded_model_and_a_restore_of_the_live_version_say_so(home, tmp_path):
    rows = tmp_path / "imported.jsonl"
    rows.write_text(json.dumps({"model": "imported-only", "query": "What is 3 + 4?", "score": 1}) + "\n")
    _cli(home, "import", rows, "--no-encode", code=0)
    from registry import Registry
    from registry.errors import NotFoundError

    with pytest.raises(NotFoundError, match="no versions yet: it came in by `registry import`"):
        Registry.open(home).history("imported-only")  # it said "no model named" while show listed it
    assert "no versions yet" in _cli(home, "history", "imported-only").output
    _cli(home, "remove", "imported-only", code=0)
    shown = _cli(home, "history", "imported-only", code=0).output  # printed "encoder None  None evals"
    assert "not embedded" in shown and "None" not in shown
    restored = _cli(home, "restore", "imported-only", code=0).output
    assert "restored imported-only" in restored
    again = _cli(home, "restore", "imported-only", "--version", "2", code=0).output
    assert again.strip() == "imported-only is version 2 already: nothing to restore"
