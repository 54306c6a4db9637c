"""Write docs/results/onboarding.md (+ onboarding.json): the onboarding curve of `suggest-queries` on
MMLU-Pro and BFCL.

    .venv/bin/python scripts/report_onboarding.py [--folds 4] [--draws 5] [--seeds 0,1,2]

Protocol, per dataset (../shared/data/<name>, its precomputed all-mpnet-base-v2 query vectors):
- queries split 80/10/10 by seed (encoder.data.split_queries, the split `registry evaluate` uses);
- the models are dealt into `--folds` folds; each fold in turn is held out: the item table
  (encoder.fingerprint, the registry's defaults) is fitted on the other models' evaluations of the training
  and validation queries only, and those models are fingerprinted from all of theirs (the pool);
- each held-out model is onboarded from n = 16/32/64/128 of its evaluations on training queries, chosen
  - random: n uniformly random queries (`--draws` draws per model and n),
  - suggested: the first n picks of `registry.analytics.suggest.design_for` at the pool's prior (one batch,
    what `registry suggest-queries` returns for a model not yet added; its default criterion, representative),
  - adaptive: batches of 16, each picked at the fingerprint fitted from the answers so far (what
    `suggest-queries --answered` / POST /v1/suggest-queries returns for the next batch);
  - v-optimal and theta: the other criteria of `design_for` (the fall in the uncertainty of the predicted
    correctness, the registry's default until this page showed it losing to random; the information about
    the fingerprint itself, BALD), one batch at the pool's prior: not what the registry suggests;
  its fingerprint is `ItemTable.fingerprint` of those answers (the registry's add-model path);
- measured on the test queries: the held-out models' correctness accuracy (P >= 0.5 against the score)
  and the routing accuracy of the whole pool with the held-out models in it (each test query to the model
  of highest predicted P(correct), scored by its real score).
The predictor is the item table alone (the fingerprint's P(correct)); LOCUS is not refitted per fold.
With several `--seeds`, each seed is the whole protocol again (its own split, folds and draws); the page
shows the mean over seeds and judges the target on it, with each seed's gap beside it.
Every setting is the registry's default, the same for both datasets; but the default criterion and its
placement at the pool's mean were chosen from this script's output (seed 0, among the seeds it shows).

`--development` is the path for trying a criterion without reading the test queries: the same protocol
scored on the validation queries, with the validation and test queries both kept out of the item table's
fit and of the pool's fingerprints (no test score is read: a run gives the same numbers whatever they
are). It prints its curve and writes nothing unless `--out` is given; the page is only ever made from a
run on the test queries.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
sys.path.insert(0, str(ROOT))

from _datasets import DATASETS, ENCODER, dataset_dir  # noqa: E402

NS = (16, 32, 64, 128)
BATCH = 16  # the adaptive rows' batch size
STRATEGIES = ("random", "suggested", "adaptive", "v-optimal", "theta")
DESIGNED = ("suggested", "adaptive", "v-optimal", "theta")


def _fold_run(data, split, held, seed, draws, max_held=0, hidden=None):
    """Per strategy and n: the held-out models' thetas (one array per random draw), and the pool's.
    `hidden`: the queries kept out of the table's fit and the pool's fingerprints (default the test ones)."""
    from encoder.data import evals_by_model
    from encoder.fingerprint import fit_on_data
    from registry.analytics.suggest import design_for

    trained = [m for m in range(data.n_models) if m not in set(held)]
    hidden = split.test if hidden is None else hidden
    test_ids = {data.query_ids[i] for i in hidden}
    sub = data.select_models([data.models[m] for m in trained])
    table = fit_on_data(sub, exclude=test_ids)
    is_test = np.zeros(data.n_queries, bool)
    is_test[hidden] = True
    per_model = evals_by_model(data, np.arange(len(data.scores)))
    pool = np.zeros((data.n_models, table.rank + 1))
    for m in trained:
        e = per_model[m][~is_test[data.query_index[per_model[m]]]]
        f, b = table.item_params([data.query_ids[q] for q in data.query_index[e]])
        pool[m] = table.fingerprint(f, b, data.scores[e])
    pool_thetas = pool[trained]
    is_train = np.zeros(data.n_queries, bool)
    is_train[split.train] = True
    out = {s: {n: [] for n in NS} for s in STRATEGIES}  # strategy -> n -> list over draws of {model: theta}
    for s in STRATEGIES:
        for n in NS:
            out[s][n] = [dict() for _ in range(draws if s == "random" else 1)]
    asks = {"all": [], "suggested": [], "v-optimal": [], "theta": []}
    for m in held[:max_held or None]:
        e = per_model[m][is_train[data.query_index[per_model[m]]]]  # its evaluations on training queries
        e = e[[data.query_ids[q] in table._row for q in data.query_index[e]]]  # as the product: table rows only
        qids = [data.query_ids[q] for q in data.query_index[e]]
        f, b = table.item_params(qids)
        y = data.scores[e].astype(np.float64)
        fit = lambda rows: table.fingerprint(f[rows], b[rows], y[rows])  # noqa: E731
        order = design_for(table, f, b, max(NS), pool_thetas=pool_thetas).picks
        # what each one-batch design asks: the pool's mean P(correct) on its first 64 picks, against all
        p_pool = table.probabilities(pool_thetas.mean(0)[None, :], f, b)[0]
        asks["all"].append(float(p_pool.mean()))
        asks["suggested"].append(float(p_pool[order[:64]].mean()))
        for n in NS:
            out["suggested"][n][0][m] = fit(order[:n])
        for strategy, criterion in (("v-optimal", "prediction"), ("theta", "theta")):
            order = design_for(table, f, b, max(NS), pool_thetas=pool_thetas, criterion=criterion).picks
            asks[strategy].append(float(p_pool[order[:64]].mean()))
            for n in NS:
                out[strategy][n][0][m] = fit(order[:n])
        asked = np.zeros(0, np.int64)
        theta = None
        while len(asked) < max(NS):
            left = np.setdiff1d(np.arange(len(y)), asked)
            nxt = design_for(table, f[left], b[left], BATCH, pool_thetas=pool_thetas, theta=theta,
                             answered=(f[asked], b[asked])).picks
            asked = np.concatenate([asked, left[nxt]])
            theta = fit(asked)
            if len(asked) in NS:
                out["adaptive"][len(asked)][0][m] = theta
        rng = np.random.default_rng([seed, m])
        for r in range(draws):
            for n in NS:
                out["random"][n][r][m] = fit(rng.choice(len(y), size=min(n, len(y)), replace=False))
    return table, pool, out, asks


def run(name, *, folds, draws, seed, log, max_held=0, development=False):
    from encoder.data import load_triple_dir, split_queries
    from encoder.metrics import correctness_accuracy, routing_accuracy
    from registry.lab.evaluation import truth_on

    started = time.perf_counter()
    data = load_triple_dir(dataset_dir(name), encoder=ENCODER)
    split = split_queries(data.n_queries, seed=seed)
    # what is scored, and what the table and the pool never read: the test queries, or in development the
    # validation queries with the test queries kept out as well
    scored = split.val if development else split.test
    hidden = np.concatenate([split.val, split.test]) if development else split.test
    truth = truth_on(data, scored)  # (M, T)
    order = np.random.default_rng(seed).permutation(data.n_models)
    fold_of = {int(m): i % folds for i, m in enumerate(order)}
    results = {s: {n: {"correctness": [], "routing": []} for n in NS} for s in STRATEGIES}
    full = {"correctness": [], "routing": []}
    per_model = {s: {n: {} for n in NS} for s in STRATEGIES}
    scored_ids = [data.query_ids[i] for i in scored]
    asks: dict[str, list] = {}
    for k in range(folds):
        held = sorted(m for m, f in fold_of.items() if f == k)
        table, pool, out, fold_asks = _fold_run(data, split, held, seed, draws, max_held, hidden)
        held = held[:max_held or None]  # the pool keeps the others out of the table all the same
        for k_, v in fold_asks.items():
            asks.setdefault(k_, []).extend(v)
        f_scored, b_scored = table.item_params(scored_ids, data.query_vectors[scored])
        base = pool.copy()
        # the reference: each held-out model fingerprinted from all its training-query evaluations
        from encoder.data import evals_by_model

        is_train = np.zeros(data.n_queries, bool)
        is_train[split.train] = True
        everything = base.copy()
        per = evals_by_model(data, np.arange(len(data.scores)))
        for m in held:
            e = per[m][is_train[data.query_index[per[m]]]]
            f, b = table.item_params([data.query_ids[q] for q in data.query_index[e]])
            everything[m] = table.fingerprint(f, b, data.scores[e])
        pred = table.probabilities(everything, f_scored, b_scored)
        full["correctness"].append(correctness_accuracy(pred[held], truth[held]))
        full["routing"].append(routing_accuracy(pred, truth))
        for s in STRATEGIES:
            for n in NS:
                for draw in out[s][n]:
                    thetas = base.copy()
                    for m, theta in draw.items():
                        thetas[m] = theta
                    pred = table.probabilities(thetas, f_scored, b_scored)
                    results[s][n]["routing"].append(routing_accuracy(pred, truth))
                    for m in held:
                        acc = correctness_accuracy(pred[[m]], truth[[m]])
                        per_model[s][n].setdefault(data.models[m], []).append(acc)
        log(f"{name}: fold {k + 1}/{folds} ({len(held)} held out) done, {time.perf_counter() - started:.0f} s")
    # the routing columns' reference: every test query to the one model of best accuracy on its training-query
    # evaluations (ties shared), what a router that knows no query must beat
    from encoder.metrics import best_single_accuracy

    best_single = best_single_accuracy(truth_on(data, split.train), truth)
    summary = {"dataset": name, "models": data.n_models, "queries": data.n_queries, "best_single_routing": best_single,
               "train_queries": int(len(split.train)), "test_queries": int(len(scored)),
               "scored_on": "validation" if development else "test",
               "folds": folds, "draws": draws, "seed": seed, "seconds": round(time.perf_counter() - started, 1),
               "pool_p_correct_of_first_64": {k_: float(np.mean(v)) for k_, v in asks.items()},
               "full_train": {"correctness_accuracy": float(np.mean(full["correctness"])),
                              "routing_accuracy": float(np.mean(full["routing"]))}, "curve": {}}
    for s in STRATEGIES:
        summary["curve"][s] = {}
        for n in NS:
            models = per_model[s][n]
            per = np.array([np.mean(v) for v in models.values()])  # per model, mean over its draws
            by_draw = np.array([v for v in models.values()])  # (models, draws)
            summary["curve"][s][str(n)] = {
                "correctness_accuracy": float(per.mean()),
                "correctness_draw_sd": float(by_draw.mean(0).std(ddof=1)) if by_draw.shape[1] > 1 else None,
                "routing_accuracy": float(np.mean(results[s][n]["routing"])),
                "per_model": {k_: float(np.mean(v)) for k_, v in models.items()},
            }
    return summary


def combine(per_seed: list[dict]) -> dict:
    """One dataset's summary over seeds: every accuracy the mean over seeds (each seed a whole run of the
    protocol), the seeds' own values kept under "by_seed"."""
    if len(per_seed) == 1:
        return {**per_seed[0], "seeds": [per_seed[0]["seed"]]}
    first = per_seed[0]
    mean = lambda xs: float(np.mean(xs))  # noqa: E731
    out = {k: first[k] for k in ("dataset", "models", "queries", "train_queries", "test_queries", "folds", "draws")}
    out["scored_on"] = first.get("scored_on", "test")
    out["seeds"] = [s["seed"] for s in per_seed]
    out["seconds"] = round(sum(s["seconds"] for s in per_seed), 1)
    out["pool_p_correct_of_first_64"] = {k: mean([s["pool_p_correct_of_first_64"][k] for s in per_seed])
                                         for k in first["pool_p_correct_of_first_64"]}
    out["full_train"] = {m: mean([s["full_train"][m] for s in per_seed]) for m in first["full_train"]}
    if all("best_single_routing" in s for s in per_seed):
        out["best_single_routing"] = mean([s["best_single_routing"] for s in per_seed])
    out["curve"] = {}
    for strat, by_n in first["curve"].items():
        out["curve"][strat] = {}
        for n in by_n:
            cells = [s["curve"][strat][n] for s in per_seed]
            sds = [c["correctness_draw_sd"] for c in cells]
            out["curve"][strat][n] = {
                "correctness_accuracy": mean([c["correctness_accuracy"] for c in cells]),
                "correctness_draw_sd": None if any(v is None for v in sds) else mean(sds),
                "routing_accuracy": mean([c["routing_accuracy"] for c in cells]),
                # every model is held out once per seed (with --max-held, some seeds hold out others)
                "per_model": {k: mean([c["per_model"][k] for c in cells if k in c["per_model"]])
                              for k in sorted({k for c in cells for k in c["per_model"]})},
                "by_seed": {"correctness_accuracy": [c["correctness_accuracy"] for c in cells],
                            "routing_accuracy": [c["routing_accuracy"] for c in cells]},
            }
    return out


