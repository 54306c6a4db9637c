"""The CLI driven through click's CliRunner: init, import, stats, models list, demo."""
from __future__ import annotations

import json

from click.testing import CliRunner

from cli.main import cli
from helpers import write_triple


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_init_sets_the_query_encoder(tmp_path):
    home = tmp_path / "h"
    out = run("--home", str(home), "init", "--encoder", "sentence-transformers/all-MiniLM-L6-v2").output
    assert "all-MiniLM-L6-v2" in out
    assert json.loads(run("--home", str(home), "stats", "--json").output)["query_encoder"] == "all-MiniLM-L6-v2"


def test_home_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCUS_HOME", str(tmp_path / "env-home"))
    run("init", "--encoder", "all-MiniLM-L6-v2")
    assert (tmp_path / "env-home" / "config.json").is_file()


def test_stats_on_a_missing_home_is_an_error(tmp_path):
    result = run("--home", str(tmp_path / "nowhere"), "stats", ok=False)
    assert result.exit_code == 2 and "no registry at" in result.output


def test_import_stats_and_models_list(home, tmp_path):
    data = write_triple(tmp_path / "d")
    report = json.loads(run("--home", str(home), "import", str(data), "--json").stdout)  # warnings (thin models) go to stderr
    assert report["new_evaluations"] == 10 and report["encoded_texts"] == 5
    stats = json.loads(run("--home", str(home), "stats", "--json").output)
    assert {k: stats[k] for k in ("n_models", "n_queries", "n_evaluations", "coverage")} == {
        "n_models": 2, "n_queries": 5, "n_evaluations": 10, "coverage": 1.0}
    listed = json.loads(run("--home", str(home), "models", "list", "--json").output)
    assert [m["name"] for m in listed] == ["alpha-7b", "beta-13b"]
    assert listed[0]["params_b"] == 7.0
    assert "alpha-7b" in run("--home", str(home), "models", "list").output
    assert "evaluations: 10" in run("--home", str(home), "stats").output


def test_import_of_a_missing_path_names_it(home, tmp_path):
    result = run("--home", str(home), "import", str(tmp_path / "absent"), ok=False)
    # refused by click while parsing (a usage error, before any import): exit 2, naming the path
    assert result.exit_code == 2 and f"Path '{tmp_path / 'absent'}' does not exist" in result.output


def test_demo_builds_a_synthetic_registry(home):
    out = run("--home", str(home), "demo", "--epochs", "5").output
    assert "SYNTHETIC pool" in out and "mirror" in out
    assert "embedded 14 models" in out and "nearest to" in out and "audit: " in out and "candidate pair" in out
    for step in ("add-model syn-", "profile ", "portfolio (k-medoids", "route ", "with ", "clusters: ", "plots: "):
        assert step in out, step
    assert (home / "plots" / "clusters.png").stat().st_size > 1000 and (home / "plots" / "map.png").is_file()
    stats = json.loads(run("--home", str(home), "stats", "--json").output)  # the pool and the added endpoint
    assert stats["n_models"] == 15 and stats["n_queries"] == 360 and stats["n_evaluations"] == 15 * 360
    again = run("--home", str(home), "demo", "--epochs", "5", "--json").stdout  # the tour as one typed report
    from registry.results import DemoReport

    report = DemoReport.model_validate_json(again)
    assert (report.imported.new_models, report.imported.new_queries, report.imported.new_evaluations) == (0, 0, 0)
    assert report.trained is None and report.added is None  # already trained, endpoint already added
    assert report.embedded.n_embedded == 15 and report.clusters.n_models == 15 and len(report.route.ranking) == 3


def test_output_piped_into_a_reader_that_stops_early_ends_quietly(home):
    """`registry queries | head -1`: the reader closes the pipe while the command still writes; it stops
    quietly with the shell's SIGPIPE status, not a traceback and an "internal error" (it said both)."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        done = subprocess.run([sys.executable, "-m", "cli.main", "--home", str(home), "stats"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == "", done.stderr


def test_tables_pad_wide_names_by_the_columns_they_take():
    from cli._common import cell, shown_width

    assert shown_width("模型-ünï") == 8 and shown_width("e\u0301") == 1 and shown_width("plain") == 5
    rows = [cell(name, 12) + "|" for name in ("模型-ünï", "plain", "e\u0301clair")]
    assert {shown_width(row) for row in rows} == {13}  # the next column starts at one place on every row
    assert cell("a-very-long-model-name", 4) == "a-very-long-model-name"  # never cut
