"""Re-embedding every model on Ray: `registry embed --all --engine ray [--address ADDR]`.

Ray Data reads the evaluations table straight from its Lance dataset (pinned to the version seen at
the start), groups the rows by model (a hash shuffle), and hands each model's evaluations to an actor
that loaded the LOCUS checkpoint once. The actor runs the same forward pass as the single-process
engine (`encoder.inference.embed_models`), so the vectors agree within float tolerance (padding and
batching differ). The driver collects the (M, d) vectors and writes them through the registry's own
transaction (`registry.catalog.embedding.write_embeddings`): one writer, the journal, the generation token the
FAISS index watches. If another writer changed the evaluations, the queries or the query vectors while
Ray was working, the write is refused and nothing is stored.

Ray is an optional extra (`pip install 'locus-registry[ray]'`: ray[data] and pylance, which
`ray.data.read_lance` needs). Without `address` a local cluster is started with `num_workers` CPUs
and no dashboard, and shut down afterwards; with one, the job joins that cluster (its workers must
reach the registry home's path: a local home is for a local cluster, see docs/scale.md).
"""
from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from indexing.store import EVALUATIONS, MODELS, QUERIES, Store, vector_table_name
from registry.catalog.embedding import active_encoder, unvectored_warning, write_embeddings
from registry.catalog.dataset import load_query_vectors
from registry.errors import InputError, RegistryError
from registry.results import EmbedReport

__all__ = ["embed_all_ray", "RAY_INSTALL_HINT", "require_ray"]

RAY_INSTALL_HINT = ("the Ray engine needs the optional 'ray' extra: pip install 'locus-registry[ray]' "
                    "(or: pip install 'ray[data]' pylance)")
_CHECKPOINT_FILES = ("weights.safetensors", "config.json")
CONNECT_SECONDS = 5.0  # how long `--address` may take to answer a TCP connect



def _storage_options(store: Store) -> dict[str, str] | None:
    """An s3 home's endpoint and region for Lance on the workers (keys: their own AWS_* variables)."""
    from indexing.home import is_remote

    if not is_remote(store.home):
        return None
    from indexing.object_store import lance_storage_options

    return lance_storage_options()

def _local_worker_cap() -> int:
    return 4 * (os.cpu_count() or 1)


