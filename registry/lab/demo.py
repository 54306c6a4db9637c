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
from registry.lab.synthetic import synthetic_pool

# The demo's pool: four families that differ in what they are good at (family skill sd 2 against
# size gains of 0.05-0.15 per doubling and model noise 0.1), so that the features have something to
# find: clusters that are the families, and a portfolio that covers their strengths.
DEMO_POOL = {"family_spread": 2.0, "model_noise": 0.1, "size_gain": (0.05, 0.15)}
DEMO_ENCODER = "all-MiniLM-L6-v2"  # the small query encoder: a few seconds for the pool's texts


def run_demo(home: Path, *, data: Path | None, seed: int, echo: Callable[[str], None], epochs: int = 150,
             progress: Callable | None = None) -> DemoReport:
    """Build (or reopen) the registry at `home` and tour it; `echo` narrates, the report holds every
    step's typed result. progress: a train_locus progress callback (default: lines on stderr)."""
    from indexing.store import DEFAULT_QUERY_ENCODER
    from registry.checks import check_count, check_seed

    seed, epochs = check_seed(seed), check_count(epochs, "epochs", 1)  # before a home is made
    reg = Registry.open(home)
    if data is None and reg._is_empty() and reg.query_encoder == DEFAULT_QUERY_ENCODER:
        reg.set_query_encoder(DEMO_ENCODER)
        echo(f"(an empty home: the demo uses the small query encoder {DEMO_ENCODER}; "
             "`registry init --encoder NAME` picks another)")
    echo(f"registry home: {reg.home.resolve()} (embedded LanceDB; query encoder {reg.query_encoder})")
    if data is None:
        pool = synthetic_pool(seed=seed, **DEMO_POOL)
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
        from registry.catalog.embedding import progress_printer

        # budgeted in epochs, never seconds: a busy machine takes longer but gets the same encoder
        echo(f"training the LOCUS encoder ({epochs} epochs at most, progress on "
             "stderr; `registry train` runs the full schedule) ...")
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
    proposers = "by embedding and by fingerprint" if report.by_fingerprint else "neighbours"
    echo(f"audit: {report.candidates} candidate pair(s) ({report.k} nearest {proposers}), "
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
        mean, sd = chosen.random_routing_accuracy_mean, chosen.random_routing_accuracy_sd
        echo(f"  routing accuracy on {chosen.n_test_queries} held-out queries {chosen.routing_accuracy:.3f} "
             f"vs full pool {chosen.full_pool_routing_accuracy:.3f} vs random {k}-model subsets "
             f"{mean:.3f} +- {sd:.3f}")
        gap = chosen.routing_accuracy - mean
        if gap > sd:
            verdict = f"the portfolio beats the random subsets' mean by {gap:.3f}, more than their sd"
        elif gap > 0:
            verdict = (f"the portfolio is above the random subsets' mean by {gap:.3f}, within their sd: on "
                       f"{chosen.n_test_queries} test queries that is not a clear win")
        else:
            verdict = (f"the portfolio routes {-gap:.3f} worse than the random subsets' mean: picking for "
                       "coverage of the embedding space did not pick for accuracy on this pool")
        echo(f"  {verdict}")

    question = reg.store.read("queries", ["text"]).column("text")[0].as_py()
    routed = reg.route(question, k=3)
    top = routed.ranking[0].name
    echo(f"route {question[:60]!r}: " + ", ".join(f"{r.name} {r.p_correct:.2f}" for r in routed.ranking))
    without = reg.route(question, k=3, exclude=[top])
    echo(f"  with {top} down: " + ", ".join(f"{r.name} {r.p_correct:.2f}" for r in without.ranking))

    from indexing.home import is_remote

    plots = Path("locus-demo-plots") if is_remote(reg.home) else reg.home / "plots"  # matplotlib writes local files
    plots.mkdir(parents=True, exist_ok=True)
    families = reg.clusters(plot=plots / "clusters.png")
    agreement = families.family_agreement
    echo(f"clusters: {len(families.clusters)} clusters, e.g. "
         + "; ".join(", ".join(c.members[:4]) for c in families.clusters[:2]))
    if agreement is not None:
        ari = agreement.adjusted_rand
        meaning = ("they are the planted families" if ari >= 0.9 else
                   "they mostly follow the planted families" if ari >= 0.5 else
                   "they do not follow the planted families (they follow ability)")
        echo(f"  agreement with the family metadata: adjusted Rand {ari:.2f} (1 = the same grouping, 0 = chance; "
             f"permutation p {agreement.p_value:.3f}): {meaning}")
    drawn = reg.map(plots / "map.png", color_by="family")
    echo(f"plots: {plots / 'clusters.png'}, {plots / 'map.png'}")
    return {"added": added, "nearest": nearest, "audit": report, "profile": found, "portfolio": chosen,
            "route": routed, "route_without_top": without, "clusters": families, "map": drawn}


def _evaluations_of(reg: Registry, name: str) -> list[dict]:
    import pyarrow.compute as pc

    evals = reg.store.read("evaluations", ["model", "query_id", "score"])
    mine = evals.filter(pc.equal(evals["model"], name))
    return [{"query_id": q, "score": s} for q, s in zip(mine["query_id"].to_pylist(), mine["score"].to_pylist())]
