"""The registry on real data: MMLU-Pro imported, an encoder trained, two known models re-added.

    .venv/bin/python scripts/demo_mmlu_pro_registry.py [--home DIR]

1. Import ../shared/data/mmlu-pro with its precomputed all-mpnet-base-v2 query vectors; train the
   encoder (seed 0, 1024 training evaluations per model, all 32 models); embed every model.
2. Llama-3-8B re-added from 1024 of its own evaluations, shuffled, under a new name: its nearest
   neighbours.
3. Mistral-7B-v0.1 re-added from 1024 of its evaluations outside a seeded 1024-sample of them (the
   sample registry vectors were built from before they used every evaluation; now the original's
   vector sees the copy's answers too): the audit at its defaults, and which flagged pairs are
   distinct models. The copy shares its queries with the original.
4. The strict variant (--strict), the disjoint test: Mistral-7B-v0.1 is replaced by one half of its
   evaluations and the copy gets the other half: the two share only queries whose text MMLU-Pro
   repeats, and each vector is built from its own half.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlu-pro"
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--strict", action="store_true", help="Also run the variant with no shared query.")
    args = parser.parse_args()
    if not (DATA / "evals.csv").is_file():
        sys.exit(f"MMLU-Pro not found at {DATA}")
    from registry import Registry
    from registry.dataset import load_eval_data
    from registry.embedding import embedding_evals

    home = Path(args.home or tempfile.mkdtemp()) / "home"
    reg = Registry.open(home)
    emb = DATA / "query_embeddings"
    started = time.perf_counter()
    reg.import_path(DATA, encoder="all-mpnet-base-v2", query_embeddings=emb / "all-mpnet-base-v2.npy",
                    query_ids=emb / "all-mpnet-base-v2_ids.npy")
    if reg.store.config.get("active_encoder") is None:
        trained = reg.train(evals_per_model=1024, seed=0, progress=False, threads=args.threads, max_seconds=300)
        print(f"trained encoder {trained.encoder_id} in {trained.seconds:.0f} s "
              f"(validation routing {trained.val_routing_accuracy:.4f})")
    reg.embed_all()

    data = load_eval_data(reg.store, reg.query_encoder)
    used = embedding_evals(data, max_evals=1024, seed=0)
    texts = {r["query_id"]: r["text"] for r in reg.store.read("queries").to_pylist()}
    rng = np.random.default_rng(0)

    def evaluations(model: str, *, exclude_used: bool) -> list[dict]:
        m = data.models.index(model)
        own = np.flatnonzero(data.model_index == m)
        if exclude_used:
            own = np.setdiff1d(own, used[m])
        chosen = rng.permutation(own)[:1024]
        return [{"query": texts[data.query_ids[data.query_index[i]]], "score": float(data.scores[i])} for i in chosen]

    reg.add_model("Llama-3-8B (re-added)", evaluations("Llama-3-8B", exclude_used=False), {"family": "llama3"})
    print("\nnearest to 'Llama-3-8B (re-added)', 1024 of Llama-3-8B's evaluations, shuffled:")
    for hit in reg.similar("Llama-3-8B (re-added)", k=5):
        print(f"  {hit['distance']:.5f}  {hit['name']}")

    reg.add_model("Mistral-7B-v0.1 (other half)", evaluations("Mistral-7B-v0.1", exclude_used=True),
                  {"family": "mistral"})
    planted = {frozenset(("Mistral-7B-v0.1", "Mistral-7B-v0.1 (other half)")),
               frozenset(("Llama-3-8B", "Llama-3-8B (re-added)"))}
    report_audit(reg.audit(), planted)
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.strict:
        m = data.models.index("Mistral-7B-v0.1")
        own = rng.permutation(np.flatnonzero(data.model_index == m))
        halves = own[: len(own) // 2], own[len(own) // 2 :]

        def rows(chosen):
            return [{"query": texts[data.query_ids[data.query_index[i]]], "score": float(data.scores[i])}
                    for i in chosen]

        reg.remove("Mistral-7B-v0.1 (other half)")
        reg.add_model("Mistral-7B-v0.1", rows(halves[0]), {"family": "mistral"}, replace=True)
        reg.add_model("Mistral-7B-v0.1 (other half)", rows(halves[1]), {"family": "mistral"})
        print(f"\nstrict: Mistral-7B-v0.1 replaced by {len(halves[0])} of its evaluations, the copy holds the "
              f"other {len(halves[1])} (MMLU-Pro repeats 159 question texts, and a repeated text is one query here, "
              f"so the halves meet only on those)")
        report_audit(reg.audit(), planted)


def report_audit(result: dict, planted: set) -> None:
    print(f"\naudit: threshold {result['threshold']:.5f} (0.99 quantile of self-spread over "
          f"{result['self_spread']['models']} models; median self-spread "
          f"{result['self_spread']['median']:.5f}); "
          f"closest pair {result['distinct']['min']:.5f}, median pair {result['distinct']['median']:.5f}")
    distinct = [f for f in result["flags"] if frozenset((f["a"], f["b"])) not in planted]
    for f in result["flags"]:
        tag = "re-added copy" if frozenset((f["a"], f["b"])) in planted else "DISTINCT models"
        ev = f["evidence"]
        print(f"  flag {f['a']} ~ {f['b']}: {f['distance']:.5f} (score {f['score']:.4f}) [{tag}]; "
              f"shared {ev['shared_queries']}, disagreement {ev['disagreement']}, homogeneity p {ev['homogeneity_p']}")
    mistral = any(frozenset((f["a"], f["b"])) in planted and "Mistral" in f["a"] for f in result["flags"])
    print(f"{result['candidates']} pairs within the threshold, {len(result['cleared'])} cleared by their evaluations")
    print(f"Mistral-7B-v0.1 copy flagged: {mistral}; distinct pairs flagged: {len(distinct)}")


if __name__ == "__main__":
    main()
