"""Small builders for test data (files the tests write themselves)."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

QUERIES = [
    ("q1", "math", "What is 12 times 7?"),
    ("q2", "math", "Solve for x: 3x + 4 = 19."),
    ("q3", "law", "Is an oral contract for land enforceable?"),
    ("q4", "law", "What is the statute of limitations for fraud?"),
    ("q5", "biology", "Which organelle makes ATP?"),
]
MODELS = [("0", "alpha-7b", "alpha", "7", "open"), ("1", "beta-13b", "beta", "13", "api")]


def write_rows(path: Path, header: list[str], rows) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_triple(directory: Path, *, queries=QUERIES, models=MODELS, evals=None) -> Path:
    """A valid triple directory: every model scored on every query unless `evals` is given."""
    directory.mkdir(parents=True, exist_ok=True)
    write_rows(directory / "queries.csv", ["query_id", "task", "text"], queries)
    write_rows(directory / "models.csv", ["model_id", "name", "family", "params_b", "access"], models)
    if evals is None:
        evals = [(m[0], q[0], (i + j) % 2) for i, m in enumerate(models) for j, q in enumerate(queries)]
    write_rows(directory / "evals.csv", ["model_id", "query_id", "score"], evals)
    return directory


# Recipes for synthetic_registry that several modules share (conftest's synthetic_home builds each once
# per session). A test relies only on what the comment of its recipe promises.
# Two families of three sizes (6 models: syn-synfam{0,1}-{1,7,13}b), 3 tasks x 15 queries, no duplicate.
SMALL_TRAINED = dict(train_epochs=10, n_families=2, models_per_family=3, queries_per_task=15,
                     tasks=("math", "law", "code"), n_duplicates=0, seed=3)
# Three families of three sizes (syn-synfam{0,1,2}-{1,7,13}b), 4 tasks x 25 queries, every model scored on
# every query; with one near-duplicate of a model (POOL_TRAINED) or none (POOL_TRAINED_NO_COPY).
POOL_TRAINED = dict(train_epochs=20, n_families=3, models_per_family=3, queries_per_task=25,
                    tasks=("math", "law", "biology", "code"), n_duplicates=1, seed=3)
POOL_TRAINED_NO_COPY = {**POOL_TRAINED, "n_duplicates": 0}
# Three families of three sizes, 3 tasks x 25 queries, one near-duplicate, trained briefly (3 epochs): a
# registry whose fingerprint index a search reads (test_fingerprint_index; test_search_saved_evaluations
# builds it with seed 6).
FINGERPRINT_INDEXED = dict(train_epochs=3, n_families=3, models_per_family=3, queries_per_task=25,
                           tasks=("math", "law", "code"), n_duplicates=1, seed=4)
# Three families of three sizes, 4 tasks x 40 queries, no duplicate, 5 epochs: enough queries per model for
# the item table's per-model fit (test_fingerprint).
FINGERPRINT_TRAINED = dict(train_epochs=5, n_families=3, models_per_family=3, queries_per_task=40,
                           tasks=("math", "law", "biology", "code"), n_duplicates=0, seed=2)


def synthetic_registry(home: Path, *, train_epochs: int | None = None, **pool_options):
    """A registry of a synthetic pool, query encoder MiniLM; trained and embedded when
    `train_epochs` is given."""
    import tempfile

    from registry import Registry
    from registry.lab.synthetic import synthetic_pool

    reg = Registry.open(home)
    reg.set_query_encoder("all-MiniLM-L6-v2")
    with tempfile.TemporaryDirectory() as scratch:
        reg.import_path(synthetic_pool(**pool_options).write_triple(Path(scratch)))
    if train_epochs is not None:
        from encoder.training import TrainConfig

        reg.train(config=TrainConfig(epochs=train_epochs, max_seconds=None))  # no wall-clock cap: load-independent
        reg.embed_all()
    return reg


def mmlu_pro_slice(mmlu_pro: Path, out: Path, n_queries: int) -> int:
    """The first n queries of MMLU-Pro, all models, as a triple directory `out` with their rows of the
    precomputed MiniLM vectors (v.npy, i.npy); returns the number of evaluations kept."""
    out.mkdir()
    with open(mmlu_pro / "queries.csv", encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        rows = [row for _, row in zip(range(n_queries), reader)]
        with open(out / "queries.csv", "w", encoding="utf-8", newline="") as g:
            writer = csv.DictWriter(g, reader.fieldnames)
            writer.writeheader()
            writer.writerows(rows)
    keep = {row["query_id"] for row in rows}
    (out / "models.csv").write_bytes((mmlu_pro / "models.csv").read_bytes())
    with open(mmlu_pro / "evals.csv", encoding="utf-8") as f, open(out / "evals.csv", "w", encoding="utf-8") as g:
        g.write(f.readline())
        n_evals = 0
        for line in f:
            if line.split(",")[1] in keep:
                g.write(line)
                n_evals += 1
    ids = np.load(mmlu_pro / "query_embeddings" / "all-MiniLM-L6-v2_ids.npy")
    vectors = np.load(mmlu_pro / "query_embeddings" / "all-MiniLM-L6-v2.npy")
    chosen = np.isin(ids.astype(str), list(keep))
    np.save(out / "v.npy", vectors[chosen])
    np.save(out / "i.npy", ids[chosen])
    return n_evals


def own_evaluations(reg, name: str) -> list[dict]:
    """A stored model's evaluations as (query text, score) records, as add-model takes them."""
    queries = {r["query_id"]: r["text"] for r in reg.store.read("queries").to_pylist()}
    return [{"query": queries[r["query_id"]], "score": r["score"]}
            for r in reg.store.read("evaluations").to_pylist() if r["model"] == name]


