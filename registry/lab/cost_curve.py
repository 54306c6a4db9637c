"""The quality/cost curve of a pool behind `registry evaluate --cost` and docs/results/cost-routing.md.

Computed from the predictions `run_evaluation(keep_predictions=True)` already makes (no second training):
on the test queries, each routed among the models scored on it,

- **always-best**: the best single model by training accuracy (the cheaper of equally accurate ones; the
  next best where it is unscored);
- **always-cheapest**: the cheapest model (ties: the more accurate in training), likewise;
- **random mixing** of the two: a share x of the calls to always-best, in expectation (accuracy and cost
  both linear in x);
- **registry**: the registry's router (`BLENDS["registry"]`, fitted on the validation queries) choosing per
  query the model with the largest P(correct) - λ·cost, for λ swept from 0 (P(correct) alone) to a λ at
  which every query goes to its cheapest scored model.

RouteLLM's figures (Ong et al., 2024), for a pool: the *gap recovered* at a cost is (accuracy - always-cheapest)
/ (always-best - always-cheapest). "x of the calls to the expensive model" becomes the cost of random
mixing with x to always-best: always-cheapest's cost + x (always-best's - always-cheapest's); the router
is read at the smallest λ whose mean test cost is within that budget (λ is set from the routing decisions
alone, no test truth, as RouteLLM calibrates its thresholds). APGR: the mean gap recovered over x in
[0, 1] (trapezoid, 21 points; random mixing scores 0.5). The target figure: the gap recovered at half the
cost of always-best. **pair**: RouteLLM's own setting, the router between the best and the cheapest model
only, sending the x of the queries where it predicts the best model ahead by most to it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from encoder.metrics import top_models  # a tied query goes to each tied model alike
from registry.errors import InputError

__all__ = ["SHARES", "registry_router_predictions", "cost_curve", "pool_curve"]

SHARES = (0.2, 0.5, 0.8)
_GRID = np.linspace(0.0, 1.0, 21)
_LAMBDAS = np.concatenate([[0.0], np.geomspace(1e-3, 1e4, 71)])  # times 1 / always-best's cost
_TARGET = 0.8  # the issue's: at half always-best's cost, at least 80% of the gap recovered


def registry_router_predictions(predictions: dict[str, Any]) -> np.ndarray:
    """(M, Q) P(correct) of the registry's router on the test queries: its blend (registry.lab.evaluation
    BLENDS["registry"]) fitted on the validation queries, as `score_predictions` fits it."""
    from registry.lab.evaluation import BLENDS

    parts, fit = BLENDS["registry"]
    missing = [c for c in parts if c not in predictions["val"]]
    if missing:
        raise InputError(f"the predictions lack the router's components {', '.join(missing)}", field="predictions")
    blend = fit({c: predictions["val"][c] for c in parts}, predictions["val_truth"])
    return np.asarray(blend.predict({c: predictions["test"][c] for c in parts}), np.float64)


def _outcome(choice: np.ndarray, truth: np.ndarray, cost: np.ndarray) -> tuple[float, float]:
    """(accuracy, mean cost per call) of routing each query to the `choice` models, ties shared."""
    share = choice / choice.sum(axis=0)
    return float((share * np.nan_to_num(truth)).sum(axis=0).mean()), float((share * cost[:, None]).sum(axis=0).mean())


def _rank_score(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """A per-model score ordering by `first` (larger first), ties by `second` (larger first)."""
    order = np.lexsort((-second, -first))
    score = np.empty(len(first))
    score[order] = -np.arange(len(first), dtype=np.float64)
    return score


def cost_curve(predictions: dict[str, Any], costs: Sequence[float], names: Sequence[str], *,
               proxy: Sequence[str] = (), router: np.ndarray | None = None) -> dict[str, Any]:
    """The curve and figures described in the module docstring. `costs[i]` is model i's cost per call
    (USD; the pool's order, that of `names` and of the prediction rows); `proxy` names the models costed
    by the params_b proxy (reported). `router`: the router's (M, Q) test predictions (default: the
    registry's, `registry_router_predictions`)."""
    truth = np.asarray(predictions["test_truth"], np.float64)
    cost = np.asarray(costs, np.float64)
    if cost.shape != (truth.shape[0],) or len(names) != truth.shape[0]:
        raise InputError(f"{len(cost)} costs and {len(names)} names for {truth.shape[0]} models", field="costs")
    if not np.isfinite(cost).all() or (cost < 0).any():
        raise InputError("every model's cost must be a finite number >= 0", field="costs")
    scored = ~np.isnan(truth).all(axis=0)
    truth = truth[:, scored]
    p = (registry_router_predictions(predictions) if router is None else np.asarray(router, np.float64))[:, scored]
    train_mean = np.asarray(predictions["train_mean"], np.float64)
    train_mean = np.where(np.isnan(train_mean), -np.inf, train_mean)

    best_rank = _rank_score(train_mean, -cost)  # models equal in both: the first
    best_row, cheap_row = int(np.argmax(best_rank)), int(np.argmax(_rank_score(-cost, train_mean)))
    best_acc, best_cost = _outcome(top_models(np.broadcast_to(best_rank[:, None], truth.shape), truth), truth, cost)
    cheap_acc, cheap_cost = _outcome(top_models(np.broadcast_to(_rank_score(-cost, train_mean)[:, None], truth.shape),
                                             truth), truth, cost)
    gap = best_acc - cheap_acc

    def recovered(acc: float) -> float | None:
        return None if gap <= 0 else round((acc - cheap_acc) / gap, 4)

    def mixing(c: float) -> float:
        if best_cost <= cheap_cost:
            return best_acc
        x = min(max((c - cheap_cost) / (best_cost - cheap_cost), 0.0), 1.0)
        return cheap_acc + x * gap

    scale = best_cost if best_cost > 0 else (cost[cost > 0].min() if (cost > 0).any() else 1.0)
    # the end of the sweep: cheapest scored model per query, the more likely one among equals
    # (equal costs share a rank, 2 apart from the next, so P(correct) in [0, 1] orders only the equals)
    cost_rank = np.unique(cost, return_inverse=True)[1].astype(np.float64)
    cheapest_choice = top_models(-2.0 * cost_rank[:, None] + p, truth)

    def at(lam: float) -> tuple[float, float]:
        if np.isinf(lam):
            return _outcome(cheapest_choice, truth, cost)
        return _outcome(top_models(p - lam * cost[:, None], truth), truth, cost)

    def point(lam: float) -> dict[str, Any]:
        acc, c = at(lam)
        return {"lam": lam if np.isfinite(lam) else None, "cost_usd": c, "cost_share": c / best_cost if best_cost else None,
                "routing_accuracy": acc, "gap_recovered": recovered(acc), "random_mix_accuracy": mixing(c)}

    def within(budget: float) -> dict[str, Any] | None:
        """The router at the smallest λ whose mean cost is within `budget` (cost falls as λ grows: per
        query the chosen model's cost never rises with λ); None when even the cheapest routing costs more."""
        if at(0.0)[1] <= budget:
            return point(0.0)
        if at(np.inf)[1] > budget + 1e-12:
            return None
        lo, hi = -8.0, 8.0  # log10 of λ * scale
        if at(10.0 ** hi / scale)[1] > budget:
            return point(np.inf)
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if at(10.0 ** mid / scale)[1] > budget else (lo, mid)
        return point(10.0 ** hi / scale)

    points = [point(mu / scale) for mu in _LAMBDAS] + [point(np.inf)]
    share_points = {}
    grid_recovered = []
    grid = [round(float(x), 4) for x in _GRID]
    for x in sorted(set(grid) | set(SHARES)):
        hit = within(cheap_cost + x * (best_cost - cheap_cost))
        if x in SHARES:
            share_points[f"{x:.0%}"] = hit
        if x in grid:
            grid_recovered.append(hit["gap_recovered"] if hit and hit["gap_recovered"] is not None else np.nan)
    apgr = (None if gap <= 0 or np.isnan(grid_recovered).any()
            else round(float(np.trapezoid(grid_recovered, _GRID)), 4))
    half = within(0.5 * best_cost)
    half_recovered = None if half is None else half["gap_recovered"]
    return _plain({
        "models": list(names), "costs_usd": dict(zip(names, cost.tolist())), "costed_by_proxy": sorted(proxy),
        "n_test_queries": int(truth.shape[1]),
        "always_best": {"model": names[best_row], "routing_accuracy": best_acc, "cost_usd": best_cost},
        "always_cheapest": {"model": names[cheap_row], "routing_accuracy": cheap_acc, "cost_usd": cheap_cost},
        "gap": gap, "router": points[0], "points": points, "at_share": share_points, "apgr": apgr,
        "half_cost": half, "half_cost_gap_recovered": half_recovered, "target": _TARGET,
        "target_met": None if half_recovered is None else bool(half_recovered >= _TARGET),
        "pair": _pair(p, truth, best_row, cheap_row, names),
    })


def _pair(p: np.ndarray, truth: np.ndarray, strong: int, weak: int, names: Sequence[str]) -> dict[str, Any]:
    """RouteLLM's setting: the router choosing between two models on the queries both are scored on;
    the share x of calls to `strong` goes to the queries where P(strong) - P(weak) is largest."""
    both = ~np.isnan(truth[strong]) & ~np.isnan(truth[weak])
    out: dict[str, Any] = {"strong": names[strong], "weak": names[weak], "n_queries": int(both.sum())}
    if strong == weak or not both.any():
        return {**out, "gap": None, "apgr": None, "at_share": {}, "cpt": {}}
    s, w = truth[strong, both], truth[weak, both]
    order = np.argsort(-(p[strong, both] - p[weak, both]), kind="stable")
    gap = float(s.mean() - w.mean())

    def recovered(x: float) -> float | None:
        if gap <= 0:
            return None
        to_strong = np.zeros(len(s), bool)
        to_strong[order[:int(np.floor(x * len(s) + 0.5))]] = True  # half up, not Python's half-to-even
        return round((float(np.where(to_strong, s, w).mean()) - w.mean()) / gap, 4)

    fine = np.linspace(0, 1, 101)
    curve = [recovered(x) for x in fine]
    cpt = {}
    for level in (0.5, 0.8):
        hits = [x for x, r in zip(fine, curve) if r is not None and r >= level]
        cpt[f"{level:.0%}"] = round(float(hits[0]), 2) if hits else None
    return {**out, "strong_accuracy": float(s.mean()), "weak_accuracy": float(w.mean()), "gap": gap,
            "at_share": {f"{x:.0%}": recovered(x) for x in SHARES},
            "apgr": None if gap <= 0 else round(float(np.trapezoid([recovered(x) for x in _GRID], _GRID)), 4),
            "cpt": cpt}


def pool_curve(predictions: dict[str, Any], models: Sequence[str], costs: dict, excluded: Sequence[str] = ()
               ) -> dict[str, Any]:
    """`cost_curve` for `registry evaluate --cost`: `models` in the prediction rows' order, `costs` their
    registry.analytics.cost.ModelCost by name; `excluded`: pool models left out as unpriced (reported)."""
    curve = cost_curve(predictions, [costs[m].usd_per_call for m in models], list(models),
                       proxy=[m for m in models if costs[m].by_proxy])
    return {**curve, "excluded_unpriced": list(excluded)}


def _plain(value):
    """numpy scalars as Python numbers (a report is JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value
