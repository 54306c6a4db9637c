"""The `registry` command: a thin click layer over `registry.Registry`.

Heavy libraries (torch, sentence-transformers) are imported only by commands that need them, so
`registry --help` and read-only commands start fast.
"""
from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

import click

from cli._common import (
    ERROR_EXIT,
    INTERRUPTED_EXIT,
    Duration,
    EXISTING_FILE,
    FINDING_EXIT,
    _backend,
    _echo_neighbour,
    _registry,
    _server,
    cell,
    check_fraction_option,
    count,
    echo_evidence_note,
    echo_neighbour_header,
    echo_warnings,
    evals_option,
    max_evals_option,
    min_evals_option,
    quiet_thin_warnings,
    shown_width,
    emit,
    error_payload,
    json_option,
    utc_time,
)
# not registry.errors: `--help` should not import the registry package
from indexing.errors import RegistryError

HOME_HELP = "Registry home: a directory, or s3://BUCKET/PREFIX (default: $LOCUS_HOME, else ~/.locus)."


class _HomeType(click.ParamType):
    """A local directory (checked as click.Path checks it), or an s3:// location passed on as text."""

    name = "home"
    _local = click.Path(file_okay=False, path_type=Path)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.startswith("s3://"):
            if not value[len("s3://"):].split("/")[0]:
                self.fail(f"{value!r}: an s3 home is s3://BUCKET/PREFIX", param, ctx)
            return value
        return self._local.convert(value, param, ctx)


_ARGS = "locus.args"  # ctx.meta key: the arguments after the group's own options
_RAW = "locus.raw"  # ctx.meta key: every argument, the group's own options included
SERVER_HELP = ("A running `registry serve` that the commands it serves go through: add-model, refine, remove, "
               "restore, alias, stats, models list, show, history, queries, search, route, audit, drift, profile, "
               "portfolio and compare (default: $LOCUS_SERVER; the bearer token comes from $LOCUS_TOKEN); the others run "
               "here. Without one, route asks a service running for the home, if any; 'none': never.")
GLOBAL_JSON_HELP = "Print results and errors as JSON (as each command's own --json)."


def _asks_for_json(args: list[str]) -> bool:
    """`--json` anywhere before a `--`: an error found while parsing (before the flag's own callback
    ran, or in the group's options) is still printed as JSON."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


class _JsonError(click.ClickException):
    """An error printed as {"error": {...}} on stdout (what a `--json` consumer parses)."""

    exit_code = ERROR_EXIT

    def __init__(self, payload: dict) -> None:
        super().__init__(payload["message"])
        self.payload = payload

    def show(self, file=None) -> None:
        import json

        click.echo(json.dumps({"error": self.payload}, indent=2))


class _CommandError(click.ClickException):
    """The registry's error in one line naming what the user typed."""

    exit_code = ERROR_EXIT


SIGPIPE_EXIT = 128 + 13  # what a shell reports for a process its pipe's reader closed on


