"""Which stored queries a model should be evaluated on first.

Evaluations cost money, and a random sample of them spends it unevenly: by chance too many near-copies
of one another, too few of some kind of query. Under the item table (`encoder.fingerprint`), a model is
its fingerprint theta = (a, c) and a query i its row x_i = [F_i, 1] with bias b_i: logit P(correct) =
x_i . theta + b_i.

The default criterion, "representative" (`representative_design`), picks by kernel herding a sample that
stands for the stored queries as a whole: each query is placed by its logit at the pool's mean
fingerprint and the spread of that logit over the pool's fingerprints, [x_i . mean + b_i, x_i L] with L L^T the pool's
covariance, and each pick is the query where the stored queries' kernel mean most exceeds the sample's
so far. Like a stratified sample over every direction at once, but with no draw, and nested: the first n
of a longer list are the list for n. The queries are placed at the pool's mean fingerprint whatever the
basis: placing them at each model's own fingerprint fitted worse on both datasets (measured with the
onboarding benchmark's harness), so a model's answers and evaluations only count as queries asked.

The designed criteria of `greedy_design`, measured against it, ask the queries the pool is least sure of:
- "prediction": the expected fall in the uncertainty of the model's predicted correctness over the stored
  queries (V-optimal design: their predicted-logit variance, each weighted by p(1 - p), with the Fisher
  information p_i (1 - p_i) x_i x_i^T of each answer taken into the Gaussian N(basis, Sigma) by
  Sherman-Morrison);
- "theta": the answer's mutual information with theta itself (BALD), also measured there.
They pick discriminating queries of middling difficulty for the pool; the factor model is not exact, and a
fingerprint fitted on those extrapolates badly to the rest for a model unlike the pool, and both lose to
random queries (docs/results/onboarding.md).

Two bases (they set the designed criteria's picks and every pick's predicted P(correct)):
- a model in the registry: theta is its fingerprint from its stored evaluations, which count as answered
  and are never suggested again;
- a model not in the registry (no name, or `from_pool`): the pool's prior, the mean and spread of the
  stored models' fingerprints. `answered` (query id -> score, the answers a not-yet-added model already
  has) moves it to its own fitted theta and counts those queries as asked, so a caller can ask for the
  next batch after each one (the onboarding benchmark's "adaptive" rows).

Candidates are the stored queries the item table has a row for (never the encoder's test queries).
Measured on MMLU-Pro and BFCL by scripts/report_onboarding.py (docs/results/onboarding.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from registry.errors import InputError, NotFoundError, RegistryError

if TYPE_CHECKING:
    from encoder.fingerprint import ItemTable
    from indexing.store import Store
    from registry.results import QuerySuggestions

__all__ = ["Design", "prior_covariance", "greedy_design", "representative_design", "design_for", "suggest_queries",
           "check_n", "check_answered", "NO_TABLE"]

NO_TABLE = ("no item table for the active encoder yet: `registry train` fits one with the encoder, "
            "`registry fit-fingerprints` fits one for an encoder trained before item tables")


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))


def prior_covariance(table: "ItemTable", pool_thetas: np.ndarray | None) -> np.ndarray:
    """(r+1, r+1): the spread of the pool's fingerprints, with a small ridge (a pool of fewer models than
    dimensions has a singular covariance); the fingerprint's own ridge prior when the pool has under 2."""
    k = table.rank + 1
    thetas = None if pool_thetas is None else np.asarray(pool_thetas, np.float64)
    if thetas is None or len(thetas) < 2:
        # the fingerprint's ridge on a (precision 2 * ridge), and an ability spread of one logit
        return np.diag(np.r_[np.full(k - 1, 1.0 / (2.0 * table.config.ridge)), 1.0])
    cov = np.cov(thetas.T).reshape(k, k)
    scale = float(np.trace(cov)) / k
    return cov + 1e-2 * max(scale, 1e-6) * np.eye(k)


