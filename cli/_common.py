"""What every command module shares: opening the registry of the group's --home, printing a result
(as text, or as the result's own JSON under --json), and turning errors into messages or JSON that
name the option the user typed."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable

import click

JSON_HELP = "Print the result as JSON (the schema of registry.results)."
# Exit statuses, as linters give them (ruff, mypy): 0 done, 1 a finding (audit --fail-on-flag or
# --fail-on-related, audit --drift, drift --fail-on-move, check), 2 an error of any kind (the command
# line, a file's content, a name not found, the store, a bug), so that a CI step tells a finding from
# a run that could not look.
FINDING_EXIT = 1
ERROR_EXIT = 2
INTERRUPTED_EXIT = 130  # Ctrl-C under --json (a shell's code for a command ended by SIGINT)
# Checked by click while it parses, before any command imports LanceDB or torch: a mistyped path is
# answered at once (exit 2, naming the path) instead of after seconds of imports.
EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def _json_flag(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """`--json` after the command, or before it (`registry --json stats`: the group's flag in ctx.obj);
    remembered in ctx.obj so that an error raised later is printed as JSON too."""
    obj = ctx.ensure_object(dict)
    if value:
        obj["json"] = True
    return bool(value or obj.get("json"))


def json_option(command=None, *, help: str = JSON_HELP):
    """The `--json` flag every command carries (`@json_option`, or `@json_option(help=...)`)."""
    def decorate(command):
        return click.option("--json", "as_json", is_flag=True, callback=_json_flag, help=help)(command)

    return decorate if command is None else decorate(command)


class Duration(click.ParamType):
    """A time span: seconds, or a number with s, m, h or d (30m, 1h, 7d); a `datetime.timedelta`."""

    name = "duration"
    _UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

    def convert(self, value, param, ctx):
        import re
        from datetime import timedelta

        if isinstance(value, timedelta):
            return value
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if found is None:
            self.fail(f"{value!r} is not a duration: a number of seconds, or one with s, m, h or d (30m, 1h, 7d)",
                      param, ctx)
        try:
            return timedelta(seconds=float(found.group(1)) * self._UNITS[found.group(2)])
        except OverflowError:  # past timedelta's 999,999,999 days (the command says its own limit below that)
            self.fail(f"{value!r} is too long a duration", param, ctx)

    @classmethod
    def spell(cls, seconds: float) -> str:
        """`seconds` as this type reads it back, in the largest unit that divides it (3600 -> "1h")."""
        for unit in ("d", "h", "m"):
            if seconds and seconds % cls._UNITS[unit] == 0:
                return f"{seconds / cls._UNITS[unit]:g}{unit}"
        return f"{seconds:g}s"


max_evals_option = click.option(
    "--max-evals", default="all", show_default=True,
    help="Evaluations per model to embed from: 'all', or a number (a seeded sample).")


def evals_option(value: str, option: str) -> int | None:
    """A count-or-'all' option (None for 'all'), else the usage error naming `option`."""
    try:
        return None if value == "all" else int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or 'all'", param_hint=option) from None


def min_evals_option(what: str):
    """`--min-evals N` of search, route and clusters (registry.evidence): None when not given, so that
    the API applies the documented minimum; click refuses a negative or non-integer value naming it."""
    return click.option(
        "--min-evals", "min_evals", type=click.IntRange(min=0), default=None, metavar="N",
        help=f"Models embedded from fewer than N evaluations {what} (default: the documented minimum, "
             "registry.evidence.MIN_EVALS, see README; 0: every model as it ranks).")


@contextlib.contextmanager
def quiet_thin_warnings():
    """The API's ThinEvidenceWarning silenced: the CLI prints the result's `warnings` itself, once."""
    import warnings

    from registry.evidence import ThinEvidenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ThinEvidenceWarning)
        yield


def echo_evidence_note(note: str | None) -> None:
    """A thin-evidence note on stderr (stdout keeps the table): a model is never dropped unsaid."""
    if note:
        click.echo(f"note: {note}", err=True)


def _registry(ctx: click.Context, *, create: bool = True):
    from registry.api import Registry

    return Registry.open(ctx.obj["home"], create=create)


NO_SERVER = "none"  # `--server none`: run in this process even when a service serves the home
ENDPOINT_FILE = ("service", "endpoint.json")  # where `registry serve` says where it listens, under the home


def _server(ctx: click.Context):
    """A `RegistryClient` of the service `--server` (or $LOCUS_SERVER) names, else None."""
    server = ctx.obj.get("server")
    if server and server != NO_SERVER:
        from registry.client import RegistryClient

        return RegistryClient(server)
    return None


def _backend(ctx: click.Context, *, names: tuple[str, ...] | None = None):
    """The registry a command that can go through the service talks to: a `RegistryClient` when
    `--server` (or $LOCUS_SERVER) names one, else the local home (same methods, same results).

    `names` (given by `route`: the model names it was passed, aliases included, which the service
    resolves as the library does) also lets a `registry serve` already running for this home answer,
    said on stderr: it has LOCUS and the encoders loaded, where this process would spend seconds
    importing torch (and sentence-transformers for a new text) and loading them."""
    client = _server(ctx)
    if client is not None:
        return client
    server = ctx.obj.get("server")
    if names is not None and server != NO_SERVER:
        url = _local_service(ctx.obj.get("home"))
        if url is not None:
            from registry.client import RegistryClient

            click.echo(f"answered by the registry service at {url}, which serves this home "
                       f"(--server {NO_SERVER}: answer in this process)", err=True)
            return RegistryClient(url)
    return _registry(ctx, create=False)


def _local_service(home) -> str | None:
    """The URL of a live `registry serve` of this (local) home, from the endpoint file it writes while
    it listens; None when there is none, it is gone (a stale file) or it serves another home."""
    import json
    import os

    from indexing.home import is_remote, resolve_home

    home = resolve_home(home)
    if is_remote(home):
        return None
    try:
        endpoint = json.loads(home.joinpath(*ENDPOINT_FILE).read_text("utf-8"))
        url, pid = str(endpoint["url"]), int(endpoint["pid"])
        os.kill(pid, 0)  # raises when that process is gone
    except (OSError, ValueError, KeyError, TypeError):
        return None
    import httpx

    try:
        health = httpx.get(f"{url}/v1/health", timeout=2.0)
        served = Path(health.json()["home"]).resolve()
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    return url if health.status_code == 200 and served == Path(home).resolve() else None


def emit(result, as_json: bool, text: Callable[[Any], None] | None = None) -> None:
    """The result as its model's JSON under --json, else as `text(result)` prints it."""
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    elif text is not None:
        text(result)


def echo_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)


