"""`registry suggest-queries`: the stored queries to evaluate a model on first (thin over
`Registry.suggest_queries`, or the service's /v1/suggest-queries under --server)."""
from __future__ import annotations

from pathlib import Path

import click

from cli._common import EXISTING_FILE, _backend, emit, json_option, one_line

TEXT_WIDTH = 60  # a long question is cut in the table; --json has it whole


def read_answers(path: Path) -> dict[str, float]:
    """query_id -> score from a CSV with `query_id` and `score` columns; a bad row is refused naming the
    file and line."""
    import csv
    import io

    from registry.errors import InputError

    from registry.importers._common import read_utf8

    answers: dict[str, float] = {}
    with io.StringIO(read_utf8(path), newline="") as handle:  # non-UTF-8 bytes refused naming their line
        reader = csv.DictReader(handle)
        missing = [c for c in ("query_id", "score") if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"needs the column(s) {', '.join(missing)} (query_id,score)", file=path, line=1)
        for line, row in enumerate(reader, start=2):
            query_id = (row["query_id"] or "").strip()
            if not query_id:
                raise InputError("the query_id is empty", file=path, line=line)
            try:
                score = float(row["score"])
            except (TypeError, ValueError):
                raise InputError(f"score {row['score']!r} is not a number", file=path, line=line) from None
            if not 0.0 <= score <= 1.0:
                raise InputError(f"score {score} is not in [0, 1]", file=path, line=line)
            answers[query_id] = score
    return answers


@click.command("suggest-queries")
@click.argument("name", required=False)
@click.option("-n", "n", type=click.IntRange(min=1), default=64, show_default=True, help="How many queries to suggest.")
@click.option("--task", default=None, help="Only the queries of this task (see `registry stats` for the tasks).")
@click.option("--from-pool", is_flag=True,
              help="For a model not yet added: at the pool's prior (NAME, if given, need not be stored; a stored "
                   "one's answered queries are still left out).")
@click.option("--answered", type=EXISTING_FILE, default=None, metavar="CSV",
              help="query_id,score of the answers a model not yet added has so far: the next batch takes them "
                   "into account and leaves them out.")
@json_option(help="Print the QuerySuggestions as JSON (whole query texts).")
@click.pass_context
def suggest_queries(ctx, name, n, task, from_pool, answered, as_json) -> None:
    """The stored queries whose answers would tell the most about model NAME (its evaluations so far
    left out), or, without NAME, about a model not yet added: evaluate it on these first.

    Chosen under the item table (registry fit-fingerprints) to stand for the stored queries as a whole:
    kernel herding over each query's logit at the pool's mean fingerprint and its spread over the pool,
    hard and easy alike, each pick unlike the earlier ones and the answered queries. P(correct) is shown
    at the model's own fingerprint (its answers so far), else its mean over the pool's models. Picks that ask what the pool is
    least sure of fitted worse than random queries (docs/results/onboarding.md)."""
    answers = read_answers(answered) if answered is not None else None
    result = _backend(ctx).suggest_queries(name, n, task=task, from_pool=from_pool, answered=answers)
    emit(result, as_json, _echo)


def _echo(result) -> None:
    basis = {"model": f"model {result.model} ({result.n_answered} queries answered, left out; P(correct) at its "
                      "fingerprint)",
             "pool": "a model not yet added, at the pool's prior" + (f" ({result.n_answered} answered, left out)"
                                                                     if result.n_answered else ""),
             "answers": f"a model not yet added, fitted from its {result.n_answered} answers"}[result.basis]
    scope = f" of task {result.task}" if result.task else ""
    click.echo(f"{len(result.queries)} of {result.n_candidates} candidate queries{scope} for {basis}; "
               f"pool of {result.pool_models} models, item table {result.table_id}")
    if not result.queries:
        if not result.n_candidates and result.n_answered:  # say why it is empty, and what would give one
            click.echo("nothing left to suggest: every stored query" + (f" of task {result.task}" if result.task else "")
                       + " is answered; import more queries (registry import) for more to ask")
        return
    width = max(8, max(len(q.query_id) for q in result.queries))
    click.echo(f"{'#':>4}  {'query_id':<{width}}  {'task':<16} {'gain':>8} {'P(ok)':>5}  text")
    for q in result.queries:
        click.echo(f"{q.rank:>4}  {q.query_id:<{width}}  {q.task[:16]:<16} {q.gain:>8.5f} {q.p_correct:>5.2f}  "
                   f"{one_line(q.text, TEXT_WIDTH)}")
    click.echo(f"total gain {result.total_gain:.3f} (how far the picks bring the sample closer to the stored queries); "
               "--json for whole texts")


COMMANDS: list[click.Command] = [suggest_queries]
