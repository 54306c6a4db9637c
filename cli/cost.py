"""How `registry evaluate --cost` prints its quality/cost curve (registry.lab.cost_curve)."""
from __future__ import annotations

import click


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def echo_cost_curve(curve) -> None:
    best, cheap = curve.always_best, curve.always_cheapest
    click.echo(f"\ncost per call (USD): always-best {best.model} ${best.cost_usd:.6g} (routing {best.routing_accuracy:.4f}), "
               f"always-cheapest {cheap.model} ${cheap.cost_usd:.6g} ({cheap.routing_accuracy:.4f})")
    if curve.costed_by_proxy:
        click.echo(f"costed by the params_b proxy (no price): {len(curve.costed_by_proxy)} of {len(curve.models)} models: "
                   + ", ".join(curve.costed_by_proxy))
    if curve.excluded_unpriced:
        click.echo("left out, no price and no params_b: " + ", ".join(curve.excluded_unpriced))
    click.echo(f"{'policy':<16}{'lambda':>10}{'cost $/call':>14}{'of best':>9}{'routing':>9}{'gap rec.':>10}"
               f"{'random mix':>12}")
    for name, part in (("always-best", best), ("always-cheapest", cheap)):
        click.echo(f"{name:<16}{'':>10}{part.cost_usd:>14.6g}{_pct(part.cost_usd / best.cost_usd if best.cost_usd else None):>9}"
                   f"{part.routing_accuracy:>9.4f}")
    last = None
    for point in curve.points:
        key = (round(point.cost_usd, 12), round(point.routing_accuracy, 9))
        if key == last:  # a λ that changes no decision adds no line
            continue
        last = key
        lam = "inf" if point.lam is None else f"{point.lam:.4g}"
        click.echo(f"{'registry':<16}{lam:>10}{point.cost_usd:>14.6g}{_pct(point.cost_share):>9}"
                   f"{point.routing_accuracy:>9.4f}{_pct(point.gap_recovered):>10}{point.random_mix_accuracy:>12.4f}")
    shares = ", ".join(f"{s} {_pct(p.gap_recovered if p else None)}" for s, p in curve.at_share.items())
    click.echo(f"gap recovered at the cost of x of the calls to always-best: {shares}; APGR {_pct(curve.apgr)}")
    pair = curve.pair
    click.echo(f"pair ({pair.strong} vs {pair.weak}, {pair.n_queries} queries): "
               + ", ".join(f"{s} {_pct(v)}" for s, v in pair.at_share.items())
               + f"; APGR {_pct(pair.apgr)}; CPT(50%) {_pct(pair.cpt.get('50%'))}, CPT(80%) {_pct(pair.cpt.get('80%'))}")
    verdict = "-" if curve.target_met is None else "met" if curve.target_met else "NOT met"
    click.echo(f"at half always-best's cost: {_pct(curve.half_cost_gap_recovered)} of the gap recovered "
               f"(target >= {curve.target:.0%}: {verdict})")
