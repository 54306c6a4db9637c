"""What every command module shares: opening the registry of the group's --home, printing JSON."""
from __future__ import annotations

import json

import click


def _registry(ctx: click.Context, *, create: bool = True):
    from registry.api import Registry

    return Registry.open(ctx.obj["home"], create=create)


def _echo_json(payload) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=False))


def _echo_neighbour(hit: dict) -> None:
    """One result of search or profile: distance, name, family, access."""
    m = hit.get("metadata") or {}
    click.echo(f"{hit['distance']:.4f}  {hit['name']:<32} {m.get('family') or '-':<10} {m.get('access') or ''}")


def _echo_neighbour_header() -> None:
    """The header row above `_echo_neighbour` lines."""
    click.echo(f"{'distance':<8}  {'name':<32} {'family':<10} access")
