"""Does a copy of a model find the model? Nearest-neighbour identity of re-added models.

    .venv/bin/python scripts/bench_copy_search.py --home DIR [--copy-evals 1024] [--draws 3]

For every model of a trained registry: a "copy" is embedded from `--copy-evals` of the model's own
evaluations (a random sample, `--draws` times), and the registry's models from their evaluations,
capped at 1024, 4096, or all of them (the registry's default). A copy finds its original when the
original is its nearest model by cosine distance. The table prints the rate at rank 1 and within the
top 3 over models x draws, and the median rank. Nothing is written to the registry.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True, help="a registry with an active encoder")
    parser.add_argument("--copy-evals", type=int, default=1024)
    parser.add_argument("--draws", type=int, default=3)
    args = parser.parse_args()
    from encoder.data import evals_by_model
    from encoder.inference import embed_models
    from registry import Registry
    from registry.catalog.dataset import load_eval_data
    from registry.catalog.embedding import active_encoder, embedding_evals

    reg = Registry.open(args.home, create=False)
    active = active_encoder(reg.store)
    data = load_eval_data(reg.store, active.query_encoder)
    own = evals_by_model(data, np.arange(len(data.scores)))

    def unit(z: np.ndarray) -> np.ndarray:
        return z / np.linalg.norm(z, axis=1, keepdims=True)

    print(f"registry {args.home}: encoder {active.encoder_id}, {data.n_models} models; copies from "
          f"{args.copy_evals} evaluations, {args.draws} draws\n")
    print("| registry vectors from | copy finds original first | in the top 3 | median rank |")
    print("|---|---:|---:|---:|")
    copies = []
    for draw in range(args.draws):
        rng = np.random.default_rng(100 + draw)
        sets = [np.sort(rng.choice(e, min(args.copy_evals, len(e)), replace=False)) for e in own]
        copies.append(unit(embed_models(active.locus, data, sets)))
    for cap in (1024, 4096, None):
        stored = unit(embed_models(active.locus, data, embedding_evals(data, max_evals=cap, seed=0)))
        ranks = []
        for copy in copies:
            d = 1.0 - copy @ stored.T
            ranks += [int((d[m] < d[m, m]).sum()) + 1 for m in range(data.n_models)]
        ranks = np.array(ranks)
        label = "all evaluations" if cap is None else f"at most {cap} evaluations"
        print(f"| {label} | {np.mean(ranks == 1):.3f} | {np.mean(ranks <= 3):.3f} | {np.median(ranks):g} |")


if __name__ == "__main__":
    main()
