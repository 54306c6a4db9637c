"""Embedding throughput of the two engines: a benchmark that prints a table, not a timed test.

    .venv/bin/python scripts/bench_embed_engines.py [--families 40] [--queries-per-task 171] [--workers 1,2]

Builds a synthetic registry (by default 40 families x 5 sizes = 200 models, each scored on all
6 x 171 = 1,026 queries; query encoder all-MiniLM-L6-v2, 384-d), trains a LOCUS encoder for one
epoch (the forward pass costs the same whatever the weights), then runs `embed --all` once per engine
in this order: the single process (torch's own threads), Ray with 1 worker, Ray with 2 workers (one
torch thread per worker, a local cluster of workers + 1 CPUs started and shut down by each run).
Wall time is the whole call, Ray's start-up and the transactional write included; "pass" is Ray's
read + shuffle + embed alone (EmbedReport.seconds), and "worker s" the time inside the actors' forward
passes, summed over actors (EmbedReport.worker_seconds): the rest of "wall" is Ray's fixed cost
(cluster and actor start-up, the Lance read, the shuffle). Every Ray run's vectors are compared with the
single process's. One run each: on a shared machine, read the ratios, not the digits.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def _vectors(reg) -> dict[str, np.ndarray]:
    from indexing.store import MODELS

    return {r["name"]: np.asarray(r["vector"], np.float32) for r in reg.store.read(MODELS).to_pylist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", type=int, default=40)
    parser.add_argument("--queries-per-task", type=int, default=171)
    parser.add_argument("--workers", default="1,2", help="comma-separated Ray worker counts")
    parser.add_argument("--home", type=Path, default=None, help="reuse (or build) the registry here")
    args = parser.parse_args()

    from registry import Registry
    from registry.lab.synthetic import synthetic_pool

    scratch = tempfile.TemporaryDirectory()
    home = args.home or Path(scratch.name) / "home"
    t0 = time.perf_counter()
    if not (home / "config.json").exists():
        reg = Registry.open(home)
        reg.set_query_encoder("all-MiniLM-L6-v2")
        with tempfile.TemporaryDirectory() as pool_dir:
            pool = synthetic_pool(n_families=args.families, models_per_family=5, queries_per_task=args.queries_per_task,
                                  n_duplicates=0, seed=0)
            reg.import_path(pool.write_triple(Path(pool_dir)))
        reg.train(epochs=1, evals_per_model=64, progress=False)
    reg = Registry.open(home, create=False)
    n_models = reg.store.count("models")
    n_evals = reg.store.count("evaluations")
    print(f"registry: {n_models} models, {n_evals:,} evaluations ({n_evals / n_models:.0f} per model); "
          f"built in {time.perf_counter() - t0:.0f} s; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at start")

    rows = []
    t = time.perf_counter()
    local = reg.embed_all()
    wall = time.perf_counter() - t
    reference = _vectors(reg)
    rows.append(("local (1 process)", "-", local.n_embedded, wall, None, None, 0.0))
    for workers in [int(w) for w in args.workers.split(",")]:
        t = time.perf_counter()
        report = reg.embed_all(engine="ray", workers=workers)
        wall = time.perf_counter() - t
        got = _vectors(reg)
        diff = max(float(np.abs(got[n] - reference[n]).max()) for n in reference)
        rows.append(("ray", str(workers), report.n_embedded, wall, report.seconds, report.worker_seconds, diff))

    base = rows[0][2] / rows[0][3]
    print(f"\n{'engine':<18} {'workers':>7} {'models':>6} {'wall s':>7} {'models/s':>9} {'vs local':>8} "
          f"{'pass s':>7} {'pass models/s':>13} {'worker s':>8} {'max |dz|':>9}")
    for engine, workers, n, wall, pass_s, worker_s, diff in rows:
        rate = n / wall
        pass_cols = (f"{pass_s:>7.1f} {n / pass_s:>13.1f} {worker_s:>8.1f}" if pass_s
                     else f"{'-':>7} {'-':>13} {'-':>8}")
        print(f"{engine:<18} {workers:>7} {n:>6} {wall:>7.1f} {rate:>9.1f} {rate / base:>7.2f}x {pass_cols} {diff:>9.1e}")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end: the machine is shared with other jobs, one run each")


if __name__ == "__main__":
    main()
