"""The registry's router parts, predicted from one training split: LOCUS, the item table and kNN over the
training queries. `registry train` fits the router blend on their validation predictions and `registry
evaluate` scores the same recipe on held-out queries: one recipe, so the two cannot drift apart."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .fingerprint import item_table_predictions
from .inference import predict
from .knn import KNNRouter

__all__ = ["ROUTER_PARTS", "router_part_predictions"]

ROUTER_PARTS = ("locus", "item", "knn")


def router_part_predictions(locus, z: np.ndarray, data, train_evals: np.ndarray, val_queries: np.ndarray,
                            query_sets: Sequence[np.ndarray], *, knn: KNNRouter | None = None
                            ) -> tuple[list[dict[str, np.ndarray]], KNNRouter]:
    """For each query set, {part: (M, len(set)) P(correct)} of the router's parts, all fitted on
    `train_evals` only: LOCUS from the models' embeddings `z` (M, d; NaN rows: models without any), an item
    table fitted on the training evaluations alone, and the kNN router with k, pseudo-count and mode tuned
    on `val_queries` (or `knn`, already so fitted). Returns them and the kNN router (its `settings` are
    what a route needs to predict as it does)."""
    z = np.nan_to_num(z)
    items = item_table_predictions(data, train_evals, query_sets)
    if knn is None:
        knn = KNNRouter().fit(data, train_evals, val_queries)
    parts = [{"locus": predict(locus, z, data.query_vectors[queries]), "item": item, "knn": knn.predict(queries)}
             for queries, item in zip(query_sets, items)]
    return parts, knn
