"""Registries over the shared real datasets (MMLU-Pro, BFCL, or both), for the scorecard and benchmarks.

Each dataset is imported with its own query-id prefix (`mmlu-pro:`, `bfcl:`) and every model tagged
`dataset=<name>`, with the precomputed all-mpnet-base-v2 query vectors, so nothing is re-encoded and
`--pool/--where 'dataset == bfcl'` selects one dataset's models. The CLI equivalent of one import:

    registry --home H import ../shared/data/bfcl --id-prefix bfcl: --meta dataset=bfcl \\
        --encoder all-mpnet-base-v2 --query-embeddings ../shared/data/bfcl/query_embeddings/all-mpnet-base-v2.npy \\
        --query-ids ../shared/data/bfcl/query_embeddings/all-mpnet-base-v2_ids.npy
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DATASETS = ("mmlu-pro", "bfcl")
ENCODER = "all-mpnet-base-v2"


def dataset_dir(name: str) -> Path:
    return SHARED / name


def import_dataset(reg, name: str):
    """Import ../shared/data/<name> into `reg` with prefix `<name>:` and metadata dataset=<name>."""
    data = dataset_dir(name)
    if not (data / "evals.csv").is_file():
        sys.exit(f"{name} not found at {data}: put ../shared/data/{name} beside the project")
    vectors = data / "query_embeddings"
    return reg.import_path(data, id_prefix=f"{name}:", encoder=ENCODER, metadata={"dataset": name},
                           query_embeddings=vectors / f"{ENCODER}.npy", query_ids=vectors / f"{ENCODER}_ids.npy")


def ready(home: Path) -> bool:
    """Whether `home` is a registry with an active encoder and every model embedded with it."""
    from registry import Registry

    if not (home / "config.json").is_file():
        return False
    reg = Registry.open(home, create=False)
    active = reg.store.config.get("active_encoder")
    rows = reg.store.read("models", ["vector", "encoder_id"]).to_pylist()
    return bool(active) and bool(rows) and all(r["vector"] is not None and r["encoder_id"] == active for r in rows)


def build_registry(home: Path, datasets: tuple[str, ...], *, seed: int = 0, max_seconds: float | None = None,
                   threads: int = 2, log=print):
    """(Registry, built): the registry at `home` when `ready`; otherwise imported (when empty), trained
    with `registry train`'s defaults (1024 evaluations per model, `seed`, capped at `max_seconds`) and
    every model embedded."""
    from registry import Registry

    home = Path(home)
    if ready(home):
        return Registry.open(home, create=False), False
    if home.exists() and any(home.iterdir()) and not (home / "config.json").is_file():
        sys.exit(f"{home} is neither a registry nor empty; give an empty directory to build one in")
    reg = Registry.open(home)
    stored = {r.metadata().get("dataset") for r in reg.models()}
    for name in datasets:
        if name not in stored:
            report = import_dataset(reg, name)
            log(f"imported {name}: {report.new_models} models, {report.new_queries} queries, "
                f"{report.new_evaluations} evaluations")
    if not reg.store.config.get("active_encoder"):
        from encoder.training import TrainConfig

        config = TrainConfig(threads=threads) if max_seconds is None else TrainConfig(threads=threads,
                                                                                      max_seconds=max_seconds)
        trained = reg.train(evals_per_model=1024, seed=seed, config=config)
        log(f"trained encoder {trained.encoder_id} on {len(trained.models)} models in {trained.seconds:.0f} s "
            f"(best epoch {trained.best_epoch}, validation routing {trained.val_routing_accuracy:.4f})")
    reg.embed_all()
    return reg, True
