"""`registry queries`: the stored queries' ids, tasks and texts (thin over `Registry.queries`).

The ids are what a `query_id` column in an add-model file, or `"query_id"` in a POST /v1/models,
refers to; without this command they could only be read from the files that were imported."""
from __future__ import annotations

import click

from cli._common import _backend, emit, json_option, one_line

TEXT_WIDTH = 70  # a long question is cut in the table; --json has it whole


@click.command()
@click.option("--task", default=None, help="Only the queries of this task (see `registry stats` for the tasks).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=0),
              help="Show at most this many (by id); 0 shows them all.")
@click.option("--offset", default=0, show_default=True, type=click.IntRange(min=0),
              help="Skip this many (by id) first: the next page.")
@json_option
@click.pass_context
def queries(ctx, task, limit, offset, as_json) -> None:
    """List stored query ids with their task and text, by id."""
    listed = _backend(ctx).queries(task=task, limit=limit or None, offset=offset)
    emit(listed, as_json, _echo_queries)


def _echo_queries(listed) -> None:
    if not listed.total:
        click.echo("no queries yet (registry import PATH)")
        return
    width = max([8] + [len(q.id) for q in listed.queries])
    if listed.queries:  # a page past the end has none
        click.echo(f"{'query_id':<{width}}  {'task':<16} text")
    for q in listed.queries:
        click.echo(f"{q.id:<{width}}  {q.task:<16} {one_line(q.text, TEXT_WIDTH)}")
    scope = f" in task {listed.task}" if listed.task else ""
    if len(listed.queries) < listed.total:
        first = listed.offset + 1
        shown = (f"{len(listed.queries)}" if not listed.offset
                 else f"{first}-{listed.offset + len(listed.queries)}" if listed.queries else f"none from {first}")
        click.echo(f"{shown} of {listed.total} queries{scope} (--limit N, 0 for all; --offset N for the next page; "
                   "--json for whole texts)")
    else:
        click.echo(f"{listed.total} queries{scope}")


COMMANDS: list[click.Command] = [queries]
