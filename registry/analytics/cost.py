"""What one call to a model costs, read from its metadata, and routing under a cost trade-off.

A model's cost per call, in USD, comes from its metadata (free-form keys, `--meta k=v`):

- `price_call`: USD per call, taken as it is;
- else `price_in` and `price_out`: USD per 1M input / output tokens, for a call of the assumed
  `ASSUMED_TOKENS_IN` input and `ASSUMED_TOKENS_OUT` output tokens;
- else the proxy `params_b` (the typed column): a hosted open model's price grows about linearly with its
  size, so a call is priced at `PROXY_USD_PER_M_TOKENS_PER_B` per billion parameters per 1M tokens, for the
  same assumed tokens. Results name the models costed this way: the proxy ranks sizes, not bills.

`latency_ms` (optional) is carried into the result; it does not enter the trade-off. A model with none of
these cannot be placed on a cost scale: asking for a trade-off over it is an error naming it, unless the
caller asks `unpriced="exclude"` (such models are then left out of the candidates, and named).

The trade-off (`TradeOff`): `max_cost` keeps only candidates whose cost is at most that; `willingness_to_pay`
λ ranks by P(correct) - λ·cost (λ in probability per USD: 0 ranks by P(correct) alone, a larger λ prefers
cheaper models). `registry.analytics.routing.decide` ranks with `TradeOff.rank` and
`registry.operations.route` calls `restrict` before it and `annotate` after it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from registry.errors import InputError
from registry.limits import MAX_WILLINGNESS_TO_PAY
from registry.records import PRICE_KEYS

if TYPE_CHECKING:
    from registry.records import ModelRecord
    from registry.results import RouteDecision

__all__ = ["ASSUMED_TOKENS_IN", "ASSUMED_TOKENS_OUT", "PROXY_USD_PER_M_TOKENS_PER_B", "PRICE_KEYS", "UNPRICED",
           "ModelCost", "model_cost", "pool_costs", "check_cost_option", "check_unpriced", "TradeOff",
           "trade_off"]

# A generic chat call: a prompt of about 1,000 tokens and an answer of about 500. Costs scale with these
# only through price_in/price_out or the proxy; price_call is per call whatever the length.
ASSUMED_TOKENS_IN = 1000
ASSUMED_TOKENS_OUT = 500
# Serverless list prices of open-weight models in 2024 were roughly $0.1-0.2 per 1M tokens at 7-8B and
# about $0.9 at 70B: about a cent per billion parameters per 1M tokens.
PROXY_USD_PER_M_TOKENS_PER_B = 0.01
UNPRICED = ("error", "exclude")

Source = Literal["price", "price_call", "params_b"]


@dataclass(frozen=True)
class ModelCost:
    """One model's cost per call in USD and where it came from (None: it has no price and no params_b)."""

    name: str
    usd_per_call: float | None
    source: Source | None
    latency_ms: float | None = None

    @property
    def by_proxy(self) -> bool:
        return self.source == "params_b"


def _number(record: "ModelRecord", key: str) -> float | None:
    """The metadata number `key` of a record (None when absent); refuses a text, a boolean or a negative
    number, naming the model and the key."""
    value = record.extra.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"model {record.name!r} has {key}={value!r}: a price or latency must be a number >= 0 "
                         "(USD per 1M tokens for price_in/price_out, USD per call for price_call, milliseconds "
                         "for latency_ms)", field=key)
    return float(value)


def model_cost(record: "ModelRecord") -> ModelCost:
    """A model's cost per call and its source (see the module docstring for the rule)."""
    price_in, price_out = _number(record, "price_in"), _number(record, "price_out")
    price_call, latency = _number(record, "price_call"), _number(record, "latency_ms")
    if price_call is not None:
        return ModelCost(record.name, price_call, "price_call", latency)
    if (price_in is None) != (price_out is None):
        given, missing = ("price_in", "price_out") if price_in is not None else ("price_out", "price_in")
        raise InputError(f"model {record.name!r} has {given} but no {missing}: give both (USD per 1M input and "
                         "output tokens) or price_call (USD per call)", field=missing)
    if price_in is not None:
        usd = (price_in * ASSUMED_TOKENS_IN + price_out * ASSUMED_TOKENS_OUT) / 1e6
        return ModelCost(record.name, usd, "price", latency)
    if record.params_b is not None:
        usd = record.params_b * PROXY_USD_PER_M_TOKENS_PER_B * (ASSUMED_TOKENS_IN + ASSUMED_TOKENS_OUT) / 1e6
        return ModelCost(record.name, usd, "params_b", latency)
    return ModelCost(record.name, None, None, latency)


def pool_costs(records: Mapping[str, "ModelRecord"], names: Sequence[str], *, unpriced: str = "error",
               field: str = "willingness_to_pay") -> dict[str, ModelCost]:
    """The costs of `names` (in that order). A model with neither price nor params_b is an error naming
    every such model (`unpriced="error"`), or is left out of the answer (`unpriced="exclude"`)."""
    check_unpriced(unpriced)
    costs = {name: model_cost(records[name]) for name in names}
    missing = [name for name, c in costs.items() if c.usd_per_call is None]
    if missing and unpriced == "error":
        raise InputError(f"{len(missing)} model{'s have' if len(missing) != 1 else ' has'} no price and no params_b, "
                         f"so no cost: {', '.join(missing)}. Give them metadata price_in and price_out (USD per 1M "
                         "tokens), price_call or params_b (CLI: --meta price_in=..), narrow the pool (where, exclude), "
                         "or leave them out (unpriced: exclude; CLI: --unpriced exclude)", field=field)
    return {name: c for name, c in costs.items() if c.usd_per_call is not None}


