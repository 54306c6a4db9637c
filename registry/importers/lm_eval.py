"""lm-evaluation-harness output written with `--output_path DIR --log_samples`.

A run writes, under DIR/<model_name_sanitized>/ (lm_eval/loggers/evaluation_tracker.py):

    results_<timestamp>.json         aggregate results; names the model (`model_name`,
                                     `config.model_args`, `model_name_sanitized`)
    samples_<task>_<timestamp>.jsonl one line per document and filter

PATH is such a directory, a directory above several of them (every run found below it is
imported, each under its own model), or one samples file. A samples file belongs to the results
file in its own directory with the same timestamp; failing that, to the only results file in its
directory. The timestamp is the part of the name after the last "_" and the task the part between
the first and the last "_", as lm_eval.utils.get_file_task_name reads them.

A samples line holds doc_id, doc, target, arguments, resps, filtered_resps, filter, metrics
(the names of the metric fields), doc_hash, prompt_hash, target_hash and one field per metric
(acc, acc_norm, exact_match, ...). What becomes of it:

- query id   id_prefix + "<task>:<doc_hash[:16]>", or "<task>:<doc_id>" when there is no doc_hash;
- query text the context of the document's first request, i.e. the prompt exactly as the model
             saw it: few-shot examples, the task's description and any chat template are part of
             the text. Runs that prompt the same document differently (another num_fewshot or
             chat template) share the query; the first prompt seen is kept, with a warning;
- task       the task name from the samples file's name;
- model      `model_name` argument, else the results file's `model_name`, else `pretrained=` (or
             `model=`, `path=`, `engine=`) in its config.model_args, else `model_name_sanitized`;
- score      the `metric` argument's field, else the first present of DEFAULT_METRICS; a bool,
             int or float in [0, 1].

`arguments` has two shapes: a list of requests, each a list [context, continuation or
generation kwargs] (what the evaluator builds, and older files), and since the tracker sanitises
it, {"gen_args_0": {"arg_0": context, "arg_1": ...}, "gen_args_1": ...}. Both are read.

A document appears once per filter (gsm8k: "strict-match" and "flexible-extract"). One filter is
kept per task: the `filter` argument, else the first one seen for the task; the skipped lines are
counted in a warning. Files from versions without a `filter` field are read whole.
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.errors import InputError
from registry.importers._common import (DuplicateKey, ImportBatch, json_limit_problem, parse_score, read_jsonl,
                                        read_utf8, unique_keys)
from registry.limits import check_model_name
from registry.records import ModelRecord, Query

# Per-sample correctness metrics, in order of preference when no `metric` is given.
DEFAULT_METRICS = ("acc", "exact_match", "acc_norm", "pass@1", "pass_at_1", "em", "correct", "is_correct")

# Fields of a samples line that are not metrics (for listing the metric fields present).
_BOOKKEEPING = frozenset(
    {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
     "doc_hash", "prompt_hash", "target_hash"}
)

_SAMPLES_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>[^_]+)\.jsonl$")
_UNSET: Any = object()  # no filter chosen yet for a task

# model_args keys naming the model, in lm-eval's order of preference (GeneralConfigTracker._get_model_name).
_MODEL_ARG_KEYS = ("pretrained", "model", "path", "engine")


@dataclass
class _SamplesFile:
    path: Path
    task: str
    stamp: str


@dataclass
class _State:
    """What reading one samples file needs to know about the others."""

    id_prefix: str
    metric: str | None
    filter: str | None
    kept_filter: dict[str, str | None] = field(default_factory=dict)  # task -> filter kept
    skipped_filters: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    prompts: dict[str, str] = field(default_factory=dict)  # query id -> text
    prompt_conflicts: int = 0


def looks_like(path: Path) -> bool:
    """A samples file, or a directory with a samples file somewhere below it."""
    if path.is_file():
        return _SAMPLES_NAME.match(path.name) is not None
    if path.is_dir():
        return any(_SAMPLES_NAME.match(p.name) for p in path.rglob("samples_*.jsonl"))
    return False


def read_lm_eval(
    path: Path,
    *,
    id_prefix: str = "",
    model_name: str | None = None,
    metric: str | None = None,
    filter: str | None = None,  # named after the samples' own `filter` field
) -> ImportBatch:
    if model_name is not None:
        check_model_name(model_name.strip(), field="model_name")
    samples = _samples_files(path)
    models, run_of = _models_of(samples, model_name)
    batch = ImportBatch(source=f"lm-eval:{path.resolve()}")
    state = _State(id_prefix=id_prefix, metric=metric, filter=filter)
    # Oldest run first, so that a re-run's score wins when duplicates are dropped.
    for sample_file in sorted(samples, key=lambda s: (s.stamp, str(s.path))):
        _read_samples(sample_file, models[sample_file.path], batch, state)

    for name in dict.fromkeys(batch.eval_models):
        batch.models.append(ModelRecord(name=name))
    for task, skipped in state.skipped_filters.items():
        if skipped:
            others = ", ".join(f"'{name}' ({count} lines)" for name, count in skipped.items())
            batch.warnings.append(
                f"task {task}: kept filter '{state.kept_filter[task]}', skipped the lines of filter(s) {others}"
            )
    batch.warnings.extend(_tasks_without_samples(samples, run_of))
    if state.prompt_conflicts:
        batch.warnings.append(
            f"{state.prompt_conflicts} documents were prompted differently in another run or line (other"
            " few-shot examples or chat template); the first prompt seen is the query text"
        )
    dropped = batch.drop_duplicate_evaluations()
    if dropped:
        batch.warnings.append(
            f"{path}: {dropped} repeated (model, query) evaluations; the last score of each was kept"
        )
    return batch


def _tasks_without_samples(samples: list[_SamplesFile], run_of: dict[Path, Path | None]) -> list[str]:
    """A warning per run whose results file scores tasks that have no samples file beside it (a run with
    --log_samples for some tasks only, or a samples file moved away): those tasks are not imported. Groups
    (results["groups"], group_subtasks) have no samples of their own and are not counted."""
    warnings = []
    runs: dict[Path, set[str]] = {}
    for sample in samples:
        results = run_of[sample.path]  # its results file, as _models_of found it
        if results is not None:
            runs.setdefault(results, set()).add(sample.task)
    for results, sampled in sorted(runs.items()):
        try:
            data = json.loads(read_utf8(results))
        except (InputError, ValueError, RecursionError):
            continue  # the model name's reading says what is wrong with the file, where it matters
        if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
            continue
        groups = set(data.get("groups") or {}) | {g for g, subtasks in (data.get("group_subtasks") or {}).items()
                                                  if subtasks}
        missing = sorted(set(data["results"]) - groups - sampled)
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            warnings.append(f"{results}: {len(missing)} task(s) with results but no samples file beside it, not "
                            f"imported: {shown} (lm-eval writes samples with --log_samples)")
    return warnings


def _samples_files(path: Path) -> list[_SamplesFile]:
    if path.is_file():
        found = [path]
    elif path.is_dir():
        found = sorted(path.rglob("samples_*.jsonl"))
    else:
        raise InputError("no such file or directory", file=path)
    samples = []
    for file in found:
        match = _SAMPLES_NAME.match(file.name)
        if match is None:
            raise InputError("not an lm-eval samples file (samples_<task>_<timestamp>.jsonl)", file=file)
        samples.append(_SamplesFile(file, match["task"], match["stamp"]))
    if not samples:
        raise InputError("no samples_<task>_<timestamp>.jsonl below this directory (run with --log_samples)", file=path)
    return samples


def _models_of(samples: list[_SamplesFile],
               model_name: str | None) -> tuple[dict[Path, str], dict[Path, Path | None]]:
    """The model of each samples file (`model_name`, else the one its run's results file names), and each
    samples file's results file (None: none found, where `model_name` made it unneeded)."""
    named: dict[Path, str] = {}  # results file -> the model it names
    run_of: dict[Path, Path | None] = {}  # samples file -> its results file
    for sample in samples:
        results = run_of[sample.path] = _results_file_of(sample, required=model_name is None)
        if results is not None and results not in named:
            name = _model_name_in(results, required=model_name is None)
            if name is not None:  # a name the registry refuses is refused here, with its file
                named[results] = check_model_name(name, file=results, field="model_name")
    if model_name is None:
        return {path: named[results] for path, results in run_of.items()}, run_of
    # One name for the runs of several models would merge their scores into one model.
    distinct = sorted(set(named.values()))
    if len(distinct) > 1:
        raise InputError(
            f"model_name {model_name!r} was given, but the runs here are of {len(distinct)} models"
            f" ({', '.join(distinct)}); import without model_name, or one run directory at a time",
            file=samples[0].path.parent,
        )
    return {sample.path: model_name.strip() for sample in samples}, run_of


def _results_file_of(sample: _SamplesFile, *, required: bool) -> Path | None:
    """The results file written by the same run as `sample`: same directory, same timestamp."""
    folder = sample.path.parent
    same_stamp = sorted(p for p in folder.glob(f"*_{sample.stamp}.json") if p.is_file())
    if len(same_stamp) == 1:
        return same_stamp[0]
    preferred = [p for p in same_stamp if p.name.startswith("results")]
    if len(preferred) == 1:
        return preferred[0]
    results = sorted(p for p in folder.glob("results*.json") if p.is_file())
    if len(results) == 1:
        return results[0]
    if not required:
        return None
    if results:
        raise InputError(
            f"cannot tell which run this samples file belongs to: no results_{sample.stamp}.json beside it,"
            f" and {len(results)} other results files; pass model_name",
            file=sample.path,
        )
    raise InputError(
        "no results_<timestamp>.json beside this samples file to name the model; pass model_name", file=sample.path
    )


def _model_name_in(results_path: Path, *, required: bool) -> str | None:
    text = read_utf8(results_path)
    try:
        results = json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKey as err:  # lm-eval never writes one: a hand-edited file, whose model no reader agrees on
        raise InputError(str(err), file=results_path, field=err.key) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not JSON ({err.msg})", file=results_path, line=err.lineno) from None
    except RecursionError:
        raise InputError("not JSON this reader takes: nested too deeply", file=results_path) from None
    except ValueError as err:
        raise InputError(json_limit_problem(err), file=results_path) from None
    if not isinstance(results, dict):
        raise InputError("expected a JSON object", file=results_path)
    name = results.get("model_name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    config = results.get("config")
    if isinstance(config, dict):
        name = _name_in_model_args(config.get("model_args"))
        if name:
            return name
    name = results.get("model_name_sanitized")
    if isinstance(name, str) and name.strip():
        return name.strip()
    if not required:
        return None
    raise InputError(
        "names no model (no model_name, no pretrained= in config.model_args, no model_name_sanitized);"
        " pass model_name",
        file=results_path, field="model_name",
    )


def _name_in_model_args(model_args: Any) -> str | None:
    """The model in config.model_args: "pretrained=org/name,dtype=float32" or (newer) a dict."""
    if isinstance(model_args, str):
        pairs = (part.split("=", 1) for part in model_args.split(",") if "=" in part)
        model_args = {key.strip(): value.strip() for key, value in pairs}
    if not isinstance(model_args, dict):
        return None
    for key in _MODEL_ARG_KEYS:
        value = model_args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _read_samples(sample: _SamplesFile, model: str, batch: ImportBatch, state: _State) -> None:
    file, task = sample.path, sample.task
    file_name = str(file)
    kept = state.filter if state.filter is not None else state.kept_filter.get(task, _UNSET)
    metric = state.metric
    filters_here: Counter = Counter()
    n_read = 0
    for line, row in read_jsonl(file):
        row_filter = row.get("filter")
        filters_here[row_filter] += 1
        if kept is _UNSET:  # first line of the task: its filter is the one kept
            kept = row_filter
        if row_filter != kept:
            state.skipped_filters[task][row_filter] += 1
            continue
        if metric is None:
            metric = _default_metric(row, file=file, line=line)
        query_id = state.id_prefix + f"{task}:{_document_key(row, file=file, line=line)}"
        text = _prompt(row, file=file, line=line)
        known = state.prompts.get(query_id)
        if known is None:
            state.prompts[query_id] = text
            batch.add_query(Query(id=query_id, text=text, task=task), file=file_name, line=line)
        elif known != text:
            state.prompt_conflicts += 1
        score = _score(row, metric, file=file, line=line)
        batch.add_evaluation(model, query_id, score, file=file_name, line=line)
        n_read += 1
    state.kept_filter[task] = None if kept is _UNSET else kept
    if n_read == 0:
        present = ", ".join(repr(f) for f in filters_here)
        raise InputError(
            f"no line has filter {kept!r} (the filter kept for task {task}); filters here: {present}",
            file=file, field="filter",
        )


def _default_metric(row: dict, *, file: Path, line: int) -> str:
    for name in DEFAULT_METRICS:
        if name in row:
            return name
    raise InputError(
        f"no score field: none of {', '.join(DEFAULT_METRICS)}; metric fields present: {_metric_fields(row)};"
        " pass metric",
        file=file, line=line,
    )


def _metric_fields(row: dict) -> str:
    listed = row.get("metrics")
    names = listed if isinstance(listed, list) else [key for key in row if key not in _BOOKKEEPING]
    return ", ".join(str(name) for name in names) or "none"


def _document_key(row: dict, *, file: Path, line: int) -> str:
    doc_hash = row.get("doc_hash")
    if isinstance(doc_hash, str) and doc_hash.strip():
        return doc_hash.strip()[:16]
    doc_id = row.get("doc_id")
    if doc_id is None or isinstance(doc_id, (dict, list)) or not str(doc_id).strip():
        raise InputError("missing doc_id (and no doc_hash)", file=file, line=line, field="doc_id")
    return str(doc_id).strip()


def _prompt(row: dict, *, file: Path, line: int) -> str:
    """The context of the document's first request, in either shape of `arguments`."""
    if "arguments" not in row:
        raise InputError("missing field", file=file, line=line, field="arguments")
    arguments = row["arguments"]
    context: Any = None
    if isinstance(arguments, dict):  # {"gen_args_0": {"arg_0": context, ...}, ...}
        first = arguments.get("gen_args_0")
        context = first.get("arg_0") if isinstance(first, dict) else None
    elif isinstance(arguments, list) and arguments:  # [[context, continuation], ...]
        first = arguments[0]
        context = first[0] if isinstance(first, list) and first else None
    if not isinstance(context, str) or not context.strip():
        raise InputError(
            f"no prompt: the first request's context is {context!r}", file=file, line=line, field="arguments"
        )
    return context


def _score(row: dict, metric: str, *, file: Path, line: int) -> float:
    if metric not in row:
        raise InputError(
            f"missing score field; metric fields present: {_metric_fields(row)}", file=file, line=line, field=metric
        )
    value = row[metric]
    # Bool, int and float only: a string or a list (some metrics log (prediction, reference) pairs
    # to aggregate later) is no per-document score.
    if not isinstance(value, (bool, int, float)):
        raise InputError(f"score {value!r} is not a number", file=file, line=line, field=metric)
    return parse_score(value, file=file, line=line, field=metric)
