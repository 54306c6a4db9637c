"""The registry on real data: MMLU-Pro imported, an encoder trained, two known models re-added.

    .venv/bin/python scripts/demo_mmlu_pro_registry.py [--home DIR] [--strict]

1. The MMLU-Pro registry in DIR/home (scripts/_mmlu_pro.py: reused when trained and embedded, else
   imported with the precomputed all-mpnet-base-v2 query vectors, trained with `registry train`'s
   defaults, every model embedded).
2. Llama-3-8B re-added from 1024 of its own evaluations, shuffled, under a new name: its nearest
   neighbours.
3. Mistral-7B-v0.1 re-added from 1024 of its evaluations: the audit at its defaults, and which flagged
   pairs are distinct models. The copy shares its queries (and answers) with the original.
4. The strict variant (--strict), the disjoint test: Mistral-7B-v0.1 is replaced by one half of its
   evaluations and the copy gets the other half: the two share only queries whose text MMLU-Pro
   repeats, and each vector is built from its own half.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _mmlu_pro import mmlu_pro_registry  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--strict", action="store_true", help="Also run the variant with no shared query.")
    args = parser.parse_args()
    from registry.catalog.dataset import load_eval_data

    started = time.perf_counter()
    reg, _ = mmlu_pro_registry(Path(args.home) / "home" if args.home else None, threads=args.threads)

    data = load_eval_data(reg.store, reg.query_encoder)
    texts = {r["query_id"]: r["text"] for r in reg.store.read("queries").to_pylist()}
    rng = np.random.default_rng(0)

    def evaluations(model: str) -> list[dict]:
        own = np.flatnonzero(data.model_index == data.models.index(model))
        chosen = rng.permutation(own)[:1024]
        return [{"query": texts[data.query_ids[data.query_index[i]]], "score": float(data.scores[i])} for i in chosen]

    reg.add_model("Llama-3-8B (re-added)", evaluations("Llama-3-8B"), {"family": "llama3"})
    print("\nnearest to 'Llama-3-8B (re-added)', 1024 of Llama-3-8B's evaluations, shuffled:")
    for hit in reg.similar("Llama-3-8B (re-added)", k=5).neighbours:
        print(f"  {hit.distance:.5f}  {hit.name}")

    reg.add_model("Mistral-7B-v0.1 (re-added)", evaluations("Mistral-7B-v0.1"), {"family": "mistral"})
    planted = {frozenset(("Mistral-7B-v0.1", copy)) for copy in ("Mistral-7B-v0.1 (re-added)",
                                                                 "Mistral-7B-v0.1 (other half)")}
    planted.add(frozenset(("Llama-3-8B", "Llama-3-8B (re-added)")))
    report_audit(reg.audit(), planted)
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.strict:
        m = data.models.index("Mistral-7B-v0.1")
        own = rng.permutation(np.flatnonzero(data.model_index == m))
        halves = own[: len(own) // 2], own[len(own) // 2 :]

        def rows(chosen):
            return [{"query": texts[data.query_ids[data.query_index[i]]], "score": float(data.scores[i])}
                    for i in chosen]

        reg.remove("Mistral-7B-v0.1 (re-added)")
        reg.add_model("Mistral-7B-v0.1", rows(halves[0]), {"family": "mistral"}, replace=True)
        reg.add_model("Mistral-7B-v0.1 (other half)", rows(halves[1]), {"family": "mistral"})
        print(f"\nstrict: Mistral-7B-v0.1 replaced by {len(halves[0])} of its evaluations, the copy holds the "
              f"other {len(halves[1])} (MMLU-Pro repeats 159 question texts, and a repeated text is one query here, "
              f"so the halves meet only on those)")
        report_audit(reg.audit(), planted)


def report_audit(report, planted: set) -> None:
    print(f"\naudit: {report.candidates} candidate pairs ({report.k} nearest neighbours), pool calibration over "
          f"{report.calibration.reference_pairs} reference pairs")
    distinct = [f for f in report.flags if frozenset((f.a, f.b)) not in planted]
    for f in report.flags:
        tag = "re-added copy" if frozenset((f.a, f.b)) in planted else "DISTINCT models"
        print(f"  {f.label} {f.a} ~ {f.b}: distance {f.distance:.5f} [{tag}]; {f.reason}")
    mistral = any(frozenset((f.a, f.b)) in planted and "Mistral" in f.a for f in report.flags)
    print(f"{report.candidates} candidate pairs, {len(report.cleared)} cleared by their evaluations")
    print(f"Mistral-7B-v0.1 copy flagged: {mistral}; distinct pairs flagged: {len(distinct)}")


if __name__ == "__main__":
    main()
