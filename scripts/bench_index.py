"""Search speed and recall of the model index: a benchmark that prints tables, not a timed test.

    .venv/bin/python scripts/bench_index.py [--sizes 10000,100000,1000000] [--queries 200]

1. similar() latency (p50, p99, one query at a time) and recall@10 against exact search, for exact
   (flat) FAISS, HNSW FAISS (the registry's settings) and LanceDB's own brute-force search, at each
   size, on 128-d vectors. Vectors are clustered (2,000 Gaussian clusters), as model embeddings of
   families and fine-tunes are; uniformly random 128-d vectors are a harder case for HNSW.
2. Wall time of `registry search` and `registry --help` in a fresh process, against a registry
   built by `registry demo` (given with --home; skipped without it).
2b. With --kinds: search latency by vector kind through `ModelIndex` as `registry search` uses it, at
   each size: the LOCUS index (64-d, the recommended encoder width; cosine) and the fingerprint index
   (17-d: rank 16 + 1; Euclidean), k = 5 neighbours of a named model (p50, p99 over --queries models),
   index build time, and the time to open the saved index from disk (what a fresh CLI process pays).
2c. With --updates: what a write costs the index past HNSW_THRESHOLD, at each size (64-d, the LOCUS
   index's two metrics): building the HNSW graph anew (what every write did before `VectorIndex.updated`)
   against updating it for 1 model added, 1 re-embedded, and 1% re-embedded; then, with 10% of the rows
   replaced (masked), search p50 and recall@10 against exact search of the same vectors. Then, through
   a LanceDB home, the first open after one add: the LOCUS index updated and built anew, and a service's
   reload of all three kinds' indexes, one read of the models table each and one read for all.
3. With --evals FILE (evaluations whose query texts the registry has already encoded): add-model wall
   time, from a fresh process (`registry add-model`, which loads torch and the encoder) and in-process
   (`Registry.add_model` after a first call), on a throwaway copy of --home. --sizes 0 skips part 1.
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


def clustered(n: int, d: int = 128, *, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(2000, d)).astype(np.float32)
    x = centres[rng.integers(0, len(centres), n)] + 0.35 * rng.normal(size=(n, d)).astype(np.float32)
    return x.astype(np.float32)


def latency_table(sizes: list[int], n_queries: int) -> None:
    from indexing.vector_index import VectorIndex

    print("| vectors | index | build s | p50 ms | p99 ms | recall@10 |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in sizes:
        x = clustered(n)
        names = [f"m{i}" for i in range(n)]
        queries = x[np.random.default_rng(1).choice(n, n_queries, replace=False)] + 0.01
        exact = None
        for kind in ("flat", "hnsw"):
            started = time.perf_counter()
            index = VectorIndex.build("bench", names, x, table_version=0, kind=kind)
            build = time.perf_counter() - started
            times, found = [], []
            for q in queries:
                t = time.perf_counter()
                hits = index.search(q, 10, metric="cosine")
                times.append(time.perf_counter() - t)
                found.append({row for row, _ in hits})
            if kind == "flat":
                exact = found
            recall = np.mean([len(f & e) / 10 for f, e in zip(found, exact)])
            p50, p99 = np.percentile(np.array(times) * 1000, [50, 99])
            print(f"| {n:,} | FAISS {kind} | {build:.1f} | {p50:.3f} | {p99:.3f} | {recall:.3f} |", flush=True)
        lance_row(n, x, queries, exact)


def updates_table(sizes: list[int], n_queries: int) -> None:
    from indexing.vector_index import VectorIndex

    def searched(index, names, vectors, rng) -> tuple[str, str]:
        exact = VectorIndex.build("exact", names, vectors, table_version=0, kind="flat")
        times, hits = [], []
        for q in vectors[rng.choice(len(vectors), n_queries, replace=False)] + 0.01:
            t = time.perf_counter()
            got = {r for r, _ in index.search(q, 10, metric="cosine")}
            times.append(time.perf_counter() - t)
            hits.append(len(got & {r for r, _ in exact.search(q, 10, metric="cosine")}) / 10)
        return f"{np.percentile(np.array(times) * 1000, 50):.3f}", f"{np.mean(hits):.3f}"

    print("| vectors | write | index s | masked rows | search p50 ms | recall@10 |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in sizes:
        x = clustered(n, 64)
        names = [f"m{i:07d}" for i in range(n)]
        rng = np.random.default_rng(2)
        started = time.perf_counter()
        base = VectorIndex.build("bench", names, x, table_version=0, kind="hnsw")
        took = time.perf_counter() - started
        print(f"| {n:,} | build anew | {took:.1f} | 0 | {' | '.join(searched(base, names, x, rng))} |", flush=True)
        for label, changed, added in (("1 added", 0, 1), ("1 re-embedded", 1, 0),
                                      ("1% re-embedded", n // 100, 0), ("10% re-embedded", n // 10, 0)):
            y = x.copy()
            rows = rng.choice(n, changed, replace=False)
            y[rows] += 0.05 * rng.normal(size=(changed, 64)).astype(np.float32)
            new_names = names + [f"n{i:07d}" for i in range(added)]
            y = np.concatenate([y, clustered(added, 64, seed=9)]) if added else y
            started = time.perf_counter()
            index = base.updated(new_names, y, table_version=1)
            took = time.perf_counter() - started
            search = searched(index, new_names, y, rng) if changed == n // 10 else ("", "")
            print(f"| {n:,} | {label} | {took:.2f} | {index.masked:,} | {' | '.join(search)} |", flush=True)
    print("\nThrough the models table (a LanceDB home of N models with 64-d LOCUS vectors, 17-d fingerprints and "
          "128-d behaviour vectors): the first search after one model is added, `ModelIndex.open` (read the table, "
          "update or build the index, save it), with the saved HNSW index updated and, as before "
          "`VectorIndex.updated`, built anew; then a service's reload, every kind's index, opened one by one "
          "(each reads the table) and by `ModelIndex.open_kinds` (one read).\n")
    print("| models | index after the write | open s |")
    print("|---:|---|---:|")
    for n in sizes:
        through_table(n)


def through_table(n: int) -> None:
    from datetime import datetime, timezone

    import pyarrow as pa

    from indexing.model_index import ModelIndex
    from indexing.store import MODEL_SCHEMA, MODELS, Store
    from indexing.vector_index import VectorIndex

    x = clustered(n + 4, 64)
    prints = clustered(n + 4, 17, seed=2)  # the fingerprint (rank 16 + 1) and behaviour (128 probes) columns
    behaviour = np.random.default_rng(3).random((n + 4, 128), dtype=np.float32)
    added = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def rows(lo: int, hi: int) -> pa.Table:  # models lo..hi-1: a name, the three vectors, the rest null
        given = {"name": pa.array([f"m{i:07d}" for i in range(lo, hi)]), "added": pa.array([added] * (hi - lo)),
                 "vector": pa.array(list(x[lo:hi]), MODEL_SCHEMA.field("vector").type),
                 "encoder_id": pa.array(["bench"] * (hi - lo)), "table_id": pa.array(["bench"] * (hi - lo)),
                 "fingerprint": pa.array(list(prints[lo:hi]), MODEL_SCHEMA.field("fingerprint").type),
                 "behaviour": pa.array(list(behaviour[lo:hi]), MODEL_SCHEMA.field("behaviour").type)}
        return pa.table({f.name: given.get(f.name, pa.nulls(hi - lo, f.type)) for f in MODEL_SCHEMA},
                        schema=MODEL_SCHEMA)

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "home")
        with store.transaction():
            store.append(MODELS, rows(0, n), MODEL_SCHEMA)
        for by in ("locus", "fingerprint", "behaviour"):
            ModelIndex.open(store, by=by)  # the saved indexes of N models
        for label, extra, patch in (("updated", n, False), ("built anew", n + 1, True)):
            with store.transaction():
                store.append(MODELS, rows(extra, extra + 1), MODEL_SCHEMA)
            original = VectorIndex.updated
            if patch:
                VectorIndex.updated = lambda self, names, vectors, *, table_version: VectorIndex.build(
                    self.encoder_id, names, vectors, table_version=table_version, metrics=self.metrics)
            try:
                started = time.perf_counter()
                index = ModelIndex.open(store)
                took = time.perf_counter() - started
            finally:
                VectorIndex.updated = original
            assert len(index.names) == extra + 1
            print(f"| {n:,} | {label} | {took:.1f} |", flush=True)
        kinds = ("locus", "fingerprint", "behaviour")  # what a service's reload after a write opens
        for label, extra, one_read in (("updated, 3 kinds, one read each", n + 2, False),
                                       ("updated, 3 kinds from one read", n + 3, True)):
            with store.transaction():
                store.append(MODELS, rows(extra, extra + 1), MODEL_SCHEMA)
            started = time.perf_counter()
            opened = ModelIndex.open_kinds(store, kinds) if one_read else \
                {by: ModelIndex.open(store, by=by) for by in kinds}
            took = time.perf_counter() - started
            assert all(len(i.names) == extra + 1 for i in opened.values())
            print(f"| {n:,} | {label} | {took:.1f} |", flush=True)


KINDS = {"locus": (64, "cosine"), "fingerprint": (17, "euclidean")}


def kinds_table(sizes: list[int], n_queries: int) -> None:
    """Search by vector kind through ModelIndex on a synthetic models table of each size."""
    import json

    from indexing.home import GENERATION_FILE
    from indexing.model_index import ModelIndex, _current_file, _file_id
    from indexing.model_rows import ModelRows
    from indexing.vector_index import VectorIndex

    print("| models | vector kind | dims | metric | build s | open saved s | p50 ms | p99 ms |")
    print("|---:|---|---:|---|---:|---:|---:|---:|")
    for n in sizes:
        names = [f"m{i:06d}" for i in range(n)]
        for kind, (dims, metric) in KINDS.items():
            x = clustered(n, dims)
            with tempfile.TemporaryDirectory() as tmp:
                home = Path(tmp)
                (home / GENERATION_FILE).write_text("bench")
                started = time.perf_counter()
                vector_index = VectorIndex.build(_file_id(kind, "bench"), names, x, table_version=1)
                rows = ModelRows(names, {"name": names})
                index = ModelIndex(home, "bench", rows, {"bench"}, vector_index, kind)
                build = time.perf_counter() - started
                index._save("bench")
                started = time.perf_counter()
                loaded = ModelIndex._load_current(home, kind)
                opened = time.perf_counter() - started
                assert loaded is not None and loaded.names == names, json.dumps(_current_file(kind))
                probes = np.random.default_rng(1).choice(n, min(n_queries, n), replace=False)
                loaded.neighbours(names[probes[0]], 5, metric=metric)
                times = []
                for i in probes:
                    t = time.perf_counter()
                    loaded.neighbours(names[i], 5, metric=metric)
                    times.append(time.perf_counter() - t)
                p50, p99 = np.percentile(np.array(times) * 1000, [50, 99])
                print(f"| {n:,} | {kind} | {dims} | {metric} | {build:.2f} | {opened:.2f} | {p50:.3f} | {p99:.3f} |",
                      flush=True)


def lance_row(n: int, x: np.ndarray, queries: np.ndarray, exact) -> None:
    import pyarrow as pa

    os.environ.setdefault("LANCEDB_LOG", "error")
    import lancedb

    with tempfile.TemporaryDirectory() as tmp:
        db = lancedb.connect(tmp)
        started = time.perf_counter()
        unit = x / np.linalg.norm(x, axis=1, keepdims=True)
        table = db.create_table("v", pa.table({
            "row": pa.array(np.arange(n)),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(unit.reshape(-1)), x.shape[1])}))
        build = time.perf_counter() - started
        times, found = [], []
        for q in queries[: min(len(queries), 50)]:
            t = time.perf_counter()
            hits = table.search(q / np.linalg.norm(q)).distance_type("cosine").limit(10).select(["row"]).to_arrow()
            times.append(time.perf_counter() - t)
            found.append(set(hits.column("row").to_pylist()))
        recall = np.mean([len(f & e) / 10 for f, e in zip(found, exact)])
        p50, p99 = np.percentile(np.array(times) * 1000, [50, 99])
        print(f"| {n:,} | LanceDB brute force | {build:.1f} | {p50:.3f} | {p99:.3f} | {recall:.3f} |", flush=True)


def cold_process_table(home: str, name: str) -> None:
    registry = str(Path(sys.executable).with_name("registry"))
    print("| command | wall s (median of 5, fresh process each) |")
    print("|---|---:|")
    for args in (["--help"], ["--home", home, "search", name, "-k", "5"]):
        times = []
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run([registry, *args], check=True, capture_output=True)
            times.append(time.perf_counter() - t)
        print(f"| registry {' '.join(args)} | {np.median(times):.2f} |")


def add_model_table(home: str, evals: str) -> None:
    import shutil

    from registry import Registry

    registry = str(Path(sys.executable).with_name("registry"))
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "home"
        shutil.copytree(home, copy)
        n = sum(1 for line in open(evals, encoding="utf-8") if line.strip())
        print(f"| add-model of {n} evaluations, texts already encoded | wall s |")
        print("|---|---:|")
        for i in range(3):
            t = time.perf_counter()
            subprocess.run([registry, "--home", str(copy), "add-model", f"bench-cli-{i}", "--evals", evals],
                           check=True, capture_output=True)
            print(f"| `registry add-model` (fresh process) #{i + 1} | {time.perf_counter() - t:.2f} |", flush=True)
        reg = Registry.open(copy)
        for i in range(4):
            t = time.perf_counter()
            result = reg.add_model(f"bench-api-{i}", evals)
            assert result.encoded_texts == 0, "the bench wants texts the registry has already encoded"
            label = "first call (loads the encoder)" if i == 0 else f"#{i}"
            print(f"| `Registry.add_model` in-process, {label} | {time.perf_counter() - t:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--home", default=None, help="a registry with embedded models, for the cold-process table")
    parser.add_argument("--model", default=None, help="model name to search for in --home")
    parser.add_argument("--evals", default=None, help="an evaluations file for the add-model timing (with --home)")
    parser.add_argument("--kinds", action="store_true", help="search by vector kind (locus, fingerprint) only")
    parser.add_argument("--updates", action="store_true", help="an HNSW index's cost of a write only")
    parser.add_argument("--faiss-threads", type=int, default=2,
                        help="FAISS OpenMP threads (1 on a machine busy with other work: OpenMP waits dominate)")
    args = parser.parse_args()
    import faiss

    faiss.omp_set_num_threads(args.faiss_threads)
    print(f"# index benchmark ({os.cpu_count()} CPUs, FAISS threads {args.faiss_threads}, load average "
          f"{os.getloadavg()[0]:.1f})\n")
    sizes = [int(s) for s in args.sizes.split(",") if int(s) > 0]
    if args.kinds:
        kinds_table(sizes, args.queries)
        return
    if args.updates:
        updates_table(sizes, args.queries)
        return
    if sizes:
        latency_table(sizes, args.queries)
    if args.home and args.model:
        print()
        cold_process_table(args.home, args.model)
    if args.home and args.evals:
        print()
        add_model_table(args.home, args.evals)


if __name__ == "__main__":
    main()
