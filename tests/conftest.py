"""Shared fixtures. The tests never reach a model hub: encoders load from installed packages."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Routes in tests use the torch query encoder unless a test asks for the exported copy (which it builds in its
# own LOCUS_CACHE): building one costs 20-60 s and ~180-870 MB under ~/.cache (encoder.query_encoder).
os.environ.setdefault("LOCUS_QUERY_EXPORT", "0")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MMLU_PRO = SHARED / "data" / "mmlu-pro"
SMALL_ENCODER = "all-MiniLM-L6-v2"


@pytest.fixture
def mmlu_pro() -> Path:
    if not (MMLU_PRO / "evals.csv").is_file():
        pytest.skip(f"real data not found at {MMLU_PRO} (../shared/data/mmlu-pro beside the project)")
    return MMLU_PRO


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fresh registry home whose query encoder is the small, fast one."""
    from registry import Registry

    path = tmp_path / "home"
    Registry.open(path).set_query_encoder(SMALL_ENCODER)
    return path


@pytest.fixture(scope="module")
def pool_home(tmp_path_factory) -> Path:
    """A registry of a small synthetic pool (built once per test module; tests work on copies)."""
    from helpers import synthetic_registry

    home = tmp_path_factory.mktemp("pool") / "home"
    synthetic_registry(home, n_families=3, models_per_family=3, queries_per_task=25,
                       tasks=("math", "law", "biology", "code"), n_duplicates=1, seed=5)
    return home
