"""Search and add-model latency with the registry home on an S3 emulator vs a local directory, in one run.

    python scripts/bench_s3_home.py [--repeats 7] [--models-per-family 4]

Builds the same synthetic registry twice (same pool, same seed, a briefly trained encoder): once in a
temporary local directory, once at s3://locus-bench/registry on moto's S3 server, started here as a
subprocess on a free loopback port with fake credentials. Then, per home, the median (and fastest) of
`--repeats` runs of:
  search (in process)     Registry.open(home).similar(NAME, k=5), a new Registry each time: reads the
                          generation token and the saved FAISS index from the home (no LanceDB)
  search (CLI)            `registry --home HOME search NAME -k 5` in a fresh Python process
  add-model (in process)  add_model of a copy of a stored model's evaluations under a new name (every
                          query text already encoded): the transaction (journal, lock or lease, three
                          table writes, generation token) and the re-saved index on the next search
and, on the s3 home, how many requests boto3 sent for one search and one add-model.
The emulator runs on this machine, so S3 here costs its HTTP round trips and moto's CPU, not a real
network: a real bucket adds its own latency per request (tens of ms per request in another region).
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
BUCKET = "locus-bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_moto() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, endpoint
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("moto's server did not start")


def _timed(fn, repeats: int) -> list[float]:
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return times


def _requests(home: str, search, add) -> tuple[int, int] | None:
    """How many requests boto3 sends for one search and one add-model (s3 home only)."""
    from indexing.home import as_path, is_remote

    if not is_remote(as_path(home)):
        return None
    from indexing import object_store

    search()  # the first search after the timed add-models re-saves the index: count a steady one
    sent: list[str] = []
    object_store.client().meta.events.register("before-send", lambda request, **_: sent.append(request.method))
    search()
    n_search = len(sent)
    sent.clear()
    add()
    return n_search, len(sent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--models-per-family", type=int, default=4)
    parser.add_argument("--queries-per-task", type=int, default=50)
    args = parser.parse_args()

    proc, endpoint = _start_moto()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1",
                      AWS_ENDPOINT_URL=endpoint)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    try:
        import boto3

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        from registry import Registry
        from tests.helpers import own_evaluations, synthetic_registry

        scratch = tempfile.TemporaryDirectory()
        homes = {"local": str(Path(scratch.name) / "home"), "s3 (moto)": f"s3://{BUCKET}/registry"}
        pool = dict(train_epochs=5, n_families=4, models_per_family=args.models_per_family,
                    queries_per_task=args.queries_per_task, tasks=("math", "law", "biology", "code"), seed=3)
        rows = []
        for label, home in homes.items():
            started = time.perf_counter()
            reg = synthetic_registry(home, **pool)
            built = time.perf_counter() - started
            name = sorted(m.name for m in reg.models())[0]
            evals = own_evaluations(reg, name)
            n_models = len(reg.models())
            Registry.open(home, create=False).similar(name, k=5)  # warm-up: saves the index
            search = _timed(lambda i: Registry.open(home, create=False).similar(name, k=5), args.repeats)
            cli = _timed(lambda i: subprocess.run([sys.executable, "-m", "cli.main", "--home", home, "search", name,
                                                   "-k", "5"], cwd=ROOT, check=True, capture_output=True),
                         args.repeats)
            add = _timed(lambda i: reg.add_model(f"bench-copy-{i}", evals, {"provider": "bench"}), args.repeats)
            requests = _requests(home, lambda: Registry.open(home, create=False).similar(name, k=5),
                                 lambda: reg.add_model("bench-counted", evals, {"provider": "bench"}))
            rows.append((label, n_models, len(evals), built, search, cli, add, requests))
        print(f"synthetic pool: {rows[0][1]} models, {rows[0][2]} evaluations per added model; "
              f"{args.repeats} runs each, median (min) in ms; S3 = moto server on 127.0.0.1")
        print(f"{'home':<12}{'search (in process)':>22}{'search (CLI)':>18}{'add-model':>18}"
              f"{'boto3 requests search/add':>28}")
        for label, _, _, built, search, cli, add, requests in rows:
            cells = [f"{statistics.median(t) * 1e3:.1f} ({min(t) * 1e3:.1f})" for t in (search, cli, add)]
            counted = "-" if requests is None else f"{requests[0]} / {requests[1]}"
            print(f"{label:<12}{cells[0]:>22}{cells[1]:>18}{cells[2]:>18}{counted:>28}")
        print("(boto3 requests: the files beside the tables; LanceDB's own requests for the tables are not counted)")
        scratch.cleanup()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
