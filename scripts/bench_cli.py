"""Wall time of CLI commands from a fresh process (what a user waits for at the prompt), against targets.

    python scripts/bench_cli.py --home locus-demo [--repeats 3] [--only route,compare] [--root TREE] [--serve]

Builds on a home with embedded models and an active encoder (`registry demo` makes one). Each command
runs once untimed (which brings the home's snapshot and saved index up to date, as the first command
after a write does), then `--repeats` times, each in a new Python process (`python -m cli.main ...`);
the table gives the median and the fastest run against the command's target (issue 24: reads and
errors at once, route / compare / alias set within 3 s without a server), and which heavy libraries
such a run imported. `--root` times another checkout of the project (e.g. the commit before a change)
with the same commands. Other jobs on the machine move these numbers: the load average is printed
before and after; run it when the machine is idle, or read the minimum.

Bytecode: an installed CLI runs from compiled .pyc files (written on first use; `scripts/setup.sh`
installs with --no-compile and lets Python compile what is imported). Where PYTHONDONTWRITEBYTECODE is
set, every run would compile torch's and LanceDB's sources again (2-3x the CPU of the import), which
no user sees: so the runs write and use their bytecode under a private PYTHONPYCACHEPREFIX (the
untimed warm-up compiles it), and leave the installed packages untouched. `--no-bytecode-cache` times
the runs with the environment as it is.

`--serve` then starts `registry serve` on the home and times route again while it runs: without
`--server`, it asks a service running for its home (said on stderr).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lancedb", "lance", "sentence_transformers", "openvino", "pyarrow", "faiss", "httpx")
# Runs the CLI as `python -m cli.main` does, then says which heavy libraries that run imported.
_PROBE = ("import sys, runpy\nsys.argv = ['registry', *sys.argv[1:]]\ncode = 0\n"
          "try:\n    runpy.run_module('cli.main', run_name='__main__')\nexcept SystemExit as e:\n"
          "    code = e.code\n"
          f"sys.stderr.write('\\nLOADED ' + ','.join(m for m in {HEAVY!r} if m in sys.modules) + '\\n')\n"
          "sys.exit(code)")
NEW_TEXT = "A train leaves at 9:40 and arrives at 13:05. How long is the journey, in minutes?"


ENV: dict[str, str] = {}  # set by main()


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", **ENV}


def _run(root: Path, args: list[str], *, probe: bool) -> tuple[float, str, int]:
    command = [sys.executable, "-c", _PROBE, *args] if probe else [sys.executable, "-m", "cli.main", *args]
    env = _env(root)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    loaded = done.stderr.rsplit("LOADED ", 1)[-1].strip() if probe else ""
    return elapsed, loaded, done.returncode


def _facts(root: Path, home: str) -> tuple[list[str], str]:
    """The home's model names and one stored query text (read through the timed tree's own API)."""
    code = ("import json, sys\nfrom registry import Registry\nreg = Registry.open(sys.argv[1], create=False)\n"
            "print(json.dumps({'names': [r.name for r in reg.models()], "
            "'text': reg.store.read('queries', ['text']).column('text')[0].as_py()}))")
    env = _env(root)
    out = subprocess.run([sys.executable, "-c", code, home], cwd=root, capture_output=True, text=True, env=env,
                         check=True).stdout
    facts = json.loads(out.strip().splitlines()[-1])
    return facts["names"], facts["text"]


def commands(names: list[str], stored_text: str) -> list[tuple[str, list[str], float, bool]]:
    """(label, arguments after --home, target seconds, whether it should succeed)."""
    a, b = names[0], names[1]
    return [
        ("--help", ["--help"], 0.3, True),
        ("stats", ["stats"], 0.3, True),
        ("stats --home after", ["stats"], 0.3, True),  # the global option after the command
        ("models list", ["models", "list"], 0.3, True),
        ("show NAME", ["show", a], 0.3, True),
        ("history NAME", ["history", a], 0.3, True),
        ("alias list", ["alias", "list"], 0.3, True),
        ("search NAME -k 5", ["search", a, "-k", "5"], 0.3, True),
        ("add-model, missing file", ["add-model", "x", "--evals", "/nonexistent/evals.csv"], 0.5, False),
        ("usage error (--bogus)", ["stats", "--bogus"], 0.3, False),
        ("alias set", ["alias", "set", "bench-alias", a], 3.0, True),
        ("route STORED_TEXT", ["route", stored_text], 3.0, True),
        ("route NEW_TEXT", ["route", NEW_TEXT], 3.0, True),
        ("compare A B", ["compare", a, b], 3.0, True),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="A registry home with embedded models.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=None, help="Comma-separated labels' first words to run (e.g. route,alias).")
    parser.add_argument("--root", type=Path, default=ROOT, help="The checkout whose CLI is timed (default: this one).")
    parser.add_argument("--serve", action="store_true",
                        help="Also time route while `registry serve` runs for the home.")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="Keep the environment's PYTHONDONTWRITEBYTECODE (every run compiles what it imports).")
    args = parser.parse_args()
    if not args.no_bytecode_cache:
        import tempfile

        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        ENV["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "locus-bench-pycache")
    home, root = str(args.home.resolve()), args.root.resolve()
    names, stored_text = _facts(root, home)
    if len(names) < 2:
        raise SystemExit(f"{home} holds {len(names)} models; the benchmark needs two")
    chosen = commands(names, stored_text)
    if args.only:
        wanted = {w.strip() for w in args.only.split(",")}
        chosen = [c for c in chosen if c[0].split()[0] in wanted]
    load = os.getloadavg()
    print(f"tree {root}; home {home} ({len(names)} models); {args.repeats} runs per command, fresh process each; "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; bytecode "
          + ("as the environment has it" if args.no_bytecode_cache else f"cached under {ENV['PYTHONPYCACHEPREFIX']}"))
    print(f"{'command':<26}{'target s':>9}{'median s':>10}{'min s':>8}  {'met':<4} imports")
    met = _table(root, home, chosen, args.repeats)
    total = len(chosen)
    if args.serve:
        served = [(label + " (served)", command, target, ok) for label, command, target, ok in chosen
                  if label.split()[0] == "route"]
        with _service(root, home):
            met += _table(root, home, served, args.repeats)
        total += len(served)
    if any(c[0] == "alias set" for c in chosen):
        subprocess.run([sys.executable, "-m", "cli.main", "--home", home, "alias", "delete", "bench-alias"], cwd=root,
                       capture_output=True, env=_env(root))
    load = os.getloadavg()
    print(f"{met} of {total} within target (median); load average after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def _table(root: Path, home: str, chosen, repeats: int) -> int:
    met = 0
    for label, command, target, ok in chosen:
        full = [*command, "--home", home] if "after" in label else ["--home", home, *command]
        _run(root, full, probe=False)  # warm-up: brings the snapshot and the saved index up to date
        _, loaded, code = _run(root, full, probe=True)  # what a run after it imports
        runs = [_run(root, full, probe=False) for _ in range(repeats)]
        times = [t for t, _, _ in runs]
        median = statistics.median(times)
        right = all((c == 0) == ok for _, _, c in runs + [(0, "", code)])
        good = right and median <= target
        met += good
        verdict = "yes" if good else "NO" if right else f"NO: exit {code}"
        print(f"{label:<26}{target:>9.1f}{median:>10.3f}{min(times):>8.3f}  {verdict:<4} {loaded or '-'}", flush=True)
    return met


@contextlib.contextmanager
def _service(root: Path, home: str):
    """`registry serve` on a free port for the home, until it writes its endpoint file; stopped after."""
    endpoint = Path(home) / "service" / "endpoint.json"
    log = open(Path(home) / "service" / "bench-serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "--home", home, "serve", "--port", "0",
                             "--log-level", "warning"], cwd=root, env=_env(root), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not endpoint.is_file():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"registry serve did not start: see {log.name}")
            time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


if __name__ == "__main__":
    main()
