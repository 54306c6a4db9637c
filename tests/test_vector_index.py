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


def _exact(vectors: np.ndarray, query: np.ndarray, k: int, metric: str) -> list[int]:
    if metric == "cosine":
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        order = np.argsort(-(unit @ (query / np.linalg.norm(query))), kind="stable")
    elif metric == INNER:
        order = np.argsort(-(vectors @ query), kind="stable")
    else:
        order = np.argsort(((vectors - query) ** 2).sum(1), kind="stable")
    return order[:k].tolist()


def test_an_hnsw_graph_takes_a_write_without_a_rebuild_and_answers_as_a_fresh_index(tmp_path, monkeypatch):
    """Models added, re-embedded and removed: the graph gains rows and masks the old ones (a rebuild at
    100,000 vectors took 30-40 s), and every search, restricted or not, saved and loaded, answers for the
    new state only: never a removed model, never a replaced vector."""
    import faiss

    import indexing.vector_index as vi

    monkeypatch.setattr(vi, "HNSW_THRESHOLD", 50)
    rng = np.random.default_rng(5)
    names = [f"m{i:03d}" for i in range(200)]
    vectors = rng.normal(size=(200, 10)).astype(np.float32)
    first = VectorIndex.build("e", names, vectors, table_version=1, metrics=(*METRICS, INNER))
    assert first.kind == "hnsw" and first.masked == 0
    removed, changed = set(names[:12]), names[12:24]
    table = dict(zip(names, vectors))
    for name in removed:
        del table[name]
    for name in changed:
        table[name] = rng.normal(size=10).astype(np.float32)
    for i in range(15):
        table[f"new{i:02d}"] = rng.normal(size=10).astype(np.float32)
    now = sorted(table)
    now_vectors = np.stack([table[n] for n in now])
    second = first.updated(now, now_vectors, table_version=2)
    assert second.names == now and np.array_equal(second.vectors, now_vectors)
    assert second.masked == 24 and all(i.ntotal == 200 + 12 + 15 for i in second._indexes.values())
    assert first.masked == 0 and all(i.ntotal == 200 for i in first._indexes.values())  # left as it was
    second.save(tmp_path)
    loaded, meta = VectorIndex.load(tmp_path, "e")
    allowed = np.arange(0, len(now), 3)
    for index in (second, loaded):
        for metric in index.metrics:
            for q in rng.normal(size=(6, 10)).astype(np.float32):
                assert [r for r, _ in index.search(q, 5, metric=metric)] == _exact(now_vectors, q, 5, metric)
                got = [r for r, _ in index.search(q, 4, metric=metric, allowed=allowed)]
                assert got == allowed[_exact(now_vectors[allowed], q, 4, metric)].tolist()
            many = index.search_many(rng.normal(size=(3, 10)), 7, metric=metric)
            assert all(len(hits) == 7 and all(0 <= r < len(now) for r, _ in hits) for hits in many)
    assert meta["table_version"] == 2 and len(meta["ids"]) == len(now)

    # past REBUILD_MASKED of the graph masked: built anew, every id its row
    third = second.updated(now[: len(now) // 2], now_vectors[: len(now) // 2], table_version=3)
    assert third.masked == 0 and third._ids is None
    # below the threshold: a flat index, as a fresh build would be
    assert second.updated(now[:40], now_vectors[:40], table_version=4).kind == "flat"
    assert isinstance(second._indexes["cosine"], faiss.IndexHNSWFlat)


def test_a_write_updates_the_saved_hnsw_index_of_a_registry(tmp_path, monkeypatch):
    """Through the models table: an add and a re-embed after the index was saved reuse its graph (the
    saved file grows by the new rows), and search answers as an index built from scratch does."""
    import indexing.vector_index as vi
    from indexing.model_index import ModelIndex
    from indexing.store import Store

    monkeypatch.setattr(vi, "HNSW_THRESHOLD", 8)
    rng = np.random.default_rng(2)
    store = Store(tmp_path / "home")
    rows = [{"name": f"m{i:02d}", "vector": rng.normal(size=6).tolist(), "encoder_id": "enc"} for i in range(30)]
    _write_models(store, rows)
    index = ModelIndex.open(store)
    assert index.kind == "hnsw" and index._index.masked == 0
    rows[3] = {**rows[3], "vector": rng.normal(size=6).tolist()}
    rows.append({"name": "m99", "vector": rng.normal(size=6).tolist(), "encoder_id": "enc"})
    _write_models(store, rows[3:4] + rows[-1:])
    after = ModelIndex.open(store)
    assert after._index.masked == 1 and after.names == sorted(r["name"] for r in rows)
    fresh = ModelIndex.open(store, rebuild=True)
    assert fresh._index.masked == 0
    for name in ("m03", "m99", "m10"):
        assert after.neighbours(name, 5) == fresh.neighbours(name, 5)
    assert after.problems(store) == []


def test_a_reader_under_writes_back_to_back_updates_the_index_it_served(tmp_path, monkeypatch):
    """While writes come back to back no reader may save (a transaction is always open), so the saved graph
    grows stale: updating from it masks every row changed since, and once that passes REBUILD_MASKED each
    read builds the graph anew. A service updates from the index it served last instead, and builds anew
    once per REBUILD_MASKED of churn; both answer as an index built from scratch."""
    import indexing.vector_index as vi
    from indexing.model_index import ModelIndex
    from indexing.store import Store

    monkeypatch.setattr(vi, "HNSW_THRESHOLD", 8)
    rng = np.random.default_rng(4)
    store = Store(tmp_path / "home")
    rows = [{"name": f"m{i:02d}", "vector": rng.normal(size=6).tolist(), "encoder_id": "enc"} for i in range(30)]
    _write_models(store, rows)
    served = ModelIndex.open(store)  # saved; from here on no reader saves
    monkeypatch.setattr(ModelIndex, "_save", lambda self, token: None)
    builds = []
    build = vi.VectorIndex.build.__func__
    monkeypatch.setattr(vi.VectorIndex, "build",
                        classmethod(lambda cls, *a, **kw: builds.append(1) or build(cls, *a, **kw)))
    with_previous = without = 0
    for write in range(8):  # each write re-embeds two models not re-embedded before
        for i in (2 * write, 2 * write + 1):
            rows[i] = {**rows[i], "vector": rng.normal(size=6).tolist()}
        _write_models(store, rows[2 * write: 2 * write + 2])
        builds.clear()
        stale = ModelIndex.open_kinds(store, ("locus",))["locus"]  # from the saved graph alone
        without += len(builds)
        builds.clear()
        served = ModelIndex.open_kinds(store, ("locus",), previous={"locus": served})["locus"]
        with_previous += len(builds)
        fresh = build(vi.VectorIndex, "enc", served.names, served.vectors, table_version=0)
        for name in ("m00", f"m{2 * write:02d}", "m29"):
            want = [served.names[r] for r, _ in fresh.search(served.vector(name), 5)]
            assert [n for n, _ in served.neighbours(name, 4)] == [n for n, _ in stale.neighbours(name, 4)] == \
                [n for n in want if n != name][:4]
    assert (with_previous, without) == (2, 5)  # past 8 of 38 masked at writes 4 and 8; every read from 4 on


def _write_models(store, rows: list[dict]) -> None:
    from datetime import datetime, timezone

    from indexing.store import MODEL_SCHEMA, MODELS

    added = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with store.transaction():
        store.upsert(MODELS, [{"added": added, **r} for r in rows], MODEL_SCHEMA, "name")


def test_model_neighbours_order_by_exact_distance_then_name_where_float32_ties(tmp_path):
    """Two exact copies of a model and another model 3e-9 away in cosine distance all read 0 in FAISS's float32:
    the other model came between the copies. Distances are taken again in float64, and exact ties go by name."""
    from indexing.model_index import ModelIndex
    from indexing.model_rows import ModelRows

    rng = np.random.default_rng(0)
    base = rng.normal(size=64).astype(np.float32)
    base /= np.linalg.norm(base)
    near = base.copy()
    near[:2] += np.float32(4e-5) * np.array([1, -1], np.float32)  # a cosine distance of about 1e-9 to 1e-8
    names = ["query", "zz-copy", "mid-near", "aa-copy", "far"]
    vectors = np.stack([base, base, near, base, rng.normal(size=64).astype(np.float32)])
    index = ModelIndex(home=tmp_path, encoder_id="e", rows=ModelRows(names, {"n_evals": [10] * 5}), encoders_seen={"e"},
                       _index=VectorIndex.build("e", names, vectors, table_version=1, kind="flat"))
    found = index.neighbours("query", 3, metric="cosine")
    assert [name for name, _ in found] == ["aa-copy", "zz-copy", "mid-near"], found
    assert found[0][1] == found[1][1] < 1e-12 < found[2][1] < 1e-7
    by_row = index.search(base, 4, metric="euclidean")
    assert [names[row] for row, _ in by_row] == ["aa-copy", "query", "zz-copy", "mid-near"]


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_a_models_distance_does_not_depend_on_how_many_others_were_asked_for(tmp_path, metric):
    """A route's fallbacks (3 asked) and a search (k + 1 asked) read one model's distance alike, to the bit: a
    matrix product's summation order changes with its number of rows (a fresh clone's CI saw 7.035137371103062e-06
    against 7.0351373709920395e-06)."""
    from indexing.model_index import ModelIndex
    from indexing.model_rows import ModelRows

    rng = np.random.default_rng(1)
    names = [f"m{i:02d}" for i in range(40)]
    vectors = rng.normal(size=(40, 384)).astype(np.float32)
    index = ModelIndex(home=tmp_path, encoder_id="e", rows=ModelRows(names, {"n_evals": [10] * 40}), encoders_seen={"e"},
                       _index=VectorIndex.build("e", names, vectors, table_version=1, kind="flat"))
    few = dict(index.neighbours("m00", 3, metric=metric))
    many = dict(index.neighbours("m00", 39, metric=metric))
    assert few and all(many[name] == distance for name, distance in few.items())