def verdict(summary, metric):
    """The smallest n at which each chosen strategy reaches random's accuracy at 128 (None: not at 128)."""
    target = summary["curve"]["random"]["128"][metric]
    out = {}
    for s in ("suggested", "adaptive"):
        reached = [n for n in NS if summary["curve"][s][str(n)][metric] >= target]
        out[s] = min(reached) if reached else None
    return target, out


def page(summaries, command) -> str:
    lines = ["# Adaptive onboarding: suggested queries against random ones", "",
             "Generated by (every number below is printed by it):", "", f"    {command}", ""]
    if any(s.get("scored_on") == "validation" for s in summaries):
        lines += ["**Development run (`--development`): scored on the validation queries, not the test queries; "
                  "\"test\" below reads \"validation\".**", ""]
    lines += ["What `registry suggest-queries` is for: a new model is evaluated first on the stored queries whose "
             "answers tell the most about it. Here models are held out of the pool (the item table is fitted "
             "without them), onboarded from n of their real evaluations on training queries chosen in one of the ways below, "
             "and scored on the test queries, which neither the table nor any onboarding ever sees:", "",
             "- **random**: n random training queries (several draws per model and n; the mean is shown, with the "
             "standard deviation over draws of the held-out models' mean correctness accuracy);",
             "- **suggested**: the first n of `suggest-queries` for a model not yet added (the pool's prior, one "
             "batch). Its default criterion is *representative*: kernel herding over the stored queries, each "
             "placed by its logit at the pool's mean fingerprint and that logit's spread over the pool, so that "
             "the picks stand for all of the stored queries, hard and easy alike, with no draw;",
             f"- **adaptive**: batches of {BATCH}, each suggested at the fingerprint fitted from the answers so far "
             "(`suggest-queries --answered`, POST /v1/suggest-queries);",
             "- **v-optimal** and **theta** (not what the registry suggests): one batch by the other criteria of "
             "`design_for`: the fall in the uncertainty of the predicted correctness over the stored queries "
             "(V-optimal, the registry's default before this page), and the information about the fingerprint "
             "itself (BALD).", "",
             "Why the designed criteria lose to random: they ask what the pool is unsure of, discriminating "
             "queries of middling difficulty (the \"asked\" line under each table: the pool's mean P(correct) "
             "on the first 64 picks; hard ones on BFCL, where most queries are easy, easier ones on MMLU-Pro, "
             "where most are hard). The factor model is not exact, so a fingerprint fitted on those extrapolates "
             "badly to the rest for the models unlike the pool: on BFCL a weak model's ability is set from hard "
             "queries and it is predicted to pass easy ones it fails (the \"worst\" line: the held-out models "
             "that lose most against random). Representative picks keep random's coverage of every kind of query "
             "without its draw-to-draw spread. The adaptive rows ask the same queries as the suggested ones: the registry "
             "places the queries as the pool sees them whatever the answers so far (placing them at each "
             "model's fitted fingerprint did worse on both datasets in development), so its batches go on with "
             "the one list.", "",
             "Predictor: the item table alone (the held-out model's fingerprint from its n answers, "
             "`ItemTable.fingerprint`, the add-model path; P(correct) from the table). LOCUS and the blended router "
             "are not refitted per fold, so these are not the router's absolute accuracies. "
             "Correctness accuracy: the held-out models' (P >= 0.5) against their real scores on the test queries, "
             "mean over models. Routing accuracy: the whole pool, held-out models included, each test query sent to "
             "the model of highest predicted P(correct), scored by its real score; mean over folds (and draws); the "
             "item table alone routes this pool less well than always sending every query to the best single model "
             "where that row shows it (it is the router's part, not the router), so the routing columns compare "
             "onboardings, nothing more. "
             "Every setting is the registry's default, the same on both datasets; but the default criterion "
             "(representative) and its placement at the pool's mean fingerprint were chosen from this script's own "
             "output with seed 0, which is among the seeds below: these curves are where the choice was made, not a "
             "fresh test of it.", ""]
    lines += ["**In short**: " + summary_line(summaries), ""]
    for s in summaries:
        lines += [f"## {s['dataset']}", "",
                  f"{s['models']} models, {s['queries']:,} queries ({s['train_queries']:,} training, "
                  f"{s['test_queries']:,} test); {s['folds']} folds, each model held out once; {s['draws']} random "
                  f"draws; {_seeds_text(s)}; {s['seconds']:.0f} s.", "",
                  "| n | random: correctness (sd) | suggested | adaptive | v-optimal | theta "
                  "| random: routing | suggested | adaptive | v-optimal | theta |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        c = s["curve"]
        for n in NS:
            r = c["random"][str(n)]
            sd = f" ({r['correctness_draw_sd']:.4f})" if r["correctness_draw_sd"] is not None else ""
            cells = [f"{r['correctness_accuracy']:.4f}{sd}"]
            cells += [f"{c[k][str(n)]['correctness_accuracy']:.4f}" for k in DESIGNED]
            cells += [f"{r['routing_accuracy']:.4f}"] + [f"{c[k][str(n)]['routing_accuracy']:.4f}" for k in DESIGNED]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        f = s["full_train"]
        lines += [f"| all training queries | {f['correctness_accuracy']:.4f} | | | | | {f['routing_accuracy']:.4f} | | | | |"]
        if "best_single_routing" in s:
            lines += [f"| always the best single model (by training accuracy) | | | | | | "
                      f"{s['best_single_routing']:.4f} | | | | |"]
        lines += [""]
        for metric, label in (("correctness_accuracy", "correctness"), ("routing_accuracy", "routing")):
            target, reached = verdict(s, metric)
            parts = []
            for strat in ("suggested", "adaptive"):
                at64 = c[strat]["64"][metric]
                n_hit = reached[strat]
                met = n_hit is not None and n_hit <= 64
                parts.append(f"{strat} {'**meets** it' if met else '**does not meet** it'} "
                             f"({'first reached at n = ' + str(n_hit) if n_hit else 'not reached by n = 128'}; "
                             f"at 64: {at64:.4f}, {at64 - target:+.4f})")
            lines.append(f"Target ({label}: random at 128 = {target:.4f}, to be reached with at most 64 chosen): "
                         + "; ".join(parts) + "." + _per_seed_gap(s, metric))
            lines.append("")
        asked = s.get("pool_p_correct_of_first_64")
        if asked:
            lines += ["Asked: the pool's mean P(correct) on the first 64 picks, over the held-out models: "
                      + ", ".join(f"{k} {asked[k]:.3f}" for k in ("suggested", "v-optimal", "theta") if k in asked)
                      + f"; on all their training queries {asked['all']:.3f}.", ""]
        worst = []
        for strat in ("v-optimal", "suggested"):
            rnd, got = c["random"]["64"]["per_model"], c[strat]["64"]["per_model"]
            losses = sorted((got[k] - rnd[k], k) for k in got)[:3]
            worst.append(f"{strat} " + ", ".join(f"{k} {d:+.3f}" for d, k in losses))
        lines += ["Worst: the three held-out models whose correctness accuracy at 64 falls most below random's "
                  "at 64: " + "; ".join(worst) + ".", ""]
        lines += [f"Noise: one test query is {1 / s['test_queries']:.4f} of a fold's routing accuracy; the random "
                  "rows' spread over draws is the (sd) column. Differences smaller than these are not evidence "
                  "either way.", ""]
    lines += ["Raw numbers, per held-out model included: [onboarding.json](onboarding.json).", ""]
    return "\n".join(lines)


def _seeds_text(s) -> str:
    seeds = s.get("seeds", [s.get("seed")])
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {', '.join(map(str, seeds))} (each a whole run: its own split, folds and draws; the mean over seeds shown)"


def _per_seed_gap(s, metric) -> str:
    """Suggested at 64 against random at 128, seed by seed (only with several seeds)."""
    got, ref = s["curve"]["suggested"]["64"].get("by_seed"), s["curve"]["random"]["128"].get("by_seed")
    if not got:
        return ""
    gaps = [a - b for a, b in zip(got[metric], ref[metric])]
    return (" Suggested at 64 against random at 128, seed by seed: "
            + ", ".join(f"{g:+.4f}" for g in gaps) + f" (sd {np.std(gaps, ddof=1):.4f}).")


def summary_line(summaries) -> str:
    """Whether the issue's target holds, per dataset and metric, for the registry's suggestions."""
    parts = []
    for s in summaries:
        for metric, label in (("correctness_accuracy", "correctness"), ("routing_accuracy", "routing")):
            target, reached = verdict(s, metric)
            best = max(("suggested", "adaptive"), key=lambda k: s["curve"][k]["64"][metric])
            gap = s["curve"][best]["64"][metric] - target
            first = min((n for n in reached.values() if n is not None), default=None)
            met = first is not None and first <= 64
            sd = s["curve"]["random"]["128"]["correctness_draw_sd"] if label == "correctness" else None
            noise = (f"; random at 128 varies by {sd:.4f} (sd) over draws" if sd is not None
                     else f"; one test query is {1 / s['test_queries']:.4f}")
            parts.append(f"{s['dataset']} {label}: {f'met at n = {first}' if met else 'not met'} (best at 64: {best}, "
                         f"{gap:+.4f} against random at 128{noise})")
    beats = []
    for s in summaries:
        c = s["curve"]
        wins = [n for n in NS if c["suggested"][str(n)]["correctness_accuracy"] > c["random"][str(n)]["correctness_accuracy"]]
        beats.append(f"{s['dataset']} at n = {', '.join(map(str, wins)) or 'none'}")

    return ("the target (random's accuracy at 128 queries reached with at most 64 suggested) is " + "; ".join(parts)
            + ". The suggested queries' correctness accuracy is above random's at the same n on " + "; ".join(beats)
            + ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--seeds", default="0", help="Comma-separated; each seed is a whole run (split, folds, draws).")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--out", type=Path, default=None, help="Where the page goes (default docs/results).")
    parser.add_argument("--max-held", type=int, default=0,
                        help="Onboard only the first N held-out models of each fold (0: all); for development.")
    parser.add_argument("--development", action="store_true",
                        help="Score on the validation queries, never reading the test ones; print only, unless --out.")
    parser.add_argument("--page-only", action="store_true",
                        help="Rewrite the page from the saved onboarding.json (its own command), running nothing.")
    args = parser.parse_args()
    out = args.out or OUT
    if args.development and args.out and args.out.resolve() == OUT.resolve():
        parser.error(f"--development scores the validation queries: its page does not go to {OUT} (the test run's)")
    if args.page_only:
        saved = json.loads((out / "onboarding.json").read_text())
        (out / "onboarding.md").write_text(page(saved["results"], saved["command"]))
        return
    command = ".venv/bin/python scripts/report_onboarding.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    seeds = [int(x) for x in args.seeds.split(",")]
    summaries = [combine([run(name, folds=args.folds, draws=args.draws, seed=seed, log=print, max_held=args.max_held,
                              development=args.development) for seed in seeds]) for name in args.datasets.split(",")]
    if not args.development or args.out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "onboarding.json").write_text(json.dumps({"command": command.strip(), "results": summaries}, indent=1))
        (out / "onboarding.md").write_text(page(summaries, command.strip()))
    for s in summaries:
        for metric in ("correctness_accuracy", "routing_accuracy"):
            print(s["dataset"], metric, " ".join(f"{st}@{n}={s['curve'][st][str(n)][metric]:.4f}"
                                                  for st in STRATEGIES for n in NS))


if __name__ == "__main__":
    main()
