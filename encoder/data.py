"""Evaluations as arrays, the query split, and per-model training subsets.

`EvalData` is what training, baselines and evaluation read: M models, Q queries with their vectors,
and E observed (model, query, score) triples. The matrix has holes (a model need not be scored on
every query), so nothing here assumes it is full; `dense()` marks holes with NaN.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["EvalData", "QuerySplit", "split_queries", "sample_per_model", "evals_by_model", "load_triple_dir",
           "truth_on"]


@dataclass(frozen=True)
class EvalData:
    models: list[str]  # M names
    query_ids: list[str]  # Q ids
    tasks: list[str]  # Q task names ("" when unknown)
    query_vectors: np.ndarray  # (Q, D) float32, L2-normalised
    model_index: np.ndarray  # (E,) int64 into models
    query_index: np.ndarray  # (E,) int64 into query_ids
    scores: np.ndarray  # (E,) float32 in [0, 1]
    # per model, evaluations the source held but left out because their query has no vector (not in E)
    unvectored: dict[str, int] = field(default_factory=dict)

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    def dense(self) -> np.ndarray:
        """(M, Q) float32 scores, NaN where a model has no score for a query."""
        matrix = np.full((self.n_models, self.n_queries), np.nan, dtype=np.float32)
        matrix[self.model_index, self.query_index] = self.scores
        return matrix

    def select_models(self, names: list[str]) -> "EvalData":
        """The same queries, only these models (in this order)."""
        position = {name: i for i, name in enumerate(self.models)}
        missing = [name for name in names if name not in position]
        if missing:
            raise KeyError(f"unknown model(s): {', '.join(missing)}")
        old_to_new = np.full(self.n_models, -1, dtype=np.int64)
        old_to_new[[position[n] for n in names]] = np.arange(len(names))
        keep = old_to_new[self.model_index] >= 0
        return EvalData(
            models=list(names),
            query_ids=self.query_ids,
            tasks=self.tasks,
            query_vectors=self.query_vectors,
            model_index=old_to_new[self.model_index[keep]],
            query_index=self.query_index[keep],
            scores=self.scores[keep],
        )


@dataclass(frozen=True)
class QuerySplit:
    train: np.ndarray  # query indices
    val: np.ndarray
    test: np.ndarray


def split_queries(n_queries: int, *, seed: int = 0, fractions=(0.8, 0.1, 0.1)) -> QuerySplit:
    """Random split of query indices (EmbedLLM's 80/10/10 by default); test queries never build
    embeddings."""
    if abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError("split fractions must sum to 1")
    order = np.random.default_rng(seed).permutation(n_queries)
    n_train = int(round(fractions[0] * n_queries))
    n_val = int(round(fractions[1] * n_queries))
    return QuerySplit(
        train=np.sort(order[:n_train]),
        val=np.sort(order[n_train : n_train + n_val]),
        test=np.sort(order[n_train + n_val :]),
    )


def sample_per_model(
    data: EvalData, queries: np.ndarray, *, n_per_model: int | None, seed: int = 0
) -> np.ndarray:
    """Indices into data's evaluations: for each model, up to `n_per_model` random evaluations on
    `queries` (all of them when None). This is "N training evaluations per model"."""
    allowed = np.zeros(data.n_queries, dtype=bool)
    allowed[queries] = True
    candidates = np.flatnonzero(allowed[data.query_index])
    if n_per_model is None:
        return candidates
    rng = np.random.default_rng(seed)
    chosen = []
    by_model = data.model_index[candidates]
    for m in range(data.n_models):
        own = candidates[by_model == m]
        if len(own) > n_per_model:
            own = np.sort(rng.choice(own, size=n_per_model, replace=False))
        chosen.append(own)
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


def evals_by_model(data: EvalData, eval_indices: np.ndarray) -> list[np.ndarray]:
    """Split an array of evaluation indices into one (sorted) array per model."""
    eval_indices = np.asarray(eval_indices, dtype=np.int64)
    owner = data.model_index[eval_indices]
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(data.n_models + 1))
    return [np.sort(eval_indices[order[bounds[m] : bounds[m + 1]]]) for m in range(data.n_models)]


def load_triple_dir(path: Path, *, encoder: str = "all-MiniLM-L6-v2") -> EvalData:
    """EvalData straight from a triple-format directory with precomputed query embeddings
    (`query_embeddings/<encoder>.npy` and `<encoder>_ids.npy`), e.g. ../shared/data/mmlu-pro.
    For benchmarks and reports; the product goes through the store."""
    path = Path(path)
    with open(path / "models.csv", encoding="utf-8", newline="") as handle:
        model_rows = list(csv.DictReader(handle))
    with open(path / "queries.csv", encoding="utf-8", newline="") as handle:
        query_rows = [(row["query_id"], row["task"]) for row in csv.DictReader(handle)]
    vectors = np.load(path / "query_embeddings" / f"{encoder}.npy", allow_pickle=False).astype(np.float32)
    vector_ids = np.load(path / "query_embeddings" / f"{encoder}_ids.npy", allow_pickle=False)
    row_of = {str(int(q)): i for i, q in enumerate(vector_ids)}
    query_ids = [q for q, _ in query_rows]
    vectors = vectors[[row_of[q] for q in query_ids]]
    q_pos = {q: i for i, q in enumerate(query_ids)}
    m_pos = {row["model_id"]: i for i, row in enumerate(model_rows)}
    evals = np.loadtxt(path / "evals.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    model_index = np.array([m_pos[str(m)] for m in evals[:, 0]], dtype=np.int64)
    query_index = np.array([q_pos[str(q)] for q in evals[:, 1]], dtype=np.int64)
    return EvalData(
        models=[row["name"] for row in model_rows],
        query_ids=query_ids,
        tasks=[t for _, t in query_rows],
        query_vectors=vectors,
        model_index=model_index,
        query_index=query_index,
        scores=evals[:, 2].astype(np.float32),
    )


def truth_on(data: EvalData, queries: np.ndarray, evals: np.ndarray | None = None) -> np.ndarray:
    """(M, len(queries)) scores with NaN holes, from all evaluations or only `evals`."""
    column = np.full(data.n_queries, -1, dtype=np.int64)
    column[queries] = np.arange(len(queries))
    idx = np.arange(len(data.scores)) if evals is None else np.asarray(evals)
    idx = idx[column[data.query_index[idx]] >= 0]
    truth = np.full((data.n_models, len(queries)), np.nan, dtype=np.float32)
    truth[data.model_index[idx], column[data.query_index[idx]]] = data.scores[idx]
    return truth