def _stdout_closed() -> bool:
    """Whether writing to stdout fails because its reader closed it (not a socket of ours that broke)."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))  # a pipe with no reader left
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or stdout is not a file
        return False


class _Group(click.Group):
    """Turns the registry's own errors into a one-line message naming the option the user typed, and
    every error into JSON under --json; every error exits ERROR_EXIT (click's usage errors already do)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_RAW] = list(args)  # click's parser consumes `args`
        try:
            rest = super().parse_args(ctx, args)
        except click.UsageError as err:  # in the group's own options, e.g. `registry --bogus stats --json`
            if _asks_for_json(ctx.meta[_RAW]):
                raise _JsonError(error_payload(err, None)) from None
            raise
        ctx.meta[_ARGS] = [*getattr(ctx, "_protected_args", []), *ctx.args]
        return rest

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (RegistryError, click.ClickException) as err:
            if isinstance(err, _JsonError):
                raise
            payload = error_payload(err, self._command_of(ctx, ctx.meta.get(_ARGS, [])))
            if self._wants_json(ctx):
                raise _JsonError(payload) from None
            if isinstance(err, click.ClickException):
                err.exit_code = ERROR_EXIT  # click's own (a file it cannot open) say 1, which is a finding's
                raise
            raise _CommandError(payload["message"]) from None
        except (click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:  # click prints "Aborted!" on stderr: a --json consumer read nothing
            if not self._wants_json(ctx):
                raise
            interrupted = _JsonError({"type": "Interrupted", "message": "interrupted (Ctrl-C); a store write under "
                                      "way was rolled back"})
            interrupted.exit_code = INTERRUPTED_EXIT
            raise interrupted from None
        except Exception as err:  # a bug: the traceback goes to stderr, and the exit is an error's, not a finding's
            if isinstance(err, BrokenPipeError) and _stdout_closed():
                # the reader went away (`registry queries | head`): stop quietly, as `git log | head` does;
                # stdout is pointed at /dev/null so that Python's flush at exit does not complain again
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                ctx.exit(SIGPIPE_EXIT)
            import traceback

            traceback.print_exc()
            if self._wants_json(ctx):
                raise _JsonError({"type": "InternalError", "message": f"{type(err).__name__}: {err}"}) from None
            raise _CommandError(f"internal error: {type(err).__name__}: {err} (a bug; the traceback is above)") from None

    @staticmethod
    def _wants_json(ctx: click.Context) -> bool:
        return bool((ctx.obj or {}).get("json") or _asks_for_json(ctx.meta.get(_RAW, ctx.meta.get(_ARGS, []))))

    def _command_of(self, ctx: click.Context, args: list[str]) -> click.Command | None:
        """The (sub)command these arguments name, or None."""
        command: click.Command = self
        try:
            while isinstance(command, click.Group) and args:
                _, command, args = command.resolve_command(ctx, args)
        except click.UsageError:
            return None
        return None if command is self else command


@click.group(cls=_Group)
@click.option("--home", type=_HomeType(), default=None, help=HOME_HELP)
@click.option("--server", envvar="LOCUS_SERVER", default=None, metavar="URL", help=SERVER_HELP)
@click.option("--json", "as_json", is_flag=True, help=GLOBAL_JSON_HELP)
@click.version_option(package_name="locus-registry")
@click.pass_context
def cli(ctx: click.Context, home: Path | str | None, server: str | None, as_json: bool) -> None:
    """A registry of language models, each embedded by LOCUS from its evaluations.

    --home, --server and --json go before or after the command: `registry --home DIR stats` and
    `registry stats --home DIR` are the same."""
    ctx.ensure_object(dict)
    ctx.obj["home"] = home
    ctx.obj["server"] = server
    ctx.obj["json"] = as_json
    _show_waits()


class _Stderr(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)  # the current stderr (click's test runner swaps it)


def _show_waits() -> None:
    """What the library logs for a user who waits (the query encoder's one-time torch-free copy) goes to stderr."""
    logger = logging.getLogger("locus.encoder")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr())
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _keep(key: str):
    """A subcommand's copy of a global option: when given, it overrides the group's (the group's
    callback has already run when a subcommand parses its own options)."""
    def callback(ctx: click.Context, param: click.Parameter, value):
        if value is not None:
            ctx.ensure_object(dict)[key] = value
    return callback


def _add_global_options(group: click.Group) -> None:
    """Give every command under `group` (nested groups too) the group's --home and --server, and
    --json where it has none of its own, so that they work after the command as well as before it."""
    for command in group.commands.values():
        taken = {opt for param in command.params for opt in getattr(param, "opts", ())}
        if "--home" not in taken:
            command.params.append(click.Option(["--home"], type=_HomeType(), default=None, expose_value=False,
                                               callback=_keep("home"), help=HOME_HELP))
        if "--server" not in taken:
            command.params.append(click.Option(["--server"], default=None, metavar="URL", expose_value=False,
                                               callback=_keep("server"), help=SERVER_HELP))
        if "--json" not in taken:
            command.params.append(click.Option(["--json"], is_flag=True, default=None, expose_value=False,
                                               callback=lambda ctx, p, v: _keep("json")(ctx, p, v or None),
                                               help=GLOBAL_JSON_HELP))
        if isinstance(command, click.Group):
            _add_global_options(command)


@cli.command()
@click.option("--encoder", default=None, help="Query encoder for new texts (default all-mpnet-base-v2).")
@json_option
@click.pass_context
def init(ctx: click.Context, encoder: str | None, as_json: bool) -> None:
    """Create the registry home (an embedded LanceDB directory)."""
    reg = _registry(ctx)
    if encoder is not None:
        reg.set_query_encoder(encoder)
    emit(reg.info(), as_json, lambda info: click.echo(f"registry at {info.home} (query encoder: {info.query_encoder})"))


@cli.command("import")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--format", "format_", default="auto", show_default=True,
              type=click.Choice(["auto", "triple", "embedllm", "lm-eval", "jsonl", "parquet"]))
@click.option("--encoder", default=None, help="Query encoder these texts (and --query-embeddings) belong to.")
@click.option("--query-embeddings", type=EXISTING_FILE, default=None,
              help=".npy (queries x dim) of precomputed query vectors for --encoder.")
@click.option("--query-ids", type=EXISTING_FILE, default=None,
              help=".npy of the query ids, one per row of --query-embeddings.")
@click.option("--id-prefix", default="", help="Prefix for this import's query ids (keeps datasets apart).")
@click.option("--no-encode", is_flag=True, help="Store texts without encoding them now.")
@click.option("--model-name", default=None, help="lm-eval: the model's name, overriding the results file.")
@click.option("--metric", default=None, help="lm-eval: the per-sample field to use as the score.")
@click.option("--meta", multiple=True,
              help="key=value set on every model of this import (repeatable), e.g. dataset=bfcl, so that "
                   "--pool/--where 'dataset == bfcl' selects them.")