def stored_texts(home) -> list[tuple[str, str]]:
    """(text, task) of every query stored in the registry at `home`."""
    from registry import Registry

    table = Registry.open(home).store.read("queries", ["text", "task"])
    return list(zip(table.column("text").to_pylist(), table.column("task").to_pylist()))


def encode_in_a_fresh_process(name: str, texts: list[str], cache: Path, out: Path,
                              load: str) -> tuple[np.ndarray, dict]:
    """`load_query_encoder(name, <load>)` (load: its keyword arguments as Python source, e.g. "exported=True")
    encoding `texts` in a new Python process whose cache is `cache`: the vectors, and what the process says of
    itself: whether the exported copy answered, which heavy libraries it imported, and its stderr."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    code = ("import sys, json, numpy as np\nfrom encoder.query_encoder import load_query_encoder\n"
            f"e = load_query_encoder(sys.argv[1], {load})\n"
            "np.save(sys.argv[2], e.encode(json.loads(sys.argv[3])))\n"
            "print(json.dumps({'exported': e.exported, 'heavy': [m for m in ('torch', 'sentence_transformers', "
            "'transformers') if m in sys.modules]}))")
    env = {**os.environ, "PYTHONPATH": str(root), "LOCUS_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    env.pop("LOCUS_QUERY_EXPORT", None)
    done = subprocess.run([sys.executable, "-c", code, name, str(out), json.dumps(texts)],
                          capture_output=True, text=True, env=env, cwd=root, check=True)
    said = json.loads(done.stdout.strip().splitlines()[-1])
    return np.load(out), {**said, "stderr": done.stderr}


def need_openvino(*, module_level: bool = False) -> None:
    """Skip unless openvino is installed, without importing it: imported unblocked it loads its usage
    telemetry, which the registry's own import keeps out (encoder.query_encoder._openvino), and the tests
    would then run with it."""
    from importlib.util import find_spec

    import pytest

    if find_spec("openvino") is None:
        pytest.skip("openvino is not installed (a dependency: pip install -e .)", allow_module_level=module_level)


def load_script(name: str):
    """scripts/<name>.py as a module (the scripts are not a package), for tests of a script's functions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
