"""The geometry scorecard (issue 16): does the embedding carry identity and behaviour? Per dataset and joint.

    nice -n 10 .venv/bin/python scripts/scorecard.py [--parts abc] [--setups mmlu-pro,bfcl,joint]
        [--work DIR] [--registry SETUP=HOME ...] [--seed 0] [--max-seconds S] [--no-write]

Setups: `mmlu-pro` and `bfcl` (a registry holding one dataset) and `joint` (both, one encoder trained
on the union of 103 models). Each is the registry at `--registry SETUP=HOME` if given (any trained
registry: its active encoder and stored vectors are what is measured), else `<work>/<setup>`, built
when missing with `registry train`'s defaults (seed 0, 1024 evaluations per model, epochs and patience
in epochs: the same encoder on a busy machine; `--max-seconds` adds a wall-clock cap only when asked)
from ../shared/data with the precomputed query vectors (scripts/_datasets.py). Views: the models of
one dataset (`--where 'dataset == X'`) and, in the joint registry, all of them.

Parts (letters for --parts):
  a  self-retrieval at 512 evaluations (top-1/top-3, 3 draws) and disjoint-pair mutual neighbours
  b  behavioural neighbours, family purity@3 and nearest-neighbour family (embedding vs raw), BFCL
     base_model siblings, adjusted Rand of the clusters against family
  c  distance vs disagreement on held-out test queries (Pearson/Spearman/Kendall, NN agreement)
  e  portfolio routing (k-medoids, k-center) vs random subsets at k = 3, 5, 10 (per view)
  f  onboarding: ~10% of a dataset's models held out of training, then embedded from 64/128/1024
     evaluations (`--seed`)
  i  the index's default likeness vector: the behaviour column as stored in the models table, searched
     through its FAISS index (self-retrieval, NN among the 3 behaviourally nearest, clusters vs family
     against raw disagreement), with the fingerprint rows of (a)-(c) and the held-out folds; no LOCUS
     training or copies, so it can be regenerated alone
Parts a-c and e read the trained registries; f trains (one LOCUS run per dataset). Routing against the
baselines is measured in one place, docs/results/router.md (scripts/bench_router.py): the page's (d)
summarises its stored results (docs/results/router.json) rather than training a second protocol.

To measure another trainer: build fresh registries (`--work NEW_DIR`, trained with the defaults of the
checked-out code) or point `--registry` at trained ones; `--results`/`--page` write elsewhere so the
baseline page stays for comparison. `--max-seconds` is wall time: with it, a loaded machine trains a
different encoder (note the LOCUS best epoch printed with each run).

Results accumulate in docs/results/scorecard.json (each entry with the command that produced it) and
the page docs/results/scorecard.md is rewritten from all of it, so parts can be run one at a time.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

OUT = ROOT / "docs" / "results"
SETUPS = {"mmlu-pro": ("mmlu-pro",), "bfcl": ("bfcl",), "joint": ("mmlu-pro", "bfcl")}
LABEL = {"mmlu-pro": "MMLU-Pro", "bfcl": "BFCL", "all": "all 103"}
K_VALUES = (3, 5, 10)
ONBOARD = (64, 128, 1024)
EVAL_POOL = {"mmlu-pro": "dataset == mmlu-pro and access == open", "bfcl": "dataset == bfcl"}
TARGETS = {"self_top1": 0.90, "behavioural_nn": 0.70, "spearman": 0.90}


def views_of(setup: str) -> list[tuple[str, str | None]]:
    """(view key, where) pairs measured in one setup."""
    if setup == "joint":
        return [("mmlu-pro", "dataset == mmlu-pro"), ("bfcl", "dataset == bfcl"), ("all", None)]
    return [(setup, f"dataset == {setup}")]


def column(setup: str, view: str) -> str:
    if setup == "joint":
        return f"joint: {LABEL[view]}"
    return f"{LABEL[view]} alone"


# ----------------------------------------------------------------------------- parts
def part_abc(reg, setup: str, args) -> dict:
    from registry.lab.geometry import view_card

    from registry.analytics.fingerprints import fit_item_table, load_item_table

    if load_item_table(reg.store) is None:  # an encoder trained before item tables: fit one (seconds)
        started = time.perf_counter()
        table = fit_item_table(reg.store)
        print(f"  item table {table.table_id} fitted in {time.perf_counter() - started:.0f} s", flush=True)
    out = {}
    for view, where in views_of(setup):
        started = time.perf_counter()
        card = view_card(reg.store, where=where, copy_evals=512, draws=3, seed=0, label=column(setup, view),
                         holdout_folds=args.holdout_folds)
        out[view] = card.model_dump()
        out[view]["seconds"] = round(time.perf_counter() - started, 1)
        print(f"  {card.view}: (a-c) in {out[view]['seconds']} s", flush=True)
    return out


def part_e(reg, setup: str, args) -> dict:
    from registry.analytics.portfolio import PortfolioSpace

    out = {}
    for view, where in views_of(setup):
        space = PortfolioSpace.load(reg.store, where=where)
        rows = {}
        for k in K_VALUES:
            if k >= space.size:
                continue
            for method in ("kmedoids", "kcenter"):
                r = space.run(method, k=k, seed=0, random_draws=200).model_dump()
                rows[f"{method}@{k}"] = {key: r[key] for key in (
                    "models", "routing_accuracy", "full_pool_routing_accuracy", "random_routing_accuracy_mean",
                    "random_routing_accuracy_sd", "random_below_fraction", "coverage")}
                rows[f"{method}@{k}"]["test_queries"] = r["n_test_queries"]
        out[view] = rows
        print(f"  {column(setup, view)}: (e) done", flush=True)
    return out


def part_f(reg, setup: str, args) -> dict:
    from registry.catalog.dataset import load_eval_data
    from registry.lab.evaluation import run_evaluation

    out = {}
    for view, _ in views_of(setup):
        if view not in EVAL_POOL:
            continue
        names = reg.select_models(f"dataset == {view}")
        data = load_eval_data(reg.store, reg.query_encoder, models=names)
        holdout = max(2, round(0.1 * len(names)))
        started = time.perf_counter()
        r = run_evaluation(data, evals_per_model=1024, seed=args.seed, holdout_models=holdout,
                           onboard_evals=ONBOARD, baselines=(), train_config=_train_config(args))
        out[view] = {"held_out": r["held_out"], "onboarding": r["onboarding"], "models": len(names),
                     "locus_routing_trained_pool": r["routing_accuracy"]["locus"]}
        print(f"  {LABEL[view]}: (f) in {time.perf_counter() - started:.0f} s", flush=True)
    return out


def _train_config(args):
    from encoder.training import TrainConfig

    return TrainConfig() if args.max_seconds is None else TrainConfig(max_seconds=args.max_seconds)


def _training(entry: dict) -> str:
    """How the entry's LOCUS was trained, for the page."""
    cap = entry.get("max_seconds")
    return "trained in epochs (no wall-clock cap)" if cap is None else f"capped at {cap:g} s of wall time"


