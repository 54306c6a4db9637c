"""The FAISS index over model embeddings, derived from the models table and persisted beside it.

The models table is the source of truth. An index is built for one encoder id (vectors from
different encoders never meet in one search), saved under `<home>/index/`, and carries the models
table's version it was built from: opening it against a newer table rebuilds it.

Exact search (flat) by default; HNSW past `HNSW_THRESHOLD` vectors; on a GPU when faiss-gpu and CUDA
are present. Cosine search runs on L2-normalised vectors (inner product, or L2 for HNSW, which ranks
unit vectors the same way); Euclidean on the raw vectors.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

__all__ = ["VectorIndex", "HNSW_THRESHOLD", "METRICS"]

HNSW_THRESHOLD = 50_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 128
METRICS = ("cosine", "euclidean")


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


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

    @classmethod
    def build(cls, encoder_id: str, names: list[str], vectors: np.ndarray, *, table_version: int,
              kind: str | None = None) -> "VectorIndex":
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(names), -1)
        kind = kind or ("hnsw" if len(names) >= HNSW_THRESHOLD else "flat")
        indexes = {}
        for metric in METRICS:
            data = _normalise(vectors) if metric == "cosine" else vectors
            d = vectors.shape[1]
            if kind == "hnsw":
                index = faiss.IndexHNSWFlat(d, HNSW_M)  # L2: on unit vectors it ranks as cosine does
                index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            elif metric == "cosine":
                index = faiss.IndexFlatIP(d)
            else:
                index = faiss.IndexFlatL2(d)
            if len(data):
                index.add(data)
            indexes[metric] = index
        return cls(encoder_id, list(names), vectors, table_version, kind, indexes)

    # ------------------------------------------------------------ persistence
    @staticmethod
    def _paths(directory: Path, encoder_id: str) -> tuple[Path, Path, Path]:
        base = directory / encoder_id
        return base.with_suffix(".cosine.faiss"), base.with_suffix(".euclidean.faiss"), base.with_suffix(".json")

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        cos_path, euc_path, meta_path = self._paths(directory, self.encoder_id)
        # Index files first, metadata last (atomically): a crash in between leaves metadata that
        # does not match, and the next open rebuilds.
        for path, metric in ((cos_path, "cosine"), (euc_path, "euclidean")):
            tmp = path.with_name(path.name + f".tmp{os.getpid()}")
            faiss.write_index(faiss.index_gpu_to_cpu(self._indexes[metric])
                              if hasattr(faiss, "index_gpu_to_cpu") and faiss.get_num_gpus() > 0
                              else self._indexes[metric], str(tmp))
            os.replace(tmp, path)
        meta = {"encoder_id": self.encoder_id, "names": self.names, "table_version": self.table_version,
                "kind": self.kind, "dim": int(self.vectors.shape[1]) if self.vectors.size else 0,
                "sizes": [int(self._indexes[m].ntotal) for m in METRICS]}
        tmp = meta_path.with_name(meta_path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, meta_path)

    @classmethod
    def load(cls, directory: Path, encoder_id: str, *, table_version: int, vectors: np.ndarray,
             names: list[str]) -> "VectorIndex | None":
        """The saved index when it was built from this table version and agrees with it; else None."""
        cos_path, euc_path, meta_path = cls._paths(directory, encoder_id)
        if not (meta_path.exists() and cos_path.exists() and euc_path.exists()):
            return None
        try:
            meta = json.loads(meta_path.read_text())
            if meta["table_version"] != table_version or meta["names"] != names:
                return None
            indexes = {"cosine": faiss.read_index(str(cos_path)), "euclidean": faiss.read_index(str(euc_path))}
        except (OSError, ValueError, KeyError, RuntimeError):
            return None
        if any(indexes[m].ntotal != len(names) for m in METRICS):
            return None
        return cls(encoder_id, names, np.ascontiguousarray(vectors, dtype=np.float32), table_version, meta["kind"],
                   {m: _to_gpu(i) for m, i in indexes.items()})

    # ----------------------------------------------------------------- search
    def search(self, query: np.ndarray, k: int, *, metric: str = "cosine",
               allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Up to k (row, distance) pairs, nearest first. Cosine distance is 1 - cosine similarity;
        Euclidean is the L2 distance. `allowed` restricts the search to these rows."""
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
        if not self.names or k <= 0:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        if metric == "cosine":
            q = _normalise(q)
        k = min(k, len(self.names) if allowed is None else len(allowed))
        if k == 0:
            return []
        params = None
        if allowed is not None:
            selector = faiss.IDSelectorBatch(np.asarray(allowed, dtype=np.int64))
            params = (faiss.SearchParametersHNSW(sel=selector, efSearch=max(HNSW_EF_SEARCH, k))
                      if self.kind == "hnsw" else faiss.SearchParameters(sel=selector))
        elif self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=max(HNSW_EF_SEARCH, k))
        scores, rows = self._indexes[metric].search(q, k, params=params)
        out = []
        for score, row in zip(scores[0], rows[0]):
            if row < 0:
                continue
            if metric == "cosine":
                distance = 1.0 - score if self.kind == "flat" else score / 2.0  # |a-b|^2 = 2 - 2cos
            else:
                distance = float(np.sqrt(max(score, 0.0)))
            out.append((int(row), float(distance)))
        return out
