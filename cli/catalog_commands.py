"""`registry refine` and `registry alias set|list|delete` (thin over `registry.Registry`)."""
from __future__ import annotations

import click

from cli._common import (EXISTING_FILE, _backend, count, echo_warnings, emit, evals_option, json_option,
                         max_evals_option, quiet_thin_warnings)


@click.command()
@click.argument("name")
@click.option("--evals", "evals_file", required=True, type=EXISTING_FILE,
              help="CSV, JSONL or Parquet with columns query (text) or query_id, score, optional task.")
@max_evals_option
@json_option
@click.pass_context
def refine(ctx, name, evals_file, max_evals, as_json) -> None:
    """Add evaluations to model NAME (or an alias) and re-embed it as a new version.

    The model keeps its earlier evaluations and metadata; a repeated (query, model) pair takes the new
    score. Every earlier version stays in `registry history NAME` and `registry restore NAME --version V`."""
    with quiet_thin_warnings():  # the result's warnings are printed below, once
        result = _backend(ctx).refine(name, evals_file, max_evals=evals_option(max_evals, "--max-evals"))
    echo_warnings(result.warnings)
    emit(result, as_json, lambda r: click.echo(
        f"refine {r.name}: nothing new (version {r.version} stays)" if r.event == "unchanged" else
        f"refine {r.name} (version {r.version}): {count(r.new_evaluations, 'new evaluation')}; embedded from "
        f"{count(r.n_evals, 'evaluation')} with encoder {r.encoder_id}; {count(r.encoded_texts, 'new text')} encoded"))


@click.group()
def alias() -> None:
    """Aliases for models, as in MLflow: `registry alias set production NAME[@VERSION]`.

    Every command that takes a model name accepts an alias. An alias without a version follows the
    model's live version; one with @VERSION stands for that version only."""


def _target(entry) -> str:
    return entry.name + (f"@{entry.version}" if entry.version is not None else "")


@alias.command("set")
@click.argument("alias", metavar="ALIAS")
@click.argument("target", metavar="NAME[@VERSION]")
@json_option
@click.pass_context
def alias_set(ctx, alias, target, as_json) -> None:
    """Point ALIAS at a model (re-points an existing alias)."""
    entry = _backend(ctx).set_alias(alias, target)

    def text(e) -> None:
        follows = "its live version" if e.version is None else f"version {e.version} only"
        click.echo(f"alias {e.alias} -> {_target(e)} ({follows})")

    emit(entry, as_json, text)


@alias.command("list")
@json_option
@click.pass_context
def alias_list(ctx, as_json) -> None:
    """Every alias and the model it stands for."""
    from registry.results import AliasList

    emit(AliasList(_backend(ctx).aliases()), as_json, _echo_aliases)


def _echo_aliases(listed) -> None:
    entries = listed.root
    if not entries:
        click.echo("no aliases (registry alias set ALIAS NAME[@VERSION])")
        return
    width = max(5, max(len(e.alias) for e in entries))
    click.echo(f"{'alias':<{width}}  model")
    for e in entries:
        click.echo(f"{e.alias:<{width}}  {_target(e)}")


@alias.command("delete")
@click.argument("alias", metavar="ALIAS")
@json_option
@click.pass_context
def alias_delete(ctx, alias, as_json) -> None:
    """Remove ALIAS (the model is untouched)."""
    entry = _backend(ctx).delete_alias(alias)
    emit(entry, as_json, lambda e: click.echo(f"deleted alias {e.alias} (was {_target(e)})"))


COMMANDS: list[click.Command] = [refine, alias]