def part_i(reg, setup: str, args) -> dict:
    """The fingerprint rows alone, with the index's: the stored fingerprint column searched through its
    FAISS index (the default likeness vector), also for models held out of the item table's fit."""
    from registry.lab.geometry import fingerprint_view_card

    out = {}
    for view, where in views_of(setup):
        started = time.perf_counter()
        card = fingerprint_view_card(reg.store, where=where, copy_evals=512, draws=3, seed=0,
                                     holdout_folds=args.holdout_folds)
        out[view] = {"view": column(setup, view), "fingerprint": card.model_dump() if card else None,
                     "seconds": round(time.perf_counter() - started, 1)}
        print(f"  {column(setup, view)}: (i) in {out[view]['seconds']} s", flush=True)
    return out


PARTS = {"abc": part_abc, "e": part_e, "f": part_f, "i": part_i}


# ----------------------------------------------------------------------------- the page
def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f}%"


def _num(x, digits=3) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def geometry_table(results: dict) -> list[str]:
    cols = [(setup, view, {**results[setup]["abc"]["data"][view], "max_seconds": results[setup]["abc"].get("max_seconds")})
            for setup in SETUPS if "abc" in results.get(setup, {}) for view, _ in views_of(setup)
            if view in results[setup]["abc"]["data"]]
    if not cols:
        return []
    head = "| metric | " + " | ".join(c[2]["view"] for c in cols) + " | target / paper |"
    lines = [head, "|---|" + "---:|" * len(cols) + "---|"]

    def row(name, fn, ref=""):
        lines.append(f"| {name} | " + " | ".join(fn(c) for _, _, c in cols) + f" | {ref} |")

    row("models / test queries", lambda c: f"{c['models']} / {c['test_queries']}")
    row("encoder", lambda c: f"`{c['encoder_id'][:8]}`" + ("" if c["max_seconds"] is None else f" ({c['max_seconds']:g} s cap)"))
    row("PC variance share (1st, 2nd, 3rd)", lambda c: ", ".join(f"{100 * v:.1f}" for v in c["pc_variance"][:3]))
    row("**(a)** self-retrieval top-1 @512", lambda c: _pct(c["self_top1"]), ">= 90%")
    row("(a) self-retrieval top-3 @512", lambda c: _pct(c["self_top3"]))
    row("(a) self-retrieval median rank", lambda c: f"{c['self_median_rank']:g}")
    row("(a) disjoint 512+512 mutual nearest", lambda c: _pct(c["mutual_pairs"]) + f" of {c['mutual_pair_models']}")
    row("**(b)** NN among 3 behaviourally nearest", lambda c: f"{_pct(c['behavioural_nn'])} ({c['behavioural_nn_hits']}/{c['models']})", ">= 70%")
    row("(b) NN shares family: embedding / raw", lambda c: f"{c['family_nn_embedding']} / {c['family_nn_raw']} of {c['family_models']}", "embedding >= raw")
    row("(b) family purity@3: embedding / raw", lambda c: f"{_num(c['family_purity_embedding'], 2)} / {_num(c['family_purity_raw'], 2)}", "embedding >= raw")
    row("(b) NN is base_model sibling: embedding / raw",
        lambda c: (f"{c['sibling_embedding'][0]} / {c['sibling_raw'][0]} of {c['sibling_raw'][1]}"
                   if c.get("sibling_embedding") and c["sibling_raw"][1] else "-"))
    row("(b) ARI vs family, silhouette k: embedding / raw",
        lambda c: f"{_num(c['ari_embedding']['ari'], 2)} (k={int(c['ari_embedding']['k'])}) / {_num(c['ari_raw']['ari'], 2)} (k={int(c['ari_raw']['k'])})")
    row("(b) ARI vs family, k = #families: embedding / raw",
        lambda c: f"{_num(c['ari_embedding']['ari_at_label_count'], 2)} / {_num(c['ari_raw']['ari_at_label_count'], 2)}")
    row("(b) NN from the model's own dataset", lambda c: "-" if c.get("same_dataset_nn") is None
        else f"{c['same_dataset_nn']} of {c['models']}")
    row("**(c)** Pearson, cosine", lambda c: _num(c["cosine"]["pearson"]), "0.845")
    row("(c) Spearman, cosine", lambda c: _num(c["cosine"]["spearman"]), ">= 0.9 (paper 0.886)")
    row("(c) Kendall, cosine", lambda c: _num(c["cosine"]["kendall"]), "0.714")
    row("(c) Pearson / Spearman / Kendall, Euclidean",
        lambda c: f"{_num(c['euclidean']['pearson'], 2)} / {_num(c['euclidean']['spearman'], 2)} / {_num(c['euclidean']['kendall'], 2)}",
        "0.887 / 0.876 / 0.702")
    row("(c) model pairs with common test queries", lambda c: str(int(c["cosine"]["pairs"])))
    row("(c) NN agreement (raw best possible)", lambda c: f"{_pct(c['nn_agreement'])} ({_pct(c['nn_agreement_raw_best'])})", "79%")

    def fp(fn):
        return lambda c: "-" if not c.get("fingerprint") else fn(c["fingerprint"])

    lines.append("| **behaviour fingerprint** (item table, rank r) | " + " | ".join(
        fp(lambda f: f"`{f['table_id'][:8]}`, r={f['rank']}")(c) for _, _, c in cols) + " |  |")
    row("**(a)** fingerprint self-retrieval top-1 @512", fp(lambda f: _pct(f["self_top1"])), ">= 90%")
    row("(a) fingerprint self-retrieval top-3 / median rank", fp(lambda f: f"{_pct(f['self_top3'])} / {f['self_median_rank']:g}"))
    row("(a) fingerprint disjoint 512+512 mutual nearest", fp(lambda f: _pct(f["mutual_pairs"])))
    row("**(b)** fingerprint NN among 3 behaviourally nearest",
        lambda c: "-" if not c.get("fingerprint") else
        f"{_pct(c['fingerprint']['behavioural_nn'])} ({c['fingerprint']['behavioural_nn_hits']}/{c['models']})", ">= 70%")
    row("(b) fingerprint NN shares family / raw", lambda c: "-" if not c.get("fingerprint") else
        f"{c['fingerprint']['family_nn']} / {c['family_nn_raw']} of {c['family_models']}", ">= raw")
    row("(b) fingerprint family purity@3 / raw", lambda c: "-" if not c.get("fingerprint") else
        f"{_num(c['fingerprint']['family_purity'], 2)} / {_num(c['family_purity_raw'], 2)}", ">= raw")
    row("(b) fingerprint NN is base_model sibling / raw", lambda c: "-" if not (c.get("fingerprint") and c["fingerprint"]["sibling"]
        and c["sibling_raw"][1]) else f"{c['fingerprint']['sibling'][0]} / {c['sibling_raw'][0]} of {c['sibling_raw'][1]}")
    row("(b) fingerprint ARI vs family, silhouette k / k = #families",
        fp(lambda f: f"{_num(f['ari']['ari'], 2)} (k={int(f['ari']['k'])}) / {_num(f['ari'].get('ari_at_label_count'), 2)}"))
    row("(b) fingerprint NN from the model's own dataset", lambda c: "-" if not c.get("fingerprint") or
        c["fingerprint"].get("same_dataset_nn") is None else f"{c['fingerprint']['same_dataset_nn']} of {c['models']}")
    row("**(c)** fingerprint Pearson / Spearman / Kendall",
        fp(lambda f: f"{_num(f['correlations']['pearson'])} / {_num(f['correlations']['spearman'])} / {_num(f['correlations']['kendall'])}"),
        "Spearman >= 0.9")
    row("(c) fingerprint NN agreement", fp(lambda f: _pct(f["nn_agreement"])), "79%")
    row("held out of the item table's fit: self-retrieval top-1 / top-3",
        fp(lambda f: "-" if not f.get("held_out") else f"{_pct(f['held_out']['self_top1'])} / {_pct(f['held_out']['self_top3'])}"))
    row("held out: NN among 3 behaviourally nearest", lambda c: "-" if not (c.get("fingerprint") and c["fingerprint"].get("held_out"))
        else f"{_pct(c['fingerprint']['held_out']['behavioural_nn'])} ({int(c['fingerprint']['held_out']['behavioural_nn_hits'])}/{c['models']}, "
             f"{int(c['fingerprint']['held_out']['folds'])} folds)")
    return lines


