"""Speed of `registry audit --model NAME` (the CI call for one new endpoint) on large synthetic registries.

    .venv/bin/python scripts/bench_audit.py [--sizes 1000,10000] [--evals-per-model 200] [--queries 2000]

For each size N: a registry of N synthetic models (each scored on `--evals-per-model` random queries
of `--queries`, 5 tasks, right/wrong from a one-parameter IRT model with family abilities) is
imported with precomputed random query vectors; instead of training an encoder, each model's vector
is written directly (its family's centre plus noise, 32-d: search speed does not depend on what the
vectors mean; scripts/bench_index.py does the same). Then:
1. the pool calibration is built once (`audit(store, model=...)` with no cache fits it and saves it
   in <home>/audit/; a nightly full audit does the same);
2. a new endpoint is added (a copy of model 17 with 5% of answers changed, its vector near the
   original's), which changes the registry's generation;
3. `audit --model new-endpoint` is timed in-process (5 runs after one warm-up: p50 and max), and as
   a fresh process (`python -m cli.main audit --model new-endpoint --json`, imports included: LanceDB
   alone takes ~2 s to import here);
4. the same through `registry serve` on that home: GET /v1/audit on the warm service, and a fresh
   `registry --server URL audit --model new-endpoint --json` process (what a CI job with a running
   service pays).
It reads the saved FAISS index, the cached calibration, and the evaluations of the model and its k
candidates; no model is embedded. The table also says whether the copy's original was flagged.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DIM = 32
TASKS = ("math", "law", "code", "biology", "history")


def write_pool(directory: Path, n_models: int, per_model: int, n_queries: int, seed: int):
    """A triple-format pool plus its query vectors; returns (names, vectors, scores of model 17)."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    difficulty = rng.normal(0, 1.2, n_queries)
    task = rng.integers(0, len(TASKS), n_queries)
    with open(directory / "queries.csv", "w", encoding="utf-8") as f:
        f.write("query_id,text,task\n")
        for q in range(n_queries):
            f.write(f"{q},synthetic question {q},{TASKS[task[q]]}\n")
    families = max(1, n_models // 20)
    fam = rng.integers(0, families, n_models)
    centres = rng.normal(size=(families, DIM))
    ability = rng.normal(0, 1, families)[fam] + rng.normal(0, 0.5, n_models)
    vectors = (centres[fam] + 0.3 * rng.normal(size=(n_models, DIM))).astype(np.float32)
    names = [f"model-{i:05d}" for i in range(n_models)]
    with open(directory / "models.csv", "w", encoding="utf-8") as f:
        f.write("model_id,name,family\n")
        for i, name in enumerate(names):
            f.write(f"{i},{name},fam{fam[i]}\n")
    kept = {}
    with open(directory / "evals.csv", "w", encoding="utf-8") as f:
        f.write("model_id,query_id,score\n")
        for i in range(n_models):
            qs = np.sort(rng.choice(n_queries, per_model, replace=False))
            y = (rng.random(per_model) < 1 / (1 + np.exp(difficulty[qs] - ability[i]))).astype(int)
            f.write("".join(f"{i},{q},{s}\n" for q, s in zip(qs, y)))
            if i == 17:
                kept = {"queries": qs, "scores": y}
    emb = directory / "emb"
    emb.mkdir()
    qv = rng.normal(size=(n_queries, 384)).astype(np.float32)
    np.save(emb / "v.npy", qv / np.linalg.norm(qv, axis=1, keepdims=True))
    np.save(emb / "ids.npy", np.arange(n_queries, dtype=np.int64))
    return names, vectors, kept


def set_vectors(store, vectors: dict[str, np.ndarray], encoder_id: str) -> None:
    """Write these models' vectors into the models table, as `registry embed` would (with the number of
    evaluations each was embedded from: a row saying 0 is a thin model, ranked and searched as one)."""
    from collections import Counter

    from indexing.store import EVALUATIONS, MODEL_SCHEMA, MODELS, now_utc

    rows = {r["name"]: r for r in store.read(MODELS).to_pylist()}
    counts = Counter(store.read_in(EVALUATIONS, ["model"], "model", list(vectors)).column("model").to_pylist())
    now = now_utc()
    updated = []
    for name, z in vectors.items():
        row = dict(rows[name])
        row.update(vector=z.astype(np.float32).tolist(), encoder_id=encoder_id, n_evals=counts[name], embedded_at=now)
        updated.append(row)
    with store.transaction():
        store.upsert(MODELS, updated, MODEL_SCHEMA, "name", insert=False)


def add_endpoint(reg, scratch: Path, orig: dict, vector: np.ndarray, encoder_id: str, seed: int) -> None:
    """The new endpoint "new-endpoint": model 17's answers (`orig`) with 5% changed, its vector near
    model 17's (`vector`), imported into the registry of `write_pool(scratch / "data", ...)`."""
    rng = np.random.default_rng(seed + 1)
    y = orig["scores"].copy()
    flip = rng.random(len(y)) < 0.05
    y[flip] = 1 - y[flip]
    new = scratch / "new"
    new.mkdir()
    (new / "queries.csv").write_text((scratch / "data" / "queries.csv").read_text())
    (new / "models.csv").write_text("model_id,name\n0,new-endpoint\n")
    (new / "evals.csv").write_text("model_id,query_id,score\n" + "".join(
        f"0,{q},{s}\n" for q, s in zip(orig["queries"], y)))
    emb = scratch / "data" / "emb"
    reg.import_path(new, encoder="all-MiniLM-L6-v2", query_embeddings=emb / "v.npy", query_ids=emb / "ids.npy")
    set_vectors(reg.store, {"new-endpoint": vector + 0.01 * rng.normal(size=DIM).astype(np.float32)}, encoder_id)


def one(n_models: int, per_model: int, n_queries: int, seed: int = 0, keep: Path | None = None) -> dict:
    from registry import Registry
    from registry.analytics.audit import audit

    with (contextlib.nullcontext(str(keep / f"n{n_models}")) if keep else tempfile.TemporaryDirectory()) as scratch:
        scratch = Path(scratch)
        names, vectors, orig = write_pool(scratch / "data", n_models, per_model, n_queries, seed)
        reg = Registry.open(scratch / "home")
        started = time.perf_counter()
        emb = scratch / "data" / "emb"
        reg.import_path(scratch / "data", encoder="all-MiniLM-L6-v2", query_embeddings=emb / "v.npy",
                        query_ids=emb / "ids.npy")
        set_vectors(reg.store, dict(zip(names, vectors)), "bench-encoder")
        built = time.perf_counter() - started
        started = time.perf_counter()
        audit(reg.store, model=names[0])  # no cache yet: fits the pool calibration and saves it
        calibrate_s = time.perf_counter() - started
        add_endpoint(reg, scratch, orig, vectors[17], "bench-encoder", seed)
        times, report = [], None
        for _ in range(6):
            t = time.perf_counter()
            report = audit(reg.store, model="new-endpoint")
            times.append(time.perf_counter() - t)
        times = times[1:]
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "cli.main", "--home", str(scratch / "home"), "audit", "--model",
                              "new-endpoint", "--json"], cwd=ROOT, env=env, capture_output=True, text=True)
        fresh = time.perf_counter() - t
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        assert json.loads(out.stdout)["model"] == "new-endpoint"
        service_s, server_cli_s = _through_service(scratch / "home", env)
        flagged = [p.b for p in report.duplicates]
        return {"service": service_s, "server_cli": server_cli_s, "models": n_models, "evals": n_models * per_model, "build": built, "calibrate": calibrate_s,
                "p50": float(np.median(times)), "max": float(np.max(times)), "fresh": fresh,
                "stale": report.calibration.stale, "found": names[17] in flagged, "flags": len(report.flags)}


