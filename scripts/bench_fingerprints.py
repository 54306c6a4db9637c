"""Cost of behaviour fingerprints (encoder/fingerprint.py) on large synthetic registries, and search speed
by vector kind (the LOCUS index, the fingerprint index and the behaviour index).

    .venv/bin/python scripts/bench_fingerprints.py [--sizes 1000,10000] [--evals-per-model 200] [--queries 2000]

For each size N: the synthetic registry of scripts/bench_audit.py (N models, each scored on
`--evals-per-model` random queries of `--queries`, vectors written directly under a stand-in encoder
id), then:
1. the item table is fitted on the pool and written beside that encoder, as `registry train` does;
2. every model's fingerprint column is written in one transaction (`rewrite_fingerprints`: what
   `registry train`, `fit-fingerprints` and the format-2 migration pay);
3. one model is added (a copy of model 17 with 5% of answers changed) and its column written (as
   add-model does for one model);
4. search speed by vector kind: the FAISS index alone (`ModelIndex.neighbours`, k = 5, p50 over 50 models
   after a warm-up; the behaviour index through `behaviour_neighbours`, as route's fallbacks read it, with
   the size of its vectors), `similar(NAME, by=...)` in-process (p50 of 5 runs after a warm-up;
   by="fingerprint" reads the behaviour index's 200 nearest and the same-model test on them) and a fresh
   `python -m cli.main search NAME --by KIND --json` process (imports included);
5. up to 1,000 models, `clusters` by each kind (the second of two runs; by fingerprint it clusters answer
   distances up to 500 models, the behaviour index's distance between stored vectors beyond);
6. the audit's fingerprint candidates of every model (what a full `registry audit` searches): the
   behaviour index's 10 nearest of each (`behaviour_neighbours_many`, batched), and, for comparison, the
   identity index's, one search per model (what the audit read before 2026-12-05).
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
CLUSTER_SIZES_UP_TO = 1000  # `clusters` is timed up to this pool size (its distance matrix is n x n)


def one(n_models: int, per_model: int, n_queries: int, seed: int = 0) -> dict:
    from bench_audit import add_endpoint, set_vectors, write_pool

    from encoder.fingerprint import fit_on_data, save_item_table
    from indexing.model_index import ModelIndex
    from registry import Registry
    from registry.analytics import fingerprints as fp
    from registry.catalog.dataset import load_eval_data
    from registry.analytics.search import behaviour_neighbours, behaviour_neighbours_many
    from registry.catalog.fingerprint_store import fingerprint_columns, rewrite_fingerprints

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
        written = rewrite_fingerprints(reg.store, table)
        column_s = time.perf_counter() - started

        add_endpoint(reg, scratch, orig, vectors[17], ENCODER_ID, seed)
        started = time.perf_counter()
        columns = fingerprint_columns(reg.store, table, ["new-endpoint"])
        _write_columns(reg.store, columns)
        added_s = time.perf_counter() - started

        out = {"models": n_models, "evals": n_models * per_model, "build": built, "fit": fit_s,
               "column": column_s, "written": written, "added": added_s, "original": names[17]}
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        rng = np.random.default_rng(seed)
        for kind in ("locus", "fingerprint"):
            index = ModelIndex.open(reg.store, by=kind)
            metric = "euclidean" if kind == "fingerprint" else "cosine"
            probes = [index.names[i] for i in rng.choice(len(index.names), 50, replace=False)]
            index.neighbours(probes[0], 5, metric=metric)
            times = []
            for name in probes:
                t = time.perf_counter()
                index.neighbours(name, 5, metric=metric)
                times.append(time.perf_counter() - t)
            out[f"{kind}_index"] = float(np.median(times))
            times, hits = [], None
            for _ in range(6):
                t = time.perf_counter()
                hits = reg.similar("new-endpoint", k=5, by=kind).neighbours
                times.append(time.perf_counter() - t)
            out[f"{kind}_similar"] = float(np.median(times[1:]))
            out[f"{kind}_first"] = hits[0].name
            t = time.perf_counter()
            run = subprocess.run([sys.executable, "-m", "cli.main", "--home", str(scratch / "home"), "search",
                                  "new-endpoint", "--by", kind, "-k", "5", "--json"],
                                 cwd=ROOT, env=env, capture_output=True, text=True)
            out[f"{kind}_fresh"] = time.perf_counter() - t
            if run.returncode != 0:
                raise SystemExit(run.stderr)
        behaviour = ModelIndex.open(reg.store, by="behaviour")
        probes = [behaviour.names[i] for i in rng.choice(len(behaviour.names), 50, replace=False)]
        behaviour_neighbours(reg.store, table, probes[0], 5, index=behaviour)
        times = []
        for name in probes:
            t = time.perf_counter()
            behaviour_neighbours(reg.store, table, name, 5, index=behaviour)
            times.append(time.perf_counter() - t)
        out["behaviour_index"] = float(np.median(times))
        out["behaviour_mb"] = behaviour.vectors.nbytes / 2**20
        out["behaviour_dim"] = int(behaviour.vectors.shape[1])
        # the audit's fingerprint candidates for every model (a full `registry audit`): the behaviour index's 10
        # nearest of each, searched in batches, against the identity index's, one search each (before 2026-12-05)
        t = time.perf_counter()
        behaviour_neighbours_many(reg.store, table, behaviour.names, 10, index=behaviour)
        out["audit_behaviour"] = time.perf_counter() - t
        identity = ModelIndex.open(reg.store, by="fingerprint")
        t = time.perf_counter()
        for name in identity.names:
            identity.neighbours(name, 10, metric="euclidean")
        out["audit_identity"] = time.perf_counter() - t
        # clusters (second of two runs): by fingerprint they read answer distances up to ANSWER_MATRIX_MAX models
        if n_models <= CLUSTER_SIZES_UP_TO:
            for kind in ("locus", "fingerprint"):
                for _ in range(2):
                    t = time.perf_counter()
                    result = reg.clusters(by=kind)
                    out[f"{kind}_clusters"] = time.perf_counter() - t
                out[f"{kind}_clusters_metric"] = result.metric
        return out


def _write_columns(store, columns: dict) -> None:
    from indexing.store import MODEL_SCHEMA, MODELS

    with store.transaction():  # the written models' rows only, as add-model reads them
        rows = [dict(r, **columns[r["name"]]) for r in store.read_in(MODELS, MODEL_SCHEMA.names, "name", list(columns)).to_pylist()]
        store.upsert(MODELS, rows, MODEL_SCHEMA, "name", insert=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--evals-per-model", type=int, default=200)
    parser.add_argument("--queries", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print("| models | evaluations | fit item table s | every fingerprint column, one transaction s | one add-model's "
          "column s | index p50 ms: locus / fingerprint / behaviour | behaviour vectors (d, MB) | similar() p50 ms: "
          "locus / fingerprint | fresh CLI search s: "
          "locus / fingerprint | copy's first neighbour is its original: locus / fingerprint | clusters s: locus / "
          "fingerprint (distance) | audit candidates of every model s: behaviour index / identity |")
    print("|---:|---:|---:|---:|---:|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        r = one(n, args.evals_per_model, args.queries)
        print(f"| {r['models']} | {r['evals']} | {r['fit']:.1f} | {r['column']:.1f} ({r['written']} models) | "
              f"{r['added']:.2f} | {1000 * r['locus_index']:.2f} / {1000 * r['fingerprint_index']:.2f} / "
              f"{1000 * r['behaviour_index']:.2f} | {r['behaviour_dim']}, {r['behaviour_mb']:.0f} | "
              f"{1000 * r['locus_similar']:.0f} / {1000 * r['fingerprint_similar']:.0f} | "
              f"{r['locus_fresh']:.1f} / {r['fingerprint_fresh']:.1f} | "
              f"{r['locus_first'] == r['original']} / {r['fingerprint_first'] == r['original']} | "
              + (f"{r['locus_clusters']:.2f} / {r['fingerprint_clusters']:.2f} ({r['fingerprint_clusters_metric']}) |"
                 if "locus_clusters" in r else "- |") + f" {r['audit_behaviour']:.1f} / {r['audit_identity']:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
