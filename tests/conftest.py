"""Shared fixtures. The tests never reach a model hub: encoders load from installed packages."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# In-process routes in tests use the torch query encoder unless a test asks for the exported copy (which it builds
# in its own LOCUS_CACHE): building one costs 8-60 s and ~180-870 MB under ~/.cache (encoder.query_encoder). The
# servers the tests start use it (tests/service_harness.py): the first writes it once, every start is faster.
os.environ.setdefault("LOCUS_QUERY_EXPORT", "0")

import hashlib  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MMLU_PRO = SHARED / "data" / "mmlu-pro"
SMALL_ENCODER = "all-MiniLM-L6-v2"


MAX_WORKERS = 4  # each worker holds torch, an encoder and its servers (~1-3 GB); past 4 the shared builds dominate


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): one worker per CPU this process may use, at most MAX_WORKERS."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_WORKERS, cpus))


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


@pytest.fixture(scope="session")
def synthetic_home(tmp_path_factory):
    """`synthetic_home(name, **options)`: the home of `helpers.synthetic_registry(home, **options)`, a copy
    of its own for the caller. Each recipe (the same options) is imported, trained and embedded once per
    session: the modules that ask for one recipe share that work, yet each gets a fresh home it may write to."""
    from helpers import synthetic_registry

    built: dict[tuple, Path] = {}

    def build(name: str, **options) -> Path:
        key = tuple(sorted(options.items()))
        if key not in built:
            built[key] = built_once(tmp_path_factory, f"recipe-{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}",
                                    lambda home: synthetic_registry(home, **options))
        return shutil.copytree(built[key], tmp_path_factory.mktemp(name) / "home")

    return build


def built_once(tmp_path_factory, key: str, make) -> Path:
    """`<dir>/home` made by `make(home)` once per test run: with pytest-xdist's workers (pyproject's addopts)
    once for all of them, the first builds it under a lock and the others wait and read it. Only a finished
    home is used (its marker file is written last)."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's directory, above every worker's own (never an earlier run's)
    place = shared / f"built-{key}"
    with FileLock(str(shared / f"built-{key}.lock")):
        if not (place / "done").exists():
            if place.exists():
                shutil.rmtree(place)  # a build that failed half-way in this run
            place.mkdir()
            make(place / "home")
            (place / "done").touch()
    return place / "home"


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory) -> Path:
    """The demo's synthetic pool, trained as `registry demo` trains it (150 epochs, no clock) and embedded:
    the expensive part of the demo, done once per session. Read it, or copy it to write."""
    import tempfile

    from encoder.training import TrainConfig
    from registry import Registry
    from registry.lab.demo import DEMO_ENCODER, DEMO_POOL
    from registry.lab.synthetic import synthetic_pool

    def make(home: Path) -> None:
        reg = Registry.open(home)
        reg.set_query_encoder(DEMO_ENCODER)
        with tempfile.TemporaryDirectory() as scratch:
            reg.import_path(synthetic_pool(seed=0, **DEMO_POOL).write_triple(Path(scratch)))
        reg.train(config=TrainConfig(epochs=150))
        reg.embed_all()

    return built_once(tmp_path_factory, "demo", make)
