"""`registry queries` / `Registry.queries`: where the query ids an add-model file or POST /v1/models
refers to come from (issue 24: the README's service example needs an id the registry really has)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import QUERIES, write_triple
from registry import InputError, Registry


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("queries") / "home"
    reg = Registry.open(home)
    reg.import_path(write_triple(home.parent / "triple"), encode=False)  # ids and texts only: no encoder needed
    return home


def run(home: Path, *args: str):
    return CliRunner().invoke(cli, ["--home", str(home), *args])


def test_library_lists_every_query_by_id_with_its_task_and_text(tiny):
    listed = Registry.open(tiny, create=False).queries()
    assert listed.total == len(QUERIES) and listed.task is None
    assert [(q.id, q.task, q.text) for q in listed.queries] == sorted(QUERIES)


def test_task_and_limit_filter_but_total_counts_every_match(tiny):
    reg = Registry.open(tiny, create=False)
    law = reg.queries(task="law", limit=1)
    assert law.total == 2 and [q.id for q in law.queries] == ["q3"]
    assert reg.queries(limit=0).queries == [] and reg.queries(limit=0).total == len(QUERIES)


def test_offset_pages_through_the_queries_by_id(tiny):
    reg = Registry.open(tiny, create=False)
    every = [q.id for q in reg.queries().queries]
    pages = [reg.queries(limit=2, offset=offset) for offset in (0, 2, 4, 6)]
    assert [q.id for page in pages for q in page.queries] == every
    assert [page.offset for page in pages] == [0, 2, 4, 6] and pages[-1].queries == [] and pages[-1].total == 5
    with pytest.raises(InputError) as err:
        reg.queries(offset=-1)
    assert err.value.field == "offset"
    result = run(tiny, "queries", "--limit", "2", "--offset", "2")
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.output.splitlines()[1:3]] == every[2:4]
    assert result.output.splitlines()[-1].startswith("3-4 of 5 queries")
    past = run(tiny, "queries", "--offset", "5")  # a page past the end: its empty table crashed max()
    assert past.exit_code == 0 and past.output.splitlines() == [
        "none from 6 of 5 queries (--limit N, 0 for all; --offset N for the next page; --json for whole texts)"]


def test_unknown_task_and_bad_limit_are_input_errors_naming_the_field(tiny):
    reg = Registry.open(tiny, create=False)
    with pytest.raises(InputError, match="no task 'physics'.*biology, law, math") as err:
        reg.queries(task="physics")
    assert err.value.field == "task"
    with pytest.raises(InputError) as err:
        reg.queries(limit=-1)
    assert err.value.field == "limit"


def test_cli_prints_a_table_and_says_how_many_were_left_out(tiny):
    result = run(tiny, "queries", "--limit", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["query_id", "task", "text"]
    assert lines[1].split()[:2] == ["q1", "math"] and "12 times 7" in lines[1]
    assert lines[2].split()[:2] == ["q2", "math"]
    assert lines[-1].startswith("2 of 5 queries")


def test_cli_json_is_the_query_list_and_limit_0_shows_all(tiny):
    result = run(tiny, "queries", "--task", "math", "--limit", "0", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["task"] == "math" and payload["total"] == 2
    assert [q["id"] for q in payload["queries"]] == ["q1", "q2"]


def test_cli_unknown_task_and_bad_limit_are_usage_errors_naming_the_option(tiny):
    result = run(tiny, "queries", "--task", "physics", "--json")
    assert result.exit_code == 2
    assert json.loads(result.output)["error"]["option"] == "--task"
    result = run(tiny, "queries", "--limit", "-3")
    assert result.exit_code == 2 and "--limit" in result.output


def test_cli_on_an_empty_home_says_so(tmp_path):
    Registry.open(tmp_path / "empty")
    result = run(tmp_path / "empty", "queries")
    assert result.exit_code == 0, result.output
    assert "no queries yet" in result.output