def portfolio_table(results: dict) -> list[str]:
    lines = []
    for setup in SETUPS:
        part = results.get(setup, {}).get("e")
        if not part:
            continue
        for view, rows in part["data"].items():
            lines += [f"**{column(setup, view)}** (encoder `{part['encoder_id'][:8]}`; routing accuracy on the "
                      "held-out test queries; random: mean +- sd of 200 random subsets of the same size)", "",
                      "| k | k-medoids | k-center | random | k-medoids beats random mean | full pool |",
                      "|---:|---:|---:|---:|:---:|---:|"]
            for k in K_VALUES:
                med, cen = rows.get(f"kmedoids@{k}"), rows.get(f"kcenter@{k}")
                if not med:
                    continue
                lines.append(f"| {k} | {_num(med['routing_accuracy'])} | {_num(cen['routing_accuracy'])} | "
                             f"{_num(med['random_routing_accuracy_mean'])} +- {_num(med['random_routing_accuracy_sd'])} | "
                             f"{'yes' if med['routing_accuracy'] > med['random_routing_accuracy_mean'] else 'no'} | "
                             f"{_num(med['full_pool_routing_accuracy'])} |")
            lines.append("")
    return lines


def routing_table(router: dict | None) -> list[str]:
    """Part (d): the router page's stored summary (docs/results/router.json), one line per setting."""
    if not router or not router.get("summary"):
        return []
    lines = [f"From [router.md](router.md) ({router['date']}; its command is on that page, and its stored results, "
             "docs/results/router.json, are read here, not measured again). The registry's router (LOCUS, the item "
             "table and kNN blended on validation queries) against the best of kNN, IRT-Net, EmbedLLM-MF and the "
             "best single model, mean over seeds on the test queries; the router page gives every method, the "
             "paired tests and what changed since it was scored" + (" (its note)" if router.get("note") else "") + ".",
             "", "| setting | seeds | registry routing | best baseline | its routing | registry correctness | best "
             "baseline correctness | ahead on both |", "|---|---|---:|---|---:|---:|---:|:---:|"]
    for block in router["summary"].values():
        rows = block["methods"]
        corr = [m for m in ("embedllm_mf", "irt_net", "knn") if rows.get(m, {}).get("correctness") is not None]
        best_corr = max(corr, key=lambda m: rows[m]["correctness"])
        ahead = block["routing_ahead"] and block["correctness_ahead"]
        lines.append(f"| {block['dataset']} {block['evals_per_model']} | {', '.join(map(str, block['seeds']))} | "
                     f"{rows['registry']['routing']:.4f} | {block['best_baseline']} | "
                     f"{rows[block['best_baseline']]['routing']:.4f} | {rows['registry']['correctness']:.4f} | "
                     f"{rows[best_corr]['correctness']:.4f} ({best_corr}) | {'yes' if ahead else '**no**'} |")
    return lines


