"""Generate docs/tour-mmlu-pro.md: run every command of the tour on real data, from an empty home, and
write the page with their outputs.

    .venv/bin/python scripts/tour_mmlu_pro.py [--work /tmp/locus-tour] [--fresh] [--out docs/tour-mmlu-pro.md]

The prose and the commands live in scripts/tour_mmlu_pro.template.md; this script only runs them. In the
template, the `$ ` lines of each ```console block are commands (a trailing backslash continues one); they
run in order in one scratch directory standing in for the repository root (`--work`/repo, with
`../shared` linked to the project's ../shared, so the page's paths are the ones a user types), with
$LOCUS_HOME an empty home (`--work`/home) and the set-up's `.venv/bin` first on PATH. What a command prints
on stdout goes under it on the page (stderr only when it warns: training's progress lines are left out).
A command fails the run when it exits non-zero, unless its line says `# exits N` and it exits N.

Two directives, HTML comments left off the page:
  <!-- tour-set NAME: COMMAND -->   runs COMMAND; {{NAME}} in later commands and prose is its output
  <!-- tour-keep FILE -> PATH -->     copies FILE from the scratch directory to docs/PATH at the end
{{GENERATED}} becomes the line that says how, where and when the page was made.

Before the commands run, the script writes the tour's two evaluation files from MMLU-Pro: endpoint.jsonl,
1,024 of Llama-3-8B's answers (query text + score), and endpoint-more.jsonl, 1,024 others of its answers.
About 12-15 minutes on 2 idle cores, most of it `registry train`.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "scripts" / "tour_mmlu_pro.template.md"
DATA = ROOT.parent / "shared" / "data" / "mmlu-pro"
ENDPOINT_MODEL = "Llama-3-8B"
FENCE = re.compile(r"^```(\S*)\s*$")
SET = re.compile(r"^<!--\s*tour-set\s+(\w+):\s*(.+?)\s*-->\s*$")
KEEP = re.compile(r"^<!--\s*tour-keep\s+(\S+)\s*->\s*(\S+)\s*-->\s*$")
EXPECTED_EXIT = re.compile(r"#\s*exits\s+(\d+)\s*$")
VARIABLE = re.compile(r"\{\{(\w+)\}\}")


def write_endpoint_files(cwd: Path) -> None:
    """endpoint.jsonl and endpoint-more.jsonl: two disjoint draws of 1,024 of the endpoint model's answers."""
    with open(DATA / "queries.csv", encoding="utf-8", newline="") as handle:
        text = {row["query_id"]: row["text"] for row in csv.DictReader(handle)}
    with open(DATA / "models.csv", encoding="utf-8", newline="") as handle:
        model = next(row["model_id"] for row in csv.DictReader(handle) if row["name"] == ENDPOINT_MODEL)
    with open(DATA / "evals.csv", encoding="utf-8", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["model_id"] == model]
    random.Random(0).shuffle(rows)
    for name, part in (("endpoint.jsonl", rows[:1024]), ("endpoint-more.jsonl", rows[1024:2048])):
        with open(cwd / name, "w", encoding="utf-8") as handle:
            for row in part:
                handle.write(json.dumps({"query": text[row["query_id"]], "score": float(row["score"])}) + "\n")


class Session:
    """Runs the tour's commands one after another in the scratch directory, with the tour's environment."""

    def __init__(self, cwd: Path, home: Path):
        self.cwd = cwd
        self.env = {**os.environ, "LOCUS_HOME": str(home), "HF_HUB_OFFLINE": "1", "LOCUS_SERVER": "none",
                    "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.env.pop("LOCUS_TOKEN", None)
        self.seconds: dict[str, float] = {}

    def run(self, command: str) -> str:
        expected = EXPECTED_EXIT.search(command)
        started = time.perf_counter()
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True)
        self.seconds[command] = time.perf_counter() - started
        if done.returncode != (int(expected.group(1)) if expected else 0):
            sys.exit(f"tour command failed (exit {done.returncode}):\n$ {command}\n{done.stdout}{done.stderr}")
        warnings = [line for line in done.stderr.splitlines() if line.lower().startswith("warning")]
        return "\n".join([*done.stdout.rstrip("\n").splitlines(), *warnings])


