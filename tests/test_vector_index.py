"""VectorIndex: a batch of queries answers as each query alone does (the audit searches every model's
behaviour vector in one call)."""
from __future__ import annotations

import numpy as np
import pytest

from indexing.vector_index import INNER, METRICS, VectorIndex


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_search_many_answers_as_search_does_for_each_query(kind):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 12)).astype(np.float32)
    index = VectorIndex.build("e", [f"m{i}" for i in range(60)], vectors, table_version=1, kind=kind,
                              metrics=(*METRICS, INNER))
    queries = rng.normal(size=(7, 12))
    for metric in index.metrics:
        many = index.search_many(queries, 5, metric=metric)
        assert len(many) == 7
        for query, got in zip(queries, many):
            want = index.search(query, 5, metric=metric)
            assert [r for r, _ in got] == [r for r, _ in want]
            assert np.allclose([d for _, d in got], [d for _, d in want], atol=1e-5)
    assert len(index.search_many(queries, 100, metric=INNER)[0]) == 60  # k capped at the index's size
    assert index.search_many(np.zeros((0, 12)), 5) == []
    with pytest.raises(Exception, match="metric must be one of"):
        index.search_many(queries, 5, metric="manhattan")