def onboarding_table(results: dict) -> list[str]:
    lines = []
    for setup in SETUPS:
        part = results.get(setup, {}).get("f")
        if not part:
            continue
        for view, block in part["data"].items():
            lines += [f"**{LABEL[view]}**: {len(block['held_out'])} of {block['models']} models never seen in "
                      f"training ({', '.join(block['held_out'])}); LOCUS {_training(part)}", "",
                      "| evaluations | held-out models' correctness accuracy | pool routing with them |",
                      "|---:|---:|---:|"]
            for n, row in block["onboarding"].items():
                lines.append(f"| {n} | {row['correctness_accuracy']:.4f} | {row['routing_accuracy']:.4f} |")
            lines.append("")
    return lines


def index_table(results: dict) -> list[str]:
    """Part (i): the index's default likeness vector (the stored behaviour column through FAISS)."""
    cols = [(setup, view, results[setup]["i"]["data"][view])
            for setup in SETUPS if "i" in results.get(setup, {}) for view, _ in views_of(setup)
            if view in results[setup]["i"]["data"] and results[setup]["i"]["data"][view].get("fingerprint")]
    cols = [(s, v, c) for s, v, c in cols if c["fingerprint"].get("index")]
    if not cols:
        return []
    lines = ["| metric | " + " | ".join(c["view"] for _, _, c in cols) + " | target |",
             "|---|" + "---:|" * len(cols) + "---|"]

    def row(name, fn, ref=""):
        lines.append(f"| {name} | " + " | ".join(fn(c["fingerprint"], c["fingerprint"]["index"]) for _, _, c in cols)
                     + f" | {ref} |")

    def ari(a):
        return f"{_num(a['ari'], 3)} (k={a['k']}) / {_num(a['ari_at_label_count'], 3)}" if a else "-"

    row("item table (rank r) / models in the index", lambda f, i: f"`{i['table_id'][:8]}`, r={f['rank']} / {i['models']} of {i['of']}")
    row("**index** self-retrieval top-1 @512", lambda f, i: _pct(i["self_top1"]), ">= 90%")
    row("index self-retrieval top-3 @512", lambda f, i: _pct(i["self_top3"]))
    row("search from a copy (512 of a model's answers, searched as `registry search` ranks): original first",
        lambda f, i: _pct(i["search_copy_top1"]) if "search_copy_top1" in i else "-", ">= 90%")
    row("**index** NN among 3 behaviourally nearest", lambda f, i: f"{_pct(i['behavioural_nn'])} "
        f"({i['behavioural_nn_hits']}/{i['models']})", ">= 70%")
    row("**search from a model** (`registry search NAME`: the index's nearest by the probes the model answered, "
        "one that could have produced its answers first): NN among 3", lambda f, i: f"{_pct(i['search_behavioural_nn'])} ({i['search_behavioural_nn_hits']}/{i['models']})"
        if "search_behavioural_nn" in i else "-", ">= 70%")
    row("held out of the item table's fit: self-retrieval top-1",
        lambda f, i: _pct(f["held_out"]["self_top1"]) if f.get("held_out") else "-", ">= 90%")
    row("held out: index NN among 3 behaviourally nearest",
        lambda f, i: (f"{_pct(f['held_out']['index_behavioural_nn'])} ({int(f['held_out']['index_behavioural_nn_hits'])}"
                      f"/{i['models']}, {int(f['held_out']['folds'])} folds)") if f.get("held_out") and "index_behavioural_nn" in f["held_out"]
        else "-", ">= 70%")
    row("held out: **search** NN among 3 behaviourally nearest",
        lambda f, i: (f"{_pct(f['held_out']['search_behavioural_nn'])} ({int(f['held_out']['search_behavioural_nn_hits'])}"
                      f"/{i['models']})") if f.get("held_out") and "search_behavioural_nn" in f["held_out"] else "-",
        ">= 70%")
    row("held out: NN by behaviour distance over all models",
        lambda f, i: (f"{_pct(f['held_out']['behavioural_nn'])} ({int(f['held_out']['behavioural_nn_hits'])}/{i['models']})"
                      if f.get("held_out") else "-"))
    row("on test queries the vectors never saw (built without them): NN among 3 least disagreeing on them, "
        "behaviour index / identity / raw disagreement on the other queries",
        lambda f, i: (f"{_pct(i['unseen']['behaviour'])} / {_pct(i['unseen']['identity'])} / {_pct(i['unseen']['raw'])}"
                      if "unseen" in i else "-"))
    row("clusters vs family, ARI silhouette k / k = #families: **`registry clusters`** (answer distances, "
        "its default linkage)", lambda f, i: ari(i["ari"]), ">= raw")
    row("clusters vs family, ARI: raw disagreement (the same linkage)", lambda f, i: ari(i["ari_raw"]))
    row("the same two with average linkage (the default before): answer distances / raw disagreement, k = #families",
        lambda f, i: (f"{_num(i['ari_average']['ari_at_label_count'], 3)} / {_num(i['ari_raw_average']['ari_at_label_count'], 3)}"
                      if "ari_average" in i else "-"))
    row("fingerprint by behaviour distance over all models: NN among 3",
        lambda f, i: f"{_pct(f['behavioural_nn'])} ({f['behavioural_nn_hits']})")
    return lines


