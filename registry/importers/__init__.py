"""Importers: users' evaluation files -> ImportBatch. `read_batch` picks the format.

Formats: triple (queries.csv + models.csv + evals.csv), embedllm (EmbedLLM's CSVs), lm-eval
(lm-evaluation-harness `--log_samples` output), jsonl and parquet (model, query/query_id, score[, task]).
"""
from __future__ import annotations

from pathlib import Path

from registry.errors import InputError
from registry.importers._common import ImportBatch

__all__ = ["FORMATS", "detect_format", "read_batch", "ImportBatch"]

FORMATS = ("triple", "embedllm", "lm-eval", "jsonl", "parquet")


def detect_format(path: Path) -> str:
    from registry.importers import triple

    if not path.exists():
        raise InputError("no such file or directory", file=path)
    if triple.looks_like(path):
        return "triple"
    from registry.importers import embedllm, lm_eval

    if lm_eval.looks_like(path):
        return "lm-eval"
    if embedllm.looks_like(path):
        return "embedllm"
    from registry.importers.tabular import KIND_OF_SUFFIX

    suffix = path.suffix.lower()
    if suffix in KIND_OF_SUFFIX:
        return KIND_OF_SUFFIX[suffix]
    # Near misses say what they lack instead of "cannot tell": a triple directory short of a file, an lm-eval
    # run without its samples, a CSV without EmbedLLM's columns
    if path.is_dir() and any((path / name).exists() for name in triple.FILES):
        return "triple"
    if path.is_dir() and any(path.rglob("results_*.json")):
        raise InputError("an lm-eval run directory without samples_<task>_*.jsonl files: run lm-eval with "
                         "--log_samples (the per-question scores are in them)", file=path)
    if suffix == ".csv":
        header = _first_line(path)
        raise InputError("a .csv file is read as EmbedLLM's CSV, which needs the columns prompt_id, model_name or "
                         f"model_id, label and prompt; this header is {header!r} (rows of model, query, score: "
                         "write JSON Lines or Parquet)", file=path, line=1)
    raise InputError(
        "cannot tell the format: expected a directory with queries.csv/models.csv/evals.csv, an "
        "lm-eval run directory, an EmbedLLM CSV, or a .jsonl/.parquet file (or pass --format)",
        file=path,
    )


def _first_line(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            return handle.readline(400).decode("utf-8", "replace").strip()
    except OSError:
        return ""


LM_EVAL_OPTIONS = ("model_name", "metric", "filter")  # what read_lm_eval takes beyond the path and prefix


def read_batch(path: Path, *, format: str = "auto", id_prefix: str = "", **options) -> ImportBatch:
    unknown = sorted(set(options) - set(LM_EVAL_OPTIONS))
    if unknown:  # a misspelt option was dropped unsaid
        raise InputError(f"unknown import option(s) {', '.join(unknown)}; the options of a format: "
                         f"{', '.join(LM_EVAL_OPTIONS)} (lm-eval)", field=unknown[0])
    path = Path(path)
    if format == "auto":
        format = detect_format(path)
    if not path.exists():
        raise InputError("no such file or directory", file=path)
    given = [name for name in LM_EVAL_OPTIONS if options.get(name) is not None]
    if given and format != "lm-eval":
        raise InputError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to lm-eval results only, "
                         f"not to the {format} format", field=given[0])
    if format == "triple":
        from registry.importers.triple import read_triple

        return read_triple(path, id_prefix=id_prefix)
    if format == "embedllm":
        from registry.importers.embedllm import read_embedllm

        return read_embedllm(path, id_prefix=id_prefix)
    if format == "lm-eval":
        from registry.importers.lm_eval import read_lm_eval

        return read_lm_eval(path, id_prefix=id_prefix, **options)
    if format in ("jsonl", "parquet"):
        from registry.importers.tabular import read_tabular

        return read_tabular(path, id_prefix=id_prefix, kind=format)
    raise InputError(f"unknown format {format!r}; expected auto or one of {', '.join(FORMATS)}")
