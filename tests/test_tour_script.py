"""scripts/tour_mmlu_pro.py writes docs/tour-mmlu-pro.md from its template: each console block's commands
followed by what they printed, directives left off the page, variables filled in. Checked here with bash
commands that need no registry (the real run takes minutes on MMLU-Pro)."""
from __future__ import annotations

import pytest

from helpers import load_script


@pytest.fixture(scope="module")
def tour():
    return load_script("tour_mmlu_pro")


def test_commands_join_continuation_lines_and_skip_output(tour):
    block = ["$ echo a \\", "    b", "old output", "$ echo c"]
    assert tour.commands_of(block) == ["echo a \\\n    b", "echo c"]


def test_render_runs_blocks_in_order_fills_variables_and_drops_directives(tour, tmp_path):
    template = "\n".join([
        "# Page", "{{GENERATED}}", "",
        "<!-- tour-set WHO: echo world -->",
        "Hello {{WHO}}.", "",
        "```console", "$ echo one > f.txt && cat f.txt", "stale output", "$ echo {{WHO}}", "```",
        "<!-- tour-keep f.txt -> out/f.txt -->",
        "```bash", "$ not run", "```",
    ])
    page, keep = tour.render(template, tour.Session(tmp_path, tmp_path / "home"), {"GENERATED": "{{GENERATED}}"})
    assert page.splitlines() == [
        "# Page", "{{GENERATED}}", "",
        "Hello world.", "",
        "```console", "$ echo one > f.txt && cat f.txt", "one", "$ echo world", "world", "```",
        "```bash", "$ not run", "```",
    ]
    assert keep == [("f.txt", "out/f.txt")]


def test_a_failing_command_stops_the_run_unless_its_line_says_so(tour, tmp_path):
    session = tour.Session(tmp_path, tmp_path / "home")
    assert session.run("echo printed; exit 1   # exits 1") == "printed"
    with pytest.raises(SystemExit, match="exit 2"):
        session.run("echo printed; exit 2")
    with pytest.raises(SystemExit, match="exit 0"):  # said to exit 1, but did not
        session.run("true   # exits 1")


def test_the_template_holds_the_tour_commands(tour):
    """Every console block of the template has commands and no pasted output (the run adds it)."""
    lines = tour.TEMPLATE.read_text(encoding="utf-8").splitlines()
    blocks, inside = [], None
    for line in lines:
        if inside is None and line == "```console":
            inside = []
        elif inside is not None and line.startswith("```"):
            blocks.append(inside)
            inside = None
        elif inside is not None:
            inside.append(line)
    assert len(blocks) >= 10
    for block in blocks:
        commands = tour.commands_of(block)
        assert commands and all(c.startswith("registry ") for c in commands), block
        assert sum(len(c.splitlines()) for c in commands) == len(block), f"output pasted in the template: {block}"
