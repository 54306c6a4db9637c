"""How many evaluations does a model need before its vector can be ranked beside the others? (issue 22, part 5)

    nice -n 10 .venv/bin/python scripts/evidence_minimum.py [--datasets mmlu-pro,bfcl] [--draws 5]
        [--home mmlu-pro=DIR ...] [--page docs/results/evidence.md] [--no-write]

For each dataset in ../shared/data (read in place) the queries are split 80/10/10 (seed 0). Each model's
reference vector is built from all its evaluations on the non-test queries; then, `--draws` times per
model, from a random sample of n = 2, 4, 8, ..., 256 of them. Per n the table prints, over models x draws:

- `moved / NN`: how far the thin vector lands from the model's own reference vector, divided by the
  distance from that reference to its nearest *other* model's reference (median over models x draws).
  Below 1, the thin vector is nearer its own model than the closest distinct model is; above 1 it may
  sit anywhere among the pool, and a search ranks it by noise.
- `self top-1`: share of thin vectors whose nearest reference vector is their own model's.
- `P(correct) MAE`: on the model's test queries, the mean absolute error of the thin vector's predicted
  P(correct) against the observed scores, minus the same error of the reference vector (0 = as good as
  all the evidence).
- `accuracy error`: |mean predicted P(correct) on the test queries - observed test accuracy| (median).

Vectors: the behaviour fingerprint (`encoder.fingerprint`: the item table fitted on the non-test
queries, distance = RMS logit difference over its probe queries), which needs no training; and, with
`--home DATASET=DIR` (a trained registry of that dataset, e.g. built by scripts/scorecard.py), the LOCUS
embedding of its active encoder (cosine distance; P(correct) from its predictor).

The page (`--page`) is rewritten from this run, with the command that produced it (the rows also go to
the JSON beside it). The documented minimum (`registry.evidence.MIN_EVALS`) is justified there: it is the
smallest n of the grid at which, on every dataset, the median thin fingerprint moved less than its
nearest distinct model's distance (moved / NN < 1). The rule reads the fingerprint, the vector that
tells models apart (the issue's likeness vector); LOCUS rows, when measured, are printed beside it: a
LOCUS encoder whose vectors share one dominant direction puts distinct models closer together than any
thin vector lands, so its moved / NN stays far above 1 at every n and cannot set a threshold.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT.parent / "shared" / "data"
GRID = (2, 4, 8, 16, 32, 64, 128, 256)
ENCODER = "all-mpnet-base-v2"


def _unit(z: np.ndarray) -> np.ndarray:
    return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)


def _rows(name: str, vector: str, n: int, moved_nn: np.ndarray, top1: np.ndarray, mae_excess: np.ndarray,
          acc_err: np.ndarray) -> dict:
    return {"dataset": name, "vector": vector, "n": n, "moved_over_nn": float(np.median(moved_nn)),
            "moved_over_nn_p90": float(np.quantile(moved_nn, 0.9)), "self_top1": float(np.mean(top1)),
            "mae_excess": float(np.mean(mae_excess)), "accuracy_error": float(np.median(acc_err))}


def measure(name: str, data, split, own: list[np.ndarray], test: list[np.ndarray], embed, predict, distances,
            vector: str, draws: int) -> list[dict]:
    """Rows per n for one kind of vector. `embed(per_model)` -> (M, d); `predict(vectors, m, evals)` ->
    P(correct) of model m's vector on those evaluations; `distances(a, b)` -> (len(a), len(b))."""
    reference = embed(own)
    between = distances(reference, reference)
    np.fill_diagonal(between, np.inf)
    nearest_other = between.min(1)  # (M,)
    ref_mae = np.array([np.abs(predict(reference[m:m + 1], m, test[m]) - data.scores[test[m]]).mean()
                        if len(test[m]) else np.nan for m in range(data.n_models)])
    out = []
    for n in GRID:
        moved_nn, top1, mae_excess, acc_err = [], [], [], []
        for draw in range(draws):
            rng = np.random.default_rng(1000 * n + draw)
            sets = [np.sort(rng.choice(e, min(n, len(e)), replace=False)) for e in own]
            thin = embed(sets)
            d = distances(thin, reference)  # (M, M)
            for m in range(data.n_models):
                moved_nn.append(d[m, m] / nearest_other[m])
                top1.append(int(np.argmin(d[m]) == m))
                if len(test[m]):
                    p = predict(thin[m:m + 1], m, test[m])
                    y = data.scores[test[m]]
                    mae_excess.append(np.abs(p - y).mean() - ref_mae[m])
                    acc_err.append(abs(p.mean() - y.mean()))
        out.append(_rows(name, vector, n, np.array(moved_nn), np.array(top1), np.array(mae_excess), np.array(acc_err)))
        print(f"  {vector:<11} n={n:<4} moved/NN {out[-1]['moved_over_nn']:.2f}  self top-1 {out[-1]['self_top1']:.3f}  "
              f"MAE excess {out[-1]['mae_excess']:+.4f}  accuracy error {out[-1]['accuracy_error']:.4f}", flush=True)
    return out


