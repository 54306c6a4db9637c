"""The `registry` command: a thin click layer over `registry.Registry`.

Heavy libraries (torch, sentence-transformers) are imported only by commands that need them, so
`registry --help` and read-only commands start fast.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from cli._common import _echo_json, _echo_neighbour, _echo_neighbour_header, _registry
from registry.errors import RegistryError

HOME_HELP = "Registry home directory (default: $LOCUS_HOME, else ~/.locus)."


class _Group(click.Group):
    """Turns the registry's own errors into a one-line message and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RegistryError as err:
            raise click.ClickException(str(err)) from None


@click.group(cls=_Group)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=None, help=HOME_HELP)
@click.version_option(package_name="locus-registry")
@click.pass_context
def cli(ctx: click.Context, home: Path | None) -> None:
    """A registry of language models, each embedded by LOCUS from its evaluations."""
    ctx.ensure_object(dict)
    ctx.obj["home"] = home


@cli.command()
@click.option("--encoder", default=None, help="Query encoder for new texts (default all-mpnet-base-v2).")
@click.pass_context
def init(ctx: click.Context, encoder: str | None) -> None:
    """Create the registry home (an embedded LanceDB directory)."""
    reg = _registry(ctx)
    if encoder:
        reg.set_query_encoder(encoder)
    click.echo(f"registry at {reg.home} (query encoder: {reg.query_encoder})")


@cli.command("import")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--format", "format_", default="auto", show_default=True,
              type=click.Choice(["auto", "triple", "embedllm", "lm-eval", "jsonl", "parquet"]))
@click.option("--encoder", default=None, help="Query encoder these texts (and --query-embeddings) belong to.")
@click.option("--query-embeddings", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=".npy (queries x dim) of precomputed query vectors for --encoder.")
@click.option("--query-ids", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=".npy of the query ids, one per row of --query-embeddings.")
@click.option("--id-prefix", default="", help="Prefix for this import's query ids (keeps datasets apart).")
@click.option("--no-encode", is_flag=True, help="Store texts without encoding them now.")
@click.option("--model-name", default=None, help="lm-eval: the model's name, overriding the results file.")
@click.option("--metric", default=None, help="lm-eval: the per-sample field to use as the score.")
@click.option("--json", "as_json", is_flag=True, help="Print the import report as JSON.")
@click.pass_context
def import_(ctx, path, format_, encoder, query_embeddings, query_ids, id_prefix, no_encode, model_name,
            metric, as_json) -> None:
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
    report = _registry(ctx).import_path(
        path, format=format_, id_prefix=id_prefix, encoder=encoder, encode=not no_encode,
        query_embeddings=query_embeddings, query_ids=query_ids, log=log, **options,
    )
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        _echo_json({k: v for k, v in vars(report).items()})
        return
    if report.query_encoder_set:
        click.echo(f"the registry was empty: its query encoder is now {report.query_encoder_set} "
                   "(as `registry init --encoder` sets it)")
    click.echo(
        f"imported {report.source}: {report.new_models} new models, {report.new_queries} new queries, "
        f"{report.new_evaluations} new evaluations ({report.updated_evaluations} updated, "
        f"{report.unchanged_evaluations} already stored); vectors: {report.stored_precomputed} precomputed, "
        f"{report.encoded_texts} encoded" + (f" with {report.encoder}" if report.encoder else "")
    )


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts of models, queries, evaluations, tasks and coverage."""
    from indexing.home import resolve_home
    from registry import snapshot

    home = resolve_home(ctx.obj["home"])
    summary = snapshot.stats(home)  # no LanceDB import while nothing has changed
    if as_json:
        _echo_json(summary)
        return
    click.echo(f"home:        {home}")
    click.echo(f"models:      {summary['models']}")
    click.echo(f"queries:     {summary['queries']} in {len(summary['tasks'])} tasks")
    click.echo(f"evaluations: {summary['evaluations']} (coverage {summary['coverage']:.4f})")
    for name, n in summary["query_vectors"].items():
        click.echo(f"vectors:     {n} query vectors from {name}")
    for task, n in summary["tasks"].items():
        click.echo(f"  {task:<24} {n}")


@cli.group()
def models() -> None:
    """Inspect the models in the registry."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def models_list(ctx: click.Context, as_json: bool) -> None:
    """List models with their metadata."""
    from indexing.home import resolve_home
    from registry import snapshot

    rows = snapshot.model_records(resolve_home(ctx.obj["home"]))
    if as_json:
        _echo_json(rows)
        return
    if not rows:
        click.echo("no models yet (registry import PATH)")
        return
    width = max(4, max(len(r["name"]) for r in rows))
    click.echo(f"{'name':<{width}}  {'family':<12} {'params':>7}  {'access':<6} provider")
    for r in rows:
        size = f"{r['params_b']:g}B" if r["params_b"] is not None else "-"
        click.echo(f"{r['name']:<{width}}  {r['family'] or '-':<12} {size:>7}  {r['access'] or '-':<6} "
                   f"{r['provider'] or ''}")


