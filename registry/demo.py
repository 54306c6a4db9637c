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


def run_demo(home: Path, *, data: Path | None, seed: int, echo: Callable[[str], None], epochs: int = 300) -> Registry:
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
    echo(f"registry: {stats['models']} models, {stats['queries']} queries in {len(stats['tasks'])} tasks, "
         f"{stats['evaluations']} evaluations, coverage {stats['coverage']:.3f}")
    for record in reg.models()[:8]:
        echo(f"  {record.name:<28} family={record.family} params_b={record.params_b} access={record.access}")
    if stats["models"] > 8:
        echo(f"  ... and {stats['models'] - 8} more (registry --home {home} models list)")

    if reg.store.config.get("active_encoder") is None:
        echo(f"training the LOCUS encoder (at most {epochs} epochs; `registry train` for a full run) ...")
        trained = reg.train(epochs=epochs, progress=False)
        echo(f"  encoder {trained.encoder_id}: validation routing accuracy {trained.val_routing_accuracy:.3f} "
             f"after {trained.seconds:.0f} s")
    summary = reg.embed_all()
    echo(f"embedded {summary['embedded']} models with encoder {summary['encoder_id']} (one forward pass each)")
    probe = reg.models()[0].name
    echo(f"nearest to {probe}:")
    for hit in reg.similar(probe, k=3):
        echo(f"  {hit['distance']:.4f}  {hit['name']}")
    result = reg.audit()
    echo(f"audit: threshold {result['threshold']:.4f} (equal-error point of self-spread and distinct pairs), {len(result['flags'])} flagged pair(s)")
    for flag in result["flags"][:5]:
        echo(f"  {flag['a']} ~ {flag['b']}: distance {flag['distance']:.4f}, P(distinct this close) {flag['score']:.3f}")
    return reg