def fingerprint_rows(name: str, data, split, own, test, draws: int) -> list[dict]:
    from encoder.fingerprint import fit_on_data

    started = time.perf_counter()
    table = fit_on_data(data, exclude={data.query_ids[q] for q in split.test})
    print(f"  item table fitted in {time.perf_counter() - started:.0f} s", flush=True)
    f, b = table.item_params(data.query_ids, data.query_vectors)

    def embed(sets):
        thetas = table.fingerprints(data.query_ids, data.query_vectors, sets, data.query_index, data.scores)
        return table.identity_vectors(thetas)

    def predict(vectors, m, evals):
        q = data.query_index[evals]
        return table.probabilities(table.thetas_of(vectors), f[q], b[q])[0]

    def distances(a, c):
        return np.sqrt(np.maximum(((a[:, None, :] - c[None, :, :]) ** 2).sum(-1), 0.0))

    return measure(name, data, split, own, test, embed, predict, distances, "fingerprint", draws)


ENCODERS: list[str] = []  # one line per LOCUS encoder measured, for the page


def locus_rows(name: str, home: str, draws: int) -> list[dict]:
    """The LOCUS embedding of a trained registry's active encoder, its own data and split."""
    import torch

    from encoder.data import split_queries
    from encoder.training import embed_models, evals_by_model, predict
    from registry import Registry
    from registry.catalog.dataset import load_eval_data
    from registry.catalog.embedding import active_encoder

    reg = Registry.open(home, create=False)
    active = active_encoder(reg.store)
    data = load_eval_data(reg.store, active.query_encoder)
    import json

    info = json.loads((active.directory / "training.json").read_text("utf-8"))
    test_ids = set(info.get("test_query_ids") or [])
    if not test_ids:
        test_ids = {data.query_ids[q] for q in split_queries(data.n_queries, seed=0).test}
    is_test = np.fromiter((q in test_ids for q in data.query_ids), dtype=bool, count=data.n_queries)
    per_model = evals_by_model(data, np.arange(len(data.scores)))
    own = [e[~is_test[data.query_index[e]]] for e in per_model]
    test = [e[is_test[data.query_index[e]]] for e in per_model]

    def embed(sets):
        with torch.no_grad():
            return np.asarray(embed_models(active.locus, data, sets), np.float64)

    def pred(vectors, m, evals):
        return np.asarray(predict(active.locus, vectors.astype(np.float32),
                                  data.query_vectors[data.query_index[evals]]))[0]

    def distances(a, c):
        return 1.0 - _unit(a) @ _unit(c).T

    line = (f"{name}: LOCUS encoder {active.encoder_id} ({data.n_models} models; trained {info.get('epochs_run')} "
            f"epochs, best {info.get('best_epoch')}, stopped by {info.get('stopped')}, "
            f"{float(info.get('seconds') or 0):.0f} s, validation routing {info.get('val_routing_accuracy', 0):.4f})")
    ENCODERS.append(line)
    print("  " + line, flush=True)
    return measure(name, data, None, own, test, embed, pred, distances, "LOCUS", draws)


def minimum_of(rows: list[dict]) -> int | None:
    """The smallest n of the grid at which every dataset's fingerprint has median moved / NN < 1."""
    for n in GRID:
        at = [r for r in rows if r["n"] == n and r["vector"] == "fingerprint"]
        if at and all(r["moved_over_nn"] < 1.0 for r in at):
            return n
    return None