def index_targets(results: dict) -> list[str]:
    lines = []
    for setup in SETUPS:
        part = results.get(setup, {}).get("i")
        if not part:
            continue
        for view, c in part["data"].items():
            f = c.get("fingerprint") or {}
            i = f.get("index")
            if not i:
                lines.append(f"- {c['view']}: no fingerprint index")
                continue
            held = f.get("held_out") or {}
            checks = [("index self-retrieval top-1 >= 90%", i["self_top1"] >= TARGETS["self_top1"]),
                      ("index NN among 3 behaviourally nearest >= 70%", i["behavioural_nn"] >= TARGETS["behavioural_nn"])]
            if "search_behavioural_nn" in i:
                checks.append(("search NN among 3 >= 70%", i["search_behavioural_nn"] >= TARGETS["behavioural_nn"]))
            if held:
                checks += [("held out: self-retrieval top-1 >= 90%", held["self_top1"] >= TARGETS["self_top1"]),
                           ("held out: index NN >= 70%", held.get("index_behavioural_nn", 0) >= TARGETS["behavioural_nn"])]
                if "search_behavioural_nn" in held:
                    checks.append(("held out: search NN >= 70%", held["search_behavioural_nn"] >= TARGETS["behavioural_nn"]))
            checks.append(("clusters (k = #families) agree with family at least as well as raw disagreement",
                           (i["ari"]["ari_at_label_count"] or -1) >= (i["ari_raw"]["ari_at_label_count"] or -1) - 1e-12))
            lines.append(f"- {c['view']}: " + "; ".join(f"{name}: {'met' if ok else '**not met**'}" for name, ok in checks))
    return lines


