"""Cost of behaviour fingerprints (encoder/fingerprint.py) on large synthetic registries.

    .venv/bin/python scripts/bench_fingerprints.py [--sizes 1000,10000] [--evals-per-model 200] [--queries 2000]

For each size N: the synthetic registry of scripts/bench_audit.py (N models, each scored on
`--evals-per-model` random queries of `--queries`, vectors written directly under a stand-in encoder
id), then:
1. the item table is fitted on the pool and written beside that encoder, as `registry train` does;
2. every model's fingerprint is computed (`pool_fingerprints`, nothing cached: what the first
   `search --by behaviour` on such a home pays) and saved in <home>/fingerprints/;
3. the same read back by a process that has not seen them (the in-process cache cleared: the on-disk
   cache answers);
4. one model is added (a copy of model 17 with 5% of answers changed) and the fingerprints brought up
   to date (only the new model is solved);
5. `similar(NAME, by="behaviour")` in-process (5 runs after a warm-up: p50) and as a fresh
   `python -m cli.main search NAME --by behaviour --json` process (imports included).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

ENCODER_ID = "bench-encoder"


def one(n_models: int, per_model: int, n_queries: int, seed: int = 0) -> dict:
    from bench_audit import add_endpoint, set_vectors, write_pool

    from encoder.fingerprint import fit_on_data, save_item_table
    from registry import Registry
    from registry import fingerprints as fp
    from registry.dataset import load_eval_data

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        names, vectors, orig = write_pool(scratch / "data", n_models, per_model, n_queries, seed)
        reg = Registry.open(scratch / "home")
        emb = scratch / "data" / "emb"
        started = time.perf_counter()
        reg.import_path(scratch / "data", encoder="all-MiniLM-L6-v2", query_embeddings=emb / "v.npy",
                        query_ids=emb / "ids.npy")
        set_vectors(reg.store, dict(zip(names, vectors)), ENCODER_ID)
        reg.store.update_config(active_encoder=ENCODER_ID)
        built = time.perf_counter() - started

        started = time.perf_counter()
        table = fit_on_data(load_eval_data(reg.store, "all-MiniLM-L6-v2"))
        directory = reg.home / "encoders" / ENCODER_ID
        directory.mkdir(parents=True)
        save_item_table(table, directory)
        fit_s = time.perf_counter() - started

        table = fp.load_item_table(reg.store)
        started = time.perf_counter()
        fp.pool_fingerprints(reg.store, table)
        cold_s = time.perf_counter() - started
        fp._pool_cache.clear()
        started = time.perf_counter()
        fp.pool_fingerprints(reg.store, table)
        disk_s = time.perf_counter() - started

        add_endpoint(reg, scratch, orig, vectors[17], ENCODER_ID, seed)
        started = time.perf_counter()
        fp.pool_fingerprints(reg.store, table)
        added_s = time.perf_counter() - started

        times, hits = [], None
        for _ in range(6):
            t = time.perf_counter()
            hits = reg.similar("new-endpoint", k=5, by="behaviour").neighbours
            times.append(time.perf_counter() - t)
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "cli.main", "--home", str(scratch / "home"), "search",
                              "new-endpoint", "--by", "behaviour", "-k", "5", "--json"],
                             cwd=ROOT, env=env, capture_output=True, text=True)
        fresh = time.perf_counter() - t
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        cache_mb = sum(f.stat().st_size for f in (reg.home / "fingerprints").iterdir()) / 1e6
        return {"models": n_models, "evals": n_models * per_model, "build": built, "fit": fit_s, "cold": cold_s,
                "disk": disk_s, "added": added_s, "p50": float(np.median(times[1:])), "fresh": fresh,
                "first": hits[0].name, "original": names[17], "cache_mb": cache_mb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--evals-per-model", type=int, default=200)
    parser.add_argument("--queries", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print("| models | evaluations | build registry s | fit item table s | every fingerprint, cold s | read back "
          "(disk cache) s | after one add-model s | search --by behaviour p50 ms | fresh CLI process s | "
          "cache MB | copy's first neighbour is its original |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        r = one(n, args.evals_per_model, args.queries)
        print(f"| {r['models']} | {r['evals']} | {r['build']:.1f} | {r['fit']:.1f} | {r['cold']:.1f} | {r['disk']:.2f} | "
              f"{r['added']:.2f} | {1000 * r['p50']:.0f} | {r['fresh']:.1f} | {r['cache_mb']:.1f} | "
              f"{r['first'] == r['original']} |", flush=True)


if __name__ == "__main__":
    main()
