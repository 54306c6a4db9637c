"""The pool's item table beside the active encoder, and models' behaviour fingerprints from the store.

`registry train` fits the table (encoder.fingerprint) on the same queries the encoder trained and
validated on, never on its test queries, and writes it into the encoder's directory
(item_table.safetensors + item_table.json). `fit_item_table` fits one for an encoder that predates it.
Every model's fingerprint lives in the models table (`registry.catalog.fingerprint_store`, store format 2),
written with its LOCUS vector, and the product (search, audit, clusters, route fallbacks) reads it there
through its FAISS index. `pool_fingerprints` is for analyses that need the raw thetas and task coverage
of the whole pool: it solves them from the stored evaluations and keeps them in
`<home>/fingerprints/<table id>.safetensors` (+ .json naming each row's model and version), so a later
call computes only the models added, refined or restored since. `fit_item_table` rewrites the column.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from encoder.fingerprint import FingerprintConfig, ItemTable, fit_on_data, save_item_table
from indexing.store import Store
from registry.catalog.embedding import active_encoder
from registry.catalog.fingerprint_store import _cache, compute as _compute, load_item_table, rewrite_fingerprints

__all__ = ["fit_item_table", "load_item_table", "PoolFingerprints", "pool_fingerprints"]



def fit_item_table(store: Store, *, config: FingerprintConfig | None = None) -> ItemTable:
    """Fit the item table of the active encoder on the current pool (without the encoder's test
    queries) and store it beside the encoder; replaces an earlier one."""
    from registry.catalog.dataset import load_eval_data
    from registry.analytics.heldout import test_queries

    active = active_encoder(store)
    store.check_writable()  # before the fit, which is most of the time
    data = load_eval_data(store, active.query_encoder)
    test, _ = test_queries(active, data)
    table = fit_on_data(data, exclude={data.query_ids[i] for i in test}, config=config)
    save_item_table(table, active.directory)
    for key in [k for k in _cache if k[0] == str(active.directory)]:
        _cache.pop(key)
    for key in [k for k in _pool_cache if k[0] == str(store.home)]:
        _pool_cache.pop(key)
    rewrite_fingerprints(store, table)  # a new table: every model's fingerprint column, in one transaction
    return table


@dataclass
class PoolFingerprints:
    table: ItemTable
    names: list[str]  # every model of the models table with usable evaluations, sorted
    thetas: np.ndarray  # (M, r + 1)
    coverage: np.ndarray  # (M, S) bool: probe queries of the tasks each model was evaluated on
    versions: dict[str, int]  # the model versions these fingerprints were computed from
    _rows: dict[str, int] | None = field(default=None, repr=False)
    _identity: np.ndarray | None = field(default=None, repr=False)  # identity vectors, made when first asked

    def row(self, name: str) -> int:
        if self._rows is None:
            self._rows = {n: i for i, n in enumerate(self.names)}
        return self._rows[name]

    def identity_to(self, name: str) -> np.ndarray:
        """(M,) RMS logit difference of `name`'s fingerprint from every model's over the probe queries."""
        if self._identity is None:
            self._identity = self.table.identity_vectors(self.thetas)
        v = self._identity
        return np.linalg.norm(v - v[self.row(name)], axis=1)

    def behaviour_to(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Expected disagreement of `name` with every model, or with the models at `rows` (inf where no
        task in common)."""
        i = self.row(name)
        rows = np.arange(len(self.names)) if rows is None else np.asarray(rows, np.int64)
        return self.table.behaviour_distances(self.thetas[i:i + 1], self.thetas[rows], coverage=self.coverage[i:i + 1],
                                              other_coverage=self.coverage[rows])[0]


_pool_cache: dict[tuple[str, str], PoolFingerprints] = {}


def _read_cache(weights, index) -> dict[str, tuple[int, np.ndarray, np.ndarray]]:
    from safetensors import SafetensorError
    from safetensors.numpy import load

    if not index.is_file():
        return {}
    try:
        meta = json.loads(index.read_text("utf-8"))
        arrays = load(weights.read_bytes())
        return {n: (int(v), arrays["thetas"][i], arrays["coverage"][i].astype(bool))
                for i, (n, v) in enumerate(zip(meta["names"], meta["versions"]))}
    except (OSError, ValueError, KeyError, IndexError, SafetensorError):
        return {}  # a damaged cache is rebuilt, never trusted


def pool_fingerprints(store: Store, table: ItemTable) -> PoolFingerprints:
    """Every live model's fingerprint; a model whose version is unchanged since the last call (in this
    process, or in the on-disk cache) is not recomputed."""
    from safetensors.numpy import save

    from indexing.home import write_bytes_atomic, write_text_atomic
    from indexing.store import MODELS

    versions = {r["name"]: int(r["version"] or 0) for r in store.read(MODELS, ["name", "version"]).to_pylist()}
    key = (str(store.home), table.table_id)
    directory = store.home / "fingerprints"
    weights, index = directory / f"{table.table_id}.safetensors", directory / f"{table.table_id}.json"
    held = _pool_cache.get(key)
    if held is not None and held.versions == versions:
        return held
    known = ({n: (held.versions[n], held.thetas[i], held.coverage[i]) for i, n in enumerate(held.names)}
             if held is not None else _read_cache(weights, index))
    fresh = {n for n in versions if n in known and known[n][0] == versions[n]}
    computed = _compute(store, table, sorted(set(versions) - fresh))
    names = sorted(fresh | set(computed))
    pick = {n: (computed[n] if n in computed else known[n][1:]) for n in names}
    out = PoolFingerprints(
        table=table, names=names, versions={n: versions[n] for n in names},
        thetas=np.array([pick[n][0] for n in names], np.float64).reshape(len(names), table.rank + 1),
        coverage=np.array([pick[n][1] for n in names], bool).reshape(len(names), len(table.probe)))
    if computed or set(known) != set(names):
        try:
            if hasattr(directory, "mkdir"):
                directory.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(weights, save({"thetas": out.thetas, "coverage": out.coverage.astype(np.uint8)}))
            write_text_atomic(index, json.dumps({"names": names, "versions": [versions[n] for n in names]}))
        except OSError:
            pass  # a read-only home still answers; the next call recomputes
    _pool_cache[key] = out
    return out