@dataclass
class Design:
    picks: np.ndarray  # (n,) candidate rows, in the order chosen
    gains: np.ndarray  # (n,) the gain of each (greedy_design), given the ones before it
    information: np.ndarray  # (n,) w_i ||x_i||^2: each one's information alone (trace of I_i)
    p_correct: np.ndarray  # (n,) predicted P(correct) at the basis (mean over the pool for the pool basis)


_LAMBDA2 = np.pi / 8.0  # sigmoid(f) ~ Phi(f sqrt(pi / 8)): the probit approximation of the logistic
_C2 = np.pi * np.log(2.0) / 2.0  # Houlsby et al. 2011 (BALD): E[h(Phi(f))] ~ C / sqrt(s + C^2) exp(-m^2 / 2(s + C^2))


def _expected_gain(mu: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gain in nats, the moderated P(correct)) of one answer to queries whose logit is N(mu, s) under
    what is known of the model: the mutual information of the answer and the fingerprint (BALD), at most
    log 2 however steep the query."""
    m, v = np.sqrt(_LAMBDA2) * mu, _LAMBDA2 * np.maximum(s, 0.0)
    p = 1.0 / (1.0 + np.exp(-np.clip(mu / np.sqrt(1.0 + v), -30.0, 30.0)))  # Phi(m / sqrt(1 + v)) ~ this
    entropy = -(p * np.log(np.maximum(p, 1e-300)) + (1 - p) * np.log(np.maximum(1 - p, 1e-300)))
    expected = np.sqrt(_C2 / (v + _C2)) * np.exp(-m * m / (2.0 * (v + _C2))) * np.log(2.0)
    return np.maximum(entropy - expected, 0.0), p


def greedy_design(x: np.ndarray, mu: np.ndarray, covariance: np.ndarray, n: int, *,
                  population: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(picks, gains): n rows of `x` (C, k) chosen greedily, each by what its answer is expected to tell
    given the earlier picks. theta ~ N(., S) makes query i's logit N(mu_i, s_i = x_i^T S x_i); an answer
    adds its Fisher information w_i x_i x_i^T, w_i = p_i (1 - p_i) at the moderated P(correct) (Laplace),
    and S shrinks by Sherman-Morrison. The gain is
    - with `population` A = mean_j w_j x_j x_j^T over the queries the model will be asked about: the fall
      in their p(1-p)-weighted predicted-logit variance, trace(A S) before minus after
      (= w_i x_i^T S A S x_i / (1 + w_i s_i); V-optimal design, the default of `design_for`);
    - without: the answer's mutual information with theta (BALD, at most log 2 nats).
    Each row is picked at most once; ties go to the lower row (deterministic)."""
    x = np.asarray(x, np.float64)
    mu = np.asarray(mu, np.float64)
    sigma = np.array(covariance, np.float64)
    n = min(int(n), len(x))
    s = np.einsum("ij,jk,ik->i", x, sigma, x)  # x_i^T S x_i for every candidate
    taken = np.zeros(len(x), bool)
    picks, gains = np.empty(n, np.int64), np.empty(n)
    for t in range(n):
        mutual, p = _expected_gain(mu, s)
        w = p * (1.0 - p)
        if population is None:
            score = mutual
        else:
            m = sigma @ population @ sigma
            score = w * np.einsum("ij,jk,ik->i", x, m, x) / (1.0 + w * s)
        score[taken] = -np.inf
        j = int(np.argmax(score))
        picks[t], gains[t], taken[j] = j, score[j], True
        v = sigma @ x[j]
        denom = 1.0 + w[j] * s[j]
        sigma -= np.outer(v, v) * (w[j] / denom)
        s -= w[j] * (x @ v) ** 2 / denom
    return picks, gains


_REFERENCE = 4096  # population queries the kernel mean averages over (a seeded sample beyond that: time)


