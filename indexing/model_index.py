"""`ModelIndex`: the one owner of the FAISS index over the models table.

It builds the index from the table, saves it in `<home>/index/` with the table's rows (metadata, no
vectors) and the store's generation token, loads it back, decides whether the saved one is current,
and rebuilds it when not. Nothing else reads or writes `<home>/index/`.

Currency. A search first tries the saved index: when no transaction is open and the generation token
is the one it was saved with, nothing in the tables has changed since (`indexing.home`), and the search
runs without opening LanceDB (so `registry search` starts fast). Otherwise the store is opened, the
index is checked against the models table's version and the embedded names, and rebuilt when stale.

Vectors from different encoders never meet: the index holds the models embedded with one encoder id
(the only one, else the store's active encoder); `encoders_seen` says when the table holds more, and
`refuse_mixed()` turns that into an error naming the fix.

One index per vector kind (`VECTOR_KINDS`): by="locus" over the `vector` column (tagged `encoder_id`),
by="fingerprint" over the `fingerprint` column (the whitened behaviour fingerprint, tagged `table_id`,
whose Euclidean distance is the identity distance: search it with metric="euclidean"), by="behaviour"
over the `behaviour` column (a model's answers on the item table's probe queries, tagged `table_id`;
searched by inner product with the query `ItemTable.behaviour_queries` makes of a stored vector, so that
the nearest is the least expected disagreement: who behaves like this model). Each kind is
saved under its own name and pointer; fingerprints of different item tables never meet either (the
index holds the table id most models carry: after a refit every model carries the new one).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from indexing.errors import InputError, NotFoundError, RegistryError
from indexing.home import as_path, generation, is_remote, scratch_path, transaction_open, write_text_atomic
from indexing.model_rows import ModelRows
from indexing.vector_index import INNER, METRICS, VectorIndex

if TYPE_CHECKING:
    from indexing.store import Store

__all__ = ["ModelIndex", "SavedEvaluations", "METRICS", "VECTOR_KINDS", "KIND_METRICS"]

# vector kind -> (column of the models table, column naming what made it)
VECTOR_KINDS = {"locus": ("vector", "encoder_id"), "fingerprint": ("fingerprint", "table_id"),
                "behaviour": ("behaviour", "table_id")}
# the metrics each kind's index answers (a behaviour vector is searched by the inner product only)
KIND_METRICS = {"locus": METRICS, "fingerprint": METRICS, "behaviour": (INNER,)}

_INDEX_DIR = "index"
_CURRENT = "current.json"
_FORMAT = 4  # 2: rows (table columns) instead of registry records in the saved metadata; 3: the rows in one
# file per generation (`_ROWS`), which every kind's metadata names, not in each kind's metadata; 4: that file
# holds columns (ModelRows), not a dict per row
_ROWS = "rows"  # <home>/index/rows-<format>-<generation id>.json


def _rows_with(table, column: str, names: list[str]) -> dict[str, int]:
    """The table row of each model whose `column` (a vector) is set."""
    if column not in table.column_names:  # a home of an older format (no fingerprint column)
        return {}
    valid = table.column(column).is_valid().to_numpy(zero_copy_only=False)
    return {names[i]: i for i in np.flatnonzero(valid)}


def _vectors(column, rows: list[int]) -> np.ndarray:
    """(len(rows), d) float32: these table rows of a list<float32> column."""
    if not rows:
        return np.zeros((0, 0), dtype=np.float32)
    import pyarrow.compute as pc

    taken = pc.take(column, np.asarray(rows, dtype=np.int64)).combine_chunks()
    lengths = pc.list_value_length(taken).to_numpy(zero_copy_only=False)
    if (lengths != lengths[0]).any():
        return np.array(taken.to_pylist(), dtype=np.float32)  # ragged: raises, as it did
    return taken.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(len(rows), -1)


def _check_kind(by: str) -> tuple[str, str]:
    if by not in VECTOR_KINDS:
        raise InputError(f"by must be one of {', '.join(VECTOR_KINDS)}, not {by!r}", field="by")
    return VECTOR_KINDS[by]


def _file_id(by: str, vector_id: str) -> str:
    return vector_id if by == "locus" else f"{by}-{vector_id}"


def _current_file(by: str) -> str:
    return _CURRENT if by == "locus" else f"current-{by}.json"


@dataclass
class ModelIndex:
    """A snapshot of the models table's embeddings: `names` (embedded with `encoder_id`, sorted),
    `vectors` (n, d) float32 in that order, `rows` (every model, embedded or not; table columns
    without the vectors: `ModelRows`) and the FAISS index over the vectors."""

    home: Path
    encoder_id: str  # what made the vectors: the LOCUS encoder id, or the item table id (by="fingerprint")
    rows: ModelRows
    encoders_seen: set[str]
    _index: VectorIndex = field(repr=False)
    by: str = "locus"  # the vector kind (VECTOR_KINDS)

    @property
    def column(self) -> str:
        return VECTOR_KINDS[self.by][0]

    # ---------------------------------------------------------------- the snapshot
    @property
    def names(self) -> list[str]:
        return self._index.names

    @property
    def vectors(self) -> np.ndarray:
        return self._index.vectors

    @property
    def kind(self) -> str:
        return self._index.kind

    def vector(self, name: str) -> np.ndarray:
        """(d,) the stored embedding of `name`; a not-found error names the closest models."""
        if name not in self.rows:
            raise NotFoundError.model(name, list(self.rows))
        try:
            return self._index.vectors[self._index.row(name)]
        except ValueError:
            if self.by in ("fingerprint", "behaviour"):
                raise RegistryError(f"model {name!r} has no behaviour fingerprint (too few evaluations, or no item "
                                    "table: `registry fit-fingerprints`); by its LOCUS vector instead: --by "
                                    "locus, or by=locus over HTTP") from None
            raise RegistryError(f"model {name!r} has no embedding yet: run `registry embed --all`") from None

    def search(self, query: np.ndarray, k: int, *, metric: str = "cosine",
               allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Up to k (row into `names`, distance), nearest first (equal distances by name); `allowed` restricts to
        these rows."""
        return self._exact_order(query, self._index.search(query, k, metric=metric, allowed=allowed), metric)

    def search_many(self, queries: np.ndarray, k: int, *, metric: str = "cosine") -> list[list[tuple[int, float]]]:
        """`search` for each row of `queries`, in one call, over the whole index."""
        return [self._exact_order(q, hits, metric)
                for q, hits in zip(np.atleast_2d(queries), self._index.search_many(queries, k, metric=metric))]

    def neighbours(self, query: str | np.ndarray, k: int, *, metric: str = "cosine",
                   allowed: np.ndarray | None = None) -> list[tuple[str, float]]:
        """The k nearest models (name, distance) to a model name or a (d,) vector, nearest first; a
        named model is left out of its own neighbours. A behaviour index is searched with a query vector
        (its stored vectors are not their own queries)."""
        if self.by == "behaviour" and isinstance(query, str):
            raise InputError("a behaviour index is searched with a query vector (ItemTable.behaviour_queries), "
                             "not a name", field="query")
        if metric not in KIND_METRICS[self.by]:
            raise InputError(f"metric must be one of {', '.join(KIND_METRICS[self.by])}, not {metric!r}", field="metric")
        own = query if isinstance(query, str) else None
        if own is not None:
            vector = self.vector(own)
        else:
            vector = np.asarray(query, dtype=np.float32).reshape(-1)
            if self.names and vector.shape[0] != self.vectors.shape[1]:
                raise InputError(f"the vector has {vector.shape[0]} dimensions; the registry's have "
                                 f"{self.vectors.shape[1]}", field="vector")
        if allowed is not None and own is not None:
            allowed = allowed[allowed != self._index.row(own)]
        extra = 1 if own is not None and allowed is None else 0
        hits = self.search(vector, k + extra, metric=metric, allowed=allowed)
        return [(self.names[row], dist) for row, dist in hits if self.names[row] != own][:k]

    def _exact_order(self, vector: np.ndarray, hits: list[tuple[int, float]], metric: str) -> list[tuple[int, float]]:
        """The hits with their distances in float64, nearest first and equal distances by name. FAISS computes in
        float32, where two exact copies of a model and a model 3e-9 away all read 0 and came in any order (a
        different model between the copies); an approximate (HNSW) index's distances are approximate too."""
        if not hits:
            return hits
        rows = np.array([row for row, _ in hits])
        x, q = self.vectors[rows].astype(np.float64), np.asarray(vector, np.float64)
        # row by row ((x * q).sum(1), not x @ q): a matrix product's summation order depends on how many rows
        # it is given, and a model's distance must not depend on how many others were asked for beside it
        if metric == "cosine":  # each normalised first: a tiny query (1e-30 a value) keeps its direction
            units = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.finfo(np.float64).tiny)
            exact = np.maximum(1.0 - (units * (q / max(np.linalg.norm(q), np.finfo(np.float64).tiny))).sum(1), 0.0)
        elif metric == INNER:
            exact = -(x * q).sum(1)
        else:
            exact = np.linalg.norm(x - q, axis=1)
        order = sorted(range(len(rows)), key=lambda i: (exact[i], self.names[rows[i]]))
        return [(int(rows[i]), float(exact[i])) for i in order]

    def refuse_mixed(self) -> "ModelIndex":
        """This index, unless the table holds vectors from more than one encoder (not comparable).
        Fingerprints of an older item table (a restored version) are left out of the index instead."""
        if self.by == "locus" and len(self.encoders_seen) > 1:
            raise RegistryError(
                f"models carry vectors from {len(self.encoders_seen)} encoders "
                f"({', '.join(sorted(self.encoders_seen))}). Vectors from different encoders are not comparable: "
                "run `registry embed --all`."
            )
        return self

    # ------------------------------------------------------------------- lifecycle
    @classmethod
    def open(cls, source: "Store | str | Path", *, rebuild: bool = False,
             store: "Callable[[], Store] | None" = None, by: str = "locus") -> "ModelIndex":
        """The index of one vector kind (`by`) for the models table as it is now: the saved one if
        provably current (no LanceDB opened), else checked against the table and rebuilt (and saved)
        when stale. `source` is a store or a home directory; `store` opens the store lazily when a home
        is given."""
        _check_kind(by)
        from_home = not hasattr(source, "read")  # a home (str, Path or ObjectPath), not a Store
        home = as_path(source) if from_home else source.home
        if not rebuild:
            saved = cls._load_current(home, by)
            if saved is not None:
                return saved.refuse_mixed()
        if from_home:
            if store is not None:
                opened = store()
            else:
                from indexing.store import Store

                opened = Store(home, create=False)
        else:
            opened = source
        return cls._from_store(opened, rebuild=rebuild, kinds=(by,))[by].refuse_mixed()

    @classmethod
    def _load_current(cls, home: Path, by: str = "locus") -> "ModelIndex | None":
        if transaction_open(home):
            return None
        try:
            current = json.loads((home / _INDEX_DIR / _current_file(by)).read_text())
        except (OSError, ValueError):
            return None
        token = generation(home)
        if token is None or current.get("generation") != token or current.get("format") != _FORMAT:
            return None
        loaded = VectorIndex.load(home / _INDEX_DIR, _file_id(by, current["encoder_id"]))
        if loaded is None:
            return None
        index, meta = loaded
        if meta.get("generation") != token or meta.get("rows_file") != _rows_file(token):
            return None
        try:
            rows = ModelRows.from_json((home / _INDEX_DIR / meta["rows_file"]).read_text())
        except (OSError, ValueError, KeyError):  # removed by a save of a later generation meanwhile
            return None
        return cls(home, current["encoder_id"], rows, set(meta["encoders_seen"]), index, by)

    @classmethod
    def open_kinds(cls, store: "Store", kinds, *, previous: "dict[str, ModelIndex] | None" = None
                   ) -> "dict[str, ModelIndex]":
        """`open` for several vector kinds of one store, reading the models table at most once: the saved
        index of each kind that is provably current, the others from one read (a service reloads three
        after every write; at 100,000 models each read of the table took seconds). `previous`: the
        indexes this process opened last (a service's snapshot), a base to update from when newer than
        the saved one: under writes back to back no reader may save, and updating from the saved graph
        alone would mask ever more of it until every read built the graph anew. Not checked with
        `refuse_mixed` (the caller decides per kind)."""
        found = {}
        for by in kinds:
            _check_kind(by)
            saved = cls._load_current(store.home, by)
            if saved is not None:
                found[by] = saved
        missing = [by for by in kinds if by not in found]
        if missing:
            found.update(cls._from_store(store, rebuild=False, kinds=missing, previous=previous))
        return {by: found[by] for by in kinds}

    @classmethod
    def _from_store(cls, store: "Store", *, rebuild: bool, kinds=("locus",),
                    previous: "dict[str, ModelIndex] | None" = None) -> "dict[str, ModelIndex]":
        from indexing.store import HEAVY_MODEL_COLUMNS, MODELS

        wanted = {VECTOR_KINDS[by][0] for by in kinds}
        skip = tuple(c for c in HEAVY_MODEL_COLUMNS if c not in wanted)  # another kind's vectors: not read
        token = generation(store.home)
        # the table's version before its rows and after: a write landing in between (another process) would
        # label rows of one version with the other, and that index, saved, would be trusted for the newer
        # version with the older vectors (the soak test's `registry check` caught one)
        version = store.version(MODELS)
        table = store.read(MODELS, without=skip)
        consistent = store.version(MODELS) == version
        if not consistent:  # made for this answer only: never reused or saved as either version (a saved
            version = -1  # graph may still be its base: `updated` answers for exactly the rows read)
        rows = ModelRows.from_arrow(table, leave_out={c for c, _ in VECTOR_KINDS.values()})  # shared by every kind
        previous = previous or {}
        return {by: cls._of_kind(store, table, rows, by, version=version, token=token,
                                 save=consistent, rebuild=rebuild, previous=previous.get(by)) for by in kinds}

    @classmethod
    def _of_kind(cls, store: "Store", table, rows: ModelRows, by: str, *, version: int,
                 token: str | None, save: bool, rebuild: bool, previous: "ModelIndex | None" = None
                 ) -> "ModelIndex":
        column, made_by = VECTOR_KINDS[by]
        home = store.home
        vector_of = _rows_with(table, column, rows.names)
        embedded = sorted(vector_of)
        made = rows.column(made_by)
        encoders = {made[n] for n in embedded}
        if len(encoders) == 1:
            encoder_id = next(iter(encoders))
        elif by == "locus":
            encoder_id = store.config.get("active_encoder") or "none"
        else:  # the item table most models carry (after a refit: all of them), ties by id
            counts: dict[str, int] = {}
            for n in embedded:
                counts[made[n]] = counts.get(made[n], 0) + 1
            encoder_id = min(counts, key=lambda t: (-counts[t], t)) if counts else "none"
        chosen = [n for n in embedded if made[n] == encoder_id]
        vectors = _vectors(table.column(column) if chosen else None, [vector_of[n] for n in chosen])
        directory = home / _INDEX_DIR
        loaded = None if rebuild else VectorIndex.load(directory, _file_id(by, encoder_id))
        index, saved_token, base = None, None, None
        if loaded is not None:
            candidate, meta = loaded
            if candidate.table_version == version and candidate.names == chosen and \
                    meta.get("rows_file") == _rows_file(meta.get("generation") or "") and \
                    (directory / meta["rows_file"]).is_file():
                index, saved_token = candidate, meta.get("generation")
            elif candidate.metrics == KIND_METRICS[by]:
                base = candidate
        if index is None and not rebuild and previous is not None and previous.encoder_id == encoder_id \
                and previous.by == by and previous._index.metrics == KIND_METRICS[by] and \
                (base is None or previous._index.table_version > base.table_version):
            base = previous._index  # newer than the saved graph: the one this process served last
        if index is None and base is not None:  # an older state's: an HNSW graph takes the write's vectors
            index = base.updated(chosen, vectors, table_version=version)  # rather than being built anew
        if index is None:
            index = VectorIndex.build(_file_id(by, encoder_id), chosen, vectors, table_version=version,
                                      metrics=KIND_METRICS[by])
        snapshot = cls(home, encoder_id, rows, encoders, index, by)
        # an empty fingerprint index is saved too: a home without fingerprints then answers "none" from it
        # without opening LanceDB on every search
        if (save and (chosen or by != "locus") and token is not None and saved_token != token
                and not transaction_open(home)):
            try:
                snapshot._save(token)
            except (OSError, RegistryError):  # a home this process may only read: served from memory, unsaved
                pass
        return snapshot

    def _save(self, token: str) -> None:
        """The generation's rows (once for every kind: the same table read), the index files, then the
        pointer to them (atomically): a crash in between leaves a pointer to the previous generation, and
        the next open rebuilds. At 100,000 models each kind's metadata holding every row cost a reload
        after a write a second of JSON written and parsed per kind."""
        directory = self.home / _INDEX_DIR
        rows_file = _rows_file(token)
        if not (directory / rows_file).is_file():
            directory.mkdir(parents=True, exist_ok=True)
            write_text_atomic(directory / rows_file, self.rows.to_json(), fsync=False)
            for old in directory.glob(f"{_ROWS}-*.json"):  # earlier generations': their indexes are stale
                if old.name != rows_file:
                    old.unlink(missing_ok=True)
        meta = {"generation": token, "encoders_seen": sorted(self.encoders_seen), "rows_file": rows_file}
        self._index.save(directory, meta)
        write_text_atomic(directory / _current_file(self.by),
                          json.dumps({"format": _FORMAT, "encoder_id": self.encoder_id, "generation": token}),
                          fsync=False)  # a cache: lost, the next open rebuilds it

    # ---------------------------------------------------------------------- checks
    def problems(self, store: "Store") -> list[str]:
        """How this index disagrees with the models table (empty when it agrees)."""
        from indexing.store import HEAVY_MODEL_COLUMNS, MODELS

        problems = []
        column, made_by = VECTOR_KINDS[self.by]
        skip = tuple(c for c in HEAVY_MODEL_COLUMNS if c != column)
        rows = {r["name"]: r for r in store.read(MODELS, without=skip).to_pylist()}
        names = sorted(n for n, r in rows.items() if r.get(column) is not None and r.get(made_by) == self.encoder_id)
        if self.names != names:
            problems.append(f"{self.by} index names differ from the models with that vector in the table")
        for i, name in enumerate(self.names):
            if name not in rows or not np.allclose(self.vectors[i], rows[name][column]):
                problems.append(f"index vector of {name!r} differs from the table")
        return problems