@json_option
@click.pass_context
def import_(ctx, path, format_, encoder, query_embeddings, query_ids, id_prefix, no_encode, model_name,
            metric, meta, as_json) -> None:
    """Import evaluations from PATH. Lands whole or not at all; repeating it changes nothing."""
    options = {}
    if model_name is not None:
        options["model_name"] = model_name
    if metric is not None:
        options["metric"] = metric
    if options and format_ not in ("auto", "lm-eval"):
        raise click.UsageError("--model-name and --metric apply to --format lm-eval")
    # Progress per stage on stderr (stdout keeps the report); quiet under --json, as `train` is.
    log = None if as_json else (lambda message: click.echo(message, err=True))
    from indexing.home import is_remote, remove_tree, resolve_home

    home = resolve_home(ctx.obj["home"])
    made = not is_remote(home) and not home.exists()
    try:
        report = _registry(ctx).import_path(
            path, format=format_, id_prefix=id_prefix, encoder=encoder, encode=not no_encode,
            query_embeddings=query_embeddings, query_ids=query_ids, metadata=_meta_pairs(meta), log=log, **options,
        )
    except RegistryError:
        # a refused first import leaves no home behind (this command made it); an interrupted one keeps the
        # texts it encoded, for the rerun (docs/cli.md, Progress)
        if made:
            remove_tree(home)
        raise
    echo_warnings(report.warnings)
    emit(report, as_json, _echo_import)


def _echo_import(report) -> None:
    if report.query_encoder_set:
        click.echo(f"the registry was empty: its query encoder is now {report.query_encoder_set} "
                   "(as `registry init --encoder` sets it)")
    click.echo(
        f"imported {report.source}: {report.new_models} new models"
        + (f" ({report.updated_models} stored models' metadata updated)" if report.updated_models else "")
        + f", {report.new_queries} new queries, "
        f"{report.new_evaluations} new evaluations ({report.updated_evaluations} updated, "
        f"{report.unchanged_evaluations} already stored); vectors: {report.stored_precomputed} precomputed, "
        f"{report.encoded_texts} encoded" + (f" with {report.encoder}" if report.encoder else "")
    )


@cli.command()
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts of models, queries, evaluations, tasks and coverage."""
    from indexing.home import resolve_home
    from registry import snapshot

    client = _server(ctx)
    # From the snapshot: no LanceDB import while nothing has changed.
    emit(client.stats() if client else snapshot.stats(resolve_home(ctx.obj["home"])), as_json, _echo_stats)


def _echo_stats(summary) -> None:
    click.echo(f"home:        {summary.home}")
    click.echo(f"models:      {summary.n_models}")
    click.echo(f"queries:     {summary.n_queries:,} in {len(summary.queries_per_task)} tasks")
    click.echo(f"evaluations: {summary.n_evaluations:,} (coverage {summary.coverage:.4f})" + (
        f"; {summary.n_removed_evaluations:,} more of removed models, kept for `registry restore`"
        if summary.n_removed_evaluations else ""))
    for name, n in summary.query_vectors.items():
        click.echo(f"vectors:     {n:,} query vectors from {name}")
    for task, n in summary.queries_per_task.items():
        click.echo(f"  {task:<24} {n:,}")


@cli.group()
def models() -> None:
    """Inspect the models in the registry."""


@models.command("list")
@click.option("--where", default=None, help="Metadata filter, e.g. 'dataset == bfcl and access == open'.")
@json_option
@click.pass_context
def models_list(ctx: click.Context, where: str | None, as_json: bool) -> None:
    """List models with their metadata."""
    from indexing.home import resolve_home
    from registry import snapshot
    from registry.filters import matching
    from registry.results import ModelList

    client = _server(ctx)
    if client is not None:
        emit(ModelList(client.list(where)), as_json, lambda found: _echo_models(found, where))
        return
    listed = snapshot.model_list(resolve_home(ctx.obj["home"]))
    if where is not None:
        keep = set(matching(where, listed.root))
        listed = ModelList([r for r in listed.root if r.name in keep])
    emit(listed, as_json, lambda found: _echo_models(found, where))


def _echo_models(listed, where: str | None) -> None:
    records = listed.root
    if not records:
        click.echo(f"no model matches {where!r}" if where else "no models yet (registry import PATH)")
        return
    width = max(4, max(shown_width(r.name) for r in records))
    click.echo(f"{'name':<{width}}  {'family':<12} {'params':>7}  {'access':<6} {'evals':>7}  provider")
    for r in records:
        size = f"{r.params_b:g}B" if r.params_b is not None else "-"
        evals = "-" if r.n_evals is None else f"{r.n_evals}" + ("*" if r.low_evidence else "")
        click.echo(f"{cell(r.name, width)}  {cell(r.family or '-', 12)} {size:>7}  {cell(r.access or '-', 6)} "
                   f"{evals:>7}  {r.provider or ''}")
    _echo_low_evidence_key(any(r.low_evidence for r in records))


def _echo_low_evidence_key(shown: bool) -> None:
    if shown:
        from registry.evidence import MIN_EVALS

        click.echo(f"* low evidence: embedded from fewer than {MIN_EVALS} evaluations (the documented minimum); "
                   "ranked after the others in search, route fallbacks and clusters unless --min-evals 0")


def _train_config(**options):
    """TrainConfig's defaults with the options the user gave (None = not given)."""
    import dataclasses

    from encoder.training import TrainConfig

    given = {k: v for k, v in options.items() if v is not None}
    if given.pop("no_time_limit", False):
        given["max_seconds"] = None
    try:
        return dataclasses.replace(TrainConfig(), **given)
    except ValueError as err:
        # named by the option the user typed: "view_weight must be ..." is --view-weight's
        named = next((key for key in given if str(err).startswith(key + " ")), None)
        if named is None:
            raise click.UsageError(str(err)) from None
        raise click.BadParameter(str(err)[len(named) + 1:], param_hint=f"--{named.replace('_', '-')}") from None


