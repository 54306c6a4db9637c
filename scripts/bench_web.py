"""Server time of each page of the web UI: the page's HTML plus every /v1 call its script makes.

    .venv/bin/python scripts/bench_web.py [--home DIR] [--models 10000] [--runs 5] [--no-pages]

1. On HOME (default: the README tour's MMLU-Pro registry, built by scripts/_mmlu_pro.py when DIR
   holds none), `registry serve` on a free loopback port; each page's requests, in the order its
   script sends them: once on the fresh server ("first": caches empty, the audit calibration read
   from disk), then `--runs` times: the table gives the median over runs of the sum of the page's
   request times (what the server spends on one page view, requests one after another; the browser
   sends several at once), and its slowest request. The UI's own reads (table, map, compare) are
   kept per generation of the store, so a repeated view of those is cheaper than a first one.
   The route page counts the route and profile calls its two forms send.
2. The models list at `--models` models: a synthetic registry built as scripts/bench_audit.py builds
   one (200 evaluations per model, vectors written directly, no training), served the same way;
   /v1/table (the call behind the models page): its first call right after the server answers
   (the table is built at start, in the background: one scan of every evaluation), its first call
   after a write (one model's vector rewritten, as `registry embed` would: a new generation, so
   the table is built again; the server also rebuilds it by itself within seconds of a write, so the
   call is timed again 10 s after another write), then warm, for the
   first page, sorts, a filter, a name search and the last page.
Times are wall-clock on the client over loopback, so they include HTTP and JSON on both sides.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from screenshots_web import free_port, start_server  # noqa: E402


def page_calls(a: str, b: str, question: str, task: str) -> dict[str, list[tuple[str, str, dict]]]:
    """(method, path, options) of each page's requests, as its script sends them (registry/service/webui)."""
    m = quote(a, safe="")
    return {
        "models": [("GET", "/", {}), ("GET", "/v1/health", {}), ("GET", "/v1/table", {"params": {"limit": 50}})],
        "model": [("GET", f"/model?name={m}", {}), ("GET", "/v1/health", {}), ("GET", f"/v1/models/{m}", {}),
                  ("GET", f"/v1/models/{m}/history", {}), ("GET", "/v1/aliases", {}), ("GET", f"/v1/models/{m}", {}),
                  ("GET", f"/v1/models/{m}/accuracy", {}),
                  ("GET", "/v1/similar", {"params": {"name": a, "k": 10, "by": "locus"}}),
                  ("GET", "/v1/similar", {"params": {"name": a, "k": 10}}),
                  ("GET", "/v1/audit", {"params": {"model": a}})],
        "map": [("GET", "/map", {}), ("GET", "/v1/health", {}), ("GET", "/v1/map", {}),
                ("GET", "/v1/map", {"params": {"color_by": "family"}})],
        "families": [("GET", "/families", {}), ("GET", "/v1/health", {}),
                     ("GET", "/v1/clusters", {"params": {"linkage": "complete"}})],
        "audit": [("GET", "/audit", {}), ("GET", "/v1/health", {}), ("GET", "/v1/audit", {"params": {"k": 10}})],
        "route": [("GET", "/route", {}), ("GET", "/v1/health", {}), ("GET", "/v1/stats", {}),
                  ("POST", "/v1/route", {"json": {"queries": [question], "k": 3, "fallback": 3, "exclude": []}}),
                  ("POST", "/v1/profile", {"json": {"targets": {task: 0.8}, "k": 5}})],
        "compare": [("GET", f"/compare?a={m}&b={quote(b, safe='')}", {}), ("GET", "/v1/health", {}),
                    ("GET", "/v1/table", {"params": {"limit": 500}}), ("GET", "/v1/compare", {"params": {"a": a, "b": b}})],
    }


def timed(client, method: str, path: str, options: dict) -> float:
    started = time.perf_counter()
    response = client.request(method, path, **options)
    seconds = time.perf_counter() - started
    if response.status_code >= 400:
        raise SystemExit(f"{method} {path}: {response.status_code} {response.text[:300]}")
    return seconds


