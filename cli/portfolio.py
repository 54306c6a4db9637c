"""`registry` commands: portfolio (thin over `registry.Registry`)."""
from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