@cli.command()
@click.option("--evals-per-model", default="1024", show_default=True,
              help="Training evaluations per model (a number, or 'all').")
@click.option("--seed", default=0, show_default=True, help="Seeds the query split, sampling and initialisation.")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="Maximum epochs (default 4000; early stopping usually ends sooner).")
@click.option("--models", "pool", default="all", show_default=True,
              help="Models to train on: all, open, or a filter such as 'family in (llama3, qwen)'.")
@click.option("--max-seconds", type=click.FloatRange(min=1), default=None,
              help="Stop after this much wall time and keep the best checkpoint so far (default: no cap; the result then depends on the load).")
@click.option("--no-time-limit", is_flag=True, help="No wall-time cap (the default; kept for scripts that pass it).")
@click.option("--patience", type=click.IntRange(min=1), default=None,
              help="Stop after this many epochs without a 0.1% improvement of the watched value (default 500).")
@click.option("--select", type=click.Choice(["loss", "auc", "routing"]), default=None,
              help="What selection and early stopping watch on the validation queries (default loss).")
@click.option("--view-weight", type=click.FloatRange(min=0), default=None,
              help="Weight of the term pulling two samples of one model together (default 0).")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Training processes (torch.distributed: gloo on CPU, NCCL with one GPU each), each a share "
                   "of every step's models.")
@json_option(help="Print machine-readable JSON (no progress lines).")
@click.pass_context
def train(ctx, evals_per_model, seed, epochs, pool, max_seconds, no_time_limit, patience, select, view_weight,
          nproc, as_json) -> None:
    """Train the LOCUS encoder and predictor; the checkpoint becomes the active encoder.

    Progress (epoch, validation loss, best so far, elapsed time) goes to stderr."""
    from registry.catalog.embedding import progress_printer

    config = _train_config(epochs=epochs, max_seconds=max_seconds, no_time_limit=no_time_limit, patience=patience,
                           select=select, view_weight=view_weight)
    progress = None if as_json else progress_printer(lambda line: click.echo(line, err=True))
    per_model = evals_option(evals_per_model, "--evals-per-model")
    report = _registry(ctx, create=False).train(models=pool, evals_per_model=per_model,
                                                seed=seed, config=config, progress=progress, nproc=nproc)
    if as_json:
        emit(report, True)
        return
    click.echo(f"trained encoder {report.encoder_id} on {len(report.models)} models "
               f"({report.n_train_queries} train / {report.n_val_queries} validation queries) in {report.seconds:.0f} s; "
               f"stopped after {report.epochs_run} epochs ({report.stopped}); best epoch {report.best_epoch} "
               f"by validation {config.select}: loss {report.val_loss:.4f} (chance {report.val_chance_loss:.4f}), "
               f"AUC {report.val_auc:.3f}, routing accuracy {report.val_routing_accuracy:.4f}")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"checkpoint: {report.checkpoint} (now the active encoder)")


@cli.command()
@json_option
@click.pass_context
def migrate(ctx, as_json) -> None:
    """Upgrade the registry home to this version's store format, in place.

    Each numbered migration (registry/catalog/migrations.py) lands whole or not at all; a home already at the
    current format is left as it is. Write commands refuse an older home until this has run; reads
    work on it meanwhile."""
    report = _registry(ctx, create=False).migrate()
    if as_json:
        import json

        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    if not report.applied:
        click.echo(f"{report.home}: store format {report.to_format}, nothing to migrate")
        return
    for step in report.applied:
        click.echo(f"migrated to format {step}")
    if report.fingerprints is not None:
        click.echo(f"{report.fingerprints} model(s) got a behaviour fingerprint")
    click.echo(f"{report.home}: store format {report.from_format} -> {report.to_format}")