def _through_service(home: Path, env: dict) -> tuple[float, float]:
    """(p50 s of GET /v1/audit?model=new-endpoint on a warm `registry serve`, p50 s of a fresh
    `registry --server URL audit --model new-endpoint --json` process), 5 runs each after a warm-up."""
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "cli.main", "--home", str(home), "serve", "--port", str(port),
                               "--log-level", "warning"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("registry serve did not come up")
            time.sleep(0.5)
        with httpx.Client(base_url=url, timeout=120) as client:
            times = []
            for _ in range(6):
                t = time.perf_counter()
                client.get("/v1/audit", params={"model": "new-endpoint"}).raise_for_status()
                times.append(time.perf_counter() - t)
        cli_times = []
        for _ in range(6):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "cli.main", "--server", url, "audit", "--model", "new-endpoint",
                            "--json"], cwd=ROOT, env=env, capture_output=True, check=False)
            cli_times.append(time.perf_counter() - t)
        return float(np.median(times[1:])), float(np.median(cli_times[1:]))
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--evals-per-model", type=int, default=200)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--keep", type=Path, default=None, help="Build the registries under this directory and keep them.")
    args = parser.parse_args()
    print("| models | evaluations | build registry s | calibration s (once, cached) | audit --model p50 ms | "
          "max ms | fresh process s | via registry serve: HTTP p50 ms | via serve: fresh `--server` CLI s | "
          "calibration stale | original flagged duplicate | flags |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        r = one(n, args.evals_per_model, args.queries, keep=args.keep)
        print(f"| {r['models']} | {r['evals']} | {r['build']:.1f} | {r['calibrate']:.1f} | {1000 * r['p50']:.0f} | "
              f"{1000 * r['max']:.0f} | {r['fresh']:.1f} | {1000 * r['service']:.0f} | {r['server_cli']:.2f} | "
              f"{r['stale']} | {r['found']} | {r['flags']} |", flush=True)


if __name__ == "__main__":
    main()