def _address_parts(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray address (ray://HOST:PORT, a client; HOST:PORT, the head's GCS), None for "auto"
    (Ray's own lookup); an InputError naming `address` for anything else (Ray's was a ValueError)."""
    if address == "auto":
        return None
    found = re.fullmatch(r"(?:ray://)?([^\s:/]+):(\d{1,5})", address)
    if found is None or not 0 < int(found.group(2)) < 65536:
        raise InputError(f"{address!r} is not a Ray address: ray://HOST:PORT (a Ray client, port 10001 by default), "
                         "HOST:PORT (the head node, 6379 by default) or auto", field="address")
    return found.group(1), int(found.group(2))


def _reachable(address: str, host_port: tuple[str, int] | None) -> None:
    """A RegistryError when nothing listens at the address: Ray itself retries an unreachable head for minutes."""
    if host_port is None:
        return
    import socket

    try:
        socket.create_connection(host_port, timeout=CONNECT_SECONDS).close()
    except OSError as err:
        raise RegistryError(f"no Ray cluster answers at {address} ({err.strerror or err}); start one with "
                            "`ray start --head`, or leave out --address for a local one") from None


def require_ray() -> Any:
    """`ray` with Ray Data and pylance importable, or a RegistryError saying how to install them."""
    try:
        import lance  # noqa: F401  (ray.data.read_lance reads through it)
        import ray
        import ray.data  # noqa: F401
    except ImportError as error:
        raise RegistryError(f"{RAY_INSTALL_HINT} ({error})") from None
    return ray


class _EmbedWorker:
    """A Ray actor: the LOCUS encoder and the query vectors, loaded once; one model's evaluations per call."""

    def __init__(self, checkpoint: dict[str, bytes], encoder_id: str, shared: list, threads: int) -> None:
        import tempfile

        import ray
        import torch

        from encoder.checkpoint import load_checkpoint

        torch.set_num_threads(threads)  # the actor holds `threads` CPUs of the cluster; no oversubscription
        with tempfile.TemporaryDirectory() as scratch:  # workers need no shared filesystem for the weights
            for name, blob in checkpoint.items():
                (Path(scratch) / name).write_bytes(blob)
            self.locus, _, loaded = load_checkpoint(scratch)
        if loaded != encoder_id:
            raise RuntimeError(f"checkpoint shipped to the worker has id {loaded}, not {encoder_id}")
        # Through the object store, once per node: list[str], (Q, D) float32, the models table's names.
        query_ids, query_vectors, live = ray.get(shared[0])
        self.q_pos = {q: i for i, q in enumerate(query_ids)}
        self.live = set(live)
        self.locus.eval()
        with torch.inference_mode():
            # The query-only token parts, once per query for the actor's life (embed_models does this once
            # per call; here a call is one model): (Q, d) each.
            self.proj = self.locus.encoder.project_queries(torch.from_numpy(query_vectors))

    def __call__(self, group: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        from encoder.locus import QueryProjection

        d = self.locus.config.d
        name = str(group["model"][0]) if len(group["model"]) else ""
        empty = {"model": np.zeros(0, dtype=object), "vector": np.zeros((0, d), np.float32),
                 "n_evals": np.zeros(0, np.int64), "left_out": np.zeros(0, np.int64), "seconds": np.zeros(0, np.float64)}
        started = time.perf_counter()
        if name not in self.live:  # a removed model keeps its evaluations, but is not embedded
            return empty
        q_index = np.fromiter((self.q_pos.get(q, -1) for q in group["query_id"]), np.int64, len(group["query_id"]))
        keep = q_index >= 0  # queries without a vector from the query encoder are left out, as in load_eval_data
        n = int(keep.sum())
        if n == 0:  # every evaluation on a query without a vector: reported, not embedded
            return {**empty, "model": np.array([name], dtype=object), "vector": np.full((1, d), np.nan, np.float32),
                    "n_evals": np.zeros(1, np.int64), "left_out": np.array([len(keep)], np.int64),
                    "seconds": np.zeros(1)}
        with torch.inference_mode():
            q = torch.from_numpy(q_index[keep])
            proj = QueryProjection(self.proj.base[q][None], self.proj.signed[q][None])  # (1, n, d) each
            y = torch.from_numpy(np.asarray(group["score"], np.float32)[keep])[None]  # (1, n)
            # The same forward pass as encoder.inference.embed_models, for one set without padding.
            z = self.locus.encoder.embed(proj, y, torch.zeros((1, n), dtype=torch.bool))  # (1, d)
        return {"model": np.array([name], dtype=object), "vector": z.float().numpy(),
                "n_evals": np.array([n], np.int64), "left_out": np.array([len(keep) - n], np.int64),
                "seconds": np.array([time.perf_counter() - started])}


def embed_all_ray(store: Store, *, address: str | None = None, num_workers: int = 2,
                  threads_per_worker: int = 1, max_evals: int | None = None) -> EmbedReport:
    """Embed every model with evaluations using the active encoder, on Ray; see the module docstring."""
    if max_evals is not None:
        # The single-process sample draws from one generator in model order; a distributed draw could not
        # reproduce it, and the Ray engine promises the single process's vectors.
        raise InputError("the Ray engine embeds from all evaluations; drop --max-evals or use --engine local",
                         field="max_evals")
    if num_workers < 1:
        raise InputError(f"workers must be at least 1, not {num_workers}", field="workers")
    if address is None and num_workers > _local_worker_cap():
        # each actor is a process with its own copy of the encoder: 100,000 of them spun until Ray aborted
        raise InputError(f"workers: {num_workers} actors on a local Ray cluster; this machine's {os.cpu_count()} CPUs "
                         f"take at most {_local_worker_cap()} (more need a cluster: --address)", field="workers")
    host_port = _address_parts(address) if address else None
    ray = require_ray()
    active = active_encoder(store)
    if store.count(EVALUATIONS) == 0:
        raise RegistryError("the registry holds no evaluations yet (registry import PATH)")
    queries = load_query_vectors(store, active.query_encoder)
    if queries.vectors.shape[1] != active.config.query_dim:
        raise RegistryError(f"encoder {active.encoder_id} reads {active.config.query_dim}-d query vectors; "
                            f"{active.query_encoder} gives {queries.vectors.shape[1]}-d")
    live = store.read(MODELS, ["name"]).column("name").to_pylist()
    # What the vectors are computed from; the write checks these did not move meanwhile.
    versions = store.versions()
    watched = {t: versions[t] for t in (EVALUATIONS, QUERIES, vector_table_name(active.query_encoder)) if t in versions}
    uri = store.table_uri(EVALUATIONS)
    checkpoint = {name: (active.directory / name).read_bytes() for name in _CHECKPOINT_FILES}

    started = not ray.is_initialized()
    if started:
        if address:
            _reachable(address, host_port)
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            except ConnectionError as err:  # it answered a connect, then not as a Ray head / client server would
                raise RegistryError(f"could not join the Ray cluster at {address}: {err}") from None
        else:
            # One CPU beyond the actors' for the read and shuffle tasks, so they never wait on the actors.
            ray.init(num_cpus=num_workers * threads_per_worker + 1, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
    try:
        from ray.data import ActorPoolStrategy, DataContext

        DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # per-run execution plans and timings
        shared_ref = ray.put((queries.query_ids, queries.vectors, live))
        t0 = time.perf_counter()
        ds = ray.data.read_lance(uri, version=watched[EVALUATIONS], columns=["model", "query_id", "score"],
                                 storage_options=_storage_options(store))
        # Few shuffle partitions: each holds whole models, and Ray's default (200) costs seconds of
        # scheduling on a small registry for no parallelism the actors could use.
        embedded = ds.groupby("model", num_partitions=max(2, 4 * num_workers)).map_groups(
            _EmbedWorker, batch_format="numpy", compute=ActorPoolStrategy(size=num_workers),
            num_cpus=threads_per_worker,
            fn_constructor_kwargs={"checkpoint": checkpoint, "encoder_id": active.encoder_id,
                                   "shared": [shared_ref], "threads": threads_per_worker})
        names: list[str] = []
        vectors: list[np.ndarray] = []
        n_evals: list[int] = []
        left_out: dict[str, int] = {}
        worker_seconds = 0.0
        for batch in embedded.iter_batches(batch_format="numpy", batch_size=None):
            names.extend(str(n) for n in batch["model"])
            vectors.extend(np.asarray(v, np.float32) for v in batch["vector"])
            n_evals.extend(int(n) for n in batch["n_evals"])
            left_out.update((str(m), int(n)) for m, n in zip(batch["model"], batch["left_out"]))
            worker_seconds += float(np.sum(batch["seconds"]))
        seconds = time.perf_counter() - t0
    finally:
        if started:
            ray.shutdown()
    order = np.argsort(names, kind="stable")
    matrix = np.stack([vectors[i] for i in order]) if names else np.zeros((0, active.config.d), np.float32)
    report = write_embeddings(store, active.encoder_id, [names[i] for i in order], matrix,
                              [n_evals[i] for i in order], expect_versions=watched)
    warning = unvectored_warning(left_out, dict(zip(names, n_evals)), active.query_encoder)
    return report.model_copy(update={"engine": "ray", "workers": num_workers, "seconds": seconds,
                                     "worker_seconds": worker_seconds,
                                     "warnings": report.warnings + ([warning] if warning else [])})