def page(rows: list[dict], command: str, seconds: float) -> str:
    from registry.evidence import MIN_EVALS

    lines = ["# How many evaluations make a model's vector trustworthy?", "",
             f"Generated by `{command}` ({seconds:.0f} s); rewritten on every run. Data: ../shared/data, queries "
             "split 80/10/10 (seed 0); each model's reference vector from all its non-test evaluations, thin "
             "vectors from n of them (random draws).", "",
             "- **moved / NN**: distance from the thin vector to its own model's reference, over the distance from "
             "that reference to the nearest other model (median; p90 beside it). Below 1 the thin vector is nearer "
             "its own model than the closest distinct model is.",
             "- **self top-1**: share of thin vectors whose nearest reference is their own model.",
             "- **P(correct) MAE excess**: mean absolute error of the thin vector's P(correct) on the model's test "
             "queries, minus that of the reference vector.",
             "- **accuracy error**: |mean predicted P(correct) - observed accuracy| on the test queries (median).", ""]
    if ENCODERS:
        lines += ["LOCUS encoders measured (the registries given with `--home`, trained by `registry train`'s "
                  "defaults with the `--max-seconds` cap noted):", ""] + [f"- {e}" for e in ENCODERS] + [""]
    for (dataset, vector) in dict.fromkeys((r["dataset"], r["vector"]) for r in rows):
        lines += [f"## {dataset}, {vector}", "",
                  "| n evaluations | moved / NN (median) | p90 | self top-1 | P(correct) MAE excess | accuracy error |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if (r["dataset"], r["vector"]) == (dataset, vector):
                lines.append(f"| {r['n']} | {r['moved_over_nn']:.2f} | {r['moved_over_nn_p90']:.2f} | "
                             f"{r['self_top1']:.3f} | {r['mae_excess']:+.4f} | {r['accuracy_error']:.4f} |")
        lines.append("")
    found = minimum_of(rows)
    lines += ["## The minimum", "",
              f"Smallest n of the grid at which every dataset's fingerprint has median moved / NN < 1: "
              f"**{found if found is not None else 'none of the grid'}**. The registry's documented minimum "
              f"(`registry.evidence.MIN_EVALS`) is **{MIN_EVALS}**: a model embedded from fewer evaluations is "
              "marked low evidence, warned about on add/refine/replace/import/embed, and ranked after the "
              "well-evidenced models in search, route (ranking and fallbacks) and clusters unless `--min-evals 0`.",
              "",
              "The rule reads the fingerprint, the vector that tells models apart. LOCUS rows, where measured, "
              "are beside it: its vectors share one dominant direction, so distinct models sit closer together "
              "(in cosine distance) than any thin vector lands from its own model, and its moved / NN stays far "
              "above 1 at every n; its P(correct) error, what routing reads, shrinks with n as the fingerprint's does.",
              ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="mmlu-pro,bfcl")
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--home", action="append", default=[], metavar="DATASET=DIR",
                        help="a trained registry of that dataset: measure its LOCUS embeddings too")
    parser.add_argument("--page", default=str(ROOT / "docs" / "results" / "evidence.md"))
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--from-json", default=None, metavar="JSON",
                        help="rewrite the page from a run's saved rows (the JSON beside the page) without measuring")
    args = parser.parse_args()
    if args.from_json:
        import json

        saved = json.loads(Path(args.from_json).read_text("utf-8"))
        ENCODERS.extend(saved["encoders"])
        Path(args.page).write_text(page(saved["rows"], saved["command"], saved["seconds"]), encoding="utf-8")
        print(f"rewrote {args.page} from {args.from_json}: minimum {minimum_of(saved['rows'])}")
        return
    from encoder.data import load_triple_dir, split_queries
    from encoder.training import evals_by_model

    homes = dict(h.split("=", 1) for h in args.home)
    started = time.perf_counter()
    rows: list[dict] = []
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        data = load_triple_dir(DATA / name, encoder=ENCODER)
        split = split_queries(data.n_queries, seed=0)
        is_test = np.zeros(data.n_queries, bool)
        is_test[split.test] = True
        per_model = evals_by_model(data, np.arange(len(data.scores)))
        own = [e[~is_test[data.query_index[e]]] for e in per_model]
        test = [e[is_test[data.query_index[e]]] for e in per_model]
        print(f"{name}: {data.n_models} models, {data.n_queries} queries, {len(data.scores)} evaluations", flush=True)
        rows += fingerprint_rows(name, data, split, own, test, args.draws)
        if name in homes:
            rows += locus_rows(name, homes[name], args.draws)
    seconds = time.perf_counter() - started
    print(f"\nsmallest n with median fingerprint moved / NN < 1 on every dataset: {minimum_of(rows)}")
    if not args.no_write:
        import json

        command = "python scripts/evidence_minimum.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        Path(args.page).write_text(page(rows, command.strip(), seconds), encoding="utf-8")
        Path(args.page).with_suffix(".json").write_text(json.dumps(
            {"command": command.strip(), "seconds": seconds, "encoders": ENCODERS, "rows": rows}, indent=1), "utf-8")
        print(f"wrote {args.page} and {Path(args.page).with_suffix('.json')}")


if __name__ == "__main__":
    main()