@cli.command("fit-fingerprints")
@json_option
@click.pass_context
def fit_fingerprints(ctx, as_json) -> None:
    """Fit the behaviour-fingerprint item table of the active encoder on the current pool.

    `registry train` fits one itself; run this for an encoder trained before fingerprints existed, or
    after many models were added. Every model's fingerprint column is rewritten with it (one
    transaction); `search NAME --by fingerprint` reads it."""
    emit(_registry(ctx, create=False).fit_fingerprints(), as_json,
         lambda r: click.echo(f"item table {r.table_id} for encoder {r.encoder_id}: {r.queries} queries x rank "
                              f"{r.rank}, fitted on {r.models} models in {r.seconds:.1f} s"))


@cli.command()
@click.option("--all", "all_", is_flag=True, required=True, help="Embed every model in the registry.")
@max_evals_option
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: this process; ray: Ray Data over the evaluations table (pip install 'locus-registry[ray]').")
@click.option("--address", default=None, help="Ray cluster to join (ray://host:10001 or host:6379); "
              "default: start a local one.")
@click.option("--workers", type=int, default=2, show_default=True, help="Ray actors embedding in parallel.")
@json_option
@click.pass_context
def embed(ctx, all_, max_evals, engine, address, workers, as_json) -> None:
    """Embed models with the active encoder: one forward pass each, no training."""
    limit = evals_option(max_evals, "--max-evals")
    report = _registry(ctx, create=False).embed_all(max_evals=limit, engine=engine, address=address, workers=workers)
    echo_warnings(report.warnings)
    emit(report, as_json, lambda r: click.echo(
        f"embedded {r.n_embedded} models with encoder {r.encoder_id}"
        + (f" on Ray ({r.workers} workers, {r.seconds:.1f} s)" if r.engine == "ray" else "")
        + (f"; {r.unchanged} unchanged (no new history row)" if r.unchanged else "")))


@cli.command()
@click.option("--pool", default="all", show_default=True, help="all, open, or a metadata filter.")
@click.option("--evals-per-model", default="1024", show_default=True, help="Training evaluations per model, or 'all'.")
@click.option("--seed", default=0, show_default=True)
@click.option("--holdout-models", default=0, show_default=True, help="Models left out of training, onboarded after.")
@click.option("--onboard-evals", default="16,32,64,128,256,512,1024", show_default=True,
              help="Comma-separated evaluation counts to embed held-out models from.")
@click.option("--cost", is_flag=True,
              help="Also the quality/cost curve: the registry's router over a λ sweep against always-best, "
                   "always-cheapest and random mixing, with RouteLLM-style gap-recovered figures (costs from "
                   "price metadata, else params_b; docs/cli.md 'Prices').")
@click.option("--unpriced", type=click.Choice(["error", "exclude"]), default="error", show_default=True,
              help="With --cost, models with no price and no params_b: an error naming them, or left out of the pool.")
@json_option
@click.pass_context
def evaluate(ctx, pool, evals_per_model, seed, holdout_models, onboard_evals, cost, unpriced, as_json) -> None:
    """LOCUS against EmbedLLM-MF, IRT-Net, kNN, best single model and oracle on held-out queries."""
    try:
        onboard = tuple(int(n) for n in onboard_evals.split(",") if n.strip())
    except ValueError:
        raise click.BadParameter(f"{onboard_evals!r} is not a comma-separated list of numbers",
                                 param_hint="--onboard-evals") from None
    from registry.catalog.embedding import progress_printer

    per_model = evals_option(evals_per_model, "--evals-per-model")
    log = (lambda m: None) if as_json else (lambda m: click.echo(m, err=True))
    result = _registry(ctx, create=False).evaluate(
        pool=pool, evals_per_model=per_model, seed=seed, holdout_models=holdout_models,
        # the default list applies only with held-out models; a list given without them is refused
        onboard_evals=onboard if holdout_models or _given(ctx, "onboard_evals") else (), log=log,
        progress=None if as_json else progress_printer(log), cost=cost, unpriced=unpriced)
    emit(result, as_json, _echo_evaluation)


def _given(ctx, name: str) -> bool:
    """Whether the user typed option `name` (not its default)."""
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


def _echo_evaluation(result) -> None:
    held = len(result.held_out or [])
    click.echo(f"pool: {len(result.pool)} models" + (f" ({held} held out of training, onboarded after)" if held else "")
               + f"; {result.n_test_queries} test queries; {result.evals_per_model} training evaluations per model; "
               f"seed {result.seed}")
    width = max([14, *(len(name) + 2 for name in result.routing_accuracy)])  # "locus+item (logistic)" is 21
    click.echo(f"{'method':<{width}}{'routing':>9}{'correctness':>13}")
    for name, value in result.routing_accuracy.items():
        corr = result.correctness_accuracy.get(name)
        click.echo(f"{name:<{width}}{value:>9.4f}{(f'{corr:.4f}' if corr is not None else '-'):>13}")
    for n, row in (result.onboarding or {}).items():
        click.echo(f"onboarding from {n:>5} evals: correctness {row.correctness_accuracy:.4f}, "
                   f"routing {row.routing_accuracy:.4f}")
    if result.cost_curve is not None:
        from cli.cost import echo_cost_curve

        echo_cost_curve(result.cost_curve)


