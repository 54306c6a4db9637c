"""Precision and recall of the duplicate audit on real pools with planted copies of real models.

    .venv/bin/python scripts/bench_audit_real.py --home mmlu-pro=H1 --home bfcl=H2 [--pools mmlu-pro,bfcl,skewed]
        [--k 10] [--alpha 0.01] [--max-noise 0.12] [--markdown docs/results/audit.md]

Each --home is a registry holding one shared data set (../shared/data/mmlu-pro, or bfcl imported with
--id-prefix), with a trained encoder and every model embedded (`registry import`, `registry train
--max-seconds 240`, `registry embed --all`). The "skewed" pool is MMLU-Pro scored on its 3,500 hardest
questions only (lowest mean score over the pool; about 11% right answers), embedded with the MMLU-Pro
encoder from those evaluations alone.

Per pool:
1. The audit of the real pool as it is: each model's k nearest neighbours in embedding space, judged
   by the calibrated evidence (registry.analytics.audit_stats). Every flag here is a pair of distinct models.
2. For every real model, a planted copy, one variant at a time:
   - overlap-R: re-answers a random half of the queries, R of its answers changed as re-sampling
     would (a right answer turns wrong with probability c (1-p), a wrong one right with c p, p the
     model's own fitted probability, c set for the rate; so the changes are symmetric per query and
     fall where the model is unsure). c is the share of its answers the copy re-draws from its own
     probabilities; at c = 1 the copy is an independent draw of a model of the same abilities, which
     no test on answers tells from a distinct model of those abilities (the "re-drawn share c" column:
     weak models reach it at a few percent changed);
   - disjoint-R: the original keeps one random half of its evaluations, the copy re-answers the other
     half with R changed: they share no query;
   - quant-D: all queries, D points of accuracy lost (right answers turned wrong, weighted toward the
     model's hard queries by (1-p)^2) on top of 2% re-sampling noise.
   The copy is audited as `registry audit --model COPY` would: the pool calibration predates it, its
   candidates are its k nearest real models by embedding (the copy embedded by the registry's encoder
   from its own evaluations) and its k nearest in the behaviour index from its stored vector
   (`--candidates embedding`: the former only), Holm's step-down at alpha over them. A true flag: copy ~ original labelled "duplicate";
   a false flag: copy ~ any other model labelled "duplicate". Also counted: the copy ~ original pair
   labelled "same product line?", and whether the original is among the copy's 3 nearest neighbours
   by embedding. "decision recall" judges copy ~ original even when the embedding did not propose it
   (the evidence stage alone). The item table is fitted on the pool without the encoder's test queries,
   as `registry train` fits it. "search from the copy: original first": `registry search COPY` as it
   ranks by fingerprint: the behaviour index's 200 nearest by the probe queries the copy answered, a
   model whose fingerprint could have produced its answers first (registry.analytics.search.answer_keys).
   "original in k nearest": by the identity (fingerprint) distance (what `registry audit` proposed
   before 2026-12-05); by the behaviour index from the copy's stored vector (what it proposes now); and
   by the behaviour index from the probes the copy answered (what a search from the copy reads).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SKEWED_QUERIES = 3500
VARIANTS = [("overlap", 0.03), ("overlap", 0.05), ("overlap", 0.08), ("overlap", 0.10),
            ("disjoint", 0.03), ("disjoint", 0.05), ("disjoint", 0.08), ("disjoint", 0.10),
            ("quant", 0.02), ("quant", 0.04)]


def load(home: Path, skewed: bool):
    from registry import Registry
    from registry.catalog.dataset import load_eval_data
    from registry.catalog.embedding import active_encoder

    reg = Registry.open(home, create=False)
    active = active_encoder(reg.store)
    data = load_eval_data(reg.store, active.query_encoder)
    if skewed:
        dense = data.dense()
        keep = np.sort(np.argsort(np.nanmean(dense, 0), kind="stable")[:SKEWED_QUERIES])
        pos = np.full(data.n_queries, -1)
        pos[keep] = np.arange(len(keep))
        sel = pos[data.query_index] >= 0
        data = replace(data, query_ids=[data.query_ids[i] for i in keep], tasks=[data.tasks[i] for i in keep],
                       query_vectors=data.query_vectors[keep], model_index=data.model_index[sel],
                       query_index=pos[data.query_index[sel]], scores=data.scores[sel])
    return active, data


def embed(active, data, rows: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """(n, d) vectors of models given as (query index, score) rows over data's queries."""
    from encoder.inference import embed_models

    qi = np.concatenate([r[0] for r in rows]).astype(np.int64)
    y = np.concatenate([r[1] for r in rows]).astype(np.float32)
    mi = np.concatenate([np.full(len(r[0]), m, dtype=np.int64) for m, r in enumerate(rows)])
    fake = replace(data, models=[f"m{i}" for i in range(len(rows))], model_index=mi, query_index=qi, scores=y)
    return embed_models(active.locus, fake, np.arange(len(qi)))


