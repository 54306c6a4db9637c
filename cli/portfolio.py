"""`registry` commands: portfolio (thin over `registry.Registry`)."""
from __future__ import annotations

import click

from cli._common import _backend, echo_warnings, emit, json_option

def parse_budget(text: str) -> float:
    """'150B', '150b' or '150' -> 150.0 (billions of parameters); '1.5T' -> 1500.0. Raises ValueError.
    The same parser as `--meta params_b=...` (`registry.records.parse_params_b`), and positive."""
    from registry.records import parse_params_b

    try:
        value = parse_params_b(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a parameter budget: write billions as 150B, 150b or 150, "
                         "or trillions as 1.5T") from None
    if value <= 0:
        raise ValueError(f"{text!r}: the budget must be a positive number of parameters")
    return value


def _budget_option(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_budget(value)
    except ValueError as err:
        raise click.BadParameter(str(err), ctx=ctx, param=param) from None


def _number(value) -> str:
    return "-" if value is None else f"{value:.4f}"


@click.command()
@click.option("-k", "--k", "k", type=int, default=None, help="How many models (kcenter, kmedoids, answers).")
@click.option("--budget", "budget_b", callback=_budget_option, default=None, metavar="SIZE",
              help="Total parameter budget (greedy-budget): 150B, 150b, 150 (billions) or 1.5T.")
@click.option("--method", type=click.Choice(["kcenter", "kmedoids", "greedy-budget", "answers"]), default=None,
              help="Default: answers with --k (the greedy cover of the recorded answers outside the encoder's "
                   "test queries), greedy-budget with --budget; kcenter and kmedoids read the vectors.")
@click.option("--where", default=None, help="Metadata filter on the pool, e.g. 'access == open'.")
@click.option("--include-unknown-params", is_flag=True,
              help="Under a budget, keep models without params_b at no cost (total then a lower bound).")
@click.option("--seed", default=0, show_default=True, help="Seed of the random-subset baseline.")
@click.option("--draws", "random_draws", default=200, show_default=True, help="Random subsets in the baseline.")
@click.option("--by", type=click.Choice(["locus", "fingerprint", "embedding", "behaviour"]), default=None,
              help="Compare the models by their LOCUS embeddings (default) or behaviour fingerprints.")
@json_option
@click.pass_context
def portfolio(ctx, k, budget_b, method, where, include_unknown_params, seed, random_draws, by, as_json) -> None:
    """A few models that cover the pool (their recorded answers, or their vectors), with routing accuracy on
    held-out test queries: the portfolio vs the full pool vs random subsets."""
    if (k is None) == (budget_b is None):
        raise click.UsageError("give exactly one of --k N (a number of models) and --budget SIZE (e.g. 150B)")
    result = _backend(ctx).portfolio(k=k, budget_b=budget_b, method=method, where=where,
                                     include_unknown_params=include_unknown_params, seed=seed,
                                     random_draws=random_draws, by=by)
    echo_warnings(result.warnings)
    emit(result, as_json, _echo_portfolio)


def _echo_portfolio(result) -> None:
    limit = f"k = {result.k}" if result.budget_b is None else f"budget {result.budget_b:g}B"
    read = "recorded answers" if result.method == "answers" else result.by  # what the choice compared
    click.echo(f"{result.method} portfolio ({limit}) from a pool of {result.pool_size} models (by {read}):")
    for name in result.models:
        size = result.params_b[name]
        click.echo(f"  {name:<36} {'?' if size is None else f'{size:g}B':>8}")
    total = result.total_params_b
    bound = " (at least: some sizes unknown)" if result.total_params_b_is_lower_bound else ""
    answers = (f"; answer coverage {result.answer_coverage:.3f} of {result.answer_queries} queries"
               if result.answer_coverage is not None else "")
    click.echo(f"total parameters: {'unknown' if total is None else f'{total:g}B'}{bound}; "
               f"coverage {result.coverage:.3f}{answers}")
    if result.routing_accuracy is None:
        click.echo(f"routing accuracy: not measured ({result.accuracy_reason})")
        return
    sd = result.random_routing_accuracy_sd
    kind = "random feasible subsets" if result.budget_b is not None else f"random {result.k}-model subsets"
    click.echo(f"routing accuracy on {result.n_test_queries} held-out test queries:")
    click.echo(f"  portfolio   {_number(result.routing_accuracy)}")
    click.echo(f"  full pool   {_number(result.full_pool_routing_accuracy)}")
    click.echo(f"  random      {_number(result.random_routing_accuracy_mean)} ± {_number(sd)} "
               f"({kind}, {result.random_draws} draws)")


COMMANDS: list[click.Command] = [portfolio]
