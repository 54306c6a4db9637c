"""`registry serve` against today's cold CLI, on the MMLU-Pro registry. Prints one table.

Starts the service (uvicorn, a subprocess on a free loopback port) on a copy of the registry and
measures, over HTTP: route latency for new texts (never seen: encoded by the service; the registry's
own questions varied, and short chat-length ones, since the encoder's cost grows with a text's
length) and for cached ones, routes/s when texts arrive batched, add-model latency (1,024 evaluations whose texts are
stored) and a cached route 0.3 s after each add-model (what the next request meets after a write), embedding jobs/s when 64 models arrive at once (with readers routing meanwhile; every
non-2xx answer counts as an error), and the same operations through the cold CLI
(`python -m cli.main ...`, a fresh process each). A GPU section repeats the service numbers with
`--device cuda` when torch sees CUDA, and says it skipped otherwise.

    python scripts/bench_service.py --home DIR     # a registry built by scripts/_mmlu_pro.py (or the tour)

The registry at --home is copied, never written. Targets (issue 12): route p50 <= 30 ms (new text),
<= 3 ms (cached), >= 200 routes/s batched, add-model p50 <= 250 ms, 0 errors under load.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOKEN = "bench-token-0123456789abcdef"
AFTER_ADD_S = 0.3  # the route after each add-model waits this long (the CPU per add-model counts it)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(home: Path, device: str, backend: str, log: Path, env: dict[str, str] | None = None):
    """`registry serve` on a free port: (process, URL, seconds until /v1/health answered 200); `env` in place
    of this process's environment (the bench token is added)."""
    import httpx

    port = _port()
    env = {**(os.environ if env is None else env), "LOCUS_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "--home", str(home), "serve", "--port", str(port),
                             "--device", device, "--query-backend", backend, "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    while time.perf_counter() - started < 600:
        if proc.poll() is not None:
            sys.exit(f"the server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                return proc, url, time.perf_counter() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.05)  # the start's own time is measured (scripts/bench_serve_start.py)
    proc.kill()
    sys.exit("the server did not start within 600 s")


def pct(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc): unlike wall time, not inflated by other
    processes' load on a shared machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_service(url: str, pid: int, *, new_texts: list[str], stored_texts: list[str], add_evals: list[dict],
                    n_jobs: int, label: str, batch: int, short_texts: list[str] | None = None) -> dict:
    import httpx

    out: dict = {}
    errors = 0
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=600) as c:
        def route(texts):
            nonlocal errors
            start = time.perf_counter()
            r = c.post("/v1/route", json={"queries": texts, "k": 3} if len(texts) > 1 else {"query": texts[0], "k": 3})
            errors += r.status_code != 200
            return time.perf_counter() - start

        n = len(new_texts) // 3
        cpu = cpu_seconds(pid)
        if short_texts:  # a chat-length question: what the encoder costs on a short text
            out["route_new_short"] = [route([t]) for t in short_texts]
            out["cpu_route_new_short"], cpu = (cpu_seconds(pid) - cpu) / len(short_texts), cpu_seconds(pid)
        out["route_new"] = [route([t]) for t in new_texts[:n]]
        out["cpu_route_new"], cpu = (cpu_seconds(pid) - cpu) / n, cpu_seconds(pid)
        out["route_cached"] = [route([t]) for t in new_texts[:n] for _ in range(3)]
        out["cpu_route_cached"], cpu = (cpu_seconds(pid) - cpu) / (3 * n), cpu_seconds(pid)
        fresh = new_texts[n:]
        took = [route(fresh[i:i + batch]) for i in range(0, len(fresh), batch)]
        out["batched_new_rps"] = len(fresh) / sum(took)
        out["cpu_batched_new"], cpu = (cpu_seconds(pid) - cpu) / len(fresh), cpu_seconds(pid)
        took = [route(fresh[i:i + batch]) for i in range(0, len(fresh), batch)]
        out["batched_cached_rps"] = len(fresh) / sum(took)
        out["cpu_batched_cached"], cpu = (cpu_seconds(pid) - cpu) / len(fresh), cpu_seconds(pid)

        adds, after_adds = [], []
        for i in range(8):
            start = time.perf_counter()
            r = c.post("/v1/models", json={"name": f"bench-{label}-add-{i}", "evaluations": add_evals})
            adds.append(time.perf_counter() - start)
            errors += r.status_code != 201
            time.sleep(AFTER_ADD_S)  # a route some time after a write: what the next request meets
            after_adds.append(route([new_texts[i]]))  # routed above: in memory
        out["add"], out["route_after_add"] = adds, after_adds
        out["cpu_add"], cpu = (cpu_seconds(pid) - cpu) / len(adds), cpu_seconds(pid)

    # 64 models at once (one client each, as CI jobs would), readers routing stored texts meanwhile.
    def add_one(i):
        with httpx.Client(base_url=url, headers=headers, timeout=600) as c:
            r = c.post("/v1/models", json={"name": f"bench-{label}-job-{i}", "evaluations": add_evals[: 256 + i]})
            return r.status_code == 201

    def reader(i):
        with httpx.Client(base_url=url, timeout=600) as c:
            return [c.post("/v1/route", json={"query": stored_texts[(i * 7 + j) % len(stored_texts)]}).status_code
                    == 200 for j in range(10)]

    before = _metric(url, "locus_writer_batches")
    start = time.perf_counter()
    with cf.ThreadPoolExecutor(max_workers=n_jobs + 4) as pool:
        jobs = [pool.submit(add_one, i) for i in range(n_jobs)]
        reads = [pool.submit(reader, i) for i in range(4)]
        ok = [j.result() for j in jobs]
        read_ok = [x for r in reads for x in r.result()]
    elapsed = time.perf_counter() - start
    out["jobs_per_s"] = n_jobs / elapsed
    out["cpu_job"] = (cpu_seconds(pid) - cpu) / n_jobs  # readers' routes included
    out["job_batches"] = _metric(url, "locus_writer_batches") - before
    errors += ok.count(False) + read_ok.count(False)
    out["errors"] = errors
    out["requests"] = len(out["route_new"]) + len(out["route_cached"]) + 2 * (len(fresh) // batch + 1) + 8 + \
        n_jobs + len(read_ok)
    return out


def _metric(url: str, name: str) -> float:
    import httpx

    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def measure_cli(home: Path, new_text: str, stored_text: str, evals_file: Path, runs: int) -> dict:
    def run(*args) -> float:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "cli.main", "--home", str(home), *args], cwd=ROOT,
                              capture_output=True, text=True, env={**os.environ, "LOCUS_SERVER": ""})
        if done.returncode != 0:
            sys.exit(f"cold CLI failed: {' '.join(args)}\n{done.stderr[-1500:]}")
        return time.perf_counter() - start

    return {"route_new": [run("route", f"{new_text} [cli {i}]", "--json") for i in range(runs)],
            "route_cached": [run("route", stored_text, "--json") for _ in range(runs)],
            "add": [run("add-model", f"cli-add-{i}", "--evals", str(evals_file), "--json") for i in range(runs)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="the MMLU-Pro registry (copied, not written)")
    parser.add_argument("--texts", type=int, default=96, help="new texts for the route measurements")
    parser.add_argument("--batch", type=int, default=32, help="texts per batched route call")
    parser.add_argument("--jobs", type=int, default=64, help="models arriving at once")
    parser.add_argument("--cli-runs", type=int, default=2, help="cold CLI runs per operation")
    parser.add_argument("--backend", default="auto", help="query-encoder backend of the service")
    args = parser.parse_args()

    import numpy as np

    from registry import Registry

    scratch = Path(tempfile.mkdtemp(prefix="bench-service-"))
    home = scratch / "home"
    shutil.copytree(args.home, home)
    store = Registry.open(home, create=False).store
    queries = store.read("queries", ["query_id", "text"])
    ids, texts = queries.column("query_id").to_pylist(), queries.column("text").to_pylist()
    rng = np.random.default_rng(0)
    picks = rng.choice(len(texts), size=args.texts, replace=False)
    new_texts = [f"{texts[i]}\n(bench variant {k})" for k, i in enumerate(picks)]  # never stored, never encoded
    stored_texts = [texts[i] for i in rng.choice(len(texts), size=64, replace=False)]
    short_texts = [f"Which is larger, {i} squared or {i + 7} times {i % 5 + 2}?" for i in range(32)]
    chosen = rng.choice(len(ids), size=1024, replace=False)
    add_evals = [{"query_id": ids[i], "score": int(rng.random() < 0.6)} for i in chosen]
    evals_file = scratch / "evals.csv"
    evals_file.write_text("query_id,score\n" + "".join(f"{e['query_id']},{e['score']}\n" for e in add_evals))
    print(f"registry {args.home}: {len(store.read('models', ['name']))} models, {len(texts)} queries; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"new texts: {len(new_texts)} of its questions, never encoded (median {np.median([len(t) for t in new_texts]):.0f} "
          f"characters); short: {len(short_texts)} like {short_texts[0]!r} ({len(short_texts[0])} characters)",
          flush=True)

    proc, url, startup = start_server(home, "cpu", args.backend, scratch / "server.log")
    try:
        import httpx

        health = httpx.get(url + "/v1/health").json()
        print(f"service up in {startup:.1f} s (device {health['device']}, query backend {health['query_backend']})",
              flush=True)
        svc = measure_service(url, proc.pid, new_texts=new_texts, stored_texts=stored_texts, add_evals=add_evals,
                              n_jobs=args.jobs, label="cpu", batch=args.batch, short_texts=short_texts)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print("cold CLI ...", flush=True)
    cli = measure_cli(home, new_texts[0], stored_texts[0], evals_file, args.cli_runs)

    ms = lambda v: f"{v * 1000:.1f} ms"  # noqa: E731
    cpu_col = {"route p50, new text": svc["cpu_route_new"], "route p50, new short text": svc["cpu_route_new_short"],
               "route p50, cached text": svc["cpu_route_cached"],
               f"routes/s, batches of {args.batch} new": svc["cpu_batched_new"],
               f"routes/s, batches of {args.batch} cached": svc["cpu_batched_cached"],
               "add-model p50 (1,024 evals)": svc["cpu_add"], f"embedding jobs/s, {args.jobs} at once": svc["cpu_job"]}
    rows = [
        ("route p50, new text", ms(pct(svc["route_new"], 50)), ms(pct(cli["route_new"], 50)), "<= 30 ms",
         pct(svc["route_new"], 50) <= 0.030, pct(cli["route_new"], 50) / pct(svc["route_new"], 50)),
        ("route p99, new text", ms(pct(svc["route_new"], 99)), "", "", None, None),
        ("route p50, new short text", ms(pct(svc["route_new_short"], 50)), "", "(<= 30 ms)", None, None),
        ("route p50, cached text", ms(pct(svc["route_cached"], 50)), ms(pct(cli["route_cached"], 50)), "<= 3 ms",
         pct(svc["route_cached"], 50) <= 0.003, pct(cli["route_cached"], 50) / pct(svc["route_cached"], 50)),
        ("route p99, cached text", ms(pct(svc["route_cached"], 99)), "", "", None, None),
        (f"routes/s, batches of {args.batch} new", f"{svc['batched_new_rps']:.0f}",
         f"{1 / pct(cli['route_new'], 50):.2f}", ">= 200", svc["batched_new_rps"] >= 200,
         svc["batched_new_rps"] * pct(cli["route_new"], 50)),
        (f"routes/s, batches of {args.batch} cached", f"{svc['batched_cached_rps']:.0f}",
         f"{1 / pct(cli['route_cached'], 50):.2f}", "", None, svc["batched_cached_rps"] * pct(cli["route_cached"], 50)),
        ("add-model p50 (1,024 evals)", ms(pct(svc["add"], 50)), ms(pct(cli["add"], 50)), "<= 250 ms",
         pct(svc["add"], 50) <= 0.250, pct(cli["add"], 50) / pct(svc["add"], 50)),
        ("add-model p99 (1,024 evals)", ms(pct(svc["add"], 99)), "", "", None, None),
        (f"route p50, cached, {AFTER_ADD_S:g} s after add", ms(pct(svc["route_after_add"], 50)), "", "", None, None),
        (f"embedding jobs/s, {args.jobs} at once", f"{svc['jobs_per_s']:.1f} ({svc['job_batches']:.0f} batches)",
         f"{1 / pct(cli['add'], 50):.2f}", "", None, svc["jobs_per_s"] * pct(cli["add"], 50)),
        ("errors under load", f"{svc['errors']} of {svc['requests']}", "", "0", svc["errors"] == 0, None),
    ]
    print(f"\n{'measure':<34}{'service':>22}{'CPU ms/op':>11}{'cold CLI':>13}{'target':>11}{'met':>6}{'ratio':>9}")
    for name, service, cold, target, met, ratio in rows:
        cpu = f"{cpu_col[name] * 1000:.1f}" if name in cpu_col else ""
        print(f"{name:<34}{service:>22}{cpu:>11}{cold:>13}{target:>11}"
              f"{('yes' if met else 'NO') if met is not None else '':>6}{(f'{ratio:.0f}x' if ratio is not None else ''):>9}")
    print("CPU ms/op: the service process's CPU time per operation (wall time on a loaded machine waits for a core)")

    print("\nGPU")
    import torch

    if not torch.cuda.is_available():
        print("skipped: torch sees no CUDA device (run this script on a GPU host for the GPU numbers)")
    else:
        proc, url, startup = start_server(home, "cuda", "fp32", scratch / "server-gpu.log")
        try:
            gpu = measure_service(url, proc.pid, new_texts=[t + " [gpu]" for t in new_texts], stored_texts=stored_texts,
                                  add_evals=add_evals, n_jobs=args.jobs, label="gpu", batch=args.batch)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        print(f"{torch.cuda.get_device_name(0)}: route p50 new {ms(pct(gpu['route_new'], 50))}, cached "
              f"{ms(pct(gpu['route_cached'], 50))}; {gpu['batched_new_rps']:.0f} routes/s batched (new); add-model "
              f"p50 {ms(pct(gpu['add'], 50))}; {gpu['jobs_per_s']:.1f} jobs/s; {gpu['errors']} errors")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
