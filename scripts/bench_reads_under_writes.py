"""Reads while other clients write, by read mode (docs/service.md, "Reads after a write"). Prints one table.

    python scripts/bench_reads_under_writes.py --home locus-demo [--seconds 20] [--readers 2]

Starts `registry serve` on a copy of the home (never written) and, for each mode in turn (the clients are
`RegistryClient(url, read=MODE)`: fresh, session, loaded), runs for --seconds: one client adding models
back to back (another client's writes: every landing makes the loaded state stale), --readers clients
routing a stored question (a cached text, so the encoder is not what is timed; up to --rate a second each,
so that the writes get CPU too), and one client that adds a model and at once asks for its neighbours
(`similar`): "own write missed" counts the answers that did not know the model it had just added (404),
what a read-your-writes guarantee rules out. Any other refusal counts as an error. Latency of the routes
(as the client returns them, parsed) by percentile; the writer's landings during the run. The modes run in
turn on one service: a later mode's home holds the models the earlier ones added. The load average is
printed: other jobs move these numbers.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from bench_service import TOKEN, pct, start_server  # noqa: E402  (one way to start the service and wait for it)

MODES = ("fresh", "session", "loaded")


def _stored(home: Path) -> tuple[list[str], str]:
    from registry import Registry

    table = Registry.open(home).store.read("queries", ["query_id", "text"])
    return table.column("query_id").to_pylist(), table.column("text").to_pylist()[0]


def run_mode(url: str, mode: str, *, seconds: float, readers: int, rate: float, ids: list[str], text: str) -> dict:
    from registry.client import RegistryClient
    from registry.errors import NotFoundError, RegistryError

    stop = threading.Event()
    latencies: list[float] = []
    counts = {"routes": 0, "errors": 0, "landed": 0, "own": 0, "missed": 0}
    lock = threading.Lock()

    def client() -> RegistryClient:  # one a thread, as an application would hold one (its session its own)
        return RegistryClient(url, token=TOKEN, read=mode, timeout=120)

    def evals(i: int) -> list[dict]:
        return [{"query_id": q, "score": (j + i) % 2} for j, q in enumerate(ids[:64])]

    def count(key: str) -> None:
        with lock:
            counts[key] += 1

    def other_writer() -> None:
        with client() as reg:
            i = 0
            while not stop.is_set():
                try:
                    reg.add_model(f"bench-other-{mode}-{i}", evals(i))
                    count("landed")
                except RegistryError:
                    count("errors")
                i += 1

    def reader() -> None:
        with client() as reg:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    reg.route(text, k=3)
                except RegistryError:
                    count("errors")
                    continue
                took = time.perf_counter() - started
                with lock:
                    counts["routes"] += 1
                    latencies.append(took)
                stop.wait(max(0.0, 1.0 / rate - took))  # a steady stream: the writes get the rest of the CPU

    def own_writer() -> None:
        with client() as reg:
            i = 0
            while not stop.is_set():
                name = f"bench-own-{mode}-{i}"
                i += 1
                try:
                    reg.add_model(name, evals(i))
                except RegistryError:
                    count("errors")
                    continue
                count("own")
                try:
                    reg.similar(name, k=1)
                except NotFoundError:
                    count("missed")
                except RegistryError:
                    count("errors")

    threads = [threading.Thread(target=other_writer), threading.Thread(target=own_writer)]
    threads += [threading.Thread(target=reader) for _ in range(readers)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(300)
    return {"mode": mode, **counts, "p50": pct(latencies, 50), "p99": pct(latencies, 99),
            "max": max(latencies) if latencies else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a registry home with an active encoder")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each mode runs")
    parser.add_argument("--readers", type=int, default=2, help="clients routing at once")
    parser.add_argument("--rate", type=float, default=50.0, help="routes a second each routing client sends")
    parser.add_argument("--backend", default="fp32", help="query-encoder backend of the service")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="locus-reads-") as scratch:
        home = Path(scratch) / "home"
        shutil.copytree(args.home, home)
        ids, text = _stored(home)
        proc, url, _ = start_server(home, "cpu", args.backend, Path(scratch) / "serve.log")
        try:
            rows = [run_mode(url, mode, seconds=args.seconds, readers=args.readers, rate=args.rate, ids=ids,
                             text=text) for mode in MODES]
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\n{args.seconds:g} s a mode; {args.readers} clients routing a stored question, up to {args.rate:g} a "
          "second each; one client adding models back to back; one adding a model and then asking for its "
          "neighbours\n")
    print("| read mode | routes | route p50 ms | p99 ms | max ms | other writes landed | own writes read | "
          "own write missed | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['routes']} | {r['p50'] * 1000:.1f} | {r['p99'] * 1000:.1f} | {r['max'] * 1000:.1f} "
              f"| {r['landed']} | {r['own']} | {r['missed']} | {r['errors']} |")


if __name__ == "__main__":
    main()
