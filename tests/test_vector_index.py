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


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_a_vector_is_at_distance_zero_from_itself_never_below(kind):
    """float32 rounding puts many a vector's cosine to itself a hair above 1: its distance is 0, not the
    "-0.0000" the audit printed for a duplicate endpoint."""
    from registry.analytics.search import embedding_distance

    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(64, 24)).astype(np.float32)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert ((unit * unit).sum(1, dtype=np.float32) > 1).any()  # the case exists in these vectors
    index = VectorIndex.build("e", [f"m{i}" for i in range(64)], vectors, table_version=1, kind=kind)
    for row, vector in enumerate(vectors):
        hits = dict(index.search(vector, 3, metric="cosine"))
        assert hits.get(row) is not None and hits[row] >= 0.0 and hits[row] < 1e-6
    models = type("Models", (), {"vector": lambda self, name: vectors[int(name[1:])]})()
    assert all(embedding_distance(models, f"m{i}", f"m{i}", "cosine") >= 0.0 for i in range(64))


def test_threads_saving_and_loading_one_index_never_collide_or_mix(tmp_path):
    """Two threads of one process (the service's) saving the same index used one temporary name: one
    renamed it from under the other (a 500 under load, found beside `registry compact`). And a load
    between a save's files could pair one version's metadata with another's vectors of the same count."""
    import threading

    rng = np.random.default_rng(0)
    names = [f"m{i}" for i in range(50)]
    versions = {v: VectorIndex.build("enc", names, rng.normal(size=(50, 16)), table_version=v) for v in (1, 2)}
    failures: list[BaseException] = []
    mixed: list[int] = []

    def save(version: int) -> None:
        try:
            for _ in range(40):
                versions[version].save(tmp_path)
        except BaseException as err:  # noqa: BLE001 - reported below
            failures.append(err)

    def load() -> None:
        for _ in range(80):
            loaded = VectorIndex.load(tmp_path, "enc")
            if loaded is not None:
                index, meta = loaded
                if not np.array_equal(index.vectors, versions[meta["table_version"]].vectors):
                    mixed.append(meta["table_version"])

    threads = [threading.Thread(target=save, args=(v,)) for v in (1, 2)] + [threading.Thread(target=load)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]
    assert not mixed
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name) == []


def test_a_saved_index_whose_vectors_are_another_indexes_is_not_loaded(tmp_path):
    """The vectors file of another index (of the same row count, another width) beside this one's FAISS
    files and metadata: refused (the caller rebuilds), where it was served and a route failed on it."""
    rng = np.random.default_rng(1)
    names = [f"m{i}" for i in range(8)]
    VectorIndex.build("wide", names, rng.normal(size=(8, 16)), table_version=1).save(tmp_path)
    VectorIndex.build("narrow", names, rng.normal(size=(8, 5)), table_version=1).save(tmp_path)
    assert VectorIndex.load(tmp_path, "wide") is not None
    (tmp_path / "narrow.vectors.npy").replace(tmp_path / "wide.vectors.npy")
    assert VectorIndex.load(tmp_path, "wide") is None