def representative_design(candidates: np.ndarray, population: np.ndarray, n: int, *,
                          answered: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(picks, gains): n rows of `candidates` (C, d) chosen by kernel herding, so that the picks, with the
    `answered` rows (A, d), stand for `population` (P, d) as a whole: each pick is the candidate where the
    population's kernel mean most exceeds that of the set so far (Gaussian kernel, bandwidth the median
    squared distance within the population). The picks of n + k extend those of n (nested), like a
    stratified sample over every direction at once but with no draw; the gain is that excess, the pick's
    herding score. Each row is picked at most once; ties go to the lower row (deterministic)."""
    u = np.asarray(candidates, np.float64)
    ref = np.asarray(population, np.float64)
    n = min(int(n), len(u))
    rng = np.random.default_rng(0)
    if len(ref) > _REFERENCE:
        ref = ref[np.sort(rng.choice(len(ref), _REFERENCE, replace=False))]
    sample = ref if len(ref) <= 1000 else ref[rng.choice(len(ref), 1000, replace=False)]
    # in row blocks: the whole (1000, 1000, d) difference would be over 100 MB
    d2 = np.concatenate([((sample[i:i + 100, None, :] - sample[None, :, :]) ** 2).sum(-1)
                         for i in range(0, len(sample), 100)])
    positive = d2[d2 > 0]
    bandwidth = float(np.median(positive)) if len(positive) else 1.0
    sq, sq_ref = (u * u).sum(1), (ref * ref).sum(1)

    def kernel(a: np.ndarray, sq_a: np.ndarray, b: np.ndarray, sq_b: np.ndarray) -> np.ndarray:
        return np.exp(-np.maximum(sq_a[:, None] + sq_b[None, :] - 2.0 * a @ b.T, 0.0) / bandwidth)

    target = np.concatenate([kernel(u[i:i + 2048], sq[i:i + 2048], ref, sq_ref).mean(1)
                             for i in range(0, len(u), 2048)]) if len(u) else np.zeros(0)
    have = np.zeros(len(u))
    count = 0
    if answered is not None and len(answered):
        a = np.asarray(answered, np.float64)
        have += kernel(u, sq, a, (a * a).sum(1)).sum(1)
        count = len(a)
    taken = np.zeros(len(u), bool)
    picks, gains = np.empty(n, np.int64), np.empty(n)
    for t in range(n):
        score = target - have / (count + 1)
        score[taken] = -np.inf
        j = int(np.argmax(score))
        picks[t], gains[t], taken[j] = j, score[j], True
        have += kernel(u, sq, u[j:j + 1], sq[j:j + 1])[:, 0]
        count += 1
    return picks, gains


def design_for(table: "ItemTable", factors: np.ndarray, bias: np.ndarray, n: int, *,
               pool_thetas: np.ndarray | None, theta: np.ndarray | None = None,
               answered: tuple[np.ndarray, np.ndarray] | None = None,
               population: tuple[np.ndarray, np.ndarray] | None = None, criterion: str = "representative") -> Design:
    """n of the candidate queries with item parameters (F (C, r), b (C,)) to ask a model at `theta` (its
    fingerprint) or, when None, a model drawn from the pool (`pool_thetas`: their mean and spread).
    `answered` = (F, b) of the queries the model already has answers to. `population` = (F, b): the
    queries the model will be asked about (default: every query of the table). criterion
    - "representative" (default): picks that, with the answered ones, stand for the population as a whole
      (`representative_design`), each query placed by its logit at the pool's mean fingerprint (at `theta`
      without a pool) and its logit's spread over the pool's fingerprints, [x . mean + b, x L] with L L^T
      the pool's covariance: the same picks for every model, going on from the queries it has answered;
    - "prediction": the fall in the uncertainty of the model's predicted correctness over the population
      (V-optimal), the answered ones' information known already;
    - "theta": the information about its fingerprint itself (BALD).
    The designed criteria ask the queries on which the pool is unsure; a fingerprint fitted on those
    predicts the others worse than one fitted on as many random queries (the factor model is not exact),
    so they lose to random, which the representative picks beat: docs/results/onboarding.md."""
    if criterion not in ("representative", "prediction", "theta"):
        raise InputError(f"unknown criterion {criterion!r}; choose representative, prediction or theta",
                         field="criterion")
    factors, bias = np.asarray(factors, np.float64), np.asarray(bias, np.float64)
    x = np.concatenate([factors, np.ones((len(factors), 1))], 1)
    covariance = prior_covariance(table, pool_thetas)
    if theta is None:
        if pool_thetas is None or len(pool_thetas) == 0:
            raise RegistryError("no model in the registry has a fingerprint to set the pool's prior: "
                                "registry fit-fingerprints")
        basis = np.asarray(pool_thetas, np.float64).mean(0)
    else:
        basis = np.asarray(theta, np.float64)
    fp, bp = population if population is not None else (table.factors, table.bias)
    if criterion == "representative":
        spread = np.linalg.cholesky(covariance)
        # the queries are placed as the pool sees them even for a model with its own fingerprint: placed
        # at that fingerprint (the picks adapting to each batch's answers) they fitted worse on both datasets
        centre = basis if pool_thetas is None or len(pool_thetas) == 0 else np.asarray(pool_thetas, np.float64).mean(0)

        def place(f: np.ndarray, b: np.ndarray) -> np.ndarray:
            xf = np.concatenate([np.asarray(f, np.float64), np.ones((len(f), 1))], 1)
            return np.concatenate([(xf @ centre + np.asarray(b, np.float64))[:, None], xf @ spread], 1)

        done = place(*answered) if answered is not None and len(answered[0]) else None
        picks, gains = representative_design(place(factors, bias), place(fp, bp), n, answered=done)
        return _design(picks, gains, x, bias, basis, pool_thetas if theta is None else None)
    if answered is not None and len(answered[0]):
        xa = np.concatenate([np.asarray(answered[0], np.float64), np.ones((len(answered[0]), 1))], 1)
        pa = _sigmoid(xa @ basis + np.asarray(answered[1], np.float64))
        precision = np.linalg.inv(covariance) + (xa * (pa * (1 - pa))[:, None]).T @ xa
        covariance = np.linalg.inv(precision)
    a = None
    if criterion == "prediction":
        xp = np.concatenate([np.asarray(fp, np.float64), np.ones((len(fp), 1))], 1)
        _, pp = _expected_gain(xp @ basis + np.asarray(bp, np.float64), np.einsum("ij,jk,ik->i", xp, covariance, xp))
        a = (xp * (pp * (1 - pp))[:, None]).T @ xp / max(len(xp), 1)
    mu = x @ basis + bias
    picks, gains = greedy_design(x, mu, covariance, n, population=a)
    return _design(picks, gains, x, bias, basis, pool_thetas if theta is None else None)


def _design(picks: np.ndarray, gains: np.ndarray, x: np.ndarray, bias: np.ndarray, basis: np.ndarray,
            pool_thetas: np.ndarray | None) -> Design:
    """The picks with their P(correct) and information: at `basis` (a model's fingerprint), or, for a model
    drawn from the pool (`pool_thetas`), their mean over the pool's fingerprints. The sigmoid at the pool's mean
    fingerprint is not that: it is pushed towards 0 or 1 (a query 7% of the pool get right read 0.01)."""
    logits = x[picks] @ (basis[:, None] if pool_thetas is None else np.asarray(pool_thetas, np.float64).T)
    p = _sigmoid(logits + bias[picks][:, None])  # (picks, 1 or pool models)
    return Design(picks=picks, gains=gains, information=(p * (1 - p)).mean(1) * (x[picks] ** 2).sum(1),
                  p_correct=p.mean(1))


def check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"the number of queries to suggest must be an integer of at least 1, not {n!r}", field="n")
    return int(n)


def check_answered(answered) -> dict[str, float]:
    if answered is None:
        return {}
    if not isinstance(answered, dict):
        raise InputError("answers are a mapping of query id to score", field="answered")
    out = {}
    for query_id, score in answered.items():
        if not isinstance(query_id, str) or not query_id:
            raise InputError(f"query id {query_id!r} is not a non-empty string", field="answered")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= float(score) <= 1.0:
            raise InputError(f"the score of query {query_id!r} must be a number in [0, 1], not {score!r}",
                             field="answered")
        out[query_id] = float(score)
    return out


def suggest_queries(store: "Store", *, name: str | None = None, n: int = 64, task: str | None = None,
                    from_pool: bool = False, answered: dict[str, float] | None = None) -> "QuerySuggestions":
    """The n stored queries whose answers would tell the most about model `name` (its fingerprint from its
    stored evaluations; its answered queries never suggested), or about a model not in the registry (no
    name, `from_pool`, or a name the registry does not hold with `from_pool`: the pool's prior, moved by
    `answered`). `task` keeps the queries of one task."""
    from indexing.store import MODELS, QUERIES
    from registry.analytics.fingerprints import pool_fingerprints
    from registry.catalog.fingerprint_store import compute, load_item_table
    from registry.catalog.rows import read_evaluations
    from registry.results import QuerySuggestions, SuggestedQuery

    n = check_n(n)
    answers = check_answered(answered)
    if task is not None and (not isinstance(task, str) or not task):
        raise InputError("the task is empty", field="task")
    rows = store.read(QUERIES, ["query_id", "text", "task"]).to_pylist()
    tasks = sorted({r["task"] for r in rows})
    if task is not None and task not in tasks:
        raise InputError(f"no task {task!r} in the registry; tasks: {', '.join(tasks) or '(none yet)'}", field="task")
    names = store.read(MODELS, ["name"]).column("name").to_pylist()
    if name is not None and name not in names and not from_pool:
        raise NotFoundError.model(name, names)
    if answers and name in names:
        raise InputError(f"{name!r} is in the registry: its stored evaluations are its answers (registry refine "
                         "adds more)", field="answered")
    table = load_item_table(store) if store.config.get("active_encoder") else None
    if table is None:
        raise RegistryError(NO_TABLE)

    theta = None
    answered_ids: set[str] = set()
    if name in names:
        _, qids, _ = read_evaluations(store, [name])
        answered_ids = set(qids.tolist())
        if not from_pool:
            fitted = compute(store, table, [name]).get(name)
            if fitted is not None and np.isfinite(fitted[0]).all():
                theta = fitted[0]
    unknown = sorted(q for q in answers if q not in table._row)
    if unknown:
        raise InputError(f"{len(unknown)} answered query id(s) have no row in the item table (not stored, or "
                         f"test queries of the encoder), e.g. {unknown[0]!r}", field="answered")
    if answers:
        answered_ids = set(answers)
        ids = list(answers)
        f, b = table.item_params(ids)
        theta = table.fingerprint(f, b, np.array([answers[q] for q in ids]))

    candidates = [r for r in rows if r["query_id"] in table._row and r["query_id"] not in answered_ids
                  and (task is None or r["task"] == task)]
    known = [q for q in answered_ids if q in table._row]
    pool = pool_fingerprints(store, table)
    basis = "model" if theta is not None and not answers else "answers" if answers else "pool"
    result = dict(model=name, basis=basis, table_id=table.table_id, task=task, n_requested=n,
                  n_answered=len(answered_ids), n_candidates=len(candidates), pool_models=len(pool.names))
    if not candidates:
        return QuerySuggestions(**result, total_gain=0.0, queries=[])
    f, b = table.item_params([r["query_id"] for r in candidates])
    fa, ba = table.item_params(known) if known else (np.zeros((0, table.rank)), np.zeros(0))
    population = None
    if task is not None:  # the uncertainty that matters is over the task's queries, answered ones included
        population = table.item_params([r["query_id"] for r in rows if r["task"] == task and r["query_id"] in table._row])
    design = design_for(table, f, b, n, pool_thetas=pool.thetas, theta=theta, answered=(fa, ba), population=population)
    picked = [SuggestedQuery(rank=i + 1, query_id=candidates[j]["query_id"], task=candidates[j]["task"],
                             text=candidates[j]["text"], gain=float(g), information=float(info), p_correct=float(p))
              for i, (j, g, info, p) in enumerate(zip(design.picks, design.gains, design.information, design.p_correct))]
    return QuerySuggestions(**result, total_gain=float(design.gains.sum()), queries=picked)