def targets(results: dict) -> list[str]:
    lines = []
    for setup in SETUPS:
        abc = results.get(setup, {}).get("abc")
        if not abc:
            continue
        for view, c in abc["data"].items():
            checks = [("self-retrieval top-1 >= 90%", c["self_top1"] >= TARGETS["self_top1"]),
                      ("NN among 3 behaviourally nearest >= 70%", c["behavioural_nn"] >= TARGETS["behavioural_nn"]),
                      ("Spearman >= 0.9", (c["cosine"]["spearman"] or 0) >= TARGETS["spearman"]),
                      ("family purity@3 >= raw", c["family_purity_embedding"] >= c["family_purity_raw"] - 1e-12)]
            f = c.get("fingerprint")
            if f:
                checks += [("fingerprint self-retrieval top-1 >= 90%", f["self_top1"] >= TARGETS["self_top1"]),
                           ("fingerprint NN among 3 behaviourally nearest >= 70%", f["behavioural_nn"] >= TARGETS["behavioural_nn"]),
                           ("fingerprint Spearman >= 0.9", (f["correlations"]["spearman"] or 0) >= TARGETS["spearman"]),
                           ("fingerprint family purity@3 >= raw", f["family_purity"] >= c["family_purity_raw"] - 1e-12)]
            e = results.get(setup, {}).get("e", {}).get("data", {}).get(view)
            if e:
                checks.append(("portfolio (k-medoids) beats random mean at k = 3, 5, 10", all(
                    e[f"kmedoids@{k}"]["routing_accuracy"] > e[f"kmedoids@{k}"]["random_routing_accuracy_mean"]
                    for k in K_VALUES if f"kmedoids@{k}" in e)))
            lines.append(f"- {c['view']}: " + "; ".join(f"{name}: {'met' if ok else '**not met**'}" for name, ok in checks))
    return lines


def _same_registries(results: dict) -> str:
    """Whether part (i) measured the registries of (a)-(c) (the same encoder id per setup), for the page."""
    pairs = [(parts["i"]["encoder_id"], parts["abc"]["encoder_id"]) for parts in results.values()
             if "i" in parts and "abc" in parts]
    if pairs and all(a == b for a, b in pairs):
        return "Part (i) measured the registries of (a)-(c) (the same encoders)."
    return ("Part (i)'s registries are not those of (a)-(c) (other encoder ids: the commands at the top say how "
            "each was made); its rows read the item table alone.")


