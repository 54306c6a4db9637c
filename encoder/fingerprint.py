"""Behaviour fingerprints: which queries a model gets right, beyond how many.

A LOCUS embedding is read from query *text* and scores, and on real pools it carries mostly ability:
two models of similar accuracy that fail on different questions look alike, because nothing in a
question's text says which models fail it. The pool itself does say: across the stored models, each
query has a pattern of who gets it right. An `ItemTable` learns that pattern once, by logistic matrix
factorisation of the pool's score matrix,

    logit P(model m correct on query i) = F_i . a_m + c_m + b_i,   F: (Q, r) item factors, b: (Q,) item bias,

and a model's fingerprint theta_m = (a_m, c_m) is then a ridge logistic regression on its own
evaluations with F and b held fixed: a deterministic solve of r + 1 numbers, no training, more
evaluations refine it, exactly like the LOCUS forward pass. Queries the table has never seen get
(F_i, b_i) from their query vector through a ridge map fitted on the known ones.

Two distances over a fixed probe set of known queries:
- identity: the RMS difference of two fingerprints' logits; `identity_vectors` whitens theta so that
  it is the Euclidean distance (a copy of a model lands on it, whatever its ability neighbours);
- behaviour: the expected disagreement of their predicted answers, mean_i p_i(1 - q_i) + (1 - p_i) q_i,
  which is what the raw evidence measures on common queries.

Measured on the shared pools: scripts/scorecard.py (docs/results/scorecard.md, "fingerprint" rows).
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["FingerprintConfig", "ItemTable", "balanced_probe", "fit_item_table", "fit_on_data", "item_table_predictions", "save_item_table", "ITEM_TABLE_WEIGHTS",
           "ITEM_TABLE_CONFIG"]

ITEM_TABLE_WEIGHTS = "item_table.safetensors"
ITEM_TABLE_CONFIG = "item_table.json"
FORMAT = "locus-item-table/1"
_DENSE_CELLS = 20_000_000
SAME_MODEL_LEVEL = 0.01  # answer_evidence: the chance that a model's own fingerprint is not recognised as one
UNCOVERED = 0.5  # behaviour vectors: the disagreement a probe of a task the other model never answered costs
MAX_ANSWERS = 4096  # recorded answers an answer distance reads (a seeded sample beyond): 4,096 x 200 models is 0.8M predictions


@dataclass(frozen=True)
class FingerprintConfig:
    rank: int = 16  # r: item factors per query
    factor_decay: float = 0.01  # L2 on item and model factors in the pool fit (per row, mean-scaled)
    ridge: float = 1.0  # L2 on a model's factors when it is fingerprinted (its intercept is free)
    steps: int = 600  # full-batch Adam steps of the pool fit
    lr: float = 0.05
    text_ridge: float = 1.0  # L2 of the query-vector -> (F_i, b_i) map
    max_probe: int = 2048  # known queries the distances average over
    # bounds on the fit, for time and memory: a larger pool fits on a seeded sample of its models (the table
    # describes the queries; a thousand models characterise them), then of their evaluations
    max_fit_models: int = 1000
    max_fit_evals: int = 4_000_000
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ItemTable:
    query_ids: list[str]  # P known queries
    factors: np.ndarray  # (P, r) float32
    bias: np.ndarray  # (P,) float32
    text_map: np.ndarray  # (D + 1, r + 1) float32: [query vector, 1] -> [F_i, b_i]
    probe: np.ndarray  # (S,) int64 rows of the known queries the distances average over
    config: FingerprintConfig = field(default_factory=FingerprintConfig)
    models: list[str] = field(default_factory=list)  # the pool it was fitted on
    probe_tasks: list[str] = field(default_factory=list)  # (S,) task of each probe query ("" when unknown)

    def __post_init__(self) -> None:
        self._row = {q: i for i, q in enumerate(self.query_ids)}
        x = np.concatenate([self.factors[self.probe], np.ones((len(self.probe), 1), np.float32)], 1).astype(np.float64)
        gram = x.T @ x / max(len(self.probe), 1)  # (r+1, r+1)
        # a small jitter keeps the Cholesky defined when a factor is unused
        self._whiten = np.linalg.cholesky(gram + 1e-9 * np.eye(len(gram)))

    @property
    def rank(self) -> int:
        return int(self.factors.shape[1])

    @functools.cached_property
    def table_id(self) -> str:
        # once per table: a route asks for it per call, and hashing the arrays cost ~1 ms each time (a table is
        # not changed after it is built: a new one is a new object)
        # the max_fit_* bounds only limit the fit (they arrived after the first tables; those keep their ids)
        config = {k: v for k, v in self.config.to_dict().items() if not k.startswith("max_fit_")}
        h = hashlib.sha256(json.dumps({"format": FORMAT, "config": config}, sort_keys=True).encode())
        for array in (self.factors, self.bias, self.text_map, self.probe):
            h.update(np.ascontiguousarray(array).tobytes())
        h.update("\n".join(self.query_ids).encode("utf-8"))
        h.update("\n".join(self.probe_tasks).encode("utf-8"))
        return h.hexdigest()[:16]

    # ------------------------------------------------------------------ per query
    def item_params(self, query_ids, query_vectors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(F (n, r), b (n,)) for these queries: the table's rows where known, else the text map of the
        query's vector (`query_vectors` (n, D), needed only for unknown queries)."""
        rows = np.fromiter((self._row.get(q, -1) for q in query_ids), dtype=np.int64, count=len(query_ids))
        f = np.empty((len(rows), self.rank), np.float64)
        b = np.empty(len(rows), np.float64)
        known = rows >= 0
        f[known], b[known] = self.factors[rows[known]], self.bias[rows[known]]
        if (~known).any():
            if query_vectors is None:
                raise ValueError(f"{int((~known).sum())} query id(s) unknown to the item table and no query vectors given")
            v = np.asarray(query_vectors)[~known].astype(np.float64)  # rows first: the known ones need no copy
            if v.shape[1] != self.text_map.shape[0] - 1:
                from indexing.errors import RegistryError

                raise RegistryError(f"the item table places new queries from {self.text_map.shape[0] - 1}-d query "
                                    f"vectors, not {v.shape[1]}-d ones: the registry's query encoder is not the one "
                                    "the table was fitted with (registry fit-fingerprints refits it)")
            mapped = np.concatenate([v, np.ones((len(v), 1))], 1) @ self.text_map  # (u, r+1)
            f[~known], b[~known] = mapped[:, :-1], mapped[:, -1]
        return f, b

    # ------------------------------------------------------------------ per model
    def fingerprint(self, factors: np.ndarray, bias: np.ndarray, scores: np.ndarray, *, iterations: int = 50) -> np.ndarray:
        """theta = (a, c), (r + 1,): the ridge logistic regression of `scores` (n,) in [0, 1] on the queries'
        (F, b), by Newton's method from zero (deterministic)."""
        n = len(scores)
        x = np.concatenate([np.asarray(factors, np.float64), np.ones((n, 1))], 1)  # (n, r+1)
        y = np.asarray(scores, np.float64)
        penalty = np.full(self.rank + 1, 2.0 * self.config.ridge)
        penalty[-1] = 1e-6  # the intercept (ability) is free
        bias = np.asarray(bias, np.float64)

        def objective(t: np.ndarray) -> float:
            z = x @ t + bias
            return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(penalty * t * t))

        theta = np.zeros(self.rank + 1)
        current = objective(theta)
        for _ in range(iterations):
            p = 1.0 / (1.0 + np.exp(-np.clip(x @ theta + bias, -30.0, 30.0)))  # an all-right model stays finite
            grad = x.T @ (p - y) + penalty * theta
            hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty)
            step = np.linalg.solve(hess, grad)
            # a full Newton step from a flat start can overshoot on a few very discriminating queries and
            # diverge (intercepts of 1e7 were seen from 24 answers); halving it until the objective falls
            # keeps every fit at the optimum, and a step that is accepted whole changes nothing
            scale = 1.0
            while scale > 1e-6:
                trial = objective(theta - scale * step)
                if trial <= current + 1e-12:
                    break
                scale *= 0.5
            theta = theta - scale * step
            current = objective(theta)
            if np.abs(scale * step).max() < 1e-8:
                break
        return theta

    def fingerprints(self, query_ids, query_vectors: np.ndarray | None, per_model: list[np.ndarray],
                     query_index: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """(M, r + 1): one fingerprint per model from its evaluations `per_model[m]` (indices into
        `query_index` / `scores`, which index `query_ids`)."""
        f, b = self.item_params(query_ids, query_vectors)
        out = np.zeros((len(per_model), self.rank + 1))
        for m, evals in enumerate(per_model):
            if len(evals):
                q = query_index[evals]
                out[m] = self.fingerprint(f[q], b[q], scores[evals])
        return out

    def probabilities(self, thetas: np.ndarray, factors: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """(M, n) predicted P(correct) of each fingerprint on queries with item parameters (F (n, r), b (n,))
        (from `item_params`): the item table as a predictor."""
        thetas = np.asarray(thetas, np.float64)
        logits = thetas[:, :-1] @ np.asarray(factors, np.float64).T + thetas[:, -1:] + np.asarray(bias, np.float64)
        return 1.0 / (1.0 + np.exp(-np.clip(logits, -30.0, 30.0)))

    # ------------------------------------------------------------------ distances
    def identity_vectors(self, thetas: np.ndarray) -> np.ndarray:
        """(M, r + 1) vectors whose Euclidean distance is the RMS logit difference over the probe set."""
        return np.asarray(thetas, np.float64) @ self._whiten

    def thetas_of(self, identity: np.ndarray) -> np.ndarray:
        """(M, r + 1) fingerprints back from their identity vectors (the form the index stores)."""
        return np.linalg.solve(self._whiten.T, np.asarray(identity, np.float64).T).T

    def probe_probabilities(self, thetas: np.ndarray) -> np.ndarray:
        """(M, S) predicted P(correct) on the probe queries."""
        thetas = np.asarray(thetas, np.float64)
        logits = thetas[:, :-1] @ self.factors[self.probe].T.astype(np.float64) + thetas[:, -1:] + self.bias[self.probe]
        return 1.0 / (1.0 + np.exp(-logits))

    def coverage(self, tasks_per_model: list) -> np.ndarray:
        """(M, S) bool: the probe queries of a task each model was evaluated on. A model answers for
        its own kinds of query: a function-calling model's predicted answers to maths questions are the
        factor model's extrapolation, not evidence, so behaviour distances skip them."""
        tasks = self.probe_tasks if self.probe_tasks else [""] * len(self.probe)
        code = {t: i for i, t in enumerate(sorted(set(tasks)))}
        probe_codes = np.fromiter((code[t] for t in tasks), dtype=np.int64, count=len(tasks))
        out = np.zeros((len(tasks_per_model), len(tasks)), bool)
        for m, model_tasks in enumerate(tasks_per_model):
            out[m] = np.isin(probe_codes, [code[t] for t in model_tasks if t in code])
        return out

    def behaviour_distances(self, thetas: np.ndarray, others: np.ndarray | None = None, *,
                            coverage: np.ndarray | None = None, other_coverage: np.ndarray | None = None) -> np.ndarray:
        """(M, N) expected disagreement, mean_i p_i (1 - q_i) + (1 - p_i) q_i, over the probe queries both
        cover (all of them without `coverage`); +inf for a pair that covers none in common."""
        p = self.probe_probabilities(thetas)
        q = p if others is None else self.probe_probabilities(others)
        a = np.ones_like(p) if coverage is None else np.asarray(coverage, np.float64)
        b = (a if others is None else np.ones_like(q)) if other_coverage is None else np.asarray(other_coverage, np.float64)
        shared = a @ b.T
        total = (p * a) @ b.T + a @ (q * b).T - 2.0 * (p * a) @ (q * b).T
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(shared > 0, total / np.maximum(shared, 1), np.inf)

    # ------------------------------------------------------------------ the behaviour vector
    @functools.cached_property
    def _probe_task_onehot(self) -> np.ndarray:
        """(S, T) float64: probe query -> its task (the tasks sorted; one "" task without labels)."""
        tasks = self.probe_tasks if self.probe_tasks else [""] * len(self.probe)
        kinds, code = np.unique(np.asarray(tasks, dtype=object).astype(str), return_inverse=True)
        onehot = np.zeros((len(tasks), len(kinds)))
        onehot[np.arange(len(tasks)), code] = 1.0
        return onehot

    @property
    def behaviour_dim(self) -> int:
        """S + T: the length of a behaviour vector."""
        return int(sum(self._probe_task_onehot.shape))

    def probe_answers(self, query_ids, scores) -> np.ndarray:
        """(S,) a model's recorded scores on the probe queries (`scores` (n,) on `query_ids`), NaN where it
        has none (the first score of a query recorded twice)."""
        out = np.full(len(self.probe), np.nan)
        column = {int(row): j for j, row in enumerate(self.probe)}
        for q, y in zip(query_ids, scores):
            j = column.get(self._row.get(q, -1))
            if j is not None and np.isnan(out[j]):
                out[j] = float(y)
        return out

    def behaviour_vectors(self, thetas: np.ndarray, coverage: np.ndarray, answers: np.ndarray | None = None) -> np.ndarray:
        """(M, S + T) what the index stores to find a model's behavioural neighbours: [c * y, t], with y a
        model's answer on each probe query (its recorded score where `answers` (M, S) has one, else its
        fingerprint's P(correct)), c whether the probe is of a task it was evaluated on (`coverage` (M, S),
        from `coverage`) and t (T,) the same per task. Searched with `behaviour_queries`, the inner product
        is the expected disagreement over the querying model's tasks or answers (`behaviour_mean`).

        Why recorded answers where there are some: a fingerprint is a rank-r summary, and the answers are
        the evidence itself (two endpoints of one model answer alike wherever both were asked); why
        probabilities elsewhere: most models are asked a few queries, and the table says the rest."""
        y = self.probe_probabilities(thetas)
        if answers is not None:
            answers = np.asarray(answers, np.float64).reshape(y.shape)
            y = np.where(np.isnan(answers), y, answers)
        c = np.asarray(coverage, bool).reshape(y.shape)
        per_task = (c.astype(np.float64) @ self._probe_task_onehot > 0).astype(np.float64)  # (M, T)
        return np.concatenate([np.where(c, y, 0.0), per_task], 1)

    def behaviour_queries(self, vectors: np.ndarray, answered: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(queries (M, S + T), probes read (M,)) for stored behaviour vectors (`behaviour_vectors`): the largest
        inner product of a query with another's stored vector is the least expected disagreement. For query
        model A and stored B, over the probes A reads: B covering a probe costs y_A + y_B - 2 y_A y_B (the
        chance they disagree), B not covering it UNCOVERED (a coin flip's disagreement); the inner product is
        minus that sum, less UNCOVERED per probe read (`behaviour_mean` adds it back).

        A reads the probes of its tasks, or with `answered` (M, S) bool, those it has recorded answers on
        (when it has any): its fingerprint's predictions for the rest can be far from its answers when the
        table was not fitted on it, and a copy of it would then not find it (docs/results/scorecard.md)."""
        v = np.asarray(vectors, np.float64)
        s = len(self.probe)
        c = v[:, s:] @ self._probe_task_onehot.T  # (M, S) coverage, from the task part
        if answered is not None:
            answered = np.asarray(answered, bool).reshape(c.shape)
            c = np.where(answered.any(1, keepdims=True), c * answered, c)
        cy = v[:, :s] * c
        return -np.concatenate([c - 2.0 * cy, (cy - UNCOVERED * c) @ self._probe_task_onehot], 1), c.sum(1)

    @staticmethod
    def behaviour_mean(read: np.ndarray, inner: np.ndarray) -> np.ndarray:
        """Mean expected disagreement over the probes each query reads (`read` (M,), from
        `behaviour_queries`), from the inner products `inner` (M, N) of its queries with stored vectors;
        +inf for a query reading none."""
        read = np.asarray(read, np.float64)[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(read > 0, (UNCOVERED * read - inner) / np.maximum(read, 1), np.inf)

    def answer_distances(self, others: np.ndarray, query_ids, scores, *, query_tasks=None, other_tasks=None,
                         max_answers: int = MAX_ANSWERS) -> np.ndarray:
        """(N,) how far one model's recorded answers (`scores` in [0, 1] on `query_ids`) are from what each
        fingerprint in `others` ((N, r + 1)) predicts on those queries: the expected disagreement
        mean_q y_q (1 - p_q) + (1 - y_q) p_q, over the recorded queries the table knows (at most
        `max_answers` of them, a seeded sample) of the tasks the other was evaluated on (`query_tasks`
        (n,) the task of each query, `other_tasks` (N,) a set of tasks per other; all queries without);
        +inf where there are none.

        Why answers and not the model's own fingerprint: a fingerprint is a rank-r summary, and a model
        the table was not fitted on is summarised in directions that describe the others; its answers
        are the evidence itself, and raw disagreement is what "behaves alike" means
        (docs/results/scorecard.md, "search from a model")."""
        return self._answers(others, query_ids, scores, query_tasks, other_tasks, max_answers, ratios=False)[0]

    def answer_evidence(self, others: np.ndarray, query_ids, scores, *, query_tasks=None, other_tasks=None,
                        max_answers: int = MAX_ANSWERS) -> tuple[np.ndarray, np.ndarray]:
        """(`answer_distances`, ratios (N,)): the likelihood ratio 2 (l(own) - l(other)) of the sampled
        answers under their own fingerprint (`fingerprint` of them) against under each other's; below
        `same_model_ratio` the other could have produced them (+inf where it covers none of their tasks).
        The expected disagreement rewards a confident model that leans the answers' way, and can rank
        one before the answers' own model; the likelihood does not."""
        return self._answers(others, query_ids, scores, query_tasks, other_tasks, max_answers, ratios=True)

    def _answers(self, others, query_ids, scores, query_tasks, other_tasks, max_answers: int, *,
                 ratios: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """`answer_evidence`; without `ratios` the ratios are None (they cost a solve of the answers' own
        fingerprint)."""
        rows = np.fromiter((self._row.get(q, -1) for q in query_ids), dtype=np.int64, count=len(query_ids))
        keep = np.flatnonzero(rows >= 0)
        if len(keep) > max_answers:
            keep = np.sort(np.random.default_rng(0).choice(keep, max_answers, replace=False))
        others = np.asarray(others, np.float64).reshape(-1, self.rank + 1)
        if not len(keep) or not len(others):
            return np.full(len(others), np.inf), np.full(len(others), np.inf) if ratios else None
        y = np.asarray(scores, np.float64)[keep]
        f, b = self.factors[rows[keep]].astype(np.float64), self.bias[rows[keep]].astype(np.float64)
        p = self.probabilities(others, f, b)  # (N, n)
        ratio = None
        if ratios:
            own = self.probabilities(self.fingerprint(f, b, y)[None], f, b)
            q = np.clip(np.vstack([own, p]), 1e-9, 1.0 - 1e-9)
            loglik = (y[None] * np.log(q) + (1.0 - y[None]) * np.log1p(-q)).sum(1)
            ratio = np.maximum(2.0 * (loglik[0] - loglik[1:]), 0.0)
        miss = p * (1.0 - 2.0 * y[None]) + y[None]  # (N, n): y (1 - p) + (1 - y) p
        if other_tasks is None:
            distance = miss.mean(1)
        else:
            tasks = [query_tasks[i] or "" for i in keep]
            code = {t: c for c, t in enumerate(sorted(set(tasks)))}
            task_code = np.fromiter((code[t] for t in tasks), dtype=np.int64, count=len(tasks))
            kinds: dict[frozenset, int] = {}  # a pool has few distinct task sets: one coverage row each
            kind_of = np.fromiter((kinds.setdefault(frozenset(t or "" for t in held), len(kinds)) for held in other_tasks),
                                  dtype=np.int64, count=len(other_tasks))
            holds = np.zeros((len(kinds), len(code)), np.float64)
            for held, k in kinds.items():
                holds[k, [code[t] for t in held if t in code]] = 1.0
            covered = holds[:, task_code][kind_of]  # (N, n)
            n = covered.sum(1)
            with np.errstate(invalid="ignore", divide="ignore"):
                distance = np.where(n > 0, (miss * covered).sum(1) / np.maximum(n, 1), np.inf)
        return distance, (np.where(np.isfinite(distance), ratio, np.inf) if ratios else None)

    @property
    def same_model_ratio(self) -> float:
        """The likelihood ratio below which a fingerprint could have produced a model's answers: the
        chi-square (r + 1) quantile at 1 - SAME_MODEL_LEVEL."""
        return _chi2_upper_quantile(SAME_MODEL_LEVEL, self.rank + 1)

    # ------------------------------------------------------------------ files
    def tensors(self) -> dict[str, np.ndarray]:
        return {"factors": self.factors.astype(np.float32), "bias": self.bias.astype(np.float32),
                "text_map": self.text_map.astype(np.float32), "probe": self.probe.astype(np.int64)}

    def config_json(self) -> str:
        return json.dumps({"format": FORMAT, "table_id": self.table_id, "config": self.config.to_dict(),
                           "query_ids": self.query_ids, "models": self.models, "probe_tasks": self.probe_tasks})

    @classmethod
    def from_files(cls, weights: bytes, config_text: str) -> "ItemTable":
        from safetensors import SafetensorError
        from safetensors.numpy import load

        meta = json.loads(config_text)
        if meta.get("format") != FORMAT:
            raise ValueError(f"not an item table ({meta.get('format')!r}, expected {FORMAT!r})")
        try:
            t = load(weights)
        except SafetensorError as err:
            raise ValueError(f"unreadable {ITEM_TABLE_WEIGHTS}: {err}") from err
        table = cls(query_ids=list(meta["query_ids"]), factors=t["factors"], bias=t["bias"], text_map=t["text_map"],
                    probe=t["probe"], config=FingerprintConfig(**meta["config"]), models=list(meta.get("models", [])),
                    probe_tasks=list(meta.get("probe_tasks", [])))
        if len(table.query_ids) != len(table.factors) or table.factors.shape[1] != table.config.rank:
            raise ValueError("item table weights do not fit its config")
        if meta.get("table_id") != table.table_id:
            raise ValueError(f"item table id {meta.get('table_id')!r} does not match its contents ({table.table_id})")
        return table

    def weights_bytes(self) -> bytes:
        from safetensors.numpy import save

        return save(self.tensors())


def fit_item_table(query_ids: list[str], query_vectors: np.ndarray, model_index: np.ndarray, query_index: np.ndarray,
                   scores: np.ndarray, *, models: list[str], tasks: list[str] | None = None,
                   config: FingerprintConfig | None = None) -> ItemTable:
    """Fit F, b by logistic matrix factorisation of the observed (model, query, score) triples (holes are
    fine), then the text map on the queries that have them. Queries nobody was scored on get no row."""
    import torch

    config = config or FingerprintConfig()
    model_index, query_index, scores = (np.asarray(model_index, np.int64), np.asarray(query_index, np.int64),
                                        np.asarray(scores, np.float32))
    if len(models) > config.max_fit_models:
        chosen = np.sort(np.random.default_rng(config.seed).choice(len(models), config.max_fit_models, replace=False))
        renumber = np.full(len(models), -1, np.int64)
        renumber[chosen] = np.arange(len(chosen))
        keep = renumber[model_index] >= 0
        model_index, query_index, scores = renumber[model_index[keep]], query_index[keep], scores[keep]
        models = [models[i] for i in chosen]
    if len(scores) > config.max_fit_evals:
        keep = np.sort(np.random.default_rng(config.seed).choice(len(scores), config.max_fit_evals, replace=False))
        model_index, query_index, scores = model_index[keep], query_index[keep], scores[keep]
    seen = np.unique(query_index)
    renumber = np.full(len(query_ids), -1, np.int64)
    renumber[seen] = np.arange(len(seen))
    q = torch.as_tensor(renumber[query_index])
    m = torch.as_tensor(np.asarray(model_index, np.int64))
    y = torch.as_tensor(np.asarray(scores, np.float32))
    n_models, n_items, r = len(models), len(seen), config.rank
    g = torch.Generator().manual_seed(config.seed)
    item_f = (0.1 * torch.randn(n_items, r, generator=g)).requires_grad_()
    item_b = torch.zeros(n_items, requires_grad=True)
    model_a = (0.1 * torch.randn(n_models, r, generator=g)).requires_grad_()
    model_c = torch.zeros(n_models, requires_grad=True)
    opt = torch.optim.Adam([item_f, item_b, model_a, model_c], lr=config.lr)
    # a dense (M, P) matrix with a mask when it is small enough and mostly observed: three matmuls a step
    # instead of gathers over every triple; the same loss either way
    # (a dense cell costs about a tenth of a gathered triple here: dense unless the matrix is mostly holes)
    dense = n_models * n_items <= min(_DENSE_CELLS, 10 * len(y))
    if dense:
        target = torch.zeros(n_models, n_items)
        weight = torch.zeros(n_models, n_items)
        target[m, q], weight[m, q] = y, 1.0
        weight /= weight.sum()
    for _ in range(config.steps):
        opt.zero_grad()
        if dense:
            logit = model_a @ item_f.T + item_b + model_c[:, None]  # (M, P)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, target, weight=weight, reduction="sum")
        else:
            logit = (item_f[q] * model_a[m]).sum(1) + item_b[q] + model_c[m]  # (E,)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y)
        loss = loss + config.factor_decay * ((item_f ** 2).sum() / n_items + (model_a ** 2).sum() / n_models)
        loss.backward()
        opt.step()
    factors = item_f.detach().numpy().astype(np.float32)
    bias = item_b.detach().numpy().astype(np.float32)

    v = np.asarray(query_vectors, np.float64)[seen]
    x = np.concatenate([v, np.ones((len(v), 1))], 1)  # (P, D+1)
    target = np.concatenate([factors, bias[:, None]], 1).astype(np.float64)  # (P, r+1)
    reg = config.text_ridge * np.eye(x.shape[1])
    reg[-1, -1] = 0.0
    text_map = np.linalg.solve(x.T @ x + reg, x.T @ target).astype(np.float32)

    labels = [str(tasks[i] or "") for i in seen] if tasks is not None else [""] * n_items
    probe = balanced_probe(labels, config.max_probe, seed=config.seed)
    probe_tasks = [labels[i] for i in probe]
    return ItemTable(query_ids=[query_ids[i] for i in seen], factors=factors, bias=bias, text_map=text_map,
                     probe=probe, config=config, models=list(models), probe_tasks=probe_tasks)


def balanced_probe(tasks: list[str], size: int, *, seed: int = 0) -> np.ndarray:
    """(<= size,) sorted rows of the known queries (`tasks` (n,) the task of each) that the distances
    average over: every task an equal share, a task smaller than its share whole and the rest shared out
    again (water-filling), each task's drawn at random. Why not a plain sample: it gives a task its
    share of the queries, and a dataset of few queries beside a large one (function calling beside
    MMLU-Pro) would be described by a tenth of the probes, too few to tell its models apart."""
    rng = np.random.default_rng(seed)
    kinds, code = np.unique(np.asarray(tasks, dtype=object).astype(str), return_inverse=True)
    order = np.argsort(code, kind="stable")
    bounds = np.searchsorted(code[order], np.arange(len(kinds) + 1))
    groups = {str(t): order[bounds[i]:bounds[i + 1]] for i, t in enumerate(kinds)}
    quota, left = {}, min(int(size), len(tasks))
    pending = sorted(groups, key=lambda t: (len(groups[t]), t))
    while pending:
        share = left // len(pending)
        if len(groups[pending[0]]) <= share:  # the smallest task fits whole
            task = pending.pop(0)
            quota[task] = len(groups[task])
            left -= quota[task]
            continue
        extra = left - share * len(pending)
        for i, task in enumerate(pending):
            quota[task] = share + (1 if i < extra else 0)
        break
    picked = [rng.permutation(groups[t])[:quota[t]] for t in sorted(groups)]
    return np.sort(np.concatenate(picked)).astype(np.int64) if picked else np.zeros(0, np.int64)


def fit_on_data(data, *, exclude=frozenset(), config: FingerprintConfig | None = None) -> ItemTable:
    """An item table fitted on an `EvalData`'s evaluations outside the `exclude`d query ids."""
    excluded = np.fromiter((q in exclude for q in data.query_ids), dtype=bool, count=data.n_queries)
    keep = ~excluded[data.query_index]
    return fit_item_table(data.query_ids, data.query_vectors, data.model_index[keep], data.query_index[keep],
                          data.scores[keep], models=data.models, tasks=data.tasks, config=config)


def save_item_table(table: ItemTable, directory) -> None:
    """Into a checkpoint directory (a local or s3 home path); the JSON goes last: its presence means whole."""
    from indexing.home import write_bytes_atomic, write_text_atomic

    write_bytes_atomic(directory / ITEM_TABLE_WEIGHTS, table.weights_bytes())
    write_text_atomic(directory / ITEM_TABLE_CONFIG, table.config_json())


def item_table_predictions(data, train_evals: np.ndarray, query_sets) -> list[np.ndarray]:
    """The item table as a predictor: fitted on `train_evals` only, each model fingerprinted from its
    own training evaluations; (M, len(queries)) P(correct) for each array of query indices in
    `query_sets` (queries the table has not seen are placed by their vectors)."""
    from encoder.data import evals_by_model

    train_evals = np.asarray(train_evals, np.int64)
    table = fit_item_table(data.query_ids, data.query_vectors, data.model_index[train_evals],
                           data.query_index[train_evals], data.scores[train_evals], models=data.models,
                           tasks=data.tasks)
    thetas = table.fingerprints(data.query_ids, data.query_vectors, evals_by_model(data, train_evals),
                                data.query_index, data.scores)
    out = []
    for queries in query_sets:
        queries = np.asarray(queries, np.int64)
        f, b = table.item_params([data.query_ids[i] for i in queries], data.query_vectors[queries])
        out.append(table.probabilities(thetas, f, b).astype(np.float32))
    return out


# scipy.special.chdtri's answers for the defaults (SAME_MODEL_LEVEL, rank 16 + 1): importing scipy.special
# was 0.15 s of a cold CLI search from a model (scipy.stats' chi2.ppf, before it, 0.55 s). A test checks each
# entry against scipy; any other (level, k) asks scipy.
_KNOWN_QUANTILES = {(0.01, 17): 33.40866360500462}


@functools.lru_cache(maxsize=None)
def _chi2_upper_quantile(level: float, k: int) -> float:
    """x with P(chi2_k > x) = level."""
    known = _KNOWN_QUANTILES.get((level, k))
    if known is not None:
        return known
    from scipy.special import chdtri

    return float(chdtri(k, level))
