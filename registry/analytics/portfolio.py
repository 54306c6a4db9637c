"""Portfolio selection (paper, appendix E.4): a few models that cover the pool's capabilities.

The choice looks only at the model embeddings, never at per-query correctness. Models are compared
through an RBF kernel on the Euclidean distance between embeddings,

    K(z_i, z_j) = exp(-||z_i - z_j||^2 / sigma^2),   sigma = median pairwise distance in the pool

(so a pair at the median distance has similarity 1/e; sigma = 1 when every distance is 0). The
coverage of a set S of models is the facility-location objective

    J(S) = sum over pool models i of max over s in S of K(z_i, z_s)     (J(pool) = pool size),

how well every model of the pool is represented by its most similar chosen one.

Methods:
- `kcenter`: farthest-first traversal in similarity (Gonzalez 1985): start from the model with the
  highest mean similarity to the pool, then repeatedly add the model least covered by the chosen set
  (smallest max similarity). The kernel is monotone in distance, so this is farthest-first in distance.
- `kmedoids`: PAM (Kaufman & Rousseeuw 1990) from the k-center start: repeatedly make the single
  swap (a chosen model out, an unchosen one in) that improves J the most, until no swap improves it.
  Under the kernel J is a bounded ("robust") form of the k-medoids sum of distances.
- `greedy-budget`: maximise J subject to sum of params_b <= budget (billions). Greedy by marginal gain
  per billion parameters, Delta(m | S) / c_m with Delta(m | S) = sum_i max(0, K(z_i, z_m) - b_i) and
  b_i = max over S of K(z_i, z_s) (0 for the empty set); only models that still fit are candidates and
  it stops when none fits or none adds coverage. As in CELF (Leskovec et al. 2007) the plain-gain greedy
  is also run under the same budget and the better of the two (higher J) is returned: ratio greedy alone
  can be arbitrarily bad (a tiny model with a little gain crowds out a large one with a lot), the better
  of both keeps a constant-factor guarantee for this monotone submodular J. `greedy_variant` says which.

- `answers`: a greedy on the models' recorded answers instead of their vectors: the coverage of the stored
  queries outside the encoder's test queries, A(S) = mean over those queries of the best score any model of
  S recorded on it (a query a model has no score for counts 0 for it), k models each adding the most;
  once no model adds any, the most accurate of the rest. A(S) is monotone submodular (a facility location
  with the queries as the clients), so the greedy is within 1 - 1/e of the best k-subset's coverage.
  Why it exists: on MMLU-Pro and BFCL it routes as well as the full pool from k = 3 where the vector
  methods do not beat random subsets at every k (scripts/report_portfolio_by.py, docs/results/portfolio-by.md).

Models without `params_b` under a budget: excluded with a warning (their size cannot be charged). With
`include_unknown_params` they stay in the pool and cost nothing against the budget (e.g. API models paid
per call rather than hosted): their gain per parameter is unbounded, so the greedy takes every one that
adds coverage first; `total_params_b` then counts only known sizes and is a lower bound
(`total_params_b_is_lower_bound`). The count methods ignore sizes; their `total_params_b` is likewise a
lower bound when a chosen model has no size.

Routing accuracy (what a portfolio is worth). Measured on the active encoder's held-out test queries
(`registry.analytics.heldout`): queries that neither trained the encoder nor built the embeddings. The embeddings
used here, for the choice and for routing, are the held-out ones (each model embedded from up to 1024
evaluations outside the test queries), so they differ slightly from the stored vectors. Each test query
goes to the portfolio model with the highest predicted P(correct); its score is that model's actual
score on the query (real scores count as expected correctness). NaN handling: only test queries that
every model of the pool has a score for are counted (`scoring: "common"`), so the portfolio, the full
pool and every random subset are scored on the same queries and a routed model always has a score. If
no test query is scored by all pool models, each query is routed among the subset's models that have a
score for it and queries none of them has are skipped (`scoring: "scored-members"`, with a warning).
With no scored test query at all, the accuracies are None and `accuracy_reason` says why.

Baselines: the full (filtered) pool routed the same way; random subsets (`random_draws`, seeded by
`seed`): for k, uniform subsets of size k; for a budget, random feasible subsets (a random order of the
pool, each model added if it still fits, so every draw is maximal), mean and population sd, and
`random_below_fraction`: the share of random draws that route strictly worse than the portfolio.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from registry.checks import check_count
from registry.errors import InputError, RegistryError

if TYPE_CHECKING:
    from indexing.store import Store
    from registry.results import PortfolioResult

__all__ = ["portfolio", "PortfolioSpace", "METHODS", "rbf_kernel", "coverage", "kcenter", "kmedoids",
           "greedy_budget", "answer_greedy", "random_feasible"]

METHODS = ("kcenter", "kmedoids", "greedy-budget", "answers")
# which vectors compare the models by default: measured by scripts/report_portfolio_by.py
# (docs/results/portfolio-by.md); LOCUS unless the fingerprint beats random subsets on both datasets
PORTFOLIO_DEFAULT = "locus"
# the method `--k` runs by default: measured by the same script; the choice that beats random subsets at
# k = 3, 5, 10 on MMLU-Pro and BFCL
PORTFOLIO_DEFAULT_METHOD = "answers"
_TOL = 1e-9


# ---------------------------------------------------------------- the algorithms (pure, on matrices)
def pairwise_distances(vectors: np.ndarray) -> np.ndarray:
    """(n, n) Euclidean distances."""
    x = np.asarray(vectors, dtype=np.float64)
    sq = (x * x).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
    np.fill_diagonal(d2, 0.0)
    return np.sqrt(d2)


def rbf_kernel(vectors: np.ndarray) -> tuple[np.ndarray, float]:
    """K = exp(-d^2 / sigma^2) with sigma the median pairwise Euclidean distance (1 if that is 0)."""
    d = pairwise_distances(vectors)
    n = len(d)
    upper = d[np.triu_indices(n, 1)]
    sigma = float(np.median(upper)) if len(upper) else 1.0
    if not sigma > 0:
        sigma = 1.0
    return np.exp(-(d / sigma) ** 2), sigma


def coverage(sim: np.ndarray, chosen: Sequence[int]) -> float:
    """J(S) = sum_i max_{s in S} sim[i, s] (0 for the empty set)."""
    chosen = list(chosen)
    if not chosen:
        return 0.0
    return float(np.asarray(sim)[:, chosen].max(axis=1).sum())


def kcenter(sim: np.ndarray, k: int) -> list[int]:
    """Farthest-first traversal in similarity: the model with the highest mean similarity first, then
    the least covered model (lowest max similarity to the chosen set), k in all; ties to the lower index."""
    sim = np.asarray(sim, dtype=np.float64)
    n = len(sim)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n}, not {k}")
    chosen = [int(np.argmax(sim.mean(axis=1)))]
    cover = sim[:, chosen[0]].copy()
    while len(chosen) < k:
        candidates = cover.copy()
        candidates[chosen] = np.inf
        nxt = int(np.argmin(candidates))
        chosen.append(nxt)
        cover = np.maximum(cover, sim[:, nxt])
    return chosen


def kmedoids(sim: np.ndarray, k: int, start: Sequence[int] | None = None, *, max_swaps: int = 1000) -> list[int]:
    """PAM swaps maximising coverage J from `start` (default: the k-center choice). Each round makes the
    best improving swap of one chosen model for one unchosen one; stops when none improves J. Pass a
    negated distance matrix as `sim` for the classic objective (minimise the sum of distances to the
    nearest medoid)."""
    sim = np.asarray(sim, dtype=np.float64)
    n = len(sim)
    chosen = list(start) if start is not None else kcenter(sim, k)
    if len(chosen) != k or len(set(chosen)) != k:
        raise ValueError(f"start must hold {k} distinct indices")
    scale = max(1.0, float(np.abs(sim).max()) * n)
    current = coverage(sim, chosen)
    for _ in range(max_swaps):
        outside = np.setdiff1d(np.arange(n), chosen)
        if not len(outside):
            break
        best_value, best = current + _TOL * scale, None
        for position in range(k):
            rest = chosen[:position] + chosen[position + 1:]
            base = sim[:, rest].max(axis=1) if rest else np.full(n, -np.inf)
            values = np.maximum(base[:, None], sim[:, outside]).sum(axis=0)
            j = int(np.argmax(values))
            if values[j] > best_value:
                best_value, best = float(values[j]), (position, int(outside[j]))
        if best is None:
            break
        chosen[best[0]] = best[1]
        current = coverage(sim, chosen)
    return chosen


def _greedy(sim: np.ndarray, costs: np.ndarray, budget: float, *, per_cost: bool) -> list[int]:
    n = len(sim)
    chosen: list[int] = []
    taken = np.zeros(n, dtype=bool)
    best = np.zeros(n)
    remaining = float(budget)
    while True:
        candidates = np.flatnonzero(~taken & (costs <= remaining + _TOL))
        if not len(candidates):
            break
        gains = np.maximum(sim[:, candidates] - best[:, None], 0.0).sum(axis=0)
        if per_cost:
            with np.errstate(divide="ignore", invalid="ignore"):
                key = np.where(costs[candidates] > 0, gains / np.where(costs[candidates] > 0, costs[candidates], 1),
                               np.where(gains > _TOL, np.inf, 0.0))
        else:
            key = gains
        # highest key, then highest gain, then lowest index
        order = np.lexsort((-candidates, gains, key))
        pick = order[-1]
        if gains[pick] <= _TOL:
            break
        j = int(candidates[pick])
        chosen.append(j)
        taken[j] = True
        remaining -= float(costs[j])
        best = np.maximum(best, sim[:, j])
    return chosen


def greedy_budget(sim: np.ndarray, costs: Sequence[float], budget: float) -> tuple[list[int], str]:
    """Maximise J under sum(costs) <= budget: the better (higher J) of the greedy by gain per unit cost
    and the greedy by plain gain (both restricted to models that still fit). Costs of 0 are free. Returns
    the chosen indices in the order taken and which greedy won ("gain per parameter" or "gain")."""
    sim = np.asarray(sim, dtype=np.float64)
    costs = np.asarray(costs, dtype=np.float64)
    ratio = _greedy(sim, costs, budget, per_cost=True)
    plain = _greedy(sim, costs, budget, per_cost=False)
    if coverage(sim, plain) > coverage(sim, ratio) + _TOL:
        return plain, "gain"
    return ratio, "gain per parameter"


def answer_greedy(answers: np.ndarray, k: int) -> list[int]:
    """k columns of `answers` ((Q, M) scores in [0, 1], 0 where none) chosen greedily for the coverage
    A(S) = mean over rows of max over S: each step the column adding the most (ties to the lower index);
    when none adds any, the highest column mean of the rest."""
    answers = np.asarray(answers, dtype=np.float64)
    n = answers.shape[1]
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n}, not {k}")
    chosen: list[int] = []
    best = np.zeros(len(answers))
    means = answers.mean(axis=0) if len(answers) else np.zeros(n)
    # Lazy greedy (Minoux 1978): a column's gain only falls as the set grows (A is submodular), so last
    # step's gain bounds this step's; only the column on top is re-evaluated until the top one is of this
    # step. The lowest index wins ties as in the plain greedy, which this equals (tested); the plain one
    # built a (Q, M) temporary per step: ~1 GB each at 12,000 queries x 10,000 models.
    bound = answers.sum(axis=0)  # the first step's gains exactly (scores >= 0, nothing covered yet)
    fresh = np.zeros(n, dtype=np.int64)  # the step each bound was computed at
    while len(chosen) < k:
        step = len(chosen)
        while True:
            j = int(np.argmax(bound))
            if fresh[j] == step:
                break
            bound[j], fresh[j] = np.maximum(answers[:, j] - best, 0.0).sum(), step
        if bound[j] <= _TOL:  # nothing left to cover: the most accurate of the rest
            rest = np.setdiff1d(np.arange(n), chosen)
            j = int(rest[np.argmax(means[rest])])
        chosen.append(j)
        bound[j] = -np.inf
        best = np.maximum(best, answers[:, j])
    return chosen


def answer_coverage(answers: np.ndarray, chosen: Sequence[int]) -> float | None:
    """A(S): the mean over the rows of the best score of a chosen column (None without rows)."""
    if not len(answers):
        return None
    return float(np.asarray(answers)[:, list(chosen)].max(axis=1).astype(np.float64).mean())


def random_feasible(costs: np.ndarray, budget: float, rng: np.random.Generator) -> list[int]:
    """A random order of the pool, each model added when it still fits the budget (a maximal set)."""
    chosen, remaining = [], float(budget)
    for j in rng.permutation(len(costs)):
        if costs[j] <= remaining + _TOL:
            chosen.append(int(j))
            remaining -= float(costs[j])
    return chosen


# --------------------------------------------------------------------------- routing accuracy
def _routing_common(pred: np.ndarray, truth: np.ndarray, subsets: np.ndarray) -> np.ndarray:
    """(D,) accuracy of each subset (rows of `subsets`, (D, k) indices), truth without NaN; models tied at
    the top share a query (encoder.metrics.routed_scores)."""
    p = pred[subsets]  # (D, k, T)
    top = p == p.max(axis=1, keepdims=True)  # (D, k, T)
    scores = truth[subsets]  # (D, k, T)
    return ((top * scores).sum(axis=1) / top.sum(axis=1)).mean(axis=1)


def _routing_scored(pred: np.ndarray, truth: np.ndarray, subset: Sequence[int]) -> float:
    from encoder.metrics import routed_scores

    sub = list(subset)
    scores = routed_scores(pred[sub], truth[sub])
    return float(scores.mean()) if len(scores) else math.nan


# ------------------------------------------------------------------------------- the pool
@dataclass
class PortfolioSpace:
    """The pool once loaded (names, sizes, held-out embeddings, kernel, predictions on the test
    queries), for callers that select many portfolios (scripts/report_portfolio.py)."""

    names: list[str]
    params_b: list[float | None]
    embeddings: np.ndarray
    sim: np.ndarray
    sigma: float
    pred: np.ndarray | None  # (M, T) P(correct) on the counted test queries
    truth: np.ndarray | None  # (M, T) scores there (NaN only in "scored-members" mode)
    # (Q, M) recorded scores on the stored queries outside the test queries (0 where none); loaded only for
    # method "answers" (`load(answers=True)`): it is as large as the pool's scores
    answers: np.ndarray | None
    scoring: str | None  # "common", "scored-members" or None (no accuracy)
    accuracy_reason: str | None
    test_queries: int  # test queries counted
    test_queries_scored: int  # test queries some pool model has a score for
    excluded_unknown_params: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    where: str | None = None
    by: str = "locus"  # the vectors the choice compares (routing always predicts with LOCUS)

    @classmethod
    def load(cls, store: "Store", *, where: str | None = None, budget: bool = False,
             include_unknown_params: bool = False, by: str = "locus", answers: bool = False) -> "PortfolioSpace":
        """The pool: embedded models passing `where`; for a budget, without models lacking params_b
        unless `include_unknown_params`. `by`: compare the models by their LOCUS embeddings or by their
        behaviour fingerprints (both built without the test queries)."""
        from registry.analytics.search import open_index

        models = open_index(store)
        records = sorted(models.records.values(), key=lambda r: r.name)
        if not records:
            raise RegistryError("the registry holds no models yet (registry import PATH)")
        if where is not None:
            from registry.filters import matching

            keep = set(matching(where, records))
            records = [r for r in records if r.name in keep]
            if not records:
                raise InputError(f"the filter {where!r} matches no model in the registry "
                                 f"({len(models.records)} models)", field="where")
        warnings: list[str] = []
        embedded = set(models.index.names)
        missing = [r.name for r in records if r.name not in embedded]
        if missing:
            warnings.append(f"{len(missing)} model(s) without an embedding left out ({', '.join(missing)}): "
                            "run `registry embed --all`")
        records = [r for r in records if r.name in embedded]
        excluded: list[str] = []
        if budget:
            unknown = [r.name for r in records if r.params_b is None]
            if unknown and not include_unknown_params:
                excluded = unknown
                records = [r for r in records if r.params_b is not None]
                warnings.append(f"{len(unknown)} model(s) without params_b cannot be charged to a budget and are "
                                f"left out ({', '.join(unknown)}); --include-unknown-params keeps them at no cost")
            elif unknown:
                warnings.append(f"{len(unknown)} model(s) without params_b cost nothing against the budget "
                                f"({', '.join(unknown)}); total_params_b is a lower bound")
        if not records:
            scope = f" matching {where!r}" if where else ""
            raise RegistryError(f"no model{scope} can join the portfolio"
                                + (" (every one lacks params_b, needed under a budget; "
                                   "--include-unknown-params keeps them)" if excluded else
                                   " (none is embedded: run `registry embed --all`)"))
        names = [r.name for r in records]
        return cls._from_store(store, names, [r.params_b for r in records], models, warnings, excluded, where, by,
                               answers)

    @classmethod
    def _from_store(cls, store, names, params, models, warnings, excluded, where, by="locus",
                    with_answers=False) -> "PortfolioSpace":
        from encoder.inference import predict
        from registry.analytics.heldout import held_out

        held = held_out(store, models=names)
        embeddings = np.array(held.embeddings, dtype=np.float64)
        bad = [i for i in range(len(names)) if not np.isfinite(embeddings[i]).all()]
        if bad:
            for i in bad:
                embeddings[i] = models.vector(names[i])
            warnings.append(f"{len(bad)} model(s) have no evaluation outside the test queries; their stored "
                            f"embedding is used ({', '.join(names[i] for i in bad)})")
        sim, sigma = rbf_kernel(embeddings if by == "locus" else _held_out_fingerprints(store, held))
        truth, answers = held.truth(), None
        if with_answers:
            dense = held.data.dense()  # (M, Q)
            outside = np.ones(dense.shape[1], dtype=bool)
            outside[held.test_queries] = False
            answered = dense[:, outside]
            answered = answered[:, ~np.isnan(answered).all(axis=0)]  # a query no pool model answered covers nothing
            answers = np.nan_to_num(answered, nan=0.0).T  # (Q, M)
        scored_any = ~np.isnan(truth).all(axis=0)
        common = ~np.isnan(truth).any(axis=0)
        pred, scoring, reason, counted = None, None, None, np.zeros(0, dtype=np.int64)
        if not held.recorded_test_queries:
            reason = "the active encoder recorded no test queries"
        elif not scored_any.any():
            reason = (f"no model of the pool has a score on any of the {held.recorded_test_queries} held-out test "
                      "queries")
        elif common.any():
            scoring, counted = "common", np.flatnonzero(common)
            if common.sum() < 0.5 * scored_any.sum():
                warnings.append(f"only {int(common.sum())} of {int(scored_any.sum())} scored test queries are "
                                "scored for every model of the pool; the accuracies count those")
        else:
            scoring, counted = "scored-members", np.flatnonzero(scored_any)
            warnings.append("no test query is scored for every model of the pool: each query is routed among "
                            "the subset's models that have a score for it")
        if scoring is not None:
            queries = held.test_queries[counted]
            pred = predict(held.active.locus, embeddings.astype(np.float32), held.data.query_vectors[queries])
            pred = pred.astype(np.float64)
            truth = truth[:, counted].astype(np.float64)
        return cls(names=names, params_b=params, embeddings=embeddings, sim=sim, sigma=sigma, pred=pred,
                   truth=truth if scoring else None, answers=answers, scoring=scoring, accuracy_reason=reason,
                   test_queries=int(len(counted)), test_queries_scored=int(scored_any.sum()), excluded_unknown_params=excluded, warnings=warnings,
                   where=where, by=by)

    # ---------------------------------------------------------------------------- choices
    @property
    def size(self) -> int:
        return len(self.names)

    def costs(self) -> np.ndarray:
        return np.array([0.0 if p is None else float(p) for p in self.params_b])

    def select(self, method: str, *, k: int | None = None, budget_b: float | None = None) -> tuple[list[int], dict]:
        """Indices of the chosen models (in the order the method took them) and method details."""
        method, k, budget_b = _check_request(method, k, budget_b)
        if method == "greedy-budget":
            costs = self.costs()
            known = [(p, n) for p, n in zip(self.params_b, self.names) if p is not None]
            if not (costs <= budget_b + _TOL).any():
                size, name = min(known)
                raise InputError(f"a budget of {_billions(budget_b)} fits no model: the smallest in the pool is "
                                 f"{name} with {_billions(size)}", field="budget_b")
            chosen, variant = greedy_budget(self.sim, costs, budget_b)
            return chosen, {"greedy_variant": variant}
        if k > self.size:
            scope = f" matching {self.where!r}" if self.where else ""
            raise InputError(f"k {k} is larger than the pool: {self.size} embedded model(s){scope}; "
                             f"k must be in 1..{self.size}", field="k")
        if method == "answers":
            if self.answers is None:
                raise ValueError("method 'answers' needs the space loaded with answers=True")
            if not len(self.answers):
                raise RegistryError("no model of the pool has a recorded score outside the encoder's test "
                                    "queries: method 'answers' has nothing to cover")
            chosen = answer_greedy(self.answers, k)
            return chosen, {"answer_coverage": answer_coverage(self.answers, chosen),
                            "answer_queries": int(len(self.answers))}
        start = kcenter(self.sim, k)
        if method == "kcenter":
            return start, {}
        chosen = kmedoids(self.sim, k, start)
        return chosen, {"kcenter_start": [self.names[i] for i in start],
                        "kcenter_coverage": coverage(self.sim, start) / self.size}

    def accuracy(self, subset: Sequence[int]) -> float | None:
        if self.scoring is None:
            return None
        subset = list(subset)
        if self.scoring == "common":
            return float(_routing_common(self.pred, self.truth, np.asarray([subset]))[0])
        value = _routing_scored(self.pred, self.truth, subset)
        return None if math.isnan(value) else value

    def random_subsets(self, *, k: int | None = None, budget_b: float | None = None, draws: int = 200,
                       seed: int = 0) -> list[list[int]]:
        rng = np.random.default_rng(seed)
        if k is not None:
            return [sorted(rng.choice(self.size, size=k, replace=False).tolist()) for _ in range(draws)]
        return [random_feasible(self.costs(), budget_b, rng) for _ in range(draws)]

    def random_accuracies(self, subsets: list[list[int]]) -> np.ndarray:
        """The routing accuracy of each subset (subsets without any scored query left out)."""
        if self.scoring is None or not subsets:
            return np.zeros(0)
        if self.scoring == "common" and len({len(s) for s in subsets}) == 1:
            values = _routing_common(self.pred, self.truth, np.asarray(subsets))
        elif self.scoring == "common":
            values = np.array([_routing_common(self.pred, self.truth, np.asarray([s]))[0] for s in subsets])
        else:
            values = np.array([_routing_scored(self.pred, self.truth, s) for s in subsets])
            values = values[~np.isnan(values)]
        return np.asarray(values, dtype=np.float64)

    def run(self, method: str, *, k: int | None = None, budget_b: float | None = None, seed: int = 0,
            random_draws: int = 200) -> "PortfolioResult":
        """The portfolio and its accuracies against the full pool and random subsets (the result of
        `portfolio()`)."""
        from registry.results import PortfolioResult
        random_draws = check_count(random_draws, "random_draws", 1)
        chosen, details = self.select(method, k=k, budget_b=budget_b)
        names = [self.names[i] for i in chosen]
        sizes = {self.names[i]: self.params_b[i] for i in chosen}
        known = [p for p in sizes.values() if p is not None]
        unknown = [n for n, p in sizes.items() if p is None]
        if method == "greedy-budget":
            randoms = self.random_subsets(budget_b=float(budget_b), draws=int(random_draws), seed=seed)
        else:
            randoms = self.random_subsets(k=len(chosen), draws=int(random_draws), seed=seed)
        values = self.random_accuracies(randoms)
        accuracy = self.accuracy(chosen)
        costs = self.costs()
        pool_known = [p for p in self.params_b if p is not None]
        result: dict[str, Any] = {
            "models": names,
            "method": method,
            "k": len(names),
            "budget_b": None if budget_b is None else float(budget_b),
            "params_b": sizes,
            "total_params_b": round(float(sum(known)), 6) if known else None,
            "total_params_b_is_lower_bound": bool(unknown and known),
            "routing_accuracy": accuracy,
            "full_pool_routing_accuracy": self.accuracy(range(self.size)),
            "random_routing_accuracy_mean": float(values.mean()) if len(values) else None,
            "random_routing_accuracy_sd": float(values.std()) if len(values) else None,
            "random_below_fraction": (float((values < accuracy - 1e-12).mean())
                                      if len(values) and accuracy is not None else None),
            "random_draws": int(random_draws),
            "random_mean_size": float(np.mean([len(s) for s in randoms])),
            "random_mean_params_b": float(np.mean([costs[s].sum() for s in randoms])),
            # a model of unknown size costs 0 in `costs`: a draw that holds one sums to less than it weighs
            "random_mean_params_b_is_lower_bound": any(self.params_b[j] is None for s in randoms for j in s),
            "seed": seed,
            "coverage": coverage(self.sim, chosen) / self.size,
            "by": self.by,
            "kernel": {"type": "rbf", "distance": "euclidean", "sigma": self.sigma,
                       "sigma_rule": "median pairwise distance in the pool"},
            "pool_size": self.size,
            "pool_total_params_b": round(float(sum(pool_known)), 6) if pool_known else None,
            "where": self.where,
            "excluded_unknown_params": list(self.excluded_unknown_params),
            "n_test_queries": self.test_queries,
            "n_test_queries_scored": self.test_queries_scored,
            "scoring": self.scoring,
            "accuracy_reason": self.accuracy_reason,
            "warnings": list(self.warnings),
        }
        result.update(details)
        if unknown and method != "greedy-budget":
            result["warnings"].append(f"no params_b for {', '.join(unknown)}: total_params_b is a lower bound")
        return PortfolioResult.model_validate(result)


def _billions(value: float) -> str:
    return f"{value:g}B"


def _check_request(method: Any, k: Any, budget_b: Any) -> tuple[str, int | None, float | None]:
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}", field="method")
    if (k is None) == (budget_b is None):
        raise InputError("give exactly one of k (a number of models) and budget_b (billions of parameters)",
                         field="k" if k is not None else "budget")
    if budget_b is not None:
        if method != "greedy-budget":
            raise InputError(f"a parameter budget is solved by method 'greedy-budget', not {method!r} "
                             "(kcenter and kmedoids take k)", field="method")
        if isinstance(budget_b, bool) or not isinstance(budget_b, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(budget_b)) or float(budget_b) <= 0:
            raise InputError(f"budget_b must be a positive number of billions of parameters, not {budget_b!r}",
                             field="budget_b")
        return method, None, float(budget_b)
    if method == "greedy-budget":
        raise InputError("method 'greedy-budget' takes a parameter budget (--budget, budget_b), not k",
                         field="method")
    return method, check_count(k, "k", 1), None


def portfolio(store: "Store", *, k: int | None = None, budget_b: float | None = None, method: str | None = None,
              where: str | None = None, include_unknown_params: bool = False, seed: int = 0,
              random_draws: int = 200, by: str | None = None) -> "PortfolioResult":
    """A portfolio of k models (`kcenter`, `kmedoids` from the embeddings, `answers` from the recorded
    answers) or within `budget_b` billion parameters (`greedy-budget`) of the pool (embedded models passing `where`), with
    its routing accuracy on the held-out test queries next to the full pool's and random subsets'
    (mean and sd over `random_draws` draws seeded by `seed`). `method` None: greedy-budget under a
    budget, PORTFOLIO_DEFAULT_METHOD otherwise, kmedoids when `by` is given. `by`: "locus" (the default,
    PORTFOLIO_DEFAULT) or "fingerprint", the vectors the vector methods compare the models by. See the
    module docstring."""
    from registry.analytics.search import canonical_by

    asked_by = canonical_by(by)
    by = asked_by or PORTFOLIO_DEFAULT
    if method is None:  # a vector asked for: a method that compares vectors
        method = "greedy-budget" if budget_b is not None else "kmedoids" if asked_by else PORTFOLIO_DEFAULT_METHOD
    if method == "answers" and asked_by is not None:
        raise InputError("method 'answers' compares the models' recorded answers, not a vector: leave out by, or "
                         "choose kmedoids or kcenter to compare by it", field="by")
    _check_request(method, k, budget_b)  # bad arguments fail before anything is loaded
    space = PortfolioSpace.load(store, where=where, budget=budget_b is not None,
                                include_unknown_params=include_unknown_params, by=by, answers=method == "answers")
    return space.run(method, k=k, budget_b=budget_b, seed=seed, random_draws=random_draws)


def _held_out_fingerprints(store: "Store", held) -> np.ndarray:
    """(M, r + 1) identity vectors (Euclidean = RMS logit difference) of the pool's behaviour
    fingerprints, each from the model's evaluations outside the test queries, as the LOCUS embeddings
    beside them: the choice must not have seen the answers it is scored on."""
    from encoder.data import evals_by_model
    from registry.catalog.fingerprint_store import load_item_table

    table = load_item_table(store, held.active.encoder_id)
    if table is None:
        raise RegistryError("the active encoder has no item table, so no fingerprints: registry fit-fingerprints "
                            "(or --by locus)")
    data = held.data
    is_test = np.zeros(data.n_queries, dtype=bool)
    is_test[held.test_queries] = True
    outside = evals_by_model(data, np.flatnonzero(~is_test[data.query_index]))
    thetas = table.fingerprints(data.query_ids, data.query_vectors, outside, data.query_index, data.scores)
    return table.identity_vectors(thetas)
