"""Hypothetical task profiles (paper, appendix E.1): which real models look like "80% on math, 30% on law"?

A profile names tasks and a target accuracy for each. `evals` stored queries (queries that have a
vector from the active encoder's query encoder) are sampled over the named tasks, each query gets a
synthetic score drawn from Bernoulli(target accuracy of its task), so each task's accuracy matches its
target in expectation, and that synthetic evaluation set is embedded by the active encoder in one
forward pass, exactly as a new model is. The real models nearest to that hypothetical embedding
(cosine distance, as `registry search`) are the answer; `where` restricts them to models whose
metadata match (fewer than k when fewer match, as search does). k is at most the number of embedded
models.

Allocation over tasks: proportional to the number of stored queries of each named task (largest
remainder, at least one per task), so a profile over every task yields a set shaped like a real
model's evaluations (whose embedding it is compared to). `allocation="equal"` gives each task the same
share instead. Within a task queries are drawn without replacement; when a task's share exceeds its
queries, whole shuffled passes over them are repeated (each occurrence gets its own Bernoulli draw).

`ProfileSpace` loads the encoder, query vectors and index once, for callers that profile many times
(scripts/report_profile_fallback.py); `profile()` is one profile.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

import registry.limits as limits
from registry.checks import check_count
from registry.errors import InputError, RegistryError

if TYPE_CHECKING:
    from indexing.store import Store
    from registry.results import ProfileResult

__all__ = ["ALLOCATIONS", "ProfileSpace", "profile"]

ALLOCATIONS = ("proportional", "equal")
HYPOTHETICAL = "<hypothetical>"


def _check_targets(targets: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(targets, Mapping):
        raise InputError(f"targets must map task names to accuracies, not {type(targets).__name__}",
                         field="targets")
    if not targets:
        raise InputError("no targets: name at least one task and its accuracy (e.g. math=0.8)", field="targets")
    checked = {}
    for task, value in targets.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InputError(f"the target of task {task!r} must be a number in [0, 1], not {value!r}",
                             field="targets")
        value = float(value)
        if not (0.0 <= value <= 1.0):  # also refuses NaN
            raise InputError(f"the target of task {task!r} must be an accuracy in [0, 1], not {value}",
                             field="targets")
        checked[str(task)] = value
    return checked


def _allocate(sizes: dict[str, int], evals: int, allocation: str) -> dict[str, int]:
    """Evaluations per task summing to `evals` (>= number of tasks), at least one each: shares by
    weight (task size, or equal), rounded by largest remainder."""
    tasks = sorted(sizes)
    weights = np.array([sizes[t] if allocation == "proportional" else 1 for t in tasks], dtype=float)
    raw = evals * weights / weights.sum()
    counts = np.maximum(np.floor(raw).astype(int), 1)
    while counts.sum() > evals:  # the minimum of one pushed the sum over: take from the largest
        counts[np.argmax(counts)] -= 1
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[: evals - counts.sum()]] += 1
    return {t: int(c) for t, c in zip(tasks, counts)}


class ProfileSpace:
    """The active encoder, the stored queries with vectors (by task) and the models' index, loaded once."""

    def __init__(self, store: Store) -> None:
        from indexing.store import QUERIES
        from registry.catalog.embedding import active_encoder
        from registry.analytics.search import open_index

        self.store = store
        self.active = active_encoder(store)
        self.models = open_index(store)
        if not self.models.index.names:
            raise RegistryError("no model is embedded yet: run `registry embed --all`")
        if self.models.index.encoder_id != self.active.encoder_id:
            raise RegistryError(f"the models are embedded with encoder {self.models.index.encoder_id}, not the "
                                f"active {self.active.encoder_id}: run `registry embed --all`")
        queries = store.read(QUERIES, ["query_id", "task", "text_hash"])
        ids, tasks, hashes = (queries.column(c).to_pylist() for c in ("query_id", "task", "text_hash"))
        vectors = store.cached_vectors(self.active.query_encoder, hashes)
        keep = [i for i, h in enumerate(hashes) if h in vectors and tasks[i]]
        if not keep:
            raise RegistryError(f"no stored query has a task and a vector from {self.active.query_encoder!r}")
        self.query_ids = [ids[i] for i in keep]
        self.query_tasks = [tasks[i] for i in keep]
        self.query_vectors = np.stack([vectors[hashes[i]] for i in keep]).astype(np.float32)
        by_task: dict[str, list[int]] = {}
        for row, task in enumerate(self.query_tasks):
            by_task.setdefault(task, []).append(row)
        self.by_task = {t: np.asarray(rows, dtype=np.int64) for t, rows in sorted(by_task.items())}

    @property
    def tasks(self) -> list[str]:
        return list(self.by_task)

    def pool(self, where: str | None) -> np.ndarray:
        """Rows of the index that `where` allows (every embedded model when None)."""
        names = self.models.index.names
        rows = self.models.allowed_rows(where)
        if rows is None:
            return np.arange(len(names), dtype=np.int64)
        if len(rows) == 0:
            raise InputError(f"the filter {where!r} matches none of the {len(names)} embedded models", field="where")
        return rows

    def synthetic_set(self, targets: dict[str, float], evals: int, seed: int,
                      allocation: str = "proportional") -> tuple[np.ndarray, np.ndarray]:
        """(rows into the stored queries, synthetic scores) for a checked profile."""
        rng = np.random.default_rng(seed)
        counts = _allocate({t: len(self.by_task[t]) for t in targets}, evals, allocation)
        rows, scores = [], []
        for task in sorted(counts):
            pool, n = self.by_task[task], counts[task]
            passes = math.ceil(n / len(pool))
            chosen = np.concatenate([rng.permutation(pool) for _ in range(passes)])[:n]
            rows.append(chosen)
            scores.append((rng.random(n) < targets[task]).astype(np.float32))
        return np.concatenate(rows), np.concatenate(scores)

    def embed(self, rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """The active encoder's embedding of one evaluation set (one forward pass)."""
        from encoder.data import EvalData
        from encoder.inference import embed_models

        used, local = np.unique(rows, return_inverse=True)
        data = EvalData(models=[HYPOTHETICAL], query_ids=[self.query_ids[i] for i in used],
                        tasks=[self.query_tasks[i] for i in used], query_vectors=self.query_vectors[used],
                        model_index=np.zeros(len(rows), dtype=np.int64), query_index=local.astype(np.int64),
                        scores=np.asarray(scores, dtype=np.float32))
        return embed_models(self.active.locus, data, [np.arange(len(rows))])[0]

    def profile(self, targets: Mapping[str, float], *, k: int = 5, evals: int = 512, seed: int = 0,
                where: str | None = None, allocation: str = "proportional", by: str | None = None) -> ProfileResult:
        from registry.analytics.search import canonical_by
        from registry.results import Neighbour, ProfileResult, TaskSample

        by = canonical_by(by) or "locus"
        targets = _check_targets(targets)
        unknown = [t for t in targets if t not in self.by_task]
        if unknown:
            raise InputError(f"unknown task(s) {', '.join(map(repr, unknown))}; known tasks: "
                             f"{', '.join(self.tasks)}", field="targets")
        if allocation not in ALLOCATIONS:
            raise InputError(f"allocation must be one of {', '.join(ALLOCATIONS)}, not {allocation!r}",
                             field="allocation")
        if (isinstance(evals, bool) or not isinstance(evals, (int, np.integer)) or evals < len(targets)
                or evals > limits.MAX_EVALS_PER_MODEL):
            raise InputError(f"evals must be an integer from the number of tasks named ({len(targets)}) to "
                             f"{limits.MAX_EVALS_PER_MODEL:,} (a model's most evaluations), not {evals!r}",
                             field="evals")
        k = check_count(k, "k", 1)  # more than the pool gives the whole pool, as search and route do
        models = self.models if by == "locus" else self._prints()
        rows_allowed = self.pool(where) if by == "locus" else models.allowed_rows(where)
        if rows_allowed is not None and len(rows_allowed) == 0:
            raise InputError(f"the filter {where!r} matches none of the {len(models.index.names)} models with a "
                             "fingerprint", field="where")
        pool_size = len(models.index.names) if rows_allowed is None else len(rows_allowed)
        rows, scores = self.synthetic_set(targets, int(evals), seed, allocation)
        z = self.embed(rows, scores) if by == "locus" else self.fingerprint(rows, scores)
        if not np.isfinite(z).all():
            raise RegistryError("the encoder produced a non-finite embedding for this profile")
        from registry.evidence import is_thin  # the mark only: profile ranks by distance, as the paper does

        metric = "cosine" if by == "locus" else "euclidean"
        hits = models.index.search(z, min(k, pool_size), metric=metric, allowed=None if where is None else rows_allowed)
        names = models.index.names
        row_tasks = np.asarray(self.query_tasks, dtype=object)[rows]
        per_task = {}
        for task in sorted(targets):
            mask = row_tasks == task
            per_task[task] = TaskSample(n_evals=int(mask.sum()), n_queries=len(np.unique(rows[mask])),
                                        sampled_accuracy=round(float(scores[mask].mean()), 4))
        return ProfileResult(
            targets=targets, n_evals=len(rows), seed=seed, allocation=allocation, per_task=per_task,
            encoder_id=self.active.encoder_id, pool_size=pool_size, by=by,
            neighbours=[Neighbour(name=names[row], distance=dist, metric=metric, vector=by,
                                  metadata=models.records[names[row]].metadata(),
                                  n_evals=models.index.rows[names[row]].get("n_evals"),
                                  low_evidence=is_thin(models.index.rows[names[row]].get("n_evals")))
                        for row, dist in hits],
        )

    def _prints(self):
        """The fingerprint index, refusing a home without fingerprints of the active item table."""
        from registry.analytics.search import open_index

        prints = open_index(self.store, by="fingerprint")
        table = self._item_table()
        if not prints.index.names or prints.index.encoder_id != table.table_id:
            raise RegistryError("no model has a behaviour fingerprint of the active item table: registry "
                                "fit-fingerprints (or --by locus)")
        return prints

    def _item_table(self):
        from registry.catalog.fingerprint_store import load_item_table

        table = load_item_table(self.store, self.active.encoder_id)
        if table is None:
            raise RegistryError("the active encoder has no item table: registry fit-fingerprints (or --by locus)")
        return table

    def fingerprint(self, rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """The identity vector (the fingerprint index's form) of one evaluation set, under the item table."""
        table = self._item_table()
        f, b = table.item_params([self.query_ids[i] for i in rows], self.query_vectors[rows])
        theta = table.fingerprint(f, b, np.asarray(scores, np.float64))
        return table.identity_vectors(theta[None])[0].astype(np.float32)


def profile(store: Store, targets: Mapping[str, float], *, k: int = 5, evals: int = 512, seed: int = 0,
            where: str | None = None, allocation: str = "proportional", by: str | None = None) -> ProfileResult:
    """The k real models nearest (cosine) to a hypothetical model with these task accuracies, nearest
    first, with the sampled evaluations and realised accuracy per task. See the module docstring for
    how the set is drawn. `by="fingerprint"`: the set's behaviour fingerprint under the item table,
    searched in the fingerprint index (Euclidean, the identity distance) instead of its LOCUS embedding."""
    from registry.analytics.search import canonical_by

    by = canonical_by(by)  # a bad `by` fails before anything is loaded
    targets = _check_targets(targets)
    return ProfileSpace(store).profile(targets, k=k, evals=evals, seed=seed, where=where, allocation=allocation, by=by)
