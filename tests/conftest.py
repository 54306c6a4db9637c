"""Shared fixtures. The tests never reach a model hub: encoders load from installed packages."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

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
