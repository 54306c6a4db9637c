"""The MMLU-Pro registry the scripts run on: reused when ready, built when not (one place for both)."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlu-pro"
ENCODER = "all-mpnet-base-v2"


def mmlu_pro_registry(home: Path | None, *, threads: int = 2):
    """(Registry, built): the registry at `home` when it has an active encoder and embedded models;
    otherwise one built at `home` (an empty or new directory; a temporary one when None) from
    ../shared/data/mmlu-pro: imported with the precomputed query vectors, trained with `registry
    train`'s defaults (seed 0, 1024 evaluations per model), every model embedded."""
    from encoder.training import TrainConfig
    from registry import Registry

    if home is not None and (home / "config.json").is_file():
        reg = Registry.open(home, create=False)
        embedded = any(v is not None for v in reg.store.read("models", ["vector"]).column("vector").to_pylist())
        if reg.store.config.get("active_encoder") and embedded:
            return reg, False
    elif home is not None and home.exists() and any(home.iterdir()):
        sys.exit(f"{home} is neither a registry nor empty; give an empty directory to build one in")
    if not (DATA / "evals.csv").is_file():
        sys.exit(f"MMLU-Pro not found at {DATA}: put ../shared/data/mmlu-pro beside the project, or pass "
                 "--home with a registry that already holds it")
    home = home or Path(tempfile.mkdtemp()) / "home"
    reg = Registry.open(home)
    print(f"building the MMLU-Pro registry in {home}", flush=True)
    vectors = DATA / "query_embeddings"
    reg.import_path(DATA, encoder=ENCODER, query_embeddings=vectors / f"{ENCODER}.npy",
                    query_ids=vectors / f"{ENCODER}_ids.npy")
    if reg.store.config.get("active_encoder") is None:
        trained = reg.train(evals_per_model=1024, seed=0, config=TrainConfig(threads=threads))
        print(f"trained encoder {trained.encoder_id} in {trained.seconds:.0f} s (best epoch "
              f"{trained.best_epoch}, validation routing {trained.val_routing_accuracy:.4f})", flush=True)
    reg.embed_all()
    return reg, True
