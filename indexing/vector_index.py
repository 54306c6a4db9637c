"""The FAISS index over model embeddings, derived from the models table and persisted beside it.

The models table is the source of truth. An index is built for one encoder id (vectors from
different encoders never meet in one search), saved under `<home>/index/`, and carries the models
table's version it was built from: opening it against a newer table rebuilds it, or updates it.

Exact search (flat) by default; HNSW past `HNSW_THRESHOLD` vectors; on a GPU when faiss-gpu and CUDA
are present. A write to the table does not rebuild an HNSW graph (30-40 s at 100,000 vectors, 2 cores):
`updated` adds the new and changed vectors to it and masks the rows they replace, until masked rows
would be more than `REBUILD_MASKED` of the graph. Cosine search runs on L2-normalised vectors (inner
product, or L2 for HNSW, which ranks unit vectors the same way); Euclidean on the raw vectors. An index
built with metrics=("inner",) ranks by the raw inner product instead (largest first; its "distance" is
minus the inner product): the behaviour vectors, whose query is not the stored vector but a map of it
(encoder.fingerprint.ItemTable.behaviour_queries).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import numpy as np

from indexing.errors import InputError
from indexing.home import file_lock, is_remote, scratch_path

__all__ = ["VectorIndex", "HNSW_THRESHOLD", "METRICS", "INNER"]

HNSW_THRESHOLD = 50_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 128
REBUILD_MASKED = 0.2  # share of an HNSW graph's rows masked (removed or replaced vectors) past which it is rebuilt
METRICS = ("cosine", "euclidean")  # what a user may ask for
INNER = "inner"  # the raw inner product (a behaviour index's only metric)


def _normalise(x: np.ndarray) -> np.ndarray:
    # scaled by the largest entry first: a tiny non-zero vector ([1e-18] * d) keeps its direction (its norm
    # is below any floor, so dividing by a floor left it near zero: every cosine distance 1); zero rows stay 0
    scale = np.abs(x).max(axis=1, keepdims=True)
    x = x / np.where(scale > 0, scale, 1)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1)


def _to_gpu(index):
    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:  # pragma: no cover - no GPU in CI
        return faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    return index


@dataclass
class VectorIndex:
    encoder_id: str
    names: list[str]
    vectors: np.ndarray  # (n, d) float32, as stored
    table_version: int
    kind: str  # "flat" or "hnsw"
    _indexes: dict
    # the FAISS id of each row of `names` once `updated` has extended a graph (its other ids are masked rows);
    # None: row i is id i
    _ids: np.ndarray | None = field(default=None, repr=False, compare=False)
    _rows: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)  # made on first use
    _row_of_id: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _live: object = field(default=None, init=False, repr=False, compare=False)  # see `_unmasked`

    @classmethod
    def build(cls, encoder_id: str, names: list[str], vectors: np.ndarray, *, table_version: int,
              kind: str | None = None, metrics: tuple[str, ...] = METRICS) -> "VectorIndex":
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        vectors = vectors.reshape(len(names), -1) if len(names) else np.zeros((0, 1), dtype=np.float32)
        kind = kind or ("hnsw" if len(names) >= HNSW_THRESHOLD else "flat")
        indexes = {}
        for metric in metrics:
            data = _normalise(vectors) if metric == "cosine" else vectors
            d = vectors.shape[1]
            if kind == "hnsw":
                # L2 for cosine: on unit vectors it ranks as cosine does
                index = (faiss.IndexHNSWFlat(d, HNSW_M, faiss.METRIC_INNER_PRODUCT) if metric == INNER
                         else faiss.IndexHNSWFlat(d, HNSW_M))
                index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            elif metric in ("cosine", INNER):
                index = faiss.IndexFlatIP(d)
            else:
                index = faiss.IndexFlatL2(d)
            if len(data):
                index.add(data)
            indexes[metric] = index
        return cls(encoder_id, list(names), vectors, table_version, kind, indexes)

    def row(self, name: str) -> int:
        """The row of `name` (ValueError when absent), by a map made on first use: `names.index` is a scan,
        and a search from a model asks it for every candidate."""
        if self._rows is None:
            self._rows = {n: i for i, n in enumerate(self.names)}
        if name not in self._rows:
            raise ValueError(f"{name!r} is not in the index")
        return self._rows[name]

    @property
    def masked(self) -> int:
        """Rows of the FAISS graph that no name maps to any more (removed or replaced vectors)."""
        return self._ntotal - len(self.names)

    @property
    def _ntotal(self) -> int:
        return next(iter(self._indexes.values())).ntotal if self._indexes else len(self.names)

    def updated(self, names: list[str], vectors: np.ndarray, *, table_version: int) -> "VectorIndex":
        """The index of these names and vectors (in the order `build` takes them). An HNSW graph on the CPU
        gets the new and changed vectors added to a copy of it, and the rows of removed or changed ones
        masked from every search, instead of being built anew; it is built anew when more than
        REBUILD_MASKED of its rows would be masked or the table has fallen below HNSW_THRESHOLD. A flat index
        is built anew (a copy of the vectors). `self` is left as it was."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        vectors = vectors.reshape(len(names), -1) if len(names) else np.zeros((0, 1), dtype=np.float32)
        incremental = (self.kind == "hnsw" and len(names) >= HNSW_THRESHOLD and len(self.names) > 0
                       and vectors.shape[1] == self.vectors.shape[1]
                       and all(isinstance(i, faiss.IndexHNSWFlat) for i in self._indexes.values()))
        if not incremental:
            return VectorIndex.build(self.encoder_id, names, vectors, table_version=table_version, metrics=self.metrics)
        old_ids = self._ids if self._ids is not None else np.arange(len(self.names), dtype=np.int64)
        before = {n: r for r, n in enumerate(self.names)}
        row = np.array([before.get(n, -1) for n in names], dtype=np.int64)  # each name's row in self, or -1
        kept = row >= 0
        kept[kept] = (self.vectors[row[kept]] == vectors[kept]).all(axis=1)  # the same vector: the same graph row
        fresh = np.flatnonzero(~kept)
        ids = np.empty(len(names), dtype=np.int64)
        ids[kept] = old_ids[row[kept]]
        ids[fresh] = self._ntotal + np.arange(len(fresh))
        total = self._ntotal + len(fresh)
        if total - len(names) > REBUILD_MASKED * total:
            return VectorIndex.build(self.encoder_id, names, vectors, table_version=table_version, metrics=self.metrics)
        indexes = {}
        for metric, index in self._indexes.items():
            index = faiss.clone_index(index)  # readers of `self` go on searching the graph as it was
            if len(fresh):
                added = vectors[fresh]
                index.add(_normalise(added) if metric == "cosine" else added)
            indexes[metric] = index
        exact = np.array_equal(ids, np.arange(len(names)))
        return VectorIndex(self.encoder_id, list(names), vectors, table_version, "hnsw", indexes,
                           None if exact else ids)

    # ------------------------------------------------------------ persistence
    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(self._indexes)

    @staticmethod
    def _paths(directory: Path, encoder_id: str, metrics: tuple[str, ...] = METRICS) -> dict[str, Path]:
        base = directory / encoder_id
        return {**{m: base.with_suffix(f".{m}.faiss") for m in metrics},
                "vectors": base.with_suffix(".vectors.npy"), "meta": base.with_suffix(".json")}

    def save(self, directory: Path, extra: dict | None = None) -> None:
        """Index files first, metadata last (atomically): a crash in between leaves metadata that
        does not match the table, and the next open rebuilds."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = self._paths(directory, self.encoder_id, self.metrics)
        if is_remote(directory):
            self._save_remote(paths, extra)
            return
        # one saver at a time, and no reader meanwhile (`load`): two saves interleaving, or a load between
        # a save's files, could pair one index's metadata with another's vectors of the same count
        with file_lock(self._lock_path(directory)):
            for metric in self.metrics:
                tmp = scratch_path(paths[metric])
                index = self._indexes[metric]
                if hasattr(faiss, "index_gpu_to_cpu") and faiss.get_num_gpus() > 0:  # pragma: no cover
                    index = faiss.index_gpu_to_cpu(index)
                faiss.write_index(index, str(tmp))
                os.replace(tmp, paths[metric])
            tmp = scratch_path(paths["vectors"], ".npy")  # np.save adds .npy to a name without it
            np.save(tmp, self.vectors, allow_pickle=False)
            os.replace(tmp, paths["vectors"])
            tmp = scratch_path(paths["meta"])
            tmp.write_text(json.dumps(self._meta(extra)))
            os.replace(tmp, paths["meta"])

    @staticmethod
    def _lock_path(directory: Path) -> Path:
        return directory / ".index.lock"

    def _meta(self, extra: dict | None) -> dict:
        return {"encoder_id": self.encoder_id, "names": self.names, "table_version": self.table_version,
                "kind": self.kind, "metrics": list(self.metrics),
                **({} if self._ids is None else {"ids": self._ids.tolist()}), **(extra or {})}

    def _save_remote(self, paths: dict, extra: dict | None) -> None:
        """The same files through bytes (faiss and numpy write to local paths only), metadata last."""
        import io

        for metric in self.metrics:
            index = self._indexes[metric]
            if hasattr(faiss, "index_gpu_to_cpu") and faiss.get_num_gpus() > 0:  # pragma: no cover
                index = faiss.index_gpu_to_cpu(index)
            paths[metric].write_bytes(faiss.serialize_index(index).tobytes())
        buffer = io.BytesIO()
        np.save(buffer, self.vectors, allow_pickle=False)
        paths["vectors"].write_bytes(buffer.getvalue())
        paths["meta"].write_text(json.dumps(self._meta(extra)))

    @classmethod
    def _load_remote(cls, directory, encoder_id: str) -> tuple[dict, dict, np.ndarray]:
        import io

        meta = json.loads(cls._paths(directory, encoder_id)["meta"].read_text())  # first: a missing index is one request
        paths = cls._paths(directory, encoder_id, tuple(meta.get("metrics", METRICS)))
        indexes = {m: faiss.deserialize_index(np.frombuffer(paths[m].read_bytes(), dtype=np.uint8))
                   for m in meta.get("metrics", METRICS)}
        vectors = np.load(io.BytesIO(paths["vectors"].read_bytes()), allow_pickle=False)
        return meta, indexes, vectors

    @classmethod
    def load(cls, directory: Path, encoder_id: str) -> tuple["VectorIndex", dict] | None:
        """The saved index and its metadata, or None when missing or unreadable. Whether it is
        still current is the caller's check (table version, or the store's generation token)."""
        paths = cls._paths(directory, encoder_id)
        if is_remote(directory):
            try:
                meta, indexes, vectors = cls._load_remote(directory, encoder_id)
            except (OSError, ValueError, KeyError, RuntimeError):
                return None
        else:
            if not paths["meta"].is_file():
                return None
            try:
                with file_lock(cls._lock_path(directory), shared=True):
                    meta = json.loads(paths["meta"].read_text())
                    paths = cls._paths(directory, encoder_id, tuple(meta.get("metrics", METRICS)))
                    indexes = {m: faiss.read_index(str(paths[m])) for m in meta.get("metrics", METRICS)}
                    vectors = np.load(paths["vectors"], allow_pickle=False)
            except (OSError, ValueError, KeyError, RuntimeError, TypeError):
                return None
        names = meta["names"]
        ids = None if meta.get("ids") is None else np.asarray(meta["ids"], dtype=np.int64)
        if not indexes or len(vectors) != len(names):
            return None
        total = len(names) if ids is None else next(iter(indexes.values())).ntotal  # masked rows beside names
        if any(i.ntotal != total for i in indexes.values()):
            return None
        if ids is not None and (len(ids) != len(names) or len(np.unique(ids)) != len(ids)
                                or (len(ids) and (ids.min() < 0 or ids.max() >= total))):
            return None  # ids of another graph: rebuilt, never served
        if len(names) and (vectors.ndim != 2 or any(i.d != vectors.shape[1] for i in indexes.values())):
            return None  # files of two indexes (another kind's vectors): rebuilt, never served
        index = cls(encoder_id, names, vectors, meta["table_version"], meta["kind"],
                    {m: _to_gpu(i) for m, i in indexes.items()}, ids)
        return index, meta

    # ----------------------------------------------------------------- search
    def search(self, query: np.ndarray, k: int, *, metric: str = "cosine",
               allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Up to k (row, distance) pairs, nearest first. Cosine distance is 1 - cosine similarity;
        Euclidean is the L2 distance; "inner" (an index built for it) minus the inner product. `allowed`
        restricts the search to these rows."""
        if metric not in self._indexes:
            raise InputError(f"metric must be one of {', '.join(self._indexes)}, not {metric!r}", field="metric")
        if not self.names or k <= 0:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        if metric == "cosine":
            q = _normalise(q)
        k = min(k, len(self.names) if allowed is None else len(allowed))
        if k == 0:
            return []
        scores, ids = self._indexes[metric].search(q, k, params=self._params(k, allowed))
        return self._hits(scores[0], ids[0], metric)

    def search_many(self, queries: np.ndarray, k: int, *, metric: str = "cosine") -> list[list[tuple[int, float]]]:
        """`search` for each row of `queries` (n, D) in one FAISS call (a flat index answers a batch as one
        matrix product), over the whole index."""
        if metric not in self._indexes:
            raise InputError(f"metric must be one of {', '.join(self._indexes)}, not {metric!r}", field="metric")
        q = np.atleast_2d(np.ascontiguousarray(queries, dtype=np.float32))  # (n, D)
        k = min(k, len(self.names))
        if not len(q) or k <= 0:
            return [[] for _ in range(len(q))]
        if metric == "cosine":
            q = _normalise(q)
        scores, ids = self._indexes[metric].search(q, k, params=self._params(k, None))
        return [self._hits(s, i, metric) for s, i in zip(scores, ids)]

    def _params(self, k: int, allowed: np.ndarray | None):
        """FAISS search parameters: HNSW's breadth, and a selector of the allowed rows' ids (every row's
        when some of the graph's rows are masked)."""
        selector = None
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=np.int64)
            ids = allowed if self._ids is None else self._ids[allowed]
            selector = faiss.IDSelectorBatch(np.ascontiguousarray(ids, dtype=np.int64))
        elif self._ids is not None and self.masked:
            selector = self._unmasked()
        if self.kind == "hnsw":
            return (faiss.SearchParametersHNSW(efSearch=max(HNSW_EF_SEARCH, k)) if selector is None
                    else faiss.SearchParametersHNSW(sel=selector, efSearch=max(HNSW_EF_SEARCH, k)))
        return None if selector is None else faiss.SearchParameters(sel=selector)

    def _unmasked(self):
        """A selector of every row but the masked ones, made once: a selector of the 100,000 live ids, made
        per search, cost more than the search (p50 4.9 ms against 0.4-0.6 ms unmasked, bench_index.py --updates)."""
        if self._live is None:
            live = np.zeros(self._ntotal, dtype=bool)
            live[self._ids] = True
            masked = faiss.IDSelectorBatch(np.flatnonzero(~live).astype(np.int64))
            self._live = (faiss.IDSelectorNot(masked), masked)  # the second kept alive: the first points at it
        return self._live[0]

    def _hits(self, scores: np.ndarray, ids: np.ndarray, metric: str) -> list[tuple[int, float]]:
        """One query's FAISS answer as (row, distance) pairs, nearest first."""
        if self._ids is not None and self._row_of_id is None:
            row_of_id = np.full(self._ntotal, -1, dtype=np.int64)
            row_of_id[self._ids] = np.arange(len(self._ids))
            self._row_of_id = row_of_id
        out = []
        for score, row in zip(scores, ids):
            if row >= 0 and self._row_of_id is not None:
                row = self._row_of_id[row]
            if row < 0:
                continue
            if metric == "cosine":
                # |a-b|^2 = 2 - 2cos; float32 rounding puts a vector's cosine to itself a hair above 1
                distance = max(1.0 - score if self.kind == "flat" else score / 2.0, 0.0)
            elif metric == INNER:
                distance = -float(score)
            else:
                distance = float(np.sqrt(max(score, 0.0)))
            out.append((int(row), float(distance)))
        return out