def _meta_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint="--meta")
        meta[key.strip()] = value
    return meta


@cli.command("add-model")
@click.argument("name")
@click.option("--evals", "evals_file", required=True, type=EXISTING_FILE,
              help="CSV, JSONL or Parquet with columns query (text) or query_id, score, optional task.")
@click.option("--meta", "metadata", multiple=True,
              help="Metadata key=value (family, params_b, provider, endpoint, licence, access, tags, ...).")
@click.option("--replace", is_flag=True, help="Replace a model of the same name (a new version).")
@max_evals_option
@json_option
@click.pass_context
def add_model(ctx, name, evals_file, metadata, replace, max_evals, as_json) -> None:
    """Onboard model NAME from its evaluations: one forward pass of the active encoder, no training."""
    with quiet_thin_warnings():  # the result's warnings are printed below, once
        result = _backend(ctx).add_model(name, evals_file, _meta_pairs(metadata), replace=replace,
                                         max_evals=evals_option(max_evals, "--max-evals"))
    echo_warnings(result.warnings)
    emit(result, as_json, lambda r: click.echo(
        f"{r.event} {r.name} (version {r.version}): embedded from {count(r.n_evals, 'evaluation')} with encoder "
        f"{r.encoder_id}; {count(r.encoded_texts, 'new text')} encoded"))


@cli.command()
@click.argument("name")
@click.option("-k", default=5, show_default=True, help="How many neighbours.")
@click.option("--metric", type=click.Choice(["cosine", "euclidean"]), default=None,
              help="Default: euclidean for fingerprint (the identity distance), cosine for locus.")
@click.option("--where", default=None, help="Metadata filter, e.g. 'access == open and params_b <= 70'.")
@click.option("--by", type=click.Choice(["locus", "fingerprint", "embedding", "behaviour"]), default=None,
              help="The vector searched. fingerprint (default when NAME has one): the behaviour index, the "
                   "models least likely to disagree with NAME's recorded answers on the item table's probe "
                   "queries (behav. d), a copy of NAME first; locus: "
                   "the LOCUS embedding. embedding/behaviour: the old names of locus/fingerprint.")
@min_evals_option("come after the others (marked *; a note names any pushed out of the k)")
@json_option
@click.pass_context
def search(ctx, name, k, metric, where, by, min_evals, as_json) -> None:
    """The models nearest to NAME (NAME itself excluded); says which vector answered."""
    # A current saved index answers without opening LanceDB or importing torch: faster than asking a
    # running service, so search never looks for one.
    result = _backend(ctx).similar(name, k=k, metric=metric, where=where, by=by, min_evals=min_evals)
    echo_evidence_note(result.evidence_note)
    emit(result, as_json, _echo_search)


def _echo_search(result) -> None:
    if not result.neighbours:
        click.echo("no neighbours" + (f" matching {result.where!r}" if result.where else ""))
        return
    click.echo(f"by {result.by} ({result.metric})")
    echo_neighbour_header(result.metric, agreement=result.by == "fingerprint" and result.query is not None)
    for hit in result.neighbours:
        _echo_neighbour(hit)
    _echo_low_evidence_key(any(hit.low_evidence for hit in result.neighbours))


@cli.command()
@click.argument("name")
@json_option
@click.pass_context
def show(ctx, name, as_json) -> None:
    """A model's record, metadata and embedding summary (NAME may be an alias)."""
    from indexing.home import resolve_home
    from registry import snapshot

    client = _server(ctx)
    emit(client.show(name) if client else snapshot.model_info(resolve_home(ctx.obj["home"]), name), as_json, _echo_show)


def _echo_show(info) -> None:
    from datetime import datetime

    def plain(value) -> str:  # as a person reads it: no Python reprs of lists and dicts, times to the second
        if isinstance(value, datetime):
            return utc_time(value)
        if isinstance(value, (list, tuple)):
            return ", ".join(map(str, value))
        if isinstance(value, dict):
            return ", ".join(f"{k}={v}" for k, v in value.items())
        return str(value)

    fields = {**info.record.model_dump(), **info.model_dump(exclude={"record"})}
    for key, value in fields.items():
        if value not in (None, [], {}) and not (key == "low_evidence" and not value):
            # a free-text metadata value may hold line breaks: its later lines stay in the value's column
            click.echo(f"{key:<12} " + plain(value).replace("\r\n", "\n").replace("\n", "\n" + " " * 13))
    _echo_low_evidence_key(info.low_evidence)


