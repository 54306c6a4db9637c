"""The pool seen from the active encoder's held-out test queries, for measuring routing honestly.

Analytics that report a routing accuracy (portfolios, fallback) must score it on queries that neither
trained the encoder nor built the embeddings being compared. `held_out` gives the pool's evaluations,
those test queries (recorded by `registry train`; recomputed from the training seed for checkpoints
that predate the record) and every model embedded from its evaluations outside them (all of them, as
the registry's vectors, or up to `max_evals`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

import numpy as np

from encoder.data import EvalData, split_queries
from indexing.store import Store
from registry.catalog.embedding import DEFAULT_MAX_EMBED_EVALS, ActiveEncoder, active_encoder, embedding_evals

__all__ = ["HeldOut", "held_out", "test_queries"]


@dataclass
class HeldOut:
    data: EvalData  # the pool's evaluations (models as asked, every query with a vector)
    active: ActiveEncoder
    test_queries: np.ndarray  # query indices into data; never built an embedding below
    embeddings: np.ndarray  # (M, d), each model from up to max_evals evaluations outside test_queries
    # test queries the encoder recorded, the pool's or not (data holds only queries the pool was scored on)
    recorded_test_queries: int = 0

    def truth(self) -> np.ndarray:
        """(M, T) scores on the test queries, NaN where a model was not evaluated."""
        return self.data.dense()[:, self.test_queries]


def test_queries(active: ActiveEncoder, data: EvalData) -> tuple[np.ndarray, int]:
    """(indices into data's queries of the encoder's test queries, how many the encoder recorded): the
    ids `registry train` recorded, or for an older checkpoint the split recomputed from its seed."""
    info = json.loads((active.directory / "training.json").read_text("utf-8"))
    if "test_query_ids" in info:
        wanted = set(info["test_query_ids"])
        return np.asarray([i for i, q in enumerate(data.query_ids) if q in wanted], dtype=np.int64), len(wanted)
    test = split_queries(data.n_queries, seed=int(info.get("seed", 0))).test
    return test, len(test)


def held_out(store: Store, *, models: list[str] | None = None, max_evals: int | None = DEFAULT_MAX_EMBED_EVALS,
             seed: int = 0) -> HeldOut:
    from encoder.inference import embed_models
    from registry.catalog.dataset import load_eval_data

    active = active_encoder(store)
    data = load_eval_data(store, active.query_encoder, models=models)
    test, recorded = test_queries(active, data)
    is_test = np.zeros(data.n_queries, dtype=bool)
    is_test[test] = True
    keep = ~is_test[data.query_index]
    outside = replace(data, model_index=data.model_index[keep], query_index=data.query_index[keep],
                      scores=data.scores[keep])
    per_model = embedding_evals(outside, max_evals=max_evals, seed=seed)
    return HeldOut(data=data, active=active, test_queries=test,
                   embeddings=embed_models(active.locus, outside, per_model), recorded_test_queries=recorded)