_LARGEST = {"willingness_to_pay": MAX_WILLINGNESS_TO_PAY}  # max_cost: any finite ceiling filters


def check_cost_option(value: Any, name: str) -> float | None:
    """A trade-off number: None (not asked), or a finite number >= 0; else InputError naming `name`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number >= 0, not {value!r}", field=name)
    if not math.isfinite(float(value)) or value < 0:
        raise InputError(f"{name} must be a finite number >= 0, not {value!r}", field=name)
    if value > _LARGEST.get(name, math.inf):
        raise InputError(f"{name} must be at most {_LARGEST[name]:g} (P(correct) per USD), not {value!r}: past "
                         "that every model's cost outweighs P(correct) already", field=name)
    return float(value)


@dataclass
class TradeOff:
    """A cost trade-off over one route's candidates: which rows it keeps, how it ranks them, what it adds
    to the decisions."""

    max_cost: float | None
    willingness_to_pay: float | None
    costs: dict[str, ModelCost]
    excluded_unpriced: list[str] = field(default_factory=list)
    _row_cost: dict[int, float] = field(default_factory=dict)

    def restrict(self, names: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """The candidate rows (index rows, `names` the index's names) that have a cost within `max_cost`.
        None qualifying is an error naming the cheapest cost there is."""
        rows = np.asarray([r for r in rows if names[r] in self.costs], dtype=np.int64)
        if len(rows) == 0:
            raise InputError("no candidate model has a cost: every one was left out as unpriced "
                             f"({', '.join(self.excluded_unpriced)})", field="unpriced")
        cost = np.array([self.costs[names[r]].usd_per_call for r in rows], dtype=np.float64)
        if self.max_cost is not None:
            keep = cost <= self.max_cost
            if not keep.any():
                cheapest = int(np.argmin(cost))
                raise InputError(f"no candidate model costs at most {_usd(self.max_cost)} per call: the cheapest is "
                                 f"{names[rows[cheapest]]} at {_usd(cost[cheapest])}"
                                 f"{' (by the params_b proxy)' if self.costs[names[rows[cheapest]]].by_proxy else ''}",
                                 field="max_cost")
            rows, cost = rows[keep], cost[keep]
        self._row_cost = dict(zip(rows.tolist(), cost.tolist()))
        return rows

    def rank(self, p: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """What `decide` sorts the candidates `rows` by, given their P(correct) `p`: P(correct) - λ·cost."""
        if not self.willingness_to_pay:
            return p
        cost = np.array([self._row_cost[int(r)] for r in rows], dtype=np.float64)
        return np.asarray(p, np.float64) - self.willingness_to_pay * cost

    def annotate(self, decisions: "list[RouteDecision]") -> "list[RouteDecision]":
        """Each ranked model's cost (and utility under λ), and the note naming the models costed by proxy
        or left out as unpriced."""
        out = []
        for d in decisions:
            ranking = []
            for r in d.ranking:
                c = self.costs[r.name]
                utility = (None if self.willingness_to_pay is None
                           else round(r.p_correct - self.willingness_to_pay * c.usd_per_call, 6))
                ranking.append(r.model_copy(update={"cost_usd": c.usd_per_call, "cost_source": c.source,
                                                    "latency_ms": c.latency_ms, "utility": utility}))
            out.append(d.model_copy(update={"ranking": ranking, "max_cost": self.max_cost,
                                            "willingness_to_pay": self.willingness_to_pay,
                                            "cost_note": self.note([r.name for r in ranking])}))
        return out

    def note(self, shown: Sequence[str]) -> str | None:
        parts = []
        proxy = [n for n in shown if self.costs[n].by_proxy]
        if proxy:
            parts.append(f"costed by the params_b proxy (no price in their metadata): {', '.join(proxy)}")
        if self.excluded_unpriced:
            parts.append(f"left out, no price and no params_b: {', '.join(self.excluded_unpriced)}")
        return "; ".join(parts) or None


def trade_off(records: Mapping[str, "ModelRecord"], names: Sequence[str], rows: np.ndarray, *,
              max_cost: Any = None, willingness_to_pay: Any = None, unpriced: str = "error") -> TradeOff | None:
    """The trade-off a route asked for over its candidate rows, or None when it asked for none (the route
    then ranks by P(correct) alone, as before)."""
    max_cost = check_cost_option(max_cost, "max_cost")
    willingness_to_pay = check_cost_option(willingness_to_pay, "willingness_to_pay")
    check_unpriced(unpriced)
    if max_cost is None and willingness_to_pay is None:
        return None
    candidates = [names[r] for r in rows]
    costs = pool_costs(records, candidates, unpriced=unpriced,
                       field="max_cost" if willingness_to_pay is None else "willingness_to_pay")
    return TradeOff(max_cost, willingness_to_pay, costs, [n for n in candidates if n not in costs])


def check_unpriced(unpriced: Any) -> None:
    if unpriced not in UNPRICED:
        raise InputError(f"unpriced must be one of {', '.join(UNPRICED)}, not {unpriced!r}", field="unpriced")


def _usd(value: float) -> str:
    return f"${value:.6g}"