@cli.command()
@click.argument("name")
@json_option
@click.pass_context
def history(ctx, name, as_json) -> None:
    """Every version of a model, oldest first (NAME may be an alias)."""
    from indexing.home import resolve_home
    from registry import snapshot

    client = _server(ctx)
    emit(client.history(name) if client else snapshot.history(resolve_home(ctx.obj["home"]), name), as_json, lambda h: [
        click.echo(f"v{v.version:<3} {v.event:<8} {utc_time(v.time)}  " + (
            f"encoder {v.encoder_id}  {v.n_evals} evals" if v.encoder_id else "not embedded"))  # imported, never embedded
        for v in h.versions])


@cli.command()
@click.argument("name")
@json_option
@click.pass_context
def remove(ctx, name, as_json) -> None:
    """Remove a model (restorable: `registry restore NAME`)."""
    def show(r) -> None:
        click.echo(f"removed {r.name} (registry restore {shlex.quote(r.name)} brings it back)")
        if r.aliases:
            click.echo(f"aliases pointing at it, kept and answering 'removed' until the model is restored or they "
                       f"are re-pointed (registry alias set ALIAS NAME): {', '.join(r.aliases)}")

    emit(_backend(ctx).remove(name), as_json, show)


@cli.command()
@click.argument("name")
@click.option("--version", type=int, default=None, help="The version to restore (default, for a removed model: the latest; a live model needs one).")
@json_option
@click.pass_context
def restore(ctx, name, version, as_json) -> None:
    """Restore a removed model, or an older version of one, from its history."""
    def show(r) -> None:
        if r.restored:
            click.echo(f"restored {r.name} from version {r.restored_version} (now version {r.version})")
        elif r.version == r.restored_version:
            click.echo(f"{r.name} is version {r.version} already: nothing to restore")
        else:
            click.echo(f"{r.name} is version {r.version}, a restore of version {r.restored_version}, already: nothing to restore")

    emit(_backend(ctx).restore(name, version), as_json, show)


@cli.command()
@click.option("--model", default=None, help="Audit one model against its nearest neighbours (the CI call for a "
              "new endpoint; default: every model).")
@click.option("--metric", type=click.Choice(["cosine", "euclidean"]), default="cosine", show_default=True)
@click.option("-k", "--neighbours", "k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Nearest neighbours of each model proposed as candidates.")
@click.option("--alpha", type=float, default=0.01, show_default=True,
              help="Chance of any false flag in the run, over its candidates (Holm); level of the other tests.")
@click.option("--max-noise", type=float, default=0.12, show_default=True,
              help="Largest share of answers on which one model re-run or re-served may differ.")
@json_option(help="Print the AuditReport as JSON.")
@click.option("--fail-on-flag", is_flag=True, help="Exit 1 when a pair is labelled duplicate (for CI).")
@click.option("--fail-on-related", is_flag=True,
              help="Exit 1 also when a pair is labelled 'same product line?' (snapshots, fine-tunes, degraded copies).")
@click.option("--by", type=click.Choice(["locus", "fingerprint", "embedding", "behaviour"]), default=None,
              help="The index proposing candidates: locus, fingerprint (default: both; a copy is found by "
                   "whichever sees it, the evaluations then decide).")
@click.option("--drift", "drift_run", is_flag=True,
              help="Instead: `registry drift` for every model given a version since the last --drift run "
                   "(marker: last_drift_log_rows in the home's config.json); exit 1 when one moved (for CI).")
