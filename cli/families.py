"""`registry` commands: clusters, map and compare (thin over `registry.Registry`)."""
from __future__ import annotations

from pathlib import Path

import click

from cli._common import _backend, _registry, echo_evidence_note, emit, json_option, min_evals_option

PLOT = click.Path(dir_okay=False, path_type=Path)
WHERE_HELP = "Metadata filter on the models, e.g. 'access == open and params_b <= 70'."


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:5.1f}"


BY_LIKENESS = click.option(
    "--by", type=click.Choice(["locus", "fingerprint", "embedding", "behaviour"]), default=None,
    help="The vector read: fingerprint (behaviour; the default when the home has fingerprints) or locus "
         "(the LOCUS embedding); embedding/behaviour are the old names.")


@click.command()
@click.option("--plot", type=PLOT, default=None,
              help="Write the dendrogram beside the distance heatmap to this image (PNG; .svg/.pdf work too).")
# spelled out here (importing registry would load it before click answers a usage error); a test pins them
@click.option("--linkage", type=click.Choice(["average", "complete", "single", "ward"]), default="complete",
              show_default=True, help="How cluster distances combine (ward runs on unit vectors).")
@click.option("-k", "k", type=click.IntRange(min=1), default=None,
              help="Cut into this many clusters (default: the mean-silhouette maximum).")
@click.option("--where", default=None, help=WHERE_HELP)
@BY_LIKENESS
@min_evals_option("are left out of the clustering (a note names them)")
@json_option
@click.pass_context
def clusters(ctx, plot, linkage, k, where, by, min_evals, as_json) -> None:
    """Model families: hierarchical clusters of the models' fingerprints or LOCUS embeddings."""
    result = _registry(ctx, create=False).clusters(where=where, plot=plot, linkage=linkage, k=k, by=by,
                                                   min_evals=min_evals)
    echo_evidence_note(result.evidence_note)
    emit(result, as_json, _echo_clusters)


def _echo_clusters(result) -> None:
    sil, coph = result.silhouette, result.cophenetic_correlation
    click.echo(f"{result.n_models} models by {result.by}, {result.linkage} linkage on {result.metric} distances: {result.k} clusters "
               f"({result.k_rule if result.k_rule.startswith('given') else 'silhouette maximum'}; mean silhouette "
               f"{'-' if sil is None else f'{sil:.2f}'}, structure: {result.structure}); cophenetic correlation "
               f"{'-' if coph is None else f'{coph:.2f}'}")
    for group in result.clusters:
        families = ", ".join(f"{f} x{n}" if n > 1 else f for f, n in group.families.items())
        click.echo(f"  {group.id:>2} ({group.size}): {', '.join(group.members)}"
                   + (f"   [families: {families}]" if families else ""))
    agreement = result.family_agreement
    if agreement:
        line = (f"agreement with family ({agreement.n_models} models, {agreement.n_families} families): "
                f"adjusted Rand {agreement.adjusted_rand:.2f} (permutation p {agreement.p_value:.3f}), "
                f"purity {agreement.purity:.2f}")
        cut = agreement.at_family_count
        if cut:
            line += f"; cut at {cut.k} clusters: adjusted Rand {cut.adjusted_rand:.2f}"
        click.echo(line)
    if result.plot:
        click.echo(f"plot: {result.plot}")


@click.command("map")
@click.option("--plot", type=PLOT, required=True, help="The image to write (PNG; .svg/.pdf work too).")
@click.option("--color-by", "color_by", default=None,
              help="Metadata field to colour points by: family, access, provider, params_b, or any extra key.")
@click.option("--where", default=None, help=WHERE_HELP)
@BY_LIKENESS
@json_option
@click.pass_context
def map_(ctx, plot, color_by, where, by, as_json) -> None:
    """A labelled 2-D map of the models (their behaviour distances by fingerprint, or PCA of unit LOCUS vectors)."""
    result = _registry(ctx, create=False).map(plot, color_by=color_by, where=where, by=by)
    echo_evidence_note(result.note)
    emit(result, as_json, _echo_map)


