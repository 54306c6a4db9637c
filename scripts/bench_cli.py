"""Wall time of the read-only CLI commands from a fresh process (what a user waits for at the prompt).

    python scripts/bench_cli.py --home locus-demo [--repeats 5]

Each command runs `--repeats` times in a new Python process (`python -m cli.main ...`) after an
untimed warm-up run (which brings the home's snapshot and saved index up to date, as the first command
after a write does); the table gives the median and the fastest run, and whether such a run imports
torch or LanceDB. Other jobs on the machine move these numbers: run it on an idle
machine, or read the minimum.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PROBE = ("import sys, runpy\nsys.argv = ['registry', *sys.argv[1:]]\n"
          "try:\n    runpy.run_module('cli.main', run_name='__main__')\nexcept SystemExit:\n    pass\n"
          "sys.stderr.write('\\nLOADED ' + ','.join(m for m in ('torch', 'lancedb') if m in sys.modules) + '\\n')")


def _run(args: list[str], probe: bool) -> tuple[float, str]:
    command = [sys.executable, "-c", _PROBE, *args] if probe else [sys.executable, "-m", "cli.main", *args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    loaded = done.stderr.rsplit("LOADED ", 1)[-1].strip() if probe else ""
    return elapsed, loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="A registry home with embedded models.")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    home = str(args.home)
    names = json.loads(subprocess.run([sys.executable, "-m", "cli.main", "--home", home, "models", "list", "--json"],
                                      cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    if not names:
        raise SystemExit(f"{home} holds no models")
    name = names[0]["name"]
    commands = [["--help"], ["stats"], ["models", "list"], ["show", name], ["history", name],
                ["search", name, "-k", "5"]]
    print(f"home {home} ({len(names)} models), {args.repeats} runs per command, fresh process each")
    print(f"{'command':<28}{'median s':>10}{'min s':>8}  imports")
    for command in commands:
        full = ["--home", home, *command]
        _run(full, probe=False)  # warm-up: brings the snapshot and the saved index up to date
        _, loaded = _run(full, probe=True)  # what a run after it imports
        times = [_run(full, probe=False)[0] for _ in range(args.repeats)]
        label = " ".join(command[:2]) if command[0] != "search" else "search NAME -k 5"
        print(f"{label:<28}{statistics.median(times):>10.3f}{min(times):>8.3f}  {loaded or '-'}")


if __name__ == "__main__":
    main()