@click.pass_context
def audit(ctx, model, metric, k, alpha, max_noise, as_json, fail_on_flag, fail_on_related, by, drift_run) -> None:
    """Flag models that are likely the same model behind different endpoints.

    Each model's k nearest neighbours in the index are candidates; each pair is judged on its
    evaluations: agreement beyond what two distinct models of their abilities show in this pool is a
    flag, labelled duplicate, or "same product line?" when their differences are systematic."""
    if drift_run:
        from cli.drift import run_drift_audit

        if model is not None:  # it ran every model, and moved the marker past them all
            raise click.UsageError(f"--drift runs every model refined since the last run; one model's drift: "
                                   f"`registry drift {shlex.quote(model)}`")
        from click.core import ParameterSource

        # the duplicate audit's options: a pipeline writing `--drift --fail-on-flag` must not pass green on duplicates
        spelled = {"metric": "--metric", "k": "-k", "by": "--by", "fail_on_flag": "--fail-on-flag",
                   "fail_on_related": "--fail-on-related"}
        given = [flag for name, flag in spelled.items()
                 if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
        if given:
            raise click.UsageError(f"{', '.join(given)} {'belongs' if len(given) == 1 else 'belong'} to the duplicate "
                                   "audit, which --drift does not run "
                                   "(it exits 1 when a model moved): run `registry audit` and `registry audit --drift` "
                                   "as two steps")

        return run_drift_audit(ctx, alpha=alpha, max_noise=max_noise, as_json=as_json)
    check_fraction_option("--alpha", alpha)
    check_fraction_option("--max-noise", max_noise)
    report = _backend(ctx).audit(model=model, metric=metric, k=k, alpha=alpha, max_noise=max_noise, by=by)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        cal = report.calibration
        scope = f"model {report.model}" if report.model else f"{report.models} models"
        nearest = f"{report.k} nearest by embedding and by fingerprint" if report.by_fingerprint else \
            f"{report.k} nearest neighbours"
        click.echo(f"{scope}: {report.candidates} candidate pairs ({nearest}, {metric}); "
                   f"pool calibration over {cal.models} models and {cal.reference_pairs} reference pairs"
                   + (" (cached" + (", from an older generation" if cal.stale else "") + ")" if cal.cached else ""))
        for f in report.flags:
            tag = "DUPLICATE" if f.label == "duplicate" else "SAME PRODUCT LINE?"
            by = "" if f.proposed_by != "fingerprint" else " by fingerprint"
            click.echo(f"{tag} {f.a} ~ {f.b} (distance {f.distance:.4f}, neighbour {f.neighbour_rank}{by}): {f.reason}")
        for u in report.untested:
            click.echo(f"UNTESTED {u.a} ~ {u.b}: {u.reason}")
        click.echo(f"{len(report.cleared)} of {report.candidates} candidate pairs cleared by their evaluations; "
                   f"{len(report.duplicates)} duplicate(s), {len(report.related)} same product line?")
    if (fail_on_flag or fail_on_related) and report.duplicates:
        ctx.exit(FINDING_EXIT)
    if fail_on_related and report.related:
        ctx.exit(FINDING_EXIT)


@cli.command()
@json_option
@click.pass_context
def check(ctx, as_json) -> None:
    """Consistency check: the index agrees with the models table, every evaluation names a stored query.
    Exits 1 when anything is wrong."""
    result = _registry(ctx, create=False).check()
    emit(result, as_json, lambda r: click.echo("\n".join(
        ([f"PROBLEM {p}" for p in r.problems] or ["consistent: index, tables and evaluations agree"])
        + [f"NOTE {n}" for n in r.notes])))
    if not result.ok:
        ctx.exit(FINDING_EXIT)


@cli.command()
@click.option("--keep-versions-for", type=Duration(), default="1h", show_default=True,
              help="Keep the table versions superseded within this span (30m, 1h, 7d; 0: only the latest): "
                   "a process that opened one then can still read it.")
@json_option
@click.pass_context
def compact(ctx, keep_versions_for, as_json) -> None:
    """Merge the store's tables into few files and remove their old versions.

    Every write leaves a fragment and a version in each table it writes: reads and writes slow down as
    they pile up, and disk grows (`registry check` says when). The rows are unchanged; writes wait while
    it runs; a `registry serve` beside it goes on (it re-opens the tables after any write)."""
    report = _registry(ctx, create=False).compact(keep_versions_for=keep_versions_for)

    def text(r) -> None:
        def size(n) -> str:
            return "-" if n is None else f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"

        click.echo(f"{'table':<26} {'fragments':^15} {'versions':^15} {'on disk':^22}")
        for t in r.tables:
            click.echo(f"{t.table:<26} {t.fragments[0]:>7,} -> {t.fragments[1]:<4,} {t.versions[0]:>7,} -> "
                       f"{t.versions[1]:<4,} {size(t.bytes[0]):>9} -> {size(t.bytes[1])}")
        kept = ("only the latest version of each table kept" if not r.keep_versions_for_seconds else
                f"versions superseded within the last {Duration.spell(r.keep_versions_for_seconds)} kept")
        click.echo(f"compacted in {r.seconds:.1f} s; {kept}")

    emit(report, as_json, text)


@cli.command()
@click.option("--data", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Build from this triple-format directory instead of the synthetic pool.")
@click.option("--seed", default=0, show_default=True)
@click.option("--epochs", default=150, show_default=True,
              help="Training budget in epochs (no wall-clock cap) when no encoder is active yet.")
@json_option
@click.pass_context
def demo(ctx: click.Context, data: Path | None, seed: int, epochs: int, as_json: bool) -> None:
    """The main job: build a registry (synthetic pool unless --data), train, embed, search, audit."""
    from registry.lab.demo import run_demo

    home = ctx.obj["home"] or Path("locus-demo")
    report = run_demo(home, data=data, seed=seed, echo=(lambda line: None) if as_json else click.echo,
                      epochs=epochs)
    emit(report, as_json)


def _register_analytics() -> None:
    from cli import catalog_commands, drift, families, portfolio, queries, route, serve, suggest

    for module in (route, portfolio, families, catalog_commands, queries, serve, drift, suggest):
        for command in module.COMMANDS:
            cli.add_command(command)
    _add_global_options(cli)


_register_analytics()


def main() -> None:  # pragma: no cover - console entry point alias
    cli(obj={})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