def commands_of(block: list[str]) -> list[str]:
    """The commands of a console block's `$ ` lines, continuation lines joined as bash would see them."""
    commands: list[str] = []
    current: list[str] | None = None
    for line in block:
        if current is None:
            if not line.startswith("$ "):
                continue
            current = [line[2:]]
        else:
            current.append(line)
        if not line.endswith("\\"):
            commands.append("\n".join(current))
            current = None
    return commands


def render(template: str, session: Session, variables: dict[str, str]) -> tuple[str, list[tuple[str, str]]]:
    """The page: prose with variables filled in, each console block's commands followed by their output."""
    out: list[str] = []
    keep: list[tuple[str, str]] = []
    lines = template.splitlines()
    i = 0
    fill = lambda s: VARIABLE.sub(lambda m: variables[m.group(1)], s)  # noqa: E731 - a KeyError names the variable
    while i < len(lines):
        line = lines[i]
        if match := SET.match(line):
            variables[match.group(1)] = session.run(fill(match.group(2))).strip()
            i += 1
            continue
        if match := KEEP.match(line):
            keep.append((match.group(1), match.group(2)))
            i += 1
            continue
        fence = FENCE.match(line)
        if not fence or fence.group(1) != "console":
            out.append(fill(line))
            i += 1
            continue
        block: list[str] = []
        i += 1
        while not lines[i].startswith("```"):
            block.append(fill(lines[i]))
            i += 1
        i += 1
        out.append("```console")
        for command in commands_of(block):
            print(f"$ {command}", file=sys.stderr, flush=True)
            out.append("$ " + command)
            output = session.run(command)
            if output:
                out.append(output)
        out.append("```")
    return "\n".join(out) + "\n", keep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/locus-tour"),
                        help="scratch directory: the home and the stand-in repository root (must be empty)")
    parser.add_argument("--fresh", action="store_true", help="delete --work first")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "tour-mmlu-pro.md")
    args = parser.parse_args()
    if not (DATA / "evals.csv").is_file():
        sys.exit(f"MMLU-Pro not found at {DATA} (../shared beside the project); the tour needs it")
    if args.fresh:
        shutil.rmtree(args.work, ignore_errors=True)
    if args.work.exists() and any(args.work.iterdir()):
        sys.exit(f"{args.work} is not empty: the tour starts from an empty home (--fresh deletes it)")
    cwd, home = args.work / "repo", args.work / "home"
    cwd.mkdir(parents=True)
    (args.work / "shared").symlink_to(ROOT.parent / "shared")
    write_endpoint_files(cwd)

    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    session = Session(cwd, home)
    variables = {"GENERATED": "{{GENERATED}}"}  # filled once the run is over
    page, keep = render(TEMPLATE.read_text(encoding="utf-8"), session, variables)
    minutes = (time.perf_counter() - started) / 60
    train = next(s for c, s in session.seconds.items() if c.startswith("registry train"))
    stamp = (f"Generated by `.venv/bin/python scripts/tour_mmlu_pro.py` from scripts/tour_mmlu_pro.template.md "
             f"(do not edit this page by hand) on {datetime.now(timezone.utc):%Y-%m-%d}: every output below is "
             f"that run's, from an empty home, on {os.cpu_count()} CPU cores (load average {load_before:.2f} at "
             f"the start, {os.getloadavg()[0]:.2f} at the end); the whole tour took {minutes:.1f} minutes, "
             f"`registry train` {train:.0f} s of it.")
    page = page.replace("{{GENERATED}}", stamp)
    for source, target in keep:
        (args.out.parent / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cwd / source, args.out.parent / target)
    args.out.write_text(page, encoding="utf-8")
    print(f"wrote {args.out} ({minutes:.1f} min; registry train {train:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
