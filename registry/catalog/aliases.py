"""Aliases, as in MLflow's model registry: `production -> Llama-3-8B` or `production -> Llama-3-8B@3`.

An alias is a registry-wide name that stands for a model (optionally pinned to one version). Every
command that takes a model name accepts an alias; `resolve` is the one place that turns a name the
user typed into a stored model name. Aliases live in the home's `config.json` under "aliases",
written atomically under the store's writer lock (no LanceDB needed to read them, so resolving is
cheap for the fast read-only commands).

Rules: a real model name always wins over an alias of the same spelling (and setting such an alias is
refused); an alias pinned to a version resolves only while that version is the live one, and says what
to do otherwise, so that no command silently uses a different version than the alias promises.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from indexing.home import as_path, read_config
from registry.errors import InputError, NotFoundError, RegistryError

__all__ = ["ALIAS_PATTERN", "read_aliases", "split_version", "reads_as_version", "resolve", "resolve_many"]

# Short, shell-friendly, and unlike any stored name with an "@": letters, digits, '-', '_', '.'.
ALIAS_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")



def read_aliases(home: Path) -> dict[str, dict[str, Any]]:
    """alias -> {"name", "version"}; empty when the home has none (or no config yet)."""
    try:
        config = read_config(as_path(home))
    except OSError:  # no config yet
        return {}
    return dict(config.get("aliases") or {})


def split_version(target: str, known: set[str] | None = None) -> tuple[str, int | None]:
    """'NAME@3' -> ('NAME', 3); 'NAME' -> ('NAME', None). A stored name that itself holds '@'
    (an endpoint such as 'Llama-3-8B@reseller') is never split; only an all-digit suffix is a version."""
    if known is not None and target in known:
        return target, None
    name, sep, version = target.rpartition("@")
    if sep and name and version.isdigit():
        return name, int(version)
    return target, None


def reads_as_version(name: str) -> str | None:
    """Why a new model may not take `name`: it ends in '@' and digits, so `NAME@3` would be read as version 3
    of NAME by `split_version` wherever NAME exists (an alias set to it pointed at the new model instead).
    None when the name is free of that. Models stored before this rule keep their names."""
    base, version = split_version(name)
    if version is None:
        return None
    return (f"the model name {name[:60]!r} ends in '@' and digits, which reads as version {version} of {base[:60]!r} "
            "(NAME@VERSION): name the model otherwise (e.g. with '-v' or '@r' before the digits)")


def resolve(home: Path, name: str, *, live: dict[str, int] | None = None, same=None) -> str:
    """The stored model name that `name` stands for: itself when it is a model (or unknown), the
    target when it is an alias. `live` (name -> current version), when given, is checked against a
    pinned alias; without it the pin is not checked (callers that only read history). `same(name, live,
    pinned)`, when given, says whether the live version is a restore of the pinned one (which holds it)."""
    if not isinstance(name, str):
        return name
    aliases = read_aliases(home)
    entry = aliases.get(name)
    if entry is None or (live is not None and name in live):
        return name
    target, pinned = entry["name"], entry.get("version")
    if live is not None:
        if target not in live:
            raise NotFoundError(f"alias {name!r} points to {target!r}, which is not in the registry "
                                f"(removed? `registry restore {shlex.quote(target)}`, or `registry alias set {name} NAME`)")
        if pinned is not None and live[target] != pinned and not (same and same(target, live[target], pinned)):
            raise RegistryError(
                f"alias {name!r} points to {target} version {pinned}, but the live version is {live[target]}: "
                f"`registry restore {shlex.quote(target)} --version {pinned}`, or `registry alias set {name} {shlex.quote(target)}` "
                "to follow the latest version")
    return target


def resolve_many(home: Path, names, *, live: dict[str, int] | None = None) -> list[str]:
    return [resolve(home, n, live=live) for n in names]


def check_alias_name(alias: str) -> str:
    if not isinstance(alias, str) or not ALIAS_PATTERN.fullmatch(alias):
        raise InputError(f"{alias!r} is not a valid alias: start with a letter; letters, digits, '-', '_' "
                         "and '.' only; at most 64 characters", field="alias")
    return alias
