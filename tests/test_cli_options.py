"""The CLI's front door (issue 24): --home, --server and --json before or after the command, usage
errors exit 2 (as text and as JSON), and a missing file is refused naming it, before any heavy import.
A tiny registry imported without encoding (no encoder is loaded), driven through click's CliRunner."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import write_triple
from registry.results import ErrorResponse


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from registry import Registry

    root = tmp_path_factory.mktemp("options")
    home = root / "home"
    reg = Registry.open(home)
    reg.set_query_encoder("all-MiniLM-L6-v2")
    reg.import_path(write_triple(root / "data"), encode=False)
    return home


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


READS = [["stats"], ["models", "list"], ["show", "alpha-7b"], ["search", "alpha-7b"], ["alias", "list"]]


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c))
def test_global_options_work_before_and_after_the_command(tiny, command):
    placements = {
        "before": ["--home", tiny, "--json", *command],
        "after": [*command, "--home", tiny, "--json"],
        "home before, json after": ["--home", tiny, *command, "--json"],
        "json before, home after": ["--json", *command, "--home", tiny],
        "--home=DIR after": [*command, f"--home={tiny}", "--json"],
    }
    answers = {}
    for where, args in placements.items():
        result = invoke(*args)
        answers[where] = (result.exit_code, json.loads(result.stdout))
    assert all(answer == answers["before"] for answer in answers.values()), answers
    if command[0] == "search":  # no model is embedded here: the same error, as JSON, wherever --json is
        assert answers["before"][0] == 2 and "embed" in answers["before"][1]["error"]["message"]
    elif command[0] != "alias":
        assert answers["before"][0] == 0 and answers["before"][1]  # a real answer, not an empty one


def test_a_home_after_the_command_overrides_the_one_before(tiny, tmp_path):
    result = invoke("--home", tmp_path / "nowhere", "stats", "--home", tiny, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["home"] == str(tiny)
    # and the one before is used when none comes after
    result = invoke("--home", tmp_path / "nowhere", "stats")
    assert result.exit_code == 2 and "no registry at" in result.output


def test_global_options_in_a_nested_group(tiny):
    between = invoke("models", "--home", tiny, "list", "--json")
    assert between.exit_code == 0, between.output
    assert [m["name"] for m in json.loads(between.stdout)] == ["alpha-7b", "beta-13b"]


@pytest.mark.parametrize("position", ["before", "after"])
def test_server_after_the_command_sends_it_to_that_server(tiny, position):
    url = "http://127.0.0.1:9"  # the discard port: nothing listens, so the client's error names it
    args = ["--server", url, "search", "alpha-7b"] if position == "before" else \
        ["search", "alpha-7b", "--server", url]
    result = invoke("--home", tiny, *args)
    assert result.exit_code != 0 and "127.0.0.1:9" in result.output, result.output


def test_help_lists_the_global_options_on_every_command():
    for command in (["stats"], ["models", "list"], ["alias", "set"], ["route"], ["serve"]):
        out = invoke(*command, "--help").output
        assert "--home" in out and "--server" in out and "--json" in out, command


USAGE_ERRORS = [
    (["stats", "--bogus"], "--bogus"),  # an unknown option after the command
    (["--bogus", "stats"], "--bogus"),  # ... before it (the group's own options)
    (["nocommand"], "nocommand"),
    (["show"], "NAME"),  # a missing argument
    (["clusters", "--linkage", "median"], "median"),  # not one of the choices
    (["search", "alpha-7b", "-k", "many"], "many"),  # not an integer
    (["portfolio"], "--k"),  # the command's own usage check
    (["alias", "set", "prod"], "NAME[@VERSION]"),
    (["train", "--evals-per-model", "some"], "--evals-per-model"),  # neither a number nor 'all'
    (["evaluate", "--evals-per-model", "few"], "--evals-per-model"),
    (["embed", "--all", "--max-evals", "lots"], "--max-evals"),
]


@pytest.mark.parametrize("args, named", USAGE_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_usage_errors_exit_2_as_text(tiny, args, named):
    result = invoke("--home", tiny, *args)
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("json_at", ["start", "end"])
@pytest.mark.parametrize("args, named", USAGE_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_usage_errors_exit_2_as_json(tiny, args, named, json_at):
    full = ["--json", "--home", tiny, *args] if json_at == "start" else ["--home", tiny, *args, "--json"]
    result = invoke(*full)
    assert result.exit_code == 2, result.output
    error = ErrorResponse.model_validate_json(result.stdout).error
    assert error.type == "UsageError" and named in error.message


@pytest.mark.parametrize("args, option", [
    (["add-model", "x", "--evals", "MISSING"], "--evals"),
    (["refine", "alpha-7b", "--evals", "MISSING"], "--evals"),
    (["import", "MISSING"], "PATH"),
    (["import", "DATA", "--query-embeddings", "MISSING", "--query-ids", "MISSING"], "--query-embeddings"),
])
def test_a_missing_file_is_refused_naming_it(tiny, tmp_path, args, option):
    missing = tmp_path / "no-such-evals.csv"
    args = [missing if a == "MISSING" else tiny.parent / "data" if a == "DATA" else a for a in args]
    result = invoke("--home", tiny, *args)
    assert result.exit_code == 2, result.output
    assert str(missing) in result.output and option in result.output and "does not exist" in result.output
    result = invoke("--home", tiny, *args, "--json")
    assert result.exit_code == 2, result.output
    error = ErrorResponse.model_validate_json(result.stdout).error
    assert error.option == option and str(missing) in error.message
    before = json.loads(invoke("--home", tiny, "stats", "--json").stdout)
    assert before["n_models"] == 2  # nothing was written


def test_a_missing_token_file_is_refused_naming_it(tiny, tmp_path):
    missing = tmp_path / "token"
    result = invoke("--home", tiny, "serve", "--token-file", missing)
    assert result.exit_code == 2 and str(missing) in result.output and "--token-file" in result.output


def test_a_missing_file_is_answered_before_any_heavy_import(tiny, tmp_path):
    """What the user waits for is the imports: the refusal comes from click's parsing, so a fresh
    process answering it has loaded neither LanceDB, torch nor the registry's result types."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    code = ("import sys, runpy\nsys.argv = ['registry', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('cli.main', run_name='__main__')\nexcept SystemExit as e:\n"
            "    print('EXIT', e.code)\n"
            "print('HEAVY', sorted(m for m in ('torch', 'lancedb', 'pyarrow', 'registry.api') if m in sys.modules))")
    missing = tmp_path / "absent.jsonl"
    done = subprocess.run([sys.executable, "-c", code, "--home", str(tiny), "add-model", "x", "--evals", str(missing)],
                          capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                          timeout=120)
    assert "EXIT 2" in done.stdout and str(missing) in done.stderr, done.stdout + done.stderr
    assert done.stdout.strip().endswith("HEAVY []"), done.stdout


def test_the_evaluate_table_keeps_its_columns_for_long_method_names_and_says_who_was_held_out(capsys):
    """'locus+item (logistic)' pushed its row out of line, and the pool's count took in the held-out models
    unsaid."""
    from types import SimpleNamespace

    from cli.main import _echo_evaluation

    result = SimpleNamespace(pool=["a", "b", "c"], held_out=["c"], n_test_queries=10, evals_per_model=64, seed=0,
                             routing_accuracy={"locus": 0.5, "locus+item (logistic)": 0.625},
                             correctness_accuracy={"locus": 0.75}, onboarding=None, cost_curve=None)
    _echo_evaluation(result)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("pool: 3 models (1 held out of training, onboarded after);")
    header, rows = lines[1], lines[2:]
    assert all(len(row) == len(header) for row in rows), lines
    assert rows[1].split() == ["locus+item", "(logistic)", "0.6250", "-"]