def _echo_json(payload) -> None:
    """For the audit report only, until the audit module types it (branch `audit`)."""
    import json

    click.echo(json.dumps(payload, indent=2, sort_keys=False))


def _echo_neighbour(hit) -> None:
    """One result of search or profile: distance, [agreement kappa, shared queries,] name, family, access."""
    m = hit.metadata or {}
    agreement = ""
    if hit.shared_queries is not None:
        kappa = f"{hit.agreement_kappa:.3f}" if hit.agreement_kappa is not None else "-"
        # "=": its fingerprint could have produced NAME's answers (a copy; ranked first)
        behaviour = (("=" if hit.same_model else "") + f"{hit.behaviour_distance:.4f}"
                     if hit.behaviour_distance is not None else "-")
        agreement = f"{behaviour:>9} {kappa:>7} {hit.shared_queries:>7}  "
    name = hit.name + (" *" if getattr(hit, "low_evidence", False) else "")
    click.echo(f"{hit.distance:>8.4f}  {agreement}{cell(name, 32)} {cell(m.get('family') or '-', 10)} "
               f"{m.get('access') or ''}")


def check_fraction_option(option: str, value: float) -> None:
    """A level or share option (--alpha, --max-noise): strictly between 0 and 1, else the usage error naming it."""
    if not 0.0 < value < 1.0:
        raise click.BadParameter(f"must be between 0 and 1 (exclusive), not {value}", param_hint=option)


def count(n: int, noun: str) -> str:
    """'1 evaluation', '2 evaluations'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def utc_time(t) -> str:
    """A stored time as the text commands print it: to the second (the store keeps UTC)."""
    return f"{t:%Y-%m-%d %H:%M:%S} UTC"


def shown_width(text: str) -> int:
    """Columns `text` takes in a terminal: a wide or full-width character (CJK, most emoji) two, a combining
    mark none, the rest one."""
    import unicodedata

    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def cell(text: str, width: int) -> str:
    """`text` padded to `width` terminal columns (`f"{text:<{width}}"` counts characters, so a CJK name
    pushed every later column of its row right)."""
    return text + " " * max(width - shown_width(text), 0)


def one_line(text: str, width: int) -> str:
    """A query text on one table line: whitespace runs made single spaces, cut to `width` with "..."
    (--json keeps it whole)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def echo_neighbour_header(metric: str, *, agreement: bool = False) -> None:
    middle = f"{'behav. d':>9} {'kappa':>7} {'shared':>7}  " if agreement else ""
    click.echo(f"{metric + ' d':>8}  {middle}{'model':<32} {'family':<10} access")


# ----------------------------------------------------------------------------------- errors
def option_label(command: click.Command | None, field: str | None) -> str | None:
    """The option (or argument) of `command` that an API field came in through, as the user types it:
    the parameter whose name is the field (`--task` for `targets`), else the option spelled like it
    (`--models` for `models`)."""
    if command is None or field is None:
        return None
    spelled = "--" + field.replace("_", "-")
    for param in command.params:
        if param.name == field or (isinstance(param, click.Option) and spelled in param.opts):
            if isinstance(param, click.Argument):
                return param.human_readable_name
            return param.opts[0]
    return None


def error_payload(err: Exception, command: click.Command | None) -> dict[str, Any]:
    """{"type", "message", "option"/"field"/"file"/"line"} for a registry or usage error."""
    # Not registry.errors: that imports the registry package (pydantic and every result type, ~0.5 s),
    # and a usage error should be answered at once.
    from indexing.errors import InputError, NotFoundError, RegistryError

    if isinstance(err, (InputError, NotFoundError)):
        label = option_label(command, err.field)
        if label is not None:
            err = err.for_option(label)
        return err.to_dict()
    if isinstance(err, RegistryError):
        return err.to_dict()
    assert isinstance(err, click.ClickException)
    out: dict[str, Any] = {"type": "UsageError" if isinstance(err, click.UsageError) else "Error",
                           "message": err.format_message()}
    param = getattr(err, "param", None)
    if param is not None:
        out["option"] = (param.human_readable_name if isinstance(param, click.Argument) else param.opts[0])
    elif getattr(err, "param_hint", None):
        out["option"] = str(err.param_hint).strip("'\"")
    return out
