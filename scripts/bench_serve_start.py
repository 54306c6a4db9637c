"""How long `registry serve` takes to answer /v1/health, by query-encoder engine. Prints one table.

    python scripts/bench_serve_start.py --home locus-demo [--repeats 3]

Each row starts `registry serve --device cpu` on a copy of the home (never written) in a fresh process
and times it from the process's start until GET /v1/health answers 200: the query encoder warmed and
the index loaded. Rows: fp32 from the torch sentence-transformer (`LOCUS_QUERY_EXPORT=0`), fp32 from
the exported torch-free copy, and openvino from its cached IR; for the last two, "first" is a start
with an empty cache (it converts, checks and writes the copy) and "later" the median of the next
`--repeats` starts. The caches are private to the run (`LOCUS_CACHE` in a scratch directory), so
nothing under ~/.cache is read or left. An installed service runs from compiled bytecode: where
PYTHONDONTWRITEBYTECODE is set, the starts write and read theirs under a private PYTHONPYCACHEPREFIX,
compiled by one untimed start first (as scripts/bench_cli.py does). Other jobs on the machine move these
numbers: the load average is printed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import start_server  # noqa: E402  (one way to start the service and wait for it)


def start_seconds(home: Path, backend: str, env: dict[str, str], log: Path) -> float:
    """Seconds from starting `registry serve --device cpu` until /v1/health answers 200; stopped after."""
    proc, _, took = start_server(home, "cpu", backend, log, env)
    proc.terminate()
    proc.wait(timeout=60)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a registry home with an active encoder")
    parser.add_argument("--repeats", type=int, default=3, help="later starts timed per row (median)")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    rows = []
    with tempfile.TemporaryDirectory(prefix="locus-serve-start-") as scratch:
        scratch = Path(scratch)
        home = scratch / "home"
        shutil.copytree(args.home, home)
        base = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT),
                "PYTHONPYCACHEPREFIX": str(scratch / "pycache")}
        base.pop("LOCUS_QUERY_BACKEND", None)
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        for backend, export in (("fp32", "0"), ("openvino", "1")):  # untimed: compiles what a start imports
            start_seconds(home, backend, {**base, "LOCUS_QUERY_EXPORT": export,
                                          "LOCUS_CACHE": str(scratch / "cache-warm-up")}, scratch / "warm-up.log")
        cases = [("fp32", "torch", {"LOCUS_QUERY_EXPORT": "0"}),
                 ("fp32", "exported copy", {"LOCUS_QUERY_EXPORT": "1"}),
                 ("openvino", "cached IR", {})]
        for backend, engine, extra in cases:
            env = {**base, **extra, "LOCUS_CACHE": str(scratch / f"cache-{backend}-{len(rows)}")}
            run = lambda i: start_seconds(home, backend, env, scratch / f"{backend}-{len(rows)}-{i}.log")  # noqa: E731
            first = run(0)
            later = [run(i + 1) for i in range(args.repeats)]
            rows.append((backend, engine, first, statistics.median(later), min(later)))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n| --query-backend | encoder from | first start s | later starts s (median) | fastest s |")
    print("|---|---|---:|---:|---:|")
    for backend, engine, first, median, fastest in rows:
        print(f"| {backend} | {engine} | {first:.1f} | {median:.1f} | {fastest:.1f} |")


if __name__ == "__main__":
    main()
