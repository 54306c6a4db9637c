"""The router's kNN (encoder/knn.py) as `registry route` and the service hold it, at pool scale. Prints one
table.

    .venv/bin/python scripts/bench_knn.py [--queries 12032] [--models 100,1000] [--repeat 5]

The pool is synthetic: unit query vectors of 768 dimensions (all-mpnet-base-v2's, which the tour's encoder
reads), each model evaluated on 256-1,024 random queries with 0/1 scores, as MMLU-Pro's 12,032 queries
would be. Each kNN is built as the service builds it after a landing (`KNNRouter(tune=False)` fitted on
every evaluation), in the two neighbourhood modes with the settings a tuned blend picks on the real pools
(per_model k 20, pooled k 100). Memory: the fitted router's resident arrays (the stored query vectors and
the models x queries scores and flags); time: wall time on this machine, the best of --repeat, for one new
text's vector and for 32 at once.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from encoder.data import EvalData  # noqa: E402
from encoder.knn import KNNRouter  # noqa: E402

DIM = 768
SETTINGS = (("per_model", 20, 5.0), ("pooled", 100, 20.0))


def pool(models: int, queries: int, seed: int = 0) -> EvalData:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((queries, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    counts = rng.integers(256, 1025, size=models)
    model_index = np.repeat(np.arange(models), counts)
    query_index = np.concatenate([rng.choice(queries, n, replace=False) for n in counts])
    ability = rng.uniform(0.2, 0.9, size=models)
    scores = (rng.random(len(model_index)) < ability[model_index]).astype(np.float32)
    return EvalData(models=[f"model-{i}" for i in range(models)], query_ids=[f"q{i}" for i in range(queries)],
                    tasks=[""] * queries, query_vectors=vectors, model_index=model_index,
                    query_index=query_index, scores=scores)


def resident_mb(knn: KNNRouter) -> float:
    return sum(a.nbytes for a in (knn._train_vecs, knn._Y, knn._O, *knn._own)) / 1e6


def best_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=12032)
    ap.add_argument("--models", default="100,1000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    texts = np.random.default_rng(1).standard_normal((32, DIM)).astype(np.float32)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    print(f"router kNN, {args.queries:,} stored queries x {DIM}-d; "
          f"build s, resident MB, route ms (best of {args.repeat})")
    print(f"{'models':>7} {'mode':>10} {'build s':>8} {'resident MB':>12} {'1 text ms':>10} {'32 texts ms':>12}")
    for models in (int(m) for m in args.models.split(",")):
        data = pool(models, args.queries)
        for mode, k, c in SETTINGS:
            start = time.perf_counter()
            knn = KNNRouter(k=k, pseudo_count=c, mode=mode, tune=False).fit(data, np.arange(len(data.scores)), [])
            build = time.perf_counter() - start
            one = best_ms(lambda: knn.predict_vectors(texts[:1]), args.repeat)
            many = best_ms(lambda: knn.predict_vectors(texts), args.repeat)
            print(f"{models:>7} {mode:>10} {build:>8.2f} {resident_mb(knn):>12.0f} {one:>10.1f} {many:>12.1f}")


if __name__ == "__main__":
    main()