def cosine_knn(z: np.ndarray, pool: np.ndarray, k: int, exclude: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    u = z / np.linalg.norm(z)
    v = pool / np.linalg.norm(pool, axis=1, keepdims=True)
    dist = 1.0 - v @ u
    if exclude is not None:
        dist[exclude] = np.inf
    order = np.argsort(dist, kind="stable")
    return order[:k], dist[order[:k]]


class Fingerprints:
    """Behaviour fingerprints over `data`'s queries with an item table fitted on the pool (without the
    encoder's test queries, as `registry train` fits it)."""

    def __init__(self, active, data) -> None:
        from encoder.fingerprint import fit_on_data
        from registry.analytics.heldout import test_queries

        test, _ = test_queries(active, data)
        self.table = fit_on_data(data, exclude={data.query_ids[i] for i in test})
        self.f, self.b = self.table.item_params(data.query_ids, data.query_vectors)
        self.tasks = np.asarray([t or "" for t in data.tasks], dtype=object)
        self.query_ids = data.query_ids

    def of(self, idx: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(theta, coverage) of a model given as (query index, score) rows."""
        return (self.table.fingerprint(self.f[idx], self.b[idx], y),
                self.table.coverage([set(self.tasks[idx].tolist())])[0])

    def behaviour(self, idx: np.ndarray, y: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the behaviour vector the registry stores for a model given as (query index, score) rows with
        fingerprint `theta`, (S,) bool the probe queries it has answers on)."""
        answers = self.table.probe_answers([self.query_ids[q] for q in idx], y)
        cover = self.table.coverage([set(self.tasks[idx].tolist())])
        return self.table.behaviour_vectors(theta[None], cover, answers[None])[0], ~np.isnan(answers)

    def index_distances(self, vector: np.ndarray, pool: np.ndarray, answered: np.ndarray | None = None) -> np.ndarray:
        """(N,) the behaviour index's distance from one stored vector to each of the pool's (N, S + T): over
        the probes it answered when `answered` is given (a search from the model), else over its tasks (a
        search from its stored vector alone)."""
        from registry.lab.geometry import behaviour_matrix

        return behaviour_matrix(self.table, vector[None], pool, None if answered is None else answered[None])[0]

    def distances(self, one, pool: list) -> tuple[np.ndarray, np.ndarray]:
        """(behaviour, identity) distances from one fingerprint to each of the pool's."""
        thetas = np.array([t for t, _ in pool])
        behaviour = self.table.behaviour_distances(one[0][None], thetas, coverage=one[1][None],
                                                   other_coverage=np.array([c for _, c in pool]))[0]
        v = self.table.identity_vectors(np.vstack([one[0][None], thetas]))
        return behaviour, np.linalg.norm(v[1:] - v[0], axis=1)


def plant(kind: str, level: float, idx: np.ndarray, y: np.ndarray, p: np.ndarray, rng):
    """(original rows, copy rows, c: the share of answers the copy re-drew) for one variant; p: the
    original's fitted P(right) on idx."""
    def resample(y, p, rate):
        change = y * (1 - p) + (1 - y) * p
        c = min(1.0, rate * len(y) / max(change.sum(), 1e-9))
        return np.where(rng.random(len(y)) < c * change, 1.0 - y, y), c

    if kind == "overlap":
        half = np.sort(rng.permutation(len(idx))[: len(idx) // 2])
        copy, c = resample(y[half], p[half], level)
        return (idx, y), (idx[half], copy), c
    if kind == "disjoint":
        perm = rng.permutation(len(idx))
        a, b = np.sort(perm[: len(idx) // 2]), np.sort(perm[len(idx) // 2 :])
        copy, c = resample(y[b], p[b], level)
        return (idx[a], y[a]), (idx[b], copy), c
    out, c = resample(y, p, 0.02)
    right = np.flatnonzero(out > 0.5)
    w = (1 - p[right]) ** 2
    lose = rng.choice(right, min(len(right), int(round(level * len(y)))), replace=False, p=w / w.sum())
    out = out.copy()
    out[lose] = 0.0
    return (idx, y), (idx, out), c


def run_pool(name: str, home: Path, *, k: int, alpha: float, max_noise: float, seed: int,
             fingerprint_candidates: bool = False) -> dict:
    from registry.analytics.audit_stats import (PoolEvals, _sigmoid, calibrate, evidence, holm_level, label,
                                                prefer_best_match)
    from registry.analytics.search import BEHAVIOUR_CANDIDATES, answer_keys, behaviour_order

    started = time.perf_counter()
    active, data = load(home, skewed=name == "skewed")
    dense = data.dense()
    _, task = np.unique(np.asarray(data.tasks, dtype=object).astype(str), return_inverse=True)
    pool = PoolEvals.from_dense(data.models, dense, task)
    names = pool.names
    z_real = embed(active, data, pool.rows)
    m = len(names)
    prints = Fingerprints(active, data)
    fp_real = [prints.of(*r) for r in pool.rows]
    bv_real = np.stack([prints.behaviour(*r, fp[0])[0] for r, fp in zip(pool.rows, fp_real)])

    # 1. the real pool's own audit: kNN candidates, Holm over all of them
    pairs = {}
    for i in range(m):
        nn, dist = cosine_knn(z_real[i], z_real, k, exclude=i)
        for j, d in zip(nn, dist):
            pairs.setdefault((min(i, j), max(i, j)), float(d))
        if fingerprint_candidates:  # the behaviour index's k nearest from its stored vector, as the audit asks
            d_i = prints.index_distances(bv_real[i], bv_real)
            d_i[i] = np.inf
            for j in np.argsort(d_i, kind="stable")[:k]:
                pairs.setdefault((min(i, j), max(i, j)), float(1.0 - z_real[i] @ z_real[j] / (
                    np.linalg.norm(z_real[i]) * np.linalg.norm(z_real[j]))))
    cal = calibrate(pool, neighbours=[(names[a], names[b]) for a, b in pairs])
    decided = {(a, b): evidence(cal, names[a], *pool.rows[a], names[b], *pool.rows[b], max_noise=max_noise)
               for a, b in pairs}
    level = holm_level([d.p_excess for d in decided.values() if d.p_excess is not None], alpha)
    for (a, b), d in decided.items():
        label(cal, d, names[a], names[b], level=level, alpha=alpha, max_noise=max_noise)
    prefer_best_match({(names[a], names[b]): d for (a, b), d in decided.items()})
    pool_flags = []
    for (a, b), d in decided.items():
        if d.label in ("duplicate", "same product line?"):
            pool_flags.append((d.label, names[a], names[b], d))

    # 2. planted copies
    rows = []
    for kind, lvl in VARIANTS:
        rng = np.random.default_rng(seed)
        originals, copies, shares = [], [], []
        for a in range(m):
            idx, y = pool.rows[a]
            p = _sigmoid(cal.theta[a][cal.task[idx]] - cal.beta[idx])
            orig, copy, c = plant(kind, lvl, idx, y, p, rng)
            shares.append(c)
            originals.append(orig)
            copies.append(copy)
        z_copy = embed(active, data, copies)
        z_orig = embed(active, data, originals) if kind == "disjoint" else z_real
        tp = related = false = top3 = search_first = fp_top10 = behaviour_top10 = answered_top10 = decision_tp = 0
        fp_copy = [prints.of(*c) for c in copies]
        changed = []
        for a in range(m):
            z_pool = z_real.copy()
            z_pool[a] = z_orig[a]
            nn, _ = cosine_knn(z_copy[a], z_pool, k)
            top3 += int(a in nn[:3])
            fp_pool = list(fp_real)
            bv_pool = bv_real.copy()
            if kind == "disjoint":  # the original holds only its half
                fp_pool[a] = prints.of(*originals[a])
                bv_pool[a] = prints.behaviour(*originals[a], fp_pool[a][0])[0]
            copy_vector, copy_answered = prints.behaviour(*copies[a], fp_copy[a][0])
            stored_d = prints.index_distances(copy_vector, bv_pool)
            behaviour_near = np.argsort(stored_d, kind="stable")[:k]
            if fingerprint_candidates:
                nn = np.asarray(list(nn) + [b for b in behaviour_near if b not in set(nn)])
            _, identity = prints.distances(fp_copy[a], fp_pool)
            fp_top10 += int(a in np.argsort(identity, kind="stable")[:k])
            # the behaviour index: from the copy's stored vector (the audit's candidates), and from the probes it answered
            behaviour_top10 += int(a in behaviour_near)
            searched = prints.index_distances(copy_vector, bv_pool, copy_answered)
            answered_top10 += int(a in np.argsort(searched, kind="stable")[:k])
            # `registry search COPY`: the index's nearest by the probes it answered, a model whose fingerprint
            # could have produced its answers first (registry.analytics.search.answer_keys)
            near = [int(b) for b in np.argsort(searched, kind="stable")[:BEHAVIOUR_CANDIDATES]]
            rows_b = [originals[a] if b == a else pool.rows[b] for b in near]
            keys = answer_keys(prints.table, np.array([fp_pool[b][0] for b in near]),
                               [data.query_ids[q] for q in copies[a][0]], copies[a][1],
                               query_tasks=list(prints.tasks[copies[a][0]]),
                               other_tasks=[set(prints.tasks[r[0]].tolist()) for r in rows_b],
                               index_distances=searched[near])
            search_first += int(behaviour_order(near, keys)[0] == a)
            copy_name = f"{names[a]} (copy)"
            rows_of = {b: (originals[a] if b == a else pool.rows[b]) for b in set(nn) | {a}}
            held = {names[a]: pool.rows[a]}  # the calibration holds the original's full answers
            ev = {b: evidence(cal, copy_name, *copies[a], names[b], *rows_of[b], max_noise=max_noise,
                              calibrated_rows=held if b == a else None) for b in rows_of}
            lvl_p = holm_level([ev[b].p_excess for b in nn if ev[b].p_excess is not None], alpha)
            for b in nn:
                label(cal, ev[b], copy_name, names[b], level=lvl_p, alpha=alpha, max_noise=max_noise)
            prefer_best_match({(copy_name, names[b]): ev[b] for b in nn})
            for b in nn:
                if ev[b].label == "duplicate":
                    if b == a:
                        tp += 1
                    else:
                        false += 1
                elif b == a and ev[b].label == "same product line?":
                    related += 1
            if a not in nn:  # the evidence stage alone, as if the embedding had proposed the original
                lvl_o = holm_level([ev[b].p_excess for b in list(nn[:-1]) + [a] if ev[b].p_excess is not None], alpha)
                label(cal, ev[a], copy_name, names[a], level=lvl_o, alpha=alpha, max_noise=max_noise)
            decision_tp += int(ev[a].label == "duplicate")
            common, ia, ib = np.intersect1d(originals[a][0], copies[a][0], return_indices=True)
            if len(common):
                changed.append(float(np.mean(originals[a][1][ia] != copies[a][1][ib])))
        rows.append({"variant": f"{kind}-{lvl:.0%}" if kind != "quant" else f"quant-{lvl * 100:.0f}pt",
                     "copies": m, "tp": tp, "related": related, "false": false, "top3": top3, "search_first": search_first,
                     "fp_top10": fp_top10, "behaviour_top10": behaviour_top10, "answered_top10": answered_top10,
                     "decision_tp": decision_tp, "changed": float(np.mean(changed)) if changed else None,
                     "resampled": float(np.mean(shares))})
        print(f"  {name} {rows[-1]['variant']}: recall {tp / m:.2f}, false {false}, top3 {top3 / m:.2f} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    return {"pool": name, "models": m, "queries": len(task), "accuracy": float(np.nanmean(dense)),
            "encoder": active.encoder_id, "candidates": len(pairs), "pool_flags": pool_flags, "rows": rows,
            "seconds": time.perf_counter() - started}


def render(results: list[dict], args) -> str:
    out = []
    for r in results:
        out.append(f"### {r['pool']}: {r['models']} models x {r['queries']} queries, mean accuracy "
                   f"{r['accuracy']:.3f}, encoder {r['encoder']}\n")
        dup = [f for f in r["pool_flags"] if f[0] == "duplicate"]
        rel = [f for f in r["pool_flags"] if f[0] != "duplicate"]
        out.append(f"Real pool, {r['candidates']} candidate pairs (k={args.k}): {len(dup)} distinct pairs labelled "
                   f"duplicate, {len(rel)} labelled same product line?\n")
        if r["pool_flags"]:
            out.append("| label | a | b | disagreement | expected (distinct) | kappa | null kappa | z |")
            out.append("|---|---|---|---:|---:|---:|---:|---:|")
            for lab, a, b, d in sorted(r["pool_flags"], key=lambda f: (f[0], -(f[3].z or 0))):
                s = d.stats
                if s.kappa is None:
                    out.append(f"| {lab} | {a} | {b} | no shared queries | | | | |")
                    continue
                out.append(f"| {lab} | {a} | {b} | {s.disagreement:.3f} | {s.expected_disagreement:.3f} | "
                           f"{s.kappa:.3f} | {d.null_kappa_median:.3f} +- {d.null_kappa_scale:.3f} | {d.z:.1f} |")
            out.append("")
        out.append("| copy variant | copies | changed (shared) | re-drawn share c | flagged duplicate (recall) | labelled "
                   "same product line? | flagged either way (recall) | false duplicate flags (copy ~ other) | precision "
                   "| precision incl. pool's distinct duplicates | decision recall (original forced in) | original in top 3 | "
                   f"search from the copy: original first | original in {args.k} nearest: identity | behaviour index | "
                   "behaviour index, answered probes |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for row in r["rows"]:
            tp, false = row["tp"], row["false"]
            prec = tp / (tp + false) if tp + false else float("nan")
            prec_pool = tp / (tp + false + len(dup)) if tp + false + len(dup) else float("nan")
            changed = f"{row['changed']:.3f}" if row["changed"] is not None else "-"
            either = tp + row["related"]
            out.append(f"| {row['variant']} | {row['copies']} | {changed} | {row['resampled']:.2f} | "
                       f"{tp} ({tp / row['copies']:.2f}) | {row['related']} | {either} ({either / row['copies']:.2f}) | "
                       f"{false} | {prec:.2f} | {prec_pool:.2f} | "
                       f"{row['decision_tp'] / row['copies']:.2f} | {row['top3'] / row['copies']:.2f} | "
                       f"{row['search_first'] / row['copies']:.2f} | {row['fp_top10'] / row['copies']:.2f} | "
                       f"{row['behaviour_top10'] / row['copies']:.2f} | {row['answered_top10'] / row['copies']:.2f} |")
        out.append(f"\n({r['seconds']:.0f} s)\n")
    return "\n".join(out)


def main() -> None:
    from registry.analytics.audit_stats import RELATIVES_MARGIN_SE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", action="append", default=[], help="POOL=HOME (mmlu-pro, bfcl); skewed uses mmlu-pro's")
    parser.add_argument("--pools", default="mmlu-pro,bfcl,skewed")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--max-noise", type=float, default=0.12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--candidates", choices=["embedding", "both"], default="both",
                        help="audit candidates: the k nearest by embedding and in the behaviour index (as `registry "
                             "audit` proposes them), or by embedding only (as it did before fingerprints)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--markdown", type=Path, default=None, help="Also write the tables to this results page.")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    homes = dict(h.split("=", 1) for h in args.home)
    results = []
    for name in args.pools.split(","):
        home = homes.get("mmlu-pro" if name == "skewed" else name)
        if home is None:
            sys.exit(f"--home {name}=HOME is needed for pool {name}")
        results.append(run_pool(name, Path(home), k=args.k, alpha=args.alpha, max_noise=args.max_noise,
                                seed=args.seed, fingerprint_candidates=args.candidates == "both"))
        print(render(results[-1:], args), flush=True)
    if args.markdown:
        command = " ".join(["scripts/bench_audit_real.py", *sys.argv[1:]])
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(PAGE.format(
            command=command, alpha=args.alpha, max_noise=args.max_noise, k=args.k, margin=RELATIVES_MARGIN_SE,
            by="by embedding and in the behaviour index" if args.candidates == "both" else "by embedding")
                                 + render(results, args))


PAGE = """# Duplicate audit on real pools with planted copies

Generated by `.venv/bin/python {command}` (do not edit by hand). What the columns mean is in the
script's docstring; in short: every real model gets a planted copy per variant, audited as
`registry audit --model COPY` would (its k={k} nearest real models {by}, Holm at
{alpha} over them, max noise {max_noise:.0%}); a flag counts when copy ~ original is labelled
"duplicate"; a false flag is copy ~ another model labelled "duplicate". "precision incl. pool's
distinct duplicates" also counts, once per variant, every pair of distinct real models the full
audit of the pool labels duplicate. "changed (shared)" is the measured share of the copy's answers
that differ from the original's on the queries both hold (disjoint copies hold none). "flagged
either way" counts copy ~ original labelled "duplicate" or "same product line?" (what
`registry audit --fail-on-related` fails on).

A symmetric pair is labelled "duplicate" only when it agrees more than the pool's closest pair of
provably distinct models (kappa above every pair, involving neither, whose disagreements lean one
way within tasks, by {margin:g} of its standard errors); else "same product line?". Where a pool holds snapshots that agree as closely as
a re-served copy (BFCL's gpt-4 and gemini snapshots), copies with more than a few percent of changed
answers are therefore flagged as relatives, not as duplicates: precision of the "duplicate" label
is bought with its recall there.

"""


if __name__ == "__main__":
    main()
