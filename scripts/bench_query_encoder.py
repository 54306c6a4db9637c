"""Query-encoder engines against speed: fp32 (the reference), the exported fp32 copy (fp32-exported:
what `registry route` and the service on fp32 encode with), bf16 and openvino, on real MMLU-Pro question
texts (dynamic int8 was measured and refused: see encoder/query_encoder.py). Prints one table: wall and
CPU time per text (batched, and one text at a time as a route call encodes it) and the cosine of each
text's vector to its fp32 vector (mean and minimum). CPU seconds are printed beside wall time because the
machine may be shared: they do not grow with other processes' load.

    python scripts/bench_query_encoder.py [--encoder all-mpnet-base-v2] [--texts 48] [--threads 1]

openvino and the exported copy (OpenVINO in fp32) run on every core whatever --threads says (torch
threads); compare CPU seconds, or pass --threads with the core count for wall time at equal cores.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data" / "mmlu-pro" / "queries.csv"


def _texts(n: int) -> list[str]:
    if DATA.is_file():
        with open(DATA, newline="", encoding="utf-8") as handle:
            rows = [r["text"] for _, r in zip(range(n), csv.DictReader(handle))]
        return rows
    from registry.lab.synthetic import synthetic_pool

    return [q.text for q in synthetic_pool().queries][:n]


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="all-mpnet-base-v2")
    parser.add_argument("--texts", type=int, default=48)
    parser.add_argument("--single", type=int, default=12, help="texts encoded one at a time")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--backends", default="fp32,fp32-exported,bf16,openvino")
    args = parser.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from encoder.query_encoder import load_query_encoder

    texts = _texts(args.texts)
    if "fp32-exported" in args.backends.split(","):
        # before the torch model: a process that holds it answers from it (nothing to save), not the copy
        load_query_encoder(args.encoder, backend="fp32", exported=True)
    ref_encoder = load_query_encoder(args.encoder, backend="fp32")
    tokens = [len(ref_encoder._model.tokenizer(t)["input_ids"]) for t in texts]
    print(f"{args.encoder}: {len(texts)} MMLU-Pro texts, {np.mean(tokens):.0f} tokens on average "
          f"(max {max(tokens)}); {args.threads} threads; CPU flags: "
          f"{' '.join(f for f in ('avx512_bf16', 'amx_bf16', 'avx512_vnni') if f in open('/proc/cpuinfo').read())}")
    reference = None
    rows = []
    for backend in args.backends.split(","):
        if backend == "fp32-exported":  # loaded above (written on first use, checked against torch to 1e-5)
            enc = load_query_encoder(args.encoder, backend="fp32", exported=True)
            assert enc.exported, "the torch model answered, not the exported copy"
        else:
            enc = load_query_encoder(args.encoder, backend=backend)
        enc.encode(texts[:2], progress=False)  # warm-up
        vectors, wall, cpu = _timed(lambda: enc.encode(texts, batch_size=32, progress=False))
        _, wall1, cpu1 = _timed(lambda: [enc.encode([t], progress=False) for t in texts[: args.single]])
        if reference is None:
            reference = vectors
        cos = np.sum(vectors * reference, axis=1)
        rows.append((backend, wall / len(texts), cpu / len(texts), wall1 / args.single, cpu1 / args.single,
                     float(cos.mean()), float(cos.min())))
    base = rows[0]
    print(f"{'backend':<14}{'batch ms/text':>15}{'CPU-s/text':>12}{'single ms':>11}{'CPU-s':>8}"
          f"{'speed-up (CPU)':>16}{'cos mean':>10}{'cos min':>9}")
    for b, w, c, w1, c1, mean, low in rows:
        print(f"{b:<14}{w * 1000:>15.1f}{c:>12.3f}{w1 * 1000:>11.1f}{c1:>8.3f}"
              f"{base[2] / c:>9.2f}x/{base[4] / c1:.2f}x{mean:>10.5f}{low:>9.5f}")


if __name__ == "__main__":
    main()
