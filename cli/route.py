"""`registry` commands: profile and route (thin over `registry.Registry`)."""
from __future__ import annotations

import math

import click

from cli._common import (_backend, _echo_neighbour, echo_evidence_note, echo_neighbour_header, emit,
                         json_option, min_evals_option)


def _parse_tasks(ctx, param, values) -> dict[str, float]:
    targets: dict[str, float] = {}
    for value in values:
        task, sep, number = value.partition("=")
        task, number = task.strip(), number.strip()
        if not sep or not task:
            raise click.BadParameter(f"{value!r} is not TASK=ACCURACY (e.g. math=0.8)", ctx=ctx, param=param)
        try:
            accuracy = float(number)
        except ValueError:
            raise click.BadParameter(f"{value!r}: the accuracy {number!r} is not a number", ctx=ctx,
                                     param=param) from None
        if math.isnan(accuracy) or not 0.0 <= accuracy <= 1.0:
            raise click.BadParameter(f"{value!r}: the accuracy must be in [0, 1]", ctx=ctx, param=param)
        if task in targets:
            raise click.BadParameter(f"task {task!r} is given twice", ctx=ctx, param=param)
        targets[task] = accuracy
    return targets  # none at all is refused by the command, after Click has named any stray argument


@click.command()
@click.option("--task", "targets", multiple=True, callback=_parse_tasks, metavar="TASK=ACCURACY",
              help="A task and the accuracy wanted on it, in [0, 1]; repeat for more tasks.")
@click.option("-k", default=5, show_default=True, help="How many models.")
@click.option("--evals", default=512, show_default=True, help="Synthetic evaluations in the hypothetical set.")
@click.option("--seed", default=0, show_default=True, help="Seed of the query sample and the synthetic scores.")
@click.option("--where", default=None, help="Metadata filter, e.g. 'access == open and params_b <= 70'.")
@click.option("--by", type=click.Choice(["locus", "fingerprint", "embedding", "behaviour"]), default=None,
              help="Make the hypothetical set into a LOCUS embedding (default) or a behaviour fingerprint.")
@json_option
@click.pass_context
def profile(ctx, targets, k, evals, seed, where, by, as_json) -> None:
    """Real models nearest to a hypothetical one with these task accuracies (appendix E.1)."""
    if not targets:
        raise click.BadParameter("name at least one task, e.g. --task math=0.8", ctx=ctx, param_hint="'--task'")
    result = _backend(ctx).profile(targets, k=k, evals=evals, seed=seed, where=where, by=by)
    emit(result, as_json, _echo_profile)


def _echo_profile(result) -> None:
    def sample(task: str) -> str:
        drawn = result.per_task[task]
        repeated = (f" of {drawn.n_queries} queries, drawn again" if drawn.n_queries < drawn.n_evals else "")
        return f"sampled {drawn.sampled_accuracy:.2f} over {drawn.n_evals}{repeated}"

    wanted = ", ".join(f"{t} {a:.2f} ({sample(t)})" for t, a in result.targets.items())
    click.echo(f"hypothetical model from {result.n_evals} synthetic evaluations: {wanted}")
    echo_neighbour_header("cosine" if result.by == "locus" else "euclidean")
    for hit in result.neighbours:
        _echo_neighbour(hit)


@click.command()
@click.argument("query")
@click.option("-k", default=3, show_default=True, help="How many models to rank.")
@click.option("--exclude", multiple=True, metavar="NAME", help="A model that must not be used; repeatable.")
@click.option("--where", default=None, help="Metadata filter, e.g. 'access == open and params_b <= 70'.")
@click.option("--fallback", default=3, show_default=True, help="How many fallback models (neighbours of the top one).")
@click.option("--by", type=click.Choice(["locus", "fingerprint", "embedding", "behaviour"]), default=None,
              help="The index the fallbacks come from: fingerprint (default when the top model has one: models "
                   "that answer as it does) or locus. The ranking is the router's whatever --by says (LOCUS "
                   "blended with the item table and kNN over the stored queries, as `registry train` fitted it).")
@min_evals_option("come after the others, in the ranking and among the fallbacks (marked; a note names any pushed out)")
@click.option("--max-cost", type=float, default=None, metavar="USD",
              help="Only models whose cost per call is at most USD (price metadata, else the params_b proxy; see "
                   "docs/cli.md 'Prices').")
@click.option("--willingness-to-pay", type=float, default=None, metavar="LAMBDA",
              help="Rank by P(correct) - LAMBDA * cost per call (USD): 0 ignores cost, larger prefers cheaper models.")
@click.option("--unpriced", type=click.Choice(["error", "exclude"]), default="error", show_default=True,
              help="Under --max-cost/--willingness-to-pay, models with no price and no params_b: an error naming "
                   "them, or left out (named).")
@json_option
@click.pass_context
def route(ctx, query, k, exclude, where, fallback, by, min_evals, max_cost, willingness_to_pay, unpriced,
          as_json) -> None:
    """The models most likely to answer QUERY correctly, and fallbacks for the top one (appendix E.2)."""
    backend = _backend(ctx, names=tuple(exclude))
    options = {"by": by} if by is not None else {}  # an older running service takes no `by`
    if max_cost is not None or willingness_to_pay is not None:  # nor a trade-off: sent only when asked
        options.update(max_cost=max_cost, willingness_to_pay=willingness_to_pay, unpriced=unpriced)
    result = backend.route(query, k=k, exclude=exclude, where=where, fallback=fallback, min_evals=min_evals, **options)
    echo_evidence_note(result.evidence_note)
    emit(result, as_json, _echo_route)


def _mark(item) -> str:
    return " (low evidence)" if item.low_evidence else ""


def _echo_route(result) -> None:
    if result.max_cost is not None or result.willingness_to_pay is not None:
        _echo_cost_ranking(result)
    else:
        click.echo("P(correct)  model")
        for r in result.ranking:
            click.echo(f"{r.p_correct:.4f}      {r.name}{_mark(r)}")
    if result.fallbacks:
        top = result.ranking[0].name
        what = {"behaviour": "behaviour distance", "euclidean": "fingerprint distance"}.get(
            result.fallbacks[0].metric, "cosine distance")
        click.echo(f"if {top} is unavailable ({what} to it): " +
                   ", ".join(f"{f.name} (d {(f.distance if f.distance is not None else f.distance_cosine):.4f}){_mark(f)}"
                             for f in result.fallbacks))
    if result.predictor != "locus":
        click.echo(f"(P(correct): {result.predictor_description} by the encoder's router blend)")


def _utility(value: float) -> str:
    """P(correct) - λ·cost: four decimals while it reads as a probability's scale, else in e-notation."""
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.3e}"


def _echo_cost_ranking(result) -> None:
    asked = [f"max cost ${result.max_cost:g} per call"] if result.max_cost is not None else []
    if result.willingness_to_pay is not None:
        asked.append(f"ranked by P(correct) - {result.willingness_to_pay:g} x cost")
    click.echo("; ".join(asked))
    utility = result.willingness_to_pay is not None
    click.echo("P(correct)  cost $/call  source      " + ("utility  " if utility else "") + "model")
    for r in result.ranking:
        click.echo(f"{r.p_correct:.4f}      {r.cost_usd:<11.6g}  {r.cost_source:<10}  "
                   + (f"{_utility(r.utility):<7}  " if utility else "") + f"{r.name}{_mark(r)}"
                   + (f" ({r.latency_ms:g} ms)" if r.latency_ms is not None else ""))
    if result.cost_note:
        click.echo(f"note: {result.cost_note}")


COMMANDS: list[click.Command] = [profile, route]