def _echo_map(result) -> None:
    e = result.explained_variance
    fidelity = result.distance_correlation
    click.echo(f"map of {result.n_models} models by {result.by} ({result.projection})")
    click.echo(f"axis 1 {100 * e.x:.1f}% + axis 2 {100 * e.y:.1f}% of {result.share_of}"
               + (f"; map distances vs the distances drawn r = {fidelity:.3f}" if fidelity is not None else ""))
    click.echo(f"plot: {result.plot}")


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="Tasks to list (largest differences first).")
@BY_LIKENESS
@json_option
@click.pass_context
def compare(ctx, a, b, top, by, as_json) -> None:
    """How models A and B differ: distance, and per task their accuracies with the evidence."""
    result = _backend(ctx).compare(a, b, by=by)
    emit(result, as_json, lambda r: _echo_compare(r, top))


def _echo_compare(result, top: int) -> None:
    a, b = result.a, result.b
    label = {"behaviour": "behaviour distance (expected disagreement)", "euclidean": "fingerprint distance"}
    likeness = (f"{label.get(result.distance_metric, 'fingerprint distance')} {result.distance:.4f}, "
                if result.by == "fingerprint" else "")
    click.echo(f"{a} vs {b}: {likeness}LOCUS cosine distance {result.distance_cosine:.4f}; by {result.by}, {b} is "
               f"{a}'s #{result.rank_of_b_among_a_neighbours} neighbour of {result.n_neighbours}, {a} is {b}'s "
               f"#{result.rank_of_a_among_b_neighbours}")
    g = result.agreement
    if g.shared_queries:
        click.echo(f"{g.shared_queries} shared queries: they disagree on {100 * g.disagreement_rate:.1f}% "
                   f"(both right {g.both_correct}, only A {g.only_a}, only B {g.only_b}, "
                   f"both wrong {g.both_wrong})")
    o = result.overall
    tested = (f"on the {o.shared_n} shared queries A-B {100 * o.shared_difference:+.1f} points, z {o.z:+.2f}, "
              f"p {o.p_value:.2g}" if o.test == "paired" else
              f"no overall test: {o.shared_n} shared queries, fewer than 10 (the tasks' rows test task by task)")
    click.echo(f"overall accuracy: A {_pct(o.a_accuracy).strip()}% ({o.a_n}), "
               f"B {_pct(o.b_accuracy).strip()}% ({o.b_n}); {tested}")
    rows = result.tasks
    width = max([len("task")] + [len(r.task or "(none)") for r in rows[:top]])
    predicted = result.predicted_from is not None
    head = (f"{'task':<{width}}  {'A %':>6} {'n':>5}  {'B %':>6} {'n':>5}  {'A-B':>6}  {'shared':>6} {'A-B':>6}  "
            f"{'z':>6}  {'p (Holm)':>9}")
    click.echo(head + ("   pred A  pred B" if predicted else ""))
    for r in rows[:top]:
        diff = "-" if r.difference is None else f"{100 * r.difference:+.1f}"
        on_shared = "-" if r.shared_difference is None else f"{100 * r.shared_difference:+.1f}"
        z, p = ("-", "-") if r.z is None else (f"{r.z:+.2f}", f"{r.p_adjusted:.2g}")
        line = (f"{r.task or '(none)':<{width}}  {_pct(r.a_accuracy):>6} {r.a_n:>5}  {_pct(r.b_accuracy):>6} {r.b_n:>5}  "
                f"{diff:>6}  {r.shared_n:>6} {on_shared:>6}  {z:>6}  {p:>9}")
        if predicted:
            line += f"   {_pct(r.a_predicted):>6}  {_pct(r.b_predicted):>6}"
        click.echo(line)
    if len(rows) > top:
        click.echo(f"... {len(rows) - top} more tasks (--top {len(rows)} or --json)")
    click.echo("A-B in points, over all of each one's evaluations, then over the shared queries, where the test is "
               "paired (McNemar for 0/1 scores; fewer than 10 shared: unpaired; '-': one has none in the task)"
               + ("; pred: mean predicted P(correct) from the embeddings" if predicted else ""))


COMMANDS: list[click.Command] = [clusters, map_, compare]
