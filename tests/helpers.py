"""Small builders for test data (files the tests write themselves)."""
from __future__ import annotations

import csv
from pathlib import Path

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


def synthetic_registry(home: Path, *, train_epochs: int | None = None, **pool_options):
    """A registry of a synthetic pool, query encoder MiniLM; trained and embedded when
    `train_epochs` is given."""
    import tempfile

    from registry import Registry
    from registry.synthetic import synthetic_pool

    reg = Registry.open(home)
    reg.set_query_encoder("all-MiniLM-L6-v2")
    with tempfile.TemporaryDirectory() as scratch:
        reg.import_path(synthetic_pool(**pool_options).write_triple(Path(scratch)))
    if train_epochs is not None:
        from encoder.training import TrainConfig

        reg.train(config=TrainConfig(epochs=train_epochs, max_seconds=None))  # no wall-clock cap: load-independent
        reg.embed_all()
    return reg