def write_page(results: dict, path: Path, router_json: Path = OUT / "router.json") -> None:
    commands = sorted({c for setup in results.values() for entry in setup.values()
                       for c in entry.get("commands", [entry["command"]])})
    lines = ["# Geometry scorecard (issue 16)", "",
             "Generated by `scripts/scorecard.py`; do not edit by hand. The commands that produced the numbers "
             "below (each part is stored with its command in `docs/results/scorecard.json`):", ""]
    lines += [f"    {c}" for c in commands]
    lines += ["", "Data: `../shared/data/mmlu-pro` (32 models x 12,032 questions) and `../shared/data/bfcl` (71 models x "
              "1,460 function-calling tasks), imported with id prefixes and `dataset=` metadata "
              "(scripts/_datasets.py), all-mpnet-base-v2 query vectors (precomputed). \"X alone\": a registry and "
              "encoder on that dataset only; \"joint\": one registry and one encoder trained on all 103 models, seen "
              "per dataset (`--where 'dataset == X'`) and whole. Encoders: `registry train` defaults of the commit "
              "(seed 0, 1024 evaluations per model, epochs and patience in epochs) unless the command names "
              "--max-seconds (a wall-clock cap; entries made so say so). Definitions: "
              "the docstring of `registry/lab/geometry.py`. Stored vectors are built from all of a model's evaluations; "
              "(c) uses embeddings built without the test queries and disagreement on them.", "",
              "## (a)-(c) identity, behaviour, distance vs disagreement", ""]
    lines += geometry_table(results) or ["(not run yet: `--parts abc`)"]
    lines += ["", "## (i) the index's default likeness vector", "",
              "The behaviour column of the models table (store format 4; `ItemTable.behaviour_vectors`): a "
              "model's answers on the item table's probe queries (its recorded score where it has one, its "
              "fingerprint's P(correct) where not, over the tasks it was evaluated on; the probes shared out "
              "equally over the tasks), searched through its own FAISS index by inner product "
              "(`ItemTable.behaviour_queries`): the least expected disagreement over the querying model's tasks, "
              "a probe of a task the other never answered counting 0.5. **index** rows read the stored vectors "
              "alone (as `route`'s fallbacks do); self-retrieval and the search rows read the probes the "
              "searching model answered (as `registry search NAME` does). Caution: on BFCL the probes are "
              "nearly all of the queries, so a model's stored vector holds most of its recorded answers and the "
              "index's nearest is close to the raw-disagreement truth by construction; the row \"on test "
              "queries the vectors never saw\" is the out-of-sample check (BFCL has 146 test queries: a noisy "
              "truth). The item table and the vectors do not depend on LOCUS. " + _same_registries(results), ""]
    lines += index_table(results) or ["(not run yet: `--parts i`)"]
    lines += ["", "Targets (issue 22, \"Done when\"):", ""]
    lines += index_targets(results) or ["(no index results yet)"]
    lines += ["", "### Which vector each operation reads by default", "",
              "- Likeness — `search`, `audit` candidates (both indexes), `clusters`, `map`, `compare`, `route` "
              "fallbacks: **fingerprint** (`--by fingerprint`), whenever the home holds fingerprints (else LOCUS). "
              "Measured: the index rows above against LOCUS's (a)/(b) rows (self-retrieval 17-38%, NN among 3 "
              "behaviourally nearest 18-56%). `search` from a model and `route`'s fallbacks read the behaviour "
              "index (above); `search` puts first any candidate whose fingerprint could have produced the model's "
              "answers (a likelihood-ratio test at 1%: a copy, a re-served endpoint; `same_model`), then the rest "
              "in the index's order (`registry.analytics.search`; before store format 4 it re-ranked the identity "
              "index's 200 nearest by the candidates' fingerprint predictions, which describe a model held out of "
              "the item table's fit poorly: this page's history in git has its rows). `clusters` on fingerprints clusters each pair's mean "
              "answer distance (pools up to 500 models; beyond, the behaviour index's distance between the stored vectors) "
              "with complete linkage, and so does the clusters row; `map` draws the same distances flat (classical "
              "MDS); `audit` proposes the behaviour index's nearest from each model's stored vector (measured on "
              "planted copies: docs/results/audit.md, scripts/bench_audit_real.py)."
              + ("" if "i" in results.get("joint", {}) else
                 " The joint setup was not measured for part (i) (its registry was not built in time)."),
              "- Skill on unseen queries — onboarding (`add-model`'s embedding), `profile`: **LOCUS** (`profile "
              "--by fingerprint` fingerprints the hypothetical set instead; not measured here); `route`'s ranking: "
              "LOCUS blended with the item table and kNN over the stored queries (below); (f) measures LOCUS.",
              "- Portfolio: **the recorded answers** (`--method answers`, the default with `--k`: the greedy cover "
              "of the stored queries outside the test queries); the vector methods compare by LOCUS (`--by "
              "fingerprint` by fingerprints). [portfolio-by.md](portfolio-by.md), `scripts/report_portfolio_by.py`, "
              "measures the three on the part (i) registries: only `answers` is above the random subsets' mean at "
              "every k = 3, 5, 10 on both datasets (on BFCL at k = 10 by 0.03 points, where random 10-subsets "
              "already route within 0.03 of the full pool).",
              "- Routing's P(correct): LOCUS blended with the item table and kNN over the stored queries (the router "
              "blend `registry train` fits on "
              "validation queries; [router.md](router.md)).", ""]
    lines += ["## Targets of issue 16 (moonshot) against this page", ""]
    lines += targets(results) or ["(no geometry results yet)"]
    lines += ["", "## (d) routing and correctness: the registry's router vs the baselines", ""]
    lines += routing_table(json.loads(router_json.read_text("utf-8")) if router_json.is_file() else None) or [
        f"(no router results at {router_json}: `scripts/bench_router.py` writes them)"]
    lines += ["", "## (e) portfolio routing vs random subsets", ""]
    lines += portfolio_table(results) or ["(not run yet: `--parts e`)"]
    lines += ["", "## (f) onboarding an unseen model", ""]
    lines += onboarding_table(results) or ["(not run yet: `--parts f`)"]
    lines += ["", "## Reading the page", "",
              "- \"raw\" columns use the evaluations themselves (disagreement on every common query): the evidence "
              "the embedding should reproduce. Its family figures are a reference, not a ceiling.",
              "- In the joint registry's whole view (all 103) two models of different datasets share no query: "
              "they have no raw disagreement, never count as behavioural neighbours, and their pairs are left out of "
              "(c). Its portfolio rows route each test query among the chosen models scored on it and skip the "
              "queries none of them has (`scoring: scored-members`), so subsets are scored on different queries; "
              "the per-dataset views are the comparable test.",
              "- The fingerprint rows measure behaviour fingerprints (`encoder/fingerprint.py`, the second vector "
              "`search --by behaviour` uses): an item table fitted by logistic matrix factorisation on the registry's "
              "pool (as the encoder is trained on it; never on the encoder's test queries), and per model a ridge "
              "solve of r + 1 numbers on its evaluations. (a) uses the identity distance (RMS logit difference over "
              "the probe queries), (b) and (c) the behaviour distance (expected disagreement over the probe queries "
              "of the tasks both models were evaluated on). The \"held out\" rows refit the table without a fold of "
              "the models and score those: a model onboarded after training.",
              "- Clusters (the ARI rows) cut a hierarchical tree of the distances with the registry's default linkage "
              "(complete since part (i)'s run that added the average-linkage row; average before). The ARI rows of "
              "LOCUS (b) and of the fingerprint (b) come from the earlier runs listed at the top, made with average "
              "linkage; part (i)'s rows were made with both, as labelled.",
              "- MMLU-Pro's full pool contains Gemini-3.1-Pro, the best single model on every subject: its portfolio "
              "rows saturate at the best single model; part (d) therefore routes on the open-weight pool.",
              "- Part (f) trains fresh LOCUS runs under `registry evaluate`'s protocol (80/10/10 query split "
              "by seed, 1024 training evaluations per model); parts (a)-(c), (e) and (i) measure the registry's own "
              "trained encoder and item table."]
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="abc", help="letters of the parts to run: abc, e, f, i (default abc; "
                        "part d is read from --router)")
    parser.add_argument("--setups", default="mmlu-pro,bfcl,joint", help="comma-separated: mmlu-pro, bfcl, joint")
    parser.add_argument("--work", type=Path, default=Path("/tmp/locus-scorecard"),
                        help="where registries are built (<work>/<setup>) or reused")
    parser.add_argument("--registry", action="append", default=[], metavar="SETUP=HOME",
                        help="measure this existing registry for SETUP instead of <work>/<setup>")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="wall-clock cap on each LOCUS training run (default none: epochs and patience in epochs, "
                             "so a busy machine trains the same encoder)")
    parser.add_argument("--holdout-folds", type=int, default=4,
                        help="folds of models left out of the item table's fit for the fingerprint's held-out rows "
                             "(0: skip them)")
    parser.add_argument("--seed", type=int, default=0, help="the query split's seed of part f")
    parser.add_argument("--results", type=Path, default=OUT / "scorecard.json")
    parser.add_argument("--page", type=Path, default=OUT / "scorecard.md")
    parser.add_argument("--router", type=Path, default=OUT / "router.json",
                        help="the router page's stored results, part (d) (scripts/bench_router.py writes them)")
    parser.add_argument("--no-write", action="store_true", help="print only; write neither json nor page")
    parser.add_argument("--page-only", action="store_true",
                        help="rewrite the page from --results (and --router) as they are, running no part")
    args = parser.parse_args(argv)
    if args.page_only:
        _save({}, args)
        print(f"wrote {args.page}")
        return
    if "d" in args.parts:
        parser.error("--parts: part d is read from docs/results/router.json (scripts/bench_router.py makes it)")
    unknown = set(args.parts) - set("abcefi")
    if unknown:
        parser.error(f"--parts: unknown part(s) {''.join(sorted(unknown))}; use letters of abcefi")
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    bad = [s for s in setups if s not in SETUPS]
    if bad:
        parser.error(f"--setups: unknown {', '.join(bad)}; choose from {', '.join(SETUPS)}")
    homes = {}
    for item in args.registry:
        name, sep, home = item.partition("=")
        if not sep or name not in SETUPS:
            parser.error(f"--registry {item!r}: expected SETUP=HOME with SETUP one of {', '.join(SETUPS)}")
        homes[name] = Path(home)
    command = "nice -n 10 .venv/bin/python scripts/scorecard.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    results = json.loads(args.results.read_text("utf-8")) if args.results.is_file() else {}
    from _datasets import build_registry
    from registry.catalog.embedding import active_encoder

    # the cheap parts first, the training of (f) last, so that a run cut short has saved them
    jobs = [(setup, part) for setup in setups for part in ("abc", "e", "i") if set(part) & set(args.parts)]
    if "f" in args.parts:
        jobs += [(setup, "f") for setup in setups]
    produced: dict = {}
    registries: dict = {}
    for setup, part in jobs:
        if setup not in registries:
            home = homes.get(setup, args.work / setup)
            print(f"{setup}: registry {home}", flush=True)
            registries[setup] = build_registry(home, SETUPS[setup], max_seconds=args.max_seconds,
                                               log=lambda m: print(f"  {m}", flush=True))[0]
        reg = registries[setup]
        encoder_id = active_encoder(reg.store).encoder_id
        data = PARTS[part](reg, setup, args)
        entry = {"command": command, "encoder_id": encoder_id, "max_seconds": args.max_seconds, "data": data,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        results.setdefault(setup, {})[part] = entry
        produced.setdefault(setup, {})[part] = entry
        if not args.no_write:  # after every job: a long run cut short keeps what it finished
            results = _save(produced, args)
    print("\n".join(geometry_table(results)))
    print("\n".join(index_table(results)))
    print("\n".join(targets(results)))
    for table in (portfolio_table, onboarding_table):
        text = table(results)
        if text:
            print("\n".join(text))
    if not args.no_write:
        _save(produced, args)
        print(f"wrote {args.page.relative_to(ROOT) if args.page.is_relative_to(ROOT) else args.page}")


def _save(produced: dict, args) -> dict:
    """Merge this run's parts into the results file as it is now (another run may have added parts
    meanwhile), write it and the page; returns the merged results."""
    results = json.loads(args.results.read_text("utf-8")) if args.results.is_file() else {}
    for parts in results.values():
        parts.pop("d", None)  # part (d) is the router page's now (scripts/bench_router.py)
    for setup, parts in produced.items():
        results.setdefault(setup, {}).update(parts)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1, default=float), encoding="utf-8")
    write_page(results, args.page, args.router)
    return results


if __name__ == "__main__":
    main()
