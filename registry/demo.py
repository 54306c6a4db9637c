"""The main job behind `registry demo`: build a registry and show what it holds.

Without `--data` it uses the synthetic pool (labelled synthetic everywhere: names start with `syn-`,
models carry the tag `synthetic`); with `--data DIR` it imports a triple-format directory, using its
`query_embeddings/` when present so nothing is re-encoded.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Callable

from registry.api import Registry
from registry.results import DemoReport
from registry.synthetic import synthetic_pool


def run_demo(home: Path, *, data: Path | None, seed: int, echo: Callable[[str], None], epochs: int = 300,
             progress: Callable | None = None) -> DemoReport:
    """Build (or reopen) the registry at `home` and tour it; `echo` narrates, the report holds every
    step's typed result. progress: a train_locus progress callback (default: lines on stderr)."""
    reg = Registry.open(home)
    echo(f"registry home: {reg.home.resolve()} (embedded LanceDB; query encoder {reg.query_encoder})")
    if data is None:
        pool = synthetic_pool(seed=seed)
        echo(f"SYNTHETIC pool: {len(pool.models)} models in {len(set(pool.family_of.values()))} families, "
             f"{len(pool.queries)} queries, planted duplicates: "
             + ", ".join(f"{a} ~ {b}" for a, b in pool.duplicates))
        with tempfile.TemporaryDirectory() as scratch:
            report = reg.import_path(pool.write_triple(Path(scratch)))
    else:
        vectors = data / "query_embeddings" / f"{reg.query_encoder}.npy"
        ids = data / "query_embeddings" / f"{reg.query_encoder}_ids.npy"
        if vectors.exists() and ids.exists():
            report = reg.import_path(data, query_embeddings=vectors, query_ids=ids)
        else:
            report = reg.import_path(data)
    echo(f"import: {report.new_models} new models, {report.new_queries} new queries, "
         f"{report.new_evaluations} new evaluations, {report.encoded_texts} texts encoded, "
         f"{report.stored_precomputed} precomputed vectors stored")
    stats = reg.stats()
    echo(f"registry: {stats.n_models} models, {stats.n_queries} queries in {len(stats.queries_per_task)} tasks, "
         f"{stats.n_evaluations} evaluations, coverage {stats.coverage:.3f}")
    for record in reg.models()[:8]:
        echo(f"  {record.name:<28} family={record.family} params_b={record.params_b} access={record.access}")
    if stats.n_models > 8:
        echo(f"  ... and {stats.n_models - 8} more (registry --home {home} models list)")

    trained = None
    if reg.store.config.get("active_encoder") is None:
        from encoder.training import TrainConfig
        from registry.embedding import progress_printer

        echo(f"training the LOCUS encoder (at most {epochs} epochs; `registry train` for a full run) ...")
        config = TrainConfig(epochs=epochs)
        trained = reg.train(config=config, progress=progress or progress_printer(
            lambda line: print(f"  {line}", file=sys.stderr, flush=True)))
        echo(f"  encoder {trained.encoder_id}: validation loss {trained.val_loss:.4f} (chance "
             f"{trained.val_chance_loss:.4f}), routing accuracy {trained.val_routing_accuracy:.3f}, best epoch "
             f"{trained.best_epoch} of {trained.epochs_run} ({trained.stopped}), {trained.seconds:.0f} s")
        for warning in trained.warnings:
            echo(f"  warning: {warning}")
    summary = reg.embed_all()
    echo(f"embedded {summary.n_embedded} models with encoder {summary.encoder_id} (one forward pass each)")
    tour = _tour(reg, home, echo)
    return DemoReport(home=str(reg.home), synthetic=data is None, imported=report, stats=stats, trained=trained,
                      embedded=summary, **tour)


