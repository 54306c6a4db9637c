"""The store's evaluations as `EvalData` arrays, for training, embedding and evaluation."""
from __future__ import annotations

import numpy as np

from encoder.data import EvalData
from indexing.store import EVALUATIONS, MODELS, QUERIES, Store
from registry.errors import RegistryError

__all__ = ["load_eval_data"]


def load_eval_data(store: Store, encoder: str, *, models: list[str] | None = None) -> EvalData:
    """Every evaluated query that has a vector from `encoder`, and the evaluations of `models`
    (when None: every model in the models table that has evaluations; a removed model keeps its
    evaluations for restore, but is not part of the pool), in a stable order (models as given or
    sorted, queries as stored). Queries without a vector are left out with their evaluations;
    `registry import` with encoding on fills them."""
    queries = store.read(QUERIES, ["query_id", "task", "text_hash"])
    evals = store.read(EVALUATIONS, ["model", "query_id", "score"])
    if evals.num_rows == 0:
        raise RegistryError("the registry holds no evaluations yet (registry import PATH)")
    query_ids = queries.column("query_id").to_pylist()
    hashes = queries.column("text_hash").to_pylist()
    vectors = store.cached_vectors(encoder, hashes)
    if not vectors:
        others = [name for name in store.vector_encoders() if name != encoder]
        hint = (f"the stored vectors come from {', '.join(others)}: `registry init --encoder {others[0]}` makes "
                f"it the query encoder, or import again with --encoder {encoder}" if others
                else f"import with --encoder {encoder}")
        raise RegistryError(f"no query vectors from {encoder!r} (the registry's query encoder); {hint}")
    order = sorted(i for i, h in enumerate(hashes) if h in vectors)
    kept_ids = [query_ids[i] for i in order]
    q_pos = {q: i for i, q in enumerate(kept_ids)}

    eval_models = np.asarray(evals.column("model").to_pylist(), dtype=object)
    if models is None:
        live = set(store.read(MODELS, ["name"]).column("name").to_pylist())
        names = sorted(set(eval_models.tolist()) & live)
    else:
        names = list(models)
    m_pos = {m: i for i, m in enumerate(names)}
    model_index = np.fromiter((m_pos.get(m, -1) for m in eval_models), dtype=np.int64, count=len(eval_models))
    query_index = np.fromiter((q_pos.get(q, -1) for q in evals.column("query_id").to_pylist()),
                              dtype=np.int64, count=len(eval_models))
    keep = (model_index >= 0) & (query_index >= 0)
    return EvalData(
        models=names,
        query_ids=kept_ids,
        tasks=[queries.column("task")[i].as_py() for i in order],
        query_vectors=np.stack([vectors[hashes[i]] for i in order]).astype(np.float32),
        model_index=model_index[keep],
        query_index=query_index[keep],
        scores=evals.column("score").to_numpy(zero_copy_only=False)[keep].astype(np.float32),
    )
