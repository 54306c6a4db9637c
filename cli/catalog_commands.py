"""`registry refine` and `registry alias set|list|delete` (thin over `registry.Registry`)."""
from __future__ import annotations

from pathlib import Path

import click

from cli._common import _echo_json, _registry


@click.command()
@click.argument("name")
@click.option("--evals", "evals_file", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="CSV, JSONL or Parquet with columns query (text) or query_id, score, optional task.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def refine(ctx, name, evals_file, as_json) -> None:
    """Add evaluations to model NAME (or an alias) and re-embed it as a new version.

    The model keeps its earlier evaluations and metadata; a repeated (query, model) pair takes the new
    score. Every earlier version stays in `registry history NAME` and `registry restore NAME --version V`."""
    result = _registry(ctx, create=False).refine(name, evals_file)
    for warning in result.pop("warnings", []):
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        _echo_json(result)
        return
    click.echo(f"refine {result['name']} (version {result['version']}): {result['new_evaluations']} new evaluations; "
               f"embedded from {result['n_evals']} evaluations with encoder {result['encoder_id']}; "
               f"{result['encoded_texts']} new texts encoded")


@click.group()
def alias() -> None:
    """Aliases for models, as in MLflow: `registry alias set production NAME[@VERSION]`.

    Every command that takes a model name accepts an alias. An alias without a version follows the
    model's live version; one with @VERSION stands for that version only."""


def _target(entry: dict) -> str:
    return entry["name"] + (f"@{entry['version']}" if entry.get("version") is not None else "")


@alias.command("set")
@click.argument("alias_name", metavar="ALIAS")
@click.argument("target", metavar="NAME[@VERSION]")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def alias_set(ctx, alias_name, target, as_json) -> None:
    """Point ALIAS at a model (re-points an existing alias)."""
    entry = _registry(ctx, create=False).set_alias(alias_name, target)
    if as_json:
        _echo_json(entry)
        return
    follows = "its live version" if entry["version"] is None else f"version {entry['version']} only"
    click.echo(f"alias {entry['alias']} -> {_target(entry)} ({follows})")


@alias.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def alias_list(ctx, as_json) -> None:
    """Every alias and the model it stands for."""
    entries = _registry(ctx, create=False).aliases()
    if as_json:
        _echo_json(entries)
        return
    if not entries:
        click.echo("no aliases (registry alias set ALIAS NAME[@VERSION])")
        return
    width = max(5, max(len(e["alias"]) for e in entries))
    click.echo(f"{'alias':<{width}}  model")
    for e in entries:
        click.echo(f"{e['alias']:<{width}}  {_target(e)}")


@alias.command("delete")
@click.argument("alias_name", metavar="ALIAS")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def alias_delete(ctx, alias_name, as_json) -> None:
    """Remove ALIAS (the model is untouched)."""
    entry = _registry(ctx, create=False).delete_alias(alias_name)
    if as_json:
        _echo_json(entry)
        return
    click.echo(f"deleted alias {entry['alias']} (was {_target(entry)})")


COMMANDS: list[click.Command] = [refine, alias]