# ------------------------------------------------------------------ the evaluations a search refines with
_EVALS = "evaluations"  # <home>/index/evaluations.json, evaluations-<generation>.{codes,scores}.npy
_EVALS_MAX_ROWS = 20_000_000  # beyond this (~240 MB saved), a refining search reads LanceDB as before


def _token_id(token: str) -> str:
    import hashlib

    return hashlib.sha256(token.encode()).hexdigest()[:16]


def _rows_file(token: str) -> str:
    # the format in the name: a saved index of an earlier format is then never taken as current (its graph
    # is updated instead), so the first open after an upgrade saves this format's and the next reads it
    return f"{_ROWS}-{_FORMAT}-{_token_id(token)}.json"


class SavedEvaluations:
    """The evaluations table as a fingerprint search from a model name reads it (each model's query ids
    and scores, and each query's task), saved beside the index for one generation of the store.

    That search re-ranks its nearest by agreement on shared queries, which read the evaluations table:
    importing LanceDB for it cost `registry search` half a second. The first such search after a write
    reads the table once and saves this; later ones, while the generation token is the same (no
    transaction finished since, none open), read only the rows of the models asked for, memory-mapped.
    Local homes only (an s3 home reads LanceDB as before)."""

    def __init__(self, models: list[str], starts: np.ndarray, codes: np.ndarray, scores: np.ndarray,
                 query_ids: list, tasks: list) -> None:
        self._at = {m: i for i, m in enumerate(models)}
        self._starts, self._codes, self._scores = starts, codes, scores
        self._query_ids = np.asarray(query_ids, dtype=object)
        self._tasks = tasks

    def read(self, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(model, query_id, score) arrays of these models' evaluations, each model's in table order
        (as `registry.catalog.rows.read_evaluations` returns them)."""
        owners, codes, scores = [], [], []
        for name in dict.fromkeys(names):
            i = self._at.get(name)
            if i is None:
                continue
            lo, hi = int(self._starts[i]), int(self._starts[i + 1])
            owners.append(np.full(hi - lo, name, dtype=object))
            codes.append(np.asarray(self._codes[lo:hi]))
            scores.append(np.asarray(self._scores[lo:hi], dtype=np.float64))
        if not owners:
            return np.zeros(0, dtype=object), np.zeros(0, dtype=object), np.zeros(0, dtype=np.float64)
        return np.concatenate(owners), self._query_ids[np.concatenate(codes)], np.concatenate(scores)

    def task_of(self) -> dict:
        """query id -> task (None where the table has none)."""
        return dict(zip(self._query_ids.tolist(), self._tasks))

    def task_sets(self, names: list[str]) -> dict[str, set]:
        """name -> the tasks its evaluations are on ("" for none), from the codes (no query id strings)."""
        labels = [t or "" for t in self._tasks]
        kinds = sorted(set(labels))
        index = {t: i for i, t in enumerate(kinds)}
        code = np.fromiter((index[t] for t in labels), dtype=np.int64, count=len(labels))
        out = {}
        for name in names:
            i = self._at.get(name)
            held = code[np.asarray(self._codes[int(self._starts[i]):int(self._starts[i + 1])])] if i is not None else []
            out[name] = {kinds[c] for c in np.unique(held)}
        return out

    @classmethod
    def load(cls, home: Path) -> "SavedEvaluations | None":
        """The saved evaluations when provably current (as `ModelIndex._load_current`), else None."""
        if is_remote(home) or transaction_open(home):
            return None
        directory = Path(home) / _INDEX_DIR
        try:
            meta = json.loads((directory / f"{_EVALS}.json").read_text())
            token = generation(home)
            if token is None or meta.get("generation") != token or meta.get("format") != _FORMAT:
                return None
            stem = f"{_EVALS}-{_token_id(token)}"
            codes = np.load(directory / f"{stem}.codes.npy", mmap_mode="r", allow_pickle=False)
            scores = np.load(directory / f"{stem}.scores.npy", mmap_mode="r", allow_pickle=False)
            starts = np.asarray(meta["starts"], dtype=np.int64)
            if len(codes) != len(scores) or len(codes) != starts[-1] or len(starts) != len(meta["models"]) + 1:
                return None
            return cls(meta["models"], starts, codes, scores, meta["query_ids"], meta["tasks"])
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None

    @classmethod
    def from_store(cls, store: "Store") -> "SavedEvaluations | None":
        """Read the evaluations and query tasks of `store` and save them for its current generation
        (when no transaction is open and the table is not too large to); None when not saved."""
        import pyarrow.compute as pc

        from indexing.store import EVALUATIONS, QUERIES

        home = store.home
        token = generation(home)
        if is_remote(home) or token is None or transaction_open(home):
            return None
        if store.count(EVALUATIONS) > _EVALS_MAX_ROWS:
            return None
        table = store.read(EVALUATIONS, ["model", "query_id", "score"])
        queries = store.read(QUERIES, ["query_id", "task"])
        model = pc.dictionary_encode(table.column("model")).combine_chunks()
        owner = model.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = model.dictionary.to_pylist()
        query_ids = list(dict.fromkeys(queries.column("query_id").to_pylist()))
        tasks_of = dict(zip(queries.column("query_id").to_pylist(), queries.column("task").to_pylist()))
        evaluated = pc.dictionary_encode(table.column("query_id")).combine_chunks()
        extra = [q for q in evaluated.dictionary.to_pylist() if q not in tasks_of]  # an orphan evaluation
        query_ids += extra
        position = {q: i for i, q in enumerate(query_ids)}
        remap = np.asarray([position[q] for q in evaluated.dictionary.to_pylist()], dtype=np.int64)
        codes = remap[evaluated.indices.to_numpy(zero_copy_only=False).astype(np.int64)] if len(remap) else \
            np.zeros(0, dtype=np.int64)
        order = sorted(range(len(names)), key=names.__getitem__)
        rank = np.empty(len(names), dtype=np.int64)
        rank[order] = np.arange(len(names))
        grouped = np.argsort(rank[owner], kind="stable")  # by model name; each model's rows in table order
        counts = np.bincount(rank[owner], minlength=len(names))
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        codes = codes[grouped].astype(np.int32 if len(query_ids) < 2**31 else np.int64)
        scores = table.column("score").to_numpy(zero_copy_only=False).astype(np.float64)[grouped]
        tasks = [tasks_of.get(q) for q in query_ids]
        ordered = [names[i] for i in order]
        if generation(home) != token or transaction_open(home):
            return None  # a writer came in while the tables were read: what was read may not last
        try:
            return cls._saved(home, token, ordered, starts, codes, scores, query_ids, tasks)
        except OSError:  # a home this process may only read
            return None

    @classmethod
    def _saved(cls, home, token, ordered, starts, codes, scores, query_ids, tasks) -> "SavedEvaluations":
        directory = home / _INDEX_DIR
        directory.mkdir(parents=True, exist_ok=True)
        # the arrays under the generation's own name (two searches saving the same generation write the
        # same bytes), the metadata naming that generation last: a crash or a race leaves files that the
        # next search sees to be stale, never one generation's codes with another's scores
        stem = f"{_EVALS}-{_token_id(token)}"
        for suffix, array in (("codes", codes), ("scores", scores)):
            scratch = scratch_path(directory / f"{stem}.{suffix}", ".npy")
            np.save(scratch, array, allow_pickle=False)
            os.replace(scratch, directory / f"{stem}.{suffix}.npy")
        for old in directory.glob(f"{_EVALS}-*.npy"):  # earlier generations'
            if not old.name.startswith(stem + "."):
                old.unlink(missing_ok=True)
        write_text_atomic(directory / f"{_EVALS}.json",
                          json.dumps({"format": _FORMAT, "generation": token, "models": ordered,
                                      "starts": starts.tolist(), "query_ids": query_ids, "tasks": tasks}),
                          fsync=False)
        return cls(ordered, starts, codes, scores, query_ids, tasks)
