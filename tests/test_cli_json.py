"""Every command's `--json` is its result model's JSON, and every error under `--json` is an
`ErrorResponse` that names the option the user typed. One tiny synthetic registry (6 models, 30
queries), driven only through the CLI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import synthetic_registry
from registry.results import RESULT_TYPES, ErrorResponse


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("json") / "home"
    synthetic_registry(home, n_families=2, models_per_family=3, queries_per_task=10, tasks=("math", "law", "code"),
                       n_duplicates=0, seed=3)
    return home


def run(home: Path, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result.stdout


def check(command: str, out: str):
    """The output parses as the command's model, and printing that model gives the same JSON."""
    model = RESULT_TYPES[command]
    parsed = model.model_validate_json(out)
    assert json.loads(parsed.model_dump_json()) == json.loads(out)
    return parsed


def test_every_command_prints_its_model(tiny, tmp_path):
    home = tmp_path / "home"
    info = check("init", run(home, "init", "--encoder", "all-MiniLM-L6-v2", "--json"))
    assert info.query_encoder == "all-MiniLM-L6-v2" and info.active_encoder is None
    trained = check("train", run(tiny, "train", "--epochs", "5", "--evals-per-model", "all", "--json"))
    assert len(trained.models) == 6
    fitted = check("fit-fingerprints", run(tiny, "fit-fingerprints", "--json"))
    assert fitted.encoder_id == trained.encoder_id and fitted.models == 6 and fitted.queries > 0
    embedded = check("embed", run(tiny, "embed", "--all", "--json"))
    assert embedded.n_embedded == 6 and embedded.encoder_id == trained.encoder_id
    stats = check("stats", run(tiny, "stats", "--json"))
    assert (stats.n_models, stats.n_queries, stats.active_encoder) == (6, 30, trained.encoder_id)
    listed = check("models list", run(tiny, "models", "list", "--json"))
    names = [r.name for r in listed.root]
    shown = check("show", run(tiny, "show", names[0], "--json"))
    assert shown.embedded and shown.encoder_id == trained.encoder_id and shown.record.name == names[0]
    found = check("search", run(tiny, "search", names[0], "-k", "2", "--json"))
    assert len(found.neighbours) == 2 and names[0] not in [h.name for h in found.neighbours]
    profile = check("profile", run(tiny, "profile", "--task", "math=0.9", "--task", "law=0.2", "-k", "2",
                                   "--evals", "20", "--json"))
    assert len(profile.neighbours) == 2 and set(profile.per_task) == {"math", "law"}
    from registry import Registry

    text = Registry.open(tiny).store.read("queries", ["text"]).column("text")[0].as_py()  # stored: not encoded
    routed = check("route", run(tiny, "route", text, "-k", "2", "--fallback", "2", "--json"))
    assert len(routed.ranking) == 2 and routed.ranking[0].name not in [f.name for f in routed.fallbacks]
    chosen = check("portfolio", run(tiny, "portfolio", "-k", "2", "--draws", "5", "--json"))
    assert chosen.k == 2 and chosen.pool_size == 6
    groups = check("clusters", run(tiny, "clusters", "--json"))
    assert sum(c.size for c in groups.clusters) == 6
    drawn = check("map", run(tiny, "map", "--plot", str(tmp_path / "m.png"), "--json"))
    assert drawn.n_models == 6 and Path(drawn.plot).is_file()
    compared = check("compare", run(tiny, "compare", names[0], names[1], "--json"))
    assert compared.a == names[0] and compared.tasks
    evals = tmp_path / "e.jsonl"
    queries = Registry.open(tiny).store.read("queries", ["query_id"]).column("query_id").to_pylist()
    evals.write_text("".join(json.dumps({"query_id": q, "score": i % 2}) + "\n" for i, q in enumerate(queries)))
    added = check("add-model", run(tiny, "add-model", "json-endpoint", "--evals", str(evals), "--meta",
                                   "provider=acme", "--json"))
    assert (added.event, added.version, added.n_evals) == ("add", 1, 30)
    removed = check("remove", run(tiny, "remove", "json-endpoint", "--json"))
    assert removed.removed and removed.version == 1
    restored = check("restore", run(tiny, "restore", "json-endpoint", "--json"))
    assert restored.restored_version == 1 and restored.version == 2  # a restore is a new version
    history = check("history", run(tiny, "history", "json-endpoint", "--json"))
    assert [v.event for v in history.versions] == ["add", "remove", "restore"]
    assert check("check", run(tiny, "check", "--json")).ok


def test_import_prints_its_report(tmp_path):
    from helpers import write_triple

    home = tmp_path / "home"
    run(home, "init", "--encoder", "all-MiniLM-L6-v2")
    report = check("import", run(home, "import", str(write_triple(tmp_path / "d")), "--no-encode", "--json"))
    assert (report.new_models, report.new_evaluations, report.encoded_texts) == (2, 10, 0)


@pytest.mark.parametrize("args, option, kind", [
    (["profile", "--task", "astrology=0.5", "--json"], "--task", "InputError"),
    (["profile", "--task", "math=0.5", "-k", "0", "--json"], "-k", "InputError"),
    (["search", "syn-synfam0-1b", "--where", "colour == red", "--json"], "--where", "InputError"),
    (["route", "some text", "--where", "family == nobody", "--json"], "--where", "InputError"),
    (["portfolio", "-k", "99", "--json"], "-k", "InputError"),
    (["audit", "--model", "no-such-model", "--json"], "--model", "NotFoundError"),
    (["portfolio", "--budget", "0.001B", "--method", "greedy-budget", "--json"], "--budget", "InputError"),
    (["add-model", "", "--evals", "EVALS", "--json"], "NAME", "InputError"),
    (["add-model", "x", "--evals", "EVALS", "--meta", "params_b=-3", "--json"], "--meta", "InputError"),
    (["add-model", "x", "--evals", "EVALS", "--meta", "oops", "--json"], "--meta", "UsageError"),
    (["clusters", "--linkage", "median", "--json"], "--linkage", "UsageError"),
    (["show", "nobody", "--json"], None, "NotFoundError"),
])
def test_errors_under_json_are_json_naming_the_option(tiny, tmp_path, args, option, kind):
    evals = tmp_path / "e.csv"
    evals.write_text("query,score\nWhat is 1+1?,1\n")
    result = CliRunner().invoke(cli, ["--home", str(tiny), *[str(evals) if a == "EVALS" else a for a in args]])
    assert result.exit_code == 2, result.output  # an error, whatever its kind (1 is a finding's)
    error = ErrorResponse.model_validate_json(result.stdout).error
    assert error.type == kind and error.option == option and "Traceback" not in result.output
    if option is not None:
        assert option in error.message


@pytest.mark.parametrize("args, expected", [
    (["profile", "--task", "astrology=0.5"], "option --task: unknown task(s) 'astrology'"),
    (["add-model", "", "--evals", "EVALS"], "argument NAME: the model name is empty"),
    (["add-model", "x", "--evals", "EVALS", "--meta", "params_b=-3"], "option --meta: params_b '-3'"),
])
def test_errors_as_text_name_the_option_not_the_field(tiny, tmp_path, args, expected):
    evals = tmp_path / "e.csv"
    evals.write_text("query,score\nWhat is 1+1?,1\n")
    result = CliRunner().invoke(cli, ["--home", str(tiny), *[str(evals) if a == "EVALS" else a for a in args]])
    assert result.exit_code == 2 and expected in result.output, result.output
    assert "pydantic" not in result.output and "targets" not in result.output and "validation error" not in result.output
