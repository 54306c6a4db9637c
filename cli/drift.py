"""`registry drift NAME` and the body of `registry audit --drift` (thin over `Registry.drift` / `drift_refined`)."""
from __future__ import annotations

import click

from cli._common import FINDING_EXIT, _backend, check_fraction_option, emit, json_option, utc_time


def _echo_report(report) -> None:
    tag = {"moved": "MOVED", "not moved": "NOT MOVED", "nothing to compare": "NOTHING TO COMPARE",
           "untested": "UNTESTED"}[report.status]
    versions = (f"v{report.newest_version} vs v{', v'.join(map(str, report.earlier_versions))}"
                if report.earlier_versions else (f"v{report.newest_version}" if report.newest_version else "no version"))
    click.echo(f"{tag} {report.name} ({versions}): {report.sentence}")
    for t in report.tests:
        click.echo(f"  {t.test}: statistic {t.statistic:.4g}, p={t.p_value:.3g} (level {report.level:.3g}): {t.detail}")


@click.command()
@click.argument("name")
@click.option("--alpha", type=float, default=0.01, show_default=True,
              help="Chance of a false alarm on an unchanged model (split over the tests run).")
@click.option("--max-noise", type=float, default=0.12, show_default=True,
              help="Largest share of answers one model re-run may change (the audit's).")
@click.option("--permutations", type=click.IntRange(min=19), default=399, show_default=True,
              help="Random splits of the model's own evaluations for the fingerprint test (queries differ). Its "
                   "smallest p is 1 / (N + 1): below 2 / alpha - 1 (199 at alpha 0.01, which it shares with a "
                   "second test) it cannot alarm.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of those splits.")
@json_option(help="Print the DriftReport as JSON.")
@click.option("--fail-on-move", is_flag=True, help="Exit 1 when the newest version moved (for CI).")
@click.pass_context
def drift(ctx, name, alpha, max_noise, permutations, seed, as_json, fail_on_move) -> None:
    """Whether NAME's newest version behaves like its earlier versions.

    On the queries both answered: the audit's calibrated tests (changes leaning one way within tasks,
    more changes than a re-run makes); when the queries differ: the behaviour-fingerprint distance
    against random splits of the model's own evaluations. A model with one version: nothing to compare."""
    check_fraction_option("--alpha", alpha)
    check_fraction_option("--max-noise", max_noise)
    report = _backend(ctx).drift(name, alpha=alpha, max_noise=max_noise, permutations=permutations, seed=seed)
    emit(report, as_json, _echo_report)
    if fail_on_move and report.moved:
        ctx.exit(FINDING_EXIT)


_NAMES_SHOWN = 20


def run_drift_audit(ctx, *, alpha: float, max_noise: float, as_json: bool) -> None:
    """`registry audit --drift`: drift of every model given a version since the last run; exit 1 when one moved."""
    check_fraction_option("--alpha", alpha)
    check_fraction_option("--max-noise", max_noise)
    run = _backend(ctx).drift_refined(alpha=alpha, max_noise=max_noise)

    def text(run) -> None:
        since = (f"given a version since {utc_time(run.since)}" if run.since
                 else "(the first run: every model)")
        click.echo(f"drift of {len(run.checked)} model(s) {since}")
        alone = [r.name for r in run.checked if r.status == "nothing to compare"]
        for report in run.checked:
            if report.status != "nothing to compare":
                _echo_report(report)
        if alone:  # a first run over a registry of single versions: one line, not one per model, in a CI log
            shown = ", ".join(alone[:_NAMES_SHOWN]) + (f" and {len(alone) - _NAMES_SHOWN} more (--json lists them)"
                                                        if len(alone) > _NAMES_SHOWN else "")
            click.echo(f"NOTHING TO COMPARE {len(alone)} model(s) with one version with evaluations: {shown}")
        click.echo(f"{len(run.moved)} moved" + (f": {', '.join(run.moved)}" if run.moved else ""))

    emit(run, as_json, text)
    if run.moved:
        ctx.exit(FINDING_EXIT)


COMMANDS = [drift]