def bench_pages(home: Path, env: dict, runs: int) -> None:
    import httpx

    from registry import Registry

    reg = Registry.open(home, create=False)
    names = [r.name for r in reg.models()]
    queries = reg.store.read("queries", ["text", "task"])
    question, task = queries.column("text")[0].as_py(), queries.column("task")[0].as_py()
    port = free_port()
    server = start_server(home, env, port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as c:
            near = c.get("/v1/similar", params={"name": names[0], "k": 1}).json()["neighbours"][0]["name"]
            calls = page_calls(names[0], near, question, task)
            first = {page: sum(timed(c, *call) for call in page_requests)  # a fresh server's first view
                     for page, page_requests in calls.items()}
            print(f"{home}: {len(names)} models, {queries.num_rows} queries; ms: the first view on a fresh "
                  f"server, then the median of {runs} views")
            print(f"{'page':<9} {'requests':>8} {'first':>8} {'total':>8} {'slowest':>8}  slowest request")
            detail: list[str] = []
            per_run: dict[str, list[list[float]]] = {}
            for page, page_requests in calls.items():
                totals, slowest = [], {}
                for _ in range(runs):
                    times = [timed(c, *call) for call in page_requests]
                    per_run.setdefault(page, []).append(times)
                    totals.append(sum(times))
                    for call, t in zip(page_requests, times):
                        slowest.setdefault(call[1], []).append(t)
                worst = max(slowest, key=lambda p: statistics.median(slowest[p]))
                print(f"{page:<9} {len(page_requests):>8} {1000 * first[page]:>8.1f} {1000 * statistics.median(totals):>8.1f} "
                      f"{1000 * statistics.median(slowest[worst]):>8.1f}  {worst.split('?')[0]}")
                if statistics.median(totals) > 0.2:  # where the time goes, for a page over 200 ms
                    detail.append(f"{page}: " + ", ".join(
                        f"{method} {path.split('?')[0]}{'?' + '&'.join(f'{k}={v}' for k, v in opts['params'].items()) if opts.get('params') else ''}"
                        f" {1000 * statistics.median(ts):.0f}"
                        for (method, path, opts), ts in zip(page_requests, zip(*per_run[page]))))
            for line in detail:
                print("  " + line)
    finally:
        server.terminate()
        server.wait(timeout=30)


def bench_large(n_models: int, env: dict, runs: int) -> None:
    import httpx

    from bench_audit import set_vectors, write_pool
    from registry import Registry

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        started = time.perf_counter()
        names, vectors, _ = write_pool(scratch / "data", n_models, 200, 2000, seed=0)
        reg = Registry.open(scratch / "home")
        emb = scratch / "data" / "emb"
        reg.import_path(scratch / "data", encoder="all-MiniLM-L6-v2", query_embeddings=emb / "v.npy",
                        query_ids=emb / "ids.npy")
        set_vectors(reg.store, dict(zip(names, vectors)), "bench-encoder")
        print(f"\n{n_models} synthetic models x 200 evaluations built in {time.perf_counter() - started:.0f} s")
        port = free_port()
        server = start_server(scratch / "home", env, port)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as c:
                cases = {"first page": {"limit": 50}, "sort by accuracy": {"sort": "accuracy", "order": "desc"},
                         "sort by task": {"sort": "task:math"}, "where family == fam3": {"where": "family == fam3"},
                         "search '0042'": {"q": "0042"}, "last page": {"offset": n_models - 50, "limit": 50}}
                cold = timed(c, "GET", "/v1/table", {"params": cases["first page"]})
                set_vectors(reg.store, {names[0]: vectors[0]}, "bench-encoder")  # a write, as `embed` makes: a new generation
                after_write = timed(c, "GET", "/v1/table", {"params": cases["first page"]})
                set_vectors(reg.store, {names[1]: vectors[1]}, "bench-encoder")
                time.sleep(10)  # the server rebuilds the table in the background after a write
                later = timed(c, "GET", "/v1/table", {"params": cases["first page"]})
                print(f"{'GET /v1/table':<24} {'ms (median)':>11} {'max':>8}")
                print(f"{'first call after start':<24} {1000 * cold:>11.1f}")
                print(f"{'first call after a write':<24} {1000 * after_write:>11.1f}")
                print(f"{'10 s after a write':<24} {1000 * later:>11.1f}")
                for label, params in cases.items():
                    times = [timed(c, "GET", "/v1/table", {"params": params}) for _ in range(runs)]
                    print(f"{label:<24} {1000 * statistics.median(times):>11.1f} {1000 * max(times):>8.1f}")
                page = [timed(c, "GET", "/", {}) + timed(c, "GET", "/v1/health", {})
                        + timed(c, "GET", "/v1/table", {"params": {"limit": 50}}) for _ in range(runs)]
                print(f"{'models page (3 requests)':<24} {1000 * statistics.median(page):>11.1f} {1000 * max(page):>8.1f}")
        finally:
            server.terminate()
            server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None, help="a registry home (default: MMLU-Pro, built when absent)")
    parser.add_argument("--models", type=int, default=10_000, help="size of the synthetic registry (0: skip)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-pages", action="store_true", help="only the large models list")
    args = parser.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("LOCUS_TOKEN", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if not args.no_pages:
        from _mmlu_pro import mmlu_pro_registry

        reg, _ = mmlu_pro_registry(args.home)
        bench_pages(reg.home, env, args.runs)
    if args.models:
        bench_large(args.models, env, args.runs)


if __name__ == "__main__":
    main()
