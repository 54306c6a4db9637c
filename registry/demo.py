"""The main job behind `registry demo`: build a registry and show what it holds.

Without `--data` it uses the synthetic pool (labelled synthetic everywhere: names start with `syn-`,
models carry the tag `synthetic`); with `--data DIR` it imports a triple-format directory, using its
`query_embeddings/` when present so nothing is re-encoded.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from registry.api import Registry
from registry.synthetic import synthetic_pool

# The demo's pool: four families that differ in what they are good at (family skill sd 2 against
# size gains of 0.05-0.15 per doubling and model noise 0.1), so that the features have something to
# find: clusters that are the families, and a portfolio that covers their strengths.
DEMO_POOL = {"family_spread": 2.0, "model_noise": 0.1, "size_gain": (0.05, 0.15)}
DEMO_ENCODER = "all-MiniLM-L6-v2"  # the small query encoder: a few seconds for the pool's texts
DEMO_MAX_SECONDS = 60.0  # the demo's training budget; `registry train` runs the full schedule


def run_demo(home: Path, *, data: Path | None, seed: int, echo: Callable[[str], None], epochs: int = 150,
             progress: bool = True) -> Registry:
    from indexing.store import DEFAULT_QUERY_ENCODER

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
    echo(f"registry: {stats['models']} models, {stats['queries']} queries in {len(stats['tasks'])} tasks, "
         f"{stats['evaluations']} evaluations, coverage {stats['coverage']:.3f}")
    for record in reg.models()[:8]:
        echo(f"  {record.name:<28} family={record.family} params_b={record.params_b} access={record.access}")
    if stats["models"] > 8:
        echo(f"  ... and {stats['models'] - 8} more (registry --home {home} models list)")

    if reg.store.config.get("active_encoder") is None:
        echo(f"training the LOCUS encoder (at most {epochs} epochs or {DEMO_MAX_SECONDS:.0f} s, progress on "
             "stderr; `registry train` runs the full schedule) ...")
        trained = reg.train(epochs=epochs, progress=progress, max_seconds=DEMO_MAX_SECONDS)
        echo(f"  encoder {trained.encoder_id}: best epoch {trained.best_epoch}, validation routing accuracy "
             f"{trained.val_routing_accuracy:.3f}, {trained.seconds:.0f} s")
    summary = reg.embed_all()
    echo(f"embedded {summary['embedded']} models with encoder {summary['encoder_id']} (one forward pass each)")
    _tour(reg, home, echo)
    return reg


def _tour(reg: Registry, home: Path, echo: Callable[[str], None]) -> None:
    """add-model -> search -> audit -> profile -> portfolio -> route -> clusters/map, on what was imported."""
    records = reg.models()
    source = max(records, key=lambda r: (r.params_b or 0.0, r.name)).name
    evals = _evaluations_of(reg, source)
    endpoint = f"{source}@new-endpoint"
    if endpoint not in {r.name for r in records}:
        added = reg.add_model(endpoint, evals, {"provider": "new-endpoint"})
        echo(f"add-model {endpoint}: {added['n_evals']} evaluations embedded in one forward pass, no training")
    echo(f"nearest to {endpoint}:")
    for hit in reg.similar(endpoint, k=3):
        echo(f"  {hit['distance']:.4f}  {hit['name']}")
    result = reg.audit()
    echo(f"audit: threshold {result['threshold']:.4f} (0.99 quantile of self-spread); "
         f"{result['candidates']} close pair(s), {len(result['cleared'])} cleared by their evaluations, "
         f"{len(result['flags'])} flagged")
    for flag in result["flags"][:6]:
        ev = flag["evidence"]
        shared = f", {ev['disagreement']:.1%} disagreement on {ev['shared_queries']} shared queries" \
            if ev["disagreement"] is not None else ""
        echo(f"  {flag['a']} ~ {flag['b']}: distance {flag['distance']:.4f}, P(distinct this close) "
             f"{flag['score']:.3f}{shared}")

    tasks = sorted(reg.stats()["tasks"])
    targets = {task: (0.9 if i == 0 else 0.3) for i, task in enumerate(tasks[:3])}
    found = reg.profile(targets, k=3)
    echo("profile " + " ".join(f"{t}={v}" for t, v in targets.items()) + ": "
         + ", ".join(f"{h['name']} ({h['distance']:.4f})" for h in found["results"]))

    k = min(3, len(records) - 1)
    chosen = reg.portfolio(k=k, method="kmedoids")
    echo(f"portfolio (k-medoids, k={k}): {', '.join(chosen['models'])}")
    if chosen["routing_accuracy"] is not None:
        mean, sd = chosen["random_routing_accuracy_mean"], chosen["random_routing_accuracy_sd"]
        echo(f"  routing accuracy on {chosen['test_queries']} held-out queries {chosen['routing_accuracy']:.3f} "
             f"vs full pool {chosen['full_pool_routing_accuracy']:.3f} vs random {k}-model subsets "
             f"{mean:.3f} +- {sd:.3f}")
        gap = chosen["routing_accuracy"] - mean
        if gap > sd:
            verdict = f"the portfolio beats the random subsets' mean by {gap:.3f}, more than their sd"
        elif gap > 0:
            verdict = (f"the portfolio is above the random subsets' mean by {gap:.3f}, within their sd: on "
                       f"{chosen['test_queries']} test queries that is not a clear win")
        else:
            verdict = (f"the portfolio routes {-gap:.3f} worse than the random subsets' mean: picking for "
                       "coverage of the embedding space did not pick for accuracy on this pool")
        echo(f"  {verdict}")

    question = reg.store.read("queries", ["text"]).column("text")[0].as_py()
    routed = reg.route(question, k=3)
    top = routed["ranking"][0]["name"]
    echo(f"route {question[:60]!r}: " + ", ".join(f"{r['name']} {r['p_correct']:.2f}" for r in routed["ranking"]))
    without = reg.route(question, k=3, exclude=[top])
    echo(f"  with {top} down: " + ", ".join(f"{r['name']} {r['p_correct']:.2f}" for r in without["ranking"]))

    plots = home / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    families = reg.clusters(plot=plots / "clusters.png")
    agreement = families.get("family_agreement") or {}
    echo(f"clusters: {len(families['clusters'])} clusters, e.g. "
         + "; ".join(", ".join(c["members"][:4]) for c in families["clusters"][:2]))
    if agreement.get("adjusted_rand") is not None:
        ari = agreement["adjusted_rand"]
        meaning = ("they are the planted families" if ari >= 0.9 else
                   "they mostly follow the planted families" if ari >= 0.5 else
                   "they do not follow the planted families (they follow ability)")
        echo(f"  agreement with the family metadata: adjusted Rand {ari:.2f} (1 = the same grouping, 0 = chance; "
             f"permutation p {agreement['p_value']:.3f}): {meaning}")
    reg.map(plots / "map.png", color_by="family")
    echo(f"plots: {plots / 'clusters.png'}, {plots / 'map.png'}")


def _evaluations_of(reg: Registry, name: str) -> list[dict]:
    import pyarrow.compute as pc

    evals = reg.store.read("evaluations", ["model", "query_id", "score"])
    mine = evals.filter(pc.equal(evals["model"], name))
    return [{"query_id": q, "score": s} for q, s in zip(mine["query_id"].to_pylist(), mine["score"].to_pylist())]