def _evals_option(value: str) -> int | None:
    return None if value == "all" else int(value)


@cli.command()
@click.option("--evals-per-model", default="1024", show_default=True,
              help="Training evaluations per model (a number, or 'all').")
@click.option("--seed", default=0, show_default=True, help="Seeds the query split, sampling and initialisation.")
@click.option("--epochs", type=int, default=None,
              help="Maximum epochs (default 4000; early stopping on validation loss may end sooner).")
@click.option("--models", "pool", default="all", show_default=True,
              help="Models to train on: all, open, or a filter such as 'family in (llama3, qwen)'.")
@click.option("--max-seconds", type=click.FloatRange(min=1), default=None,
              help="Stop after this much wall time and keep the best checkpoint so far.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def train(ctx, evals_per_model, seed, epochs, pool, max_seconds, as_json) -> None:
    """Train the LOCUS encoder and predictor; the checkpoint becomes the active encoder."""
    options = {} if max_seconds is None else {"max_seconds": max_seconds}
    report = _registry(ctx, create=False).train(models=pool, evals_per_model=_evals_option(evals_per_model),
                                                seed=seed, epochs=epochs, progress=not as_json, **options)
    if as_json:
        _echo_json(vars(report))
        return
    click.echo(f"trained encoder {report.encoder_id} on {len(report.models)} models "
               f"({report.n_train_queries} train / {report.n_val_queries} validation queries) in {report.seconds:.0f} s; "
               f"best epoch {report.best_epoch} (by validation loss), validation routing accuracy "
               f"{report.val_routing_accuracy:.4f}")
    click.echo(f"checkpoint: {report.checkpoint} (now the active encoder)")


@cli.command()
@click.option("--all", "all_", is_flag=True, required=True, help="Embed every model in the registry.")
@click.option("--max-evals", default="all", show_default=True,
              help="Evaluations per model to embed from: 'all', or a number (a seeded sample).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def embed(ctx, all_, max_evals, as_json) -> None:
    """Embed models with the active encoder: one forward pass each, no training."""
    summary = _registry(ctx, create=False).embed_all(max_evals=_evals_option(max_evals))
    if as_json:
        _echo_json(summary)
        return
    click.echo(f"embedded {summary['embedded']} models with encoder {summary['encoder_id']}")


@cli.command()
@click.option("--pool", default="all", show_default=True, help="all, open, or a metadata filter.")
@click.option("--evals-per-model", default="1024", show_default=True, help="Training evaluations per model, or 'all'.")
@click.option("--seed", default=0, show_default=True)
@click.option("--holdout-models", default=0, show_default=True, help="Models left out of training, onboarded after.")
@click.option("--onboard-evals", default="16,32,64,128,256,512,1024", show_default=True,
              help="Comma-separated evaluation counts to embed held-out models from.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def evaluate(ctx, pool, evals_per_model, seed, holdout_models, onboard_evals, as_json) -> None:
    """LOCUS against EmbedLLM-MF, IRT-Net, kNN, best single model and oracle on held-out queries."""
    try:
        onboard = tuple(int(n) for n in onboard_evals.split(",") if n.strip())
    except ValueError:
        raise click.BadParameter(f"{onboard_evals!r} is not a comma-separated list of numbers",
                                 param_hint="--onboard-evals") from None
    log = (lambda m: None) if as_json else (lambda m: click.echo(m, err=True))
    try:
        result = _registry(ctx, create=False).evaluate(
            pool=pool, evals_per_model=_evals_option(evals_per_model), seed=seed, holdout_models=holdout_models,
            onboard_evals=onboard if holdout_models else (), progress=not as_json, log=log)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    if as_json:
        _echo_json(result)
        return
    click.echo(f"pool: {len(result['pool'])} models; {result['n_test_queries']} test queries; "
               f"{result['evals_per_model']} training evaluations per model; seed {result['seed']}")
    click.echo(f"{'method':<14}{'routing':>9}{'correctness':>13}")
    for name, value in result["routing_accuracy"].items():
        corr = result["correctness_accuracy"].get(name)
        click.echo(f"{name:<14}{value:>9.4f}{(f'{corr:.4f}' if corr is not None else '-'):>13}")
    for n, row in result.get("onboarding", {}).items():
        click.echo(f"onboarding from {n:>5} evals: correctness {row['correctness_accuracy']:.4f}, "
                   f"routing {row['routing_accuracy']:.4f}")


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
@click.option("--evals", "evals_file", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="CSV, JSONL or Parquet with columns query (text) or query_id, score, optional task.")
@click.option("--meta", multiple=True, help="Metadata key=value (family, params_b, provider, endpoint, licence, access, tags, ...).")
@click.option("--replace", is_flag=True, help="Replace a model of the same name (a new version).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def add_model(ctx, name, evals_file, meta, replace, as_json) -> None:
    """Onboard model NAME from its evaluations: one forward pass of the active encoder, no training."""
    result = _registry(ctx, create=False).add_model(name, evals_file, _meta_pairs(meta), replace=replace)
    for warning in result.pop("warnings", []):
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        _echo_json(result)
        return
    click.echo(f"{result['event']} {name} (version {result['version']}): embedded from {result['n_evals']} "
               f"evaluations with encoder {result['encoder_id']}; {result['encoded_texts']} new texts encoded")


@cli.command()
@click.argument("name")
@click.option("-k", default=5, show_default=True, help="How many neighbours.")
@click.option("--metric", type=click.Choice(["cosine", "euclidean"]), default="cosine", show_default=True)
@click.option("--where", default=None, help="Metadata filter, e.g. 'access == open and params_b <= 70'.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def search(ctx, name, k, metric, where, as_json) -> None:
    """The models nearest to NAME in embedding space (NAME itself excluded)."""
    from indexing.home import resolve_home
    from registry.search import similar

    # Straight to the search module with the home path: a current saved index answers without
    # opening LanceDB or importing torch.
    home = resolve_home(ctx.obj["home"])
    if not home.is_dir():
        raise click.ClickException(f"no registry at {home} (run `registry init`)")
    results = similar(home, name, k=k, metric=metric, where=where)
    if as_json:
        _echo_json({"query": name, "metric": metric, "results": results})
        return
    if not results:
        click.echo("no neighbours" + (f" matching {where!r}" if where else ""))
        return
    _echo_neighbour_header()
    for r in results:
        _echo_neighbour(r)


@cli.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def show(ctx, name, as_json) -> None:
    """A model's record, metadata and embedding summary (NAME may be an alias)."""
    from indexing.home import resolve_home
    from registry import snapshot

    info = snapshot.model_info(resolve_home(ctx.obj["home"]), name)
    if as_json:
        _echo_json(info)
        return
    for key, value in info.items():
        if value not in (None, [], {}):
            click.echo(f"{key:<12} {value}")


@cli.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def history(ctx, name, as_json) -> None:
    """Every version of a model, oldest first (NAME may be an alias)."""
    from indexing.home import resolve_home
    from registry import snapshot

    rows = snapshot.history(resolve_home(ctx.obj["home"]), name)
    if as_json:
        _echo_json([{k: (str(v) if k == "time" else v) for k, v in r.items() if k not in ("vector", "record")}
                    for r in rows])
        return
    for r in rows:
        click.echo(f"v{r['version']:<3} {r['event']:<8} {r['time']:%Y-%m-%d %H:%M:%S}  encoder {r['encoder_id']}  "
                   f"{r['n_evals']} evals")


@cli.command()
@click.argument("name")
@click.pass_context
def remove(ctx, name) -> None:
    """Remove a model (restorable: `registry restore NAME`)."""
    _registry(ctx, create=False).remove(name)
    click.echo(f"removed {name} (registry restore {name} brings it back)")


@cli.command()
@click.argument("name")
@click.option("--version", type=int, default=None, help="The version to restore (default: the latest).")
@click.pass_context
def restore(ctx, name, version) -> None:
    """Restore a removed model, or an older version of one, from its history."""
    result = _registry(ctx, create=False).restore(name, version)
    click.echo(f"restored {name} from version {result['restored_version']} (now version {result['version']})")


@cli.command()
@click.option("--model", default=None, help="Check one model against the rest (default: every pair).")
@click.option("--metric", type=click.Choice(["cosine", "euclidean"]), default="cosine", show_default=True)
@click.option("--quantile", default=0.99, show_default=True, help="Quantile of self-spread used as the threshold.")
@click.option("--tolerance", default=0.10, show_default=True,
              help="Share of shared queries on which two endpoints of one model may disagree.")
@click.option("--alpha", default=0.01, show_default=True,
              help="Test level at which the evaluations clear a close pair as two different models.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--fail-on-flag", is_flag=True, help="Exit 1 when any pair is flagged (for CI).")
@click.pass_context
def audit(ctx, model, metric, quantile, tolerance, alpha, as_json, fail_on_flag) -> None:
    """Flag models that are likely the same model behind different endpoints.

    Pairs whose embeddings sit within a model's own self-spread are candidates; each is then tested
    on the evaluations both hold and cleared when they show two different models."""
    result = _registry(ctx, create=False).audit(model=model, metric=metric, quantile=quantile,
                                                tolerance=tolerance, alpha=alpha)
    if as_json:
        _echo_json(result)
    else:
        click.echo(f"{result['models']} models; threshold {result['threshold']:.4f} ({metric} distance, "
                   f"{quantile:.2f} quantile of self-spread over {result['self_spread']['models']} models); "
                   f"closest distinct pair {result['distinct']['min']:.4f}")
        for f in result["flags"]:
            ev = f["evidence"]
            shared = (f"{ev['disagreement']:.1%} disagreement on {ev['shared_queries']} shared queries"
                      if ev["disagreement"] is not None else "no shared queries to compare")
            click.echo(f"FLAG {f['a']} ~ {f['b']}: distance {f['distance']:.4f}, "
                       f"P(distinct models this close) {f['score']:.4f}; {shared}")
        click.echo(f"{len(result['cleared'])} of {result['candidates']} close pairs cleared by their evaluations")
        if not result["flags"]:
            click.echo("no likely duplicates")
    if fail_on_flag and result["flags"]:
        ctx.exit(1)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def check(ctx, as_json) -> None:
    """Consistency check: the index agrees with the models table, every evaluation names a stored query.
    Exits 1 when anything is wrong."""
    problems = _registry(ctx, create=False).check()
    if as_json:
        _echo_json({"ok": not problems, "problems": problems})
    else:
        click.echo("\n".join(f"PROBLEM {p}" for p in problems) or "consistent: index, tables and evaluations agree")
    if problems:
        ctx.exit(1)


@cli.command()
@click.option("--data", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Build from this triple-format directory instead of the synthetic pool.")
@click.option("--seed", default=0, show_default=True)
@click.option("--epochs", default=150, show_default=True,
              help="Training budget in epochs (the demo also stops at 60 s) when no encoder is active yet.")
@click.pass_context
def demo(ctx: click.Context, data: Path | None, seed: int, epochs: int) -> None:
    """The main job: build a registry (synthetic pool unless --data), train, embed, search, audit."""
    from registry.demo import run_demo

    home = ctx.obj["home"] or Path("locus-demo")
    run_demo(home, data=data, seed=seed, echo=click.echo, epochs=epochs)


def _register_analytics() -> None:
    from cli import catalog_commands, families, portfolio, route

    for module in (route, portfolio, families, catalog_commands):
        for command in module.COMMANDS:
            cli.add_command(command)


_register_analytics()


def main() -> None:  # pragma: no cover - console entry point alias
    cli(obj={})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