def _tour(reg: Registry, home: Path, echo: Callable[[str], None]) -> dict:
    """add-model -> search -> audit -> profile -> portfolio -> route -> clusters/map, on what was imported."""
    records = reg.models()
    source = max(records, key=lambda r: (r.params_b or 0.0, r.name)).name
    evals = _evaluations_of(reg, source)
    endpoint = f"{source}@new-endpoint"
    added = None
    if endpoint not in {r.name for r in records}:
        added = reg.add_model(endpoint, evals, {"provider": "new-endpoint"})
        echo(f"add-model {endpoint}: {added.n_evals} evaluations embedded in one forward pass, no training")
    echo(f"nearest to {endpoint}:")
    nearest = reg.similar(endpoint, k=3)
    for hit in nearest.neighbours:
        echo(f"  {hit.distance:.4f}  {hit.name}")
    report = reg.audit()
    echo(f"audit: {report.candidates} candidate pair(s) ({report.k} nearest neighbours), "
         f"{len(report.cleared)} cleared by their evaluations, {len(report.duplicates)} duplicate(s), "
         f"{len(report.related)} same product line?")
    for flag in report.flags[:6]:
        ev = flag.evidence
        shared = (f", {ev.disagreement_rate:.1%} disagreement on {ev.shared_queries} shared queries (distinct models "
                  f"of their abilities: {ev.expected_disagreement_rate:.1%})" if ev.disagreement_rate is not None else "")
        echo(f"  {flag.label}: {flag.a} ~ {flag.b}, distance {flag.distance:.4f}{shared}")

    tasks = sorted(reg.stats().queries_per_task)
    targets = {task: (0.9 if i == 0 else 0.3) for i, task in enumerate(tasks[:3])}
    found = reg.profile(targets, k=3)
    echo("profile " + " ".join(f"{t}={v}" for t, v in targets.items()) + ": "
         + ", ".join(f"{h.name} ({h.distance:.4f})" for h in found.neighbours))

    k = min(3, len(records) - 1)
    chosen = reg.portfolio(k=k, method="kmedoids")
    echo(f"portfolio (k-medoids, k={k}): {', '.join(chosen.models)}")
    if chosen.routing_accuracy is not None:
        echo(f"  routing accuracy on {chosen.n_test_queries} held-out queries {chosen.routing_accuracy:.3f} "
             f"vs full pool "
             f"{chosen.full_pool_routing_accuracy:.3f} vs random {k}-model subsets "
             f"{chosen.random_routing_accuracy_mean:.3f} +- {chosen.random_routing_accuracy_sd:.3f}")

    question = reg.store.read("queries", ["text"]).column("text")[0].as_py()
    routed = reg.route(question, k=3)
    top = routed.ranking[0].name
    echo(f"route {question[:60]!r}: " + ", ".join(f"{r.name} {r.p_correct:.2f}" for r in routed.ranking))
    without = reg.route(question, k=3, exclude=[top])
    echo(f"  with {top} down: " + ", ".join(f"{r.name} {r.p_correct:.2f}" for r in without.ranking))

    plots = home / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    families = reg.clusters(plot=plots / "clusters.png")
    echo(f"clusters: {len(families.clusters)} families, e.g. "
         + "; ".join(", ".join(c.members[:4]) for c in families.clusters[:2]))
    drawn = reg.map(plots / "map.png", color_by="family")
    echo(f"plots: {plots / 'clusters.png'}, {plots / 'map.png'}")
    return {"added": added, "nearest": nearest, "audit": report, "profile": found, "portfolio": chosen,
            "route": routed, "route_without_top": without, "clusters": families, "map": drawn}


def _evaluations_of(reg: Registry, name: str) -> list[dict]:
    import pyarrow.compute as pc

    evals = reg.store.read("evaluations", ["model", "query_id", "score"])
    mine = evals.filter(pc.equal(evals["model"], name))
    return [{"query_id": q, "score": s} for q, s in zip(mine["query_id"].to_pylist(), mine["score"].to_pylist())]
