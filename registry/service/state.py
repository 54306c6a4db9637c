"""What the service keeps loaded between requests, and when it reloads it.

A `Snapshot` is one consistent view: the active LOCUS checkpoint as routes read it (the predictor G in
numpy on the CPU; the whole torch Locus on a GPU) and the FAISS indexes with every model's record, both
for one generation of the store. Writes embed with the torch Locus, loaded beside it (`WarmState.active`).
Each request compares two tiny files with the snapshot's key (the store's generation token, which every
finished transaction rewrites whoever the writer was, CLI or service, and the home's
config, which names the active encoder); only when they changed is anything reloaded. While a
transaction is open (its journal exists) nothing is loaded, the tables may be half-way through the
write: the last whole state answers the reads it will do for.

Every finished transaction has a number (its generation, `indexing.home.generation_number`), and a
request says which states it may read (`ReadRequest`): by default one holding every write finished when
it arrived (each client reads its own writes; while another write is under way, it waits for the state
after it rather than answer from an older one); with `X-Locus-Read: N` one of generation N or newer
(the number the client's own last write answered with: its writes, not every client's); with
`X-Locus-Read: loaded` whatever is loaded. The last two answer at once when the loaded state will do, and
a reload goes on in a thread of its own; at 100,000 models reopening the indexes after a write took 2.3 s.

Encoded query texts are kept in an LRU keyed by (query encoder, text hash): a text is encoded at
most once per process, and stored texts are read from the store's vector cache, not re-encoded.
Texts that must be encoded go to one encoding thread: requests that arrive while it works are
encoded together in its next batch, and the engine gets every core without requests competing.
"""
from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from indexing.home import JOURNAL_FILE, as_path, is_remote, transaction_open
from indexing.home import generation as read_generation
from indexing.home import generation_number
from indexing.store import Store
from registry.errors import RegistryError
from registry.operations import StoreView, router_knn_key
from registry.service.errors import HTTPError
from registry.service.settings import ServiceSettings

__all__ = ["Snapshot", "WarmState", "TextEncoder", "ReadRequest", "READ", "note_generation"]

log = logging.getLogger("locus.service")


@dataclass
class ReadRequest:
    """What one request asked of the state its reads take, and the generation its answer carries
    (`X-Locus-Generation`): the state's a read took, or the home's once its write landed."""

    loaded: bool = False  # X-Locus-Read: loaded: any loaded state
    after: int | None = None  # X-Locus-Read: N: a state of generation N or newer
    generation: int | None = None

    def needs(self, committed: int) -> int:
        """The oldest generation this read may take, `committed` being the home's last finished one."""
        if self.loaded:
            return 0
        return committed if self.after is None else min(self.after, committed)

    def takes(self, loaded: int, committed: int) -> bool:
        """Whether a loaded state of generation `loaded`, older than the home's, may answer it at once."""
        return (self.loaded or self.after is not None) and loaded >= self.needs(committed)


# The request being answered: made by the app's middleware (registry.service.edge) and filled in by its
# dependency (registry.service.deps.read_mode); None in the service's own threads, which take the state
# as it is (a write under way: the state before it).
READ: contextvars.ContextVar[ReadRequest | None] = contextvars.ContextVar("locus_read", default=None)


def note_generation(number: int | None) -> None:
    """The generation this request's answer carries (a write's, once it landed)."""
    request = READ.get()
    if request is not None and number is not None:
        request.generation = number


@dataclass(frozen=True)
class Snapshot:
    key: tuple[str | None, str]  # (generation token, config text)
    encoder_id: str | None
    active: Any  # registry.catalog.embedding.ActiveEncoder (G in numpy on the CPU) or None
    models: Any  # registry.analytics.search.EmbeddedModels or None
    problem: str | None  # why search/route cannot answer (no encoder, mixed encoders), else None
    loaded_at: float = field(default_factory=time.time)
    prints: Any = None  # the fingerprint index (registry.analytics.search.EmbeddedModels) or None
    behaviour: Any = None  # the behaviour index (indexing.model_index.ModelIndex) or None
    # the router's kNN over the stored evaluations, built by the first route that needs it (StoreView.build_router_knn)
    knn: dict = field(default_factory=dict)

    @property
    def generation(self) -> int:
        """Of the key, read before the tables: the state holds at least that generation's writes."""
        return generation_number(self.key[0])

    def require_models(self):
        if self.models is None:
            raise RegistryError(self.problem or "no model is embedded yet")
        return self.models

    def require_active(self):
        if self.active is None:
            raise RegistryError(self.problem or "no active encoder: run `registry train` first")
        return self.active


class RememberedPredictions:
    """A predictor of one state of the store (the router's kNN) that remembers its prediction per query
    vector, least recently used first out: a text routed again costs a lookup, not another pass over every
    stored query vector (~37 MB on MMLU-Pro). Exact: the key is the vector's bytes."""

    def __init__(self, predictor, size: int = 4096) -> None:
        self.predictor, self.size = predictor, size
        self._memo: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def predict_vectors(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        keys = [hashlib.blake2b(v.tobytes(), digest_size=16).digest() for v in vectors]
        with self._lock:
            found = {k: self._memo[k] for k in keys if k in self._memo}
            for k in found:
                self._memo.move_to_end(k)
        todo = [i for i, k in enumerate(keys) if k not in found]
        if todo:
            fresh = self.predictor.predict_vectors(vectors[todo])  # (M, len(todo))
            with self._lock:
                for j, i in enumerate(todo):
                    found[keys[i]] = self._memo[keys[i]] = fresh[:, j]
                while len(self._memo) > self.size:
                    self._memo.popitem(last=False)
        return np.stack([found[k] for k in keys], axis=1)


class TextEncoder:
    """One thread that encodes texts for every request: whatever waits when it is free goes into one
    batch (up to `max_texts`), per query encoder. `encode` blocks until its texts are done."""

    def __init__(self, load, max_texts: int = 64) -> None:
        self._load = load  # query-encoder name -> QueryEncoder
        self._max = max_texts
        self._waiting: queue.Queue = queue.Queue()
        self.batches = 0
        threading.Thread(target=self._run, name="locus-text-encoder", daemon=True).start()

    def encode(self, encoder: str, texts: list[str]) -> np.ndarray:
        done = threading.Event()
        job = {"encoder": encoder, "texts": texts, "done": done, "vectors": None, "error": None}
        self._waiting.put(job)
        done.wait()
        if job["error"] is not None:
            raise job["error"]
        return job["vectors"]

    def _run(self) -> None:
        while True:
            jobs = [self._waiting.get()]
            n = len(jobs[0]["texts"])
            while n < self._max:
                try:
                    jobs.append(self._waiting.get_nowait())
                except queue.Empty:
                    break
                n += len(jobs[-1]["texts"])
            for encoder in dict.fromkeys(job["encoder"] for job in jobs):
                self._encode([job for job in jobs if job["encoder"] == encoder])

    def _encode(self, jobs: list[dict]) -> None:
        try:
            unique = list(dict.fromkeys(t for job in jobs for t in job["texts"]))
            vectors = self._load(jobs[0]["encoder"]).encode(unique, progress=False)
            self.batches += 1
            row = {t: i for i, t in enumerate(unique)}
            for job in jobs:
                job["vectors"] = vectors[[row[t] for t in job["texts"]]]
        except Exception as err:  # every waiting request gets the error, the thread lives on
            for job in jobs:
                job["error"] = err
        finally:
            for job in jobs:
                job["done"].set()


class WarmState(StoreView):
    """The operations' view (registry.operations) kept warm: the snapshot's encoder and indexes, and
    encoded texts in memory; the service runs the library's operations on it."""

    def __init__(self, settings: ServiceSettings) -> None:
        home = as_path(settings.home)
        super().__init__(home, Store(home, create=False))
        self.settings = settings
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._texts: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._unstored: set[tuple[str, str]] = set()  # of `_texts`: encoded by a route; the store may lack them
        self._texts_lock = threading.Lock()
        self._knn_lock = threading.Lock()
        self._behind: threading.Thread | None = None  # the reload a read that took the loaded state started
        self._behind_lock = threading.Lock()
        self._landed = threading.Condition()  # notified when a state is loaded (reads waiting for a write's)
        self._wanted = 0  # the newest generation a read waits for
        self._locus = None  # the torch ActiveEncoder writes embed with, on the CPU (`active`)
        self._locus_lock = threading.Lock()
        self._last_knn = None  # ((query encoder, settings, pool), the router's kNN last built or extended)
        self.knn_builds = {"built": 0, "extended": 0}
        self.reloads = 0
        self.text_hits = 0
        self.text_misses = 0
        self.texts_encoded = 0
        self.encoder = TextEncoder(self.query_encoder)

    # ------------------------------------------------------------------ snapshot
    def _key(self) -> tuple[str | None, str]:
        return read_generation(self.home), (self.home / "config.json").read_text("utf-8")

    def _writer_alive(self) -> bool:
        """Whether the journal's writer still runs (a dead one's journal is recovered by reopening)."""
        if is_remote(self.home):  # a writer on another machine: its lease says whether it still renews
            from indexing.object_store import lease_alive
            from indexing.store import LOCK_FILE

            return lease_alive(self.home / LOCK_FILE)
        try:
            pid = int(json.loads((self.home / JOURNAL_FILE).read_text("utf-8")).get("pid"))
        except (OSError, ValueError, TypeError):
            return False  # gone (finished) or being written: nothing to recover here
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def snapshot(self) -> Snapshot:
        """The current view, reloaded only when the store or the active encoder changed and the request
        (`READ`) needs what changed; the request notes the view's generation."""
        request = READ.get()
        snap = self._snapshot_for(request)
        if request is not None:
            request.generation = snap.generation
        return snap

    def _snapshot_for(self, request: ReadRequest | None) -> Snapshot:
        deadline = None
        while transaction_open(self.home):
            current = self._snapshot
            if not self._writer_alive():
                with self._lock:
                    self._store = Store(self.home, create=False)  # recovers a dead writer's journal
                break
            if current is None:
                break
            # the tables may be half-way through the write: answer from the last whole state when it holds
            # what this read needs, else wait for the state after the write (this service's writer loads it
            # before its next batch: `readers_waiting`)
            need = 0 if request is None else request.needs(self.generation())
            if current.generation >= need:
                return current
            deadline = deadline or time.monotonic() + self.settings.limits.max_wait_s
            if time.monotonic() > deadline:
                raise HTTPError(503, f"the state this read needs (generation {need}) was not loaded within "
                                f"{self.settings.limits.max_wait_s:g} s: a write is under way; retry",
                                type_="StateBehind", headers={"Retry-After": "1"})
            with self._landed:
                self._wanted = max(self._wanted, need)
                self._landed.wait(0.05)
        key = self._key()
        current = self._snapshot
        if current is not None and current.key == key:
            return current
        if current is not None and request is not None and request.takes(current.generation,
                                                                         generation_number(key[0])):
            self._reload_behind()
            return current
        with self._lock:
            if self._snapshot is None or self._snapshot.key != key:
                self._snapshot = self._load(key, self._snapshot)
                self.reloads += 1
            snap = self._snapshot
        with self._landed:
            self._landed.notify_all()
        return snap

    def loaded(self) -> Snapshot | None:
        """The snapshot loaded now, whatever the home holds since (no check, no reload)."""
        return self._snapshot

    def readers_waiting(self) -> bool:
        """A read waits for a state newer than the loaded one (it arrived during a write): the writer loads
        it before it starts another."""
        snap = self._snapshot
        return snap is not None and self._wanted > snap.generation

    def note_written(self) -> None:
        """After a write this request made landed: its answer carries the home's generation (read after it:
        that of a later write when one landed since, which holds this one too)."""
        note_generation(self.generation())

    def generation(self) -> int:
        """The home's last finished generation."""
        return self.store.landed_generation()

    def _reload_behind(self) -> None:
        """Reload in a thread of its own unless a reload is under way already (a read took the loaded state)."""
        if self._lock.locked():
            return
        with self._behind_lock:
            if self._behind is not None and self._behind.is_alive():
                return
            self._behind = threading.Thread(target=self._reload_quietly, name="locus-reload", daemon=True)
            self._behind.start()

    def _reload_quietly(self) -> None:
        try:
            self.snapshot()  # a new thread's context: no request, so this one loads
        except Exception:  # noqa: BLE001 - the next reader that needs the new state loads it and says why
            log.exception("loading the state in the background failed")

    def warm(self) -> None:
        """After the writer has answered a batch's clients: load the state it landed and the router's kNN if
        routes read one (the last one extended, or built over every stored evaluation), so that the routes
        after a landing find both ready instead of the first of them paying for both (docs/results/
        benchmarks.md). Readers that arrive meanwhile wait for what they need, as they would have (never an
        older state: each client reads its own writes). A failure only leaves the work to the next reader."""
        from registry.operations import router_knn_args

        if transaction_open(self.home) or (is_remote(self.home) and not self.readers_waiting()):
            return  # on s3 the first reader loads (each check is a request), unless one waits already
        try:
            routed = self._snapshot is not None and bool(self._snapshot.knn)
            snap = self.snapshot()
            if routed and snap.models is not None and snap.active is not None:
                args = router_knn_args(snap.active, snap.models)
                if args is not None and self.item_table(snap.encoder_id) is not None:
                    self._knn_of(snap, *args)
        except Exception:  # noqa: BLE001 - the landing stands; a reader loads on demand
            log.exception("loading the state after a landing failed")

    def _load(self, key, previous: Snapshot | None) -> Snapshot:
        from registry.catalog.embedding import active_encoder, active_predictor
        from registry.analytics.search import embedded, open_indexes

        config = json.loads(key[1])
        encoder_id = config.get("active_encoder")
        problem = None
        active = None
        if encoder_id:
            if previous is not None and previous.encoder_id == encoder_id and previous.active is not None:
                active = previous.active
            elif self.settings.device == "cpu":  # routes read G alone, in numpy: no torch (`active` loads it)
                active = active_predictor(self.store, encoder_id)
            else:
                active = active_encoder(self.store, encoder_id)
                active.locus.to(self.settings.device)
        else:
            problem = "no active encoder: run `registry train` first"
        models = prints = behaviour = None
        served = {} if previous is None else {
            by: index for by, index in (("locus", previous.models and previous.models.index),
                                        ("fingerprint", previous.prints and previous.prints.index),
                                        ("behaviour", previous.behaviour)) if index is not None}
        try:  # the models table read once for the three kinds; what was served is a base to update from
            indexes = open_indexes(self.store, served)
        except RegistryError as err:
            indexes, problem = {}, str(err)
        if indexes:
            try:
                models = embedded(indexes["locus"].refuse_mixed())
            except RegistryError as err:
                problem = str(err)
            prints = embedded(indexes["fingerprint"])  # refuse_mixed refuses LOCUS vectors only
            behaviour = indexes["behaviour"]  # the one a search from a model reads too (behaviour_index)
        return Snapshot(key, encoder_id, active, models, problem, prints=prints, behaviour=behaviour)

    def current(self) -> Snapshot | None:
        """The loaded snapshot when it will do for this request without waiting (two small local file reads
        show nothing changed, or the request takes an older state and the loaded one is new enough); None
        when a write is under way, a reload is due, or the home is remote (its checks are network calls):
        `snapshot` decides then."""
        snap = self._snapshot
        if snap is None or is_remote(self.home):
            return None
        request = READ.get()
        if transaction_open(self.home):
            if request is None or not request.takes(snap.generation, self.generation()):
                return None
        else:
            key = self._key()
            if snap.key != key:
                if request is None or not request.takes(snap.generation, generation_number(key[0])):
                    return None
                self._reload_behind()
        if request is not None:
            request.generation = snap.generation
        return snap

    # ------------------------------------------------- the view the operations read
    def active(self):
        """The active encoder with the torch LOCUS (what a write embeds with): on a GPU the snapshot's, on
        the CPU loaded on first use beside the snapshot's numpy G and kept while the encoder stays active."""
        loaded = self._loaded_active()
        if self.settings.device != "cpu":
            return loaded
        with self._locus_lock:
            if self._locus is None or self._locus.encoder_id != loaded.encoder_id:
                from registry.catalog.embedding import active_encoder
                from registry.service.settings import configure_torch

                configure_torch(self.settings)
                self._locus = active_encoder(self.store, loaded.encoder_id)
            return self._locus

    def _loaded_active(self):
        """The snapshot's active encoder. When the home's config still names the encoder the snapshot holds (an
        encoder is content-addressed by its id) it is returned without reloading the indexes, which every
        write makes stale: the writer needs only the encoder, and reloading them before each landing cost
        an add-model ~110 ms of its ~260; readers reload them when they read them (`index`)."""
        snap = self._snapshot
        if snap is None or snap.active is None or is_remote(self.home) or transaction_open(self.home):
            return self.snapshot().require_active()
        key = self._key()  # the same two small reads `snapshot` makes
        if key == snap.key:
            return snap.active
        try:
            named = json.loads(key[1]).get("active_encoder")
        except (ValueError, AttributeError):
            named = None
        return snap.active if named == snap.encoder_id else self.snapshot().require_active()

    def predictor(self):
        return self._loaded_active()  # G in numpy on the CPU, the torch Locus on a GPU

    def index(self, by: str = "locus"):
        snap = self.snapshot()
        if by == "fingerprint":
            if snap.prints is None:
                raise RegistryError("no model has a behaviour fingerprint")
            return snap.prints
        return snap.require_models()

    def fingerprints(self):
        return self.snapshot().prints

    def router_knn(self, query_encoder: str, names: list[str], settings: dict, pool=()):
        """StoreView's, kept with the snapshot: reading every stored evaluation is done once per state of
        the store, not per route."""
        return self._knn_of(self.snapshot(), query_encoder, names, settings, pool)

    def _knn_of(self, snap: Snapshot, query_encoder: str, names: list[str], settings: dict, pool=()):
        key = router_knn_key(query_encoder, names, settings, pool)
        if key not in snap.knn:
            with self._knn_lock:
                if key not in snap.knn:
                    snap.knn.clear()  # one at a time: a state of the store has one pool and one encoder
                    # the last one goes on when evaluations were only appended since (the same router, exactly)
                    base = (query_encoder, key[2], key[3])
                    last = self._last_knn[1] if self._last_knn is not None and self._last_knn[0] == base else None
                    knn = None
                    if last is not None:
                        try:
                            knn = self.extend_router_knn(last, query_encoder, names, pool)
                        except Exception:  # noqa: BLE001 - a route must not fail for a shortcut: build it
                            log.exception("extending the router's kNN failed; building it")
                    self.knn_builds["extended" if knn is not None else "built"] += 1
                    if knn is None:
                        knn = self.build_router_knn(query_encoder, names, settings, pool)
                    self._last_knn = None if knn is None else (base, knn)
                    snap.knn[key] = None if knn is None else RememberedPredictions(knn)
        return snap.knn[key]

    def behaviour(self):
        return self.snapshot().behaviour

    def _likeness(self, by: str | None, query):
        """The warm index a search reads: the fingerprint index when asked, or by default for a model
        that has a fingerprint; else LOCUS (registry.analytics.search's default rule, on what is loaded)."""
        from registry.analytics.search import canonical_by

        snap = self.snapshot()
        models = snap.require_models()
        wanted = canonical_by(by)
        if snap.prints is not None and (wanted == "fingerprint" or (
                wanted is None and isinstance(query, str) and query in snap.prints.index.names)):
            return snap.prints
        return models

    # ---------------------------------------------------------------- encodings
    def query_encoder(self, name: str):
        from encoder.query_encoder import load_query_encoder

        # exported=True: fp32 on CPU answers from the checked torch-free copy (encoder.query_encoder),
        # written by the first start that lacks one; a start then skips importing sentence-transformers
        return load_query_encoder(name, device=self.settings.device, backend=self.settings.query_backend,
                                  exported=True)

    def encode(self, encoder: str, texts: list[str], *, bulk: bool = False) -> np.ndarray:
        # A write's texts (thousands, perhaps) are encoded directly, not through the routes' encoding
        # thread, so that routes do not wait behind them.
        if bulk:
            vectors = self.query_encoder(encoder).encode(texts, progress=False)
        else:
            vectors = self.encoder.encode(encoder, texts)
        self.texts_encoded += len(texts)
        return vectors

    def _from_memory(self, encoder: str, hashes) -> dict[str, np.ndarray]:
        found = {}
        with self._texts_lock:
            for h in hashes:
                vector = self._texts.get((encoder, h))
                if vector is not None:
                    self._texts.move_to_end((encoder, h))
                    found[h] = vector
        self.text_hits += len(found)
        return found

    def text_vectors(self, encoder: str, wanted, *, bulk: bool = False):
        """Memory first, then the store's cache, then encoding (StoreView); what was not in memory is
        remembered."""
        found = self._from_memory(encoder, wanted)
        rest = {h: t for h, t in wanted.items() if h not in found}
        encoded: dict[str, np.ndarray] = {}
        if rest:
            more, encoded = super().text_vectors(encoder, rest, bulk=bulk)
            self.text_misses += len(rest)
            # unstored until a write commits them (`vectors_stored`), a write's own texts too: one that lands
            # again (another writer moved the tables, or a batch landed one job at a time after a failure)
            # finds them here, not encoded, and must still store them
            self.remember(encoder, more, unstored=encoded)
            found.update(more)
        return found, encoded

    def unstored_vectors(self, encoder: str, hashes) -> set[str]:
        with self._texts_lock:
            return {h for h in hashes if (encoder, h) in self._unstored}

    def vectors_stored(self, encoder: str, hashes) -> None:
        with self._texts_lock:
            self._unstored.difference_update((encoder, h) for h in hashes)

    def remember(self, encoder: str, vectors: dict[str, np.ndarray], *, unstored=()) -> None:
        """Keep `vectors` (text hash -> vector) in memory; `unstored`: those of them the store lacks."""
        limit = self.settings.text_cache_size
        with self._texts_lock:
            for h, v in vectors.items():
                self._texts[(encoder, h)] = np.asarray(v, dtype=np.float32)
                self._texts.move_to_end((encoder, h))
            self._unstored.update((encoder, h) for h in unstored)
            while len(self._texts) > limit:
                self._unstored.discard(self._texts.popitem(last=False)[0])

    @property
    def cached_texts(self) -> int:
        return len(self._texts)

    # ---------------------------------------------------------------- queries
    def similar(self, name: str | None, vector: list[float] | None, *, k: int, metric: str | None,
                where: str | None, by: str | None = None, min_evals: int | None = None):
        """`registry.operations.similar` on the warm indexes."""
        from registry.operations import similar

        return similar(self, name if name is not None else vector, k=k, metric=metric, where=where, by=by,
                       min_evals=min_evals, warm=self._likeness)

    def route(self, texts: list[str], *, k: int, exclude: list[str], where: str | None,
              fallback: int, by: str | None = None, min_evals: int | None = None, **trade_off):
        """`registry.operations.route` on the warm state, every text in one batched pass; returns the
        decisions and how many texts were encoded now. `trade_off`: max_cost, willingness_to_pay, unpriced."""
        from registry.operations import route

        return route(self, texts, k=k, exclude=exclude, where=where, fallback=fallback, by=by, min_evals=min_evals,
                     **trade_off)

    def route_from_memory(self, texts: list[str], *, k: int, exclude: list[str], where: str | None,
                          fallback: int, by: str | None = None, min_evals: int | None = None, **trade_off):
        """`route`'s decisions when that needs no reload, store read, encoding, alias or filter (the
        snapshot is current, every text is in memory, no `where`), else None."""
        if where is not None:  # a filter is evaluated over every record: not on the event loop
            return None
        snap = self.current()
        if snap is None or snap.models is None or snap.active is None:
            return None
        from registry.operations import route

        try:
            return route(_FromMemory(self, snap), texts, k=k, exclude=exclude, where=None, fallback=fallback,
                         by=by, min_evals=min_evals, **trade_off)[0]
        except _NotInMemory:
            return None


class _NotInMemory(Exception):
    """The memory-only view was asked for something it would have to read or compute."""


class _FromMemory(StoreView):
    """One loaded snapshot and the in-memory texts, nothing else: for answers on the event loop."""

    def __init__(self, state: WarmState, snap: Snapshot) -> None:
        super().__init__(state.home, state._store)
        self._state, self._snap = state, snap

    def active(self):
        return self._snap.active

    predictor = active

    def index(self, by: str = "locus"):
        if by == "fingerprint" and self._snap.prints is not None:
            return self._snap.prints
        return self._snap.models

    def fingerprints(self):
        return self._snap.prints

    def behaviour(self):
        return self._snap.behaviour

    def router_knn(self, query_encoder: str, names, settings: dict, pool=()):
        key = router_knn_key(query_encoder, names, settings, pool)
        if key not in self._snap.knn:  # built by a route in the thread pool: it reads every evaluation
            raise _NotInMemory()
        return self._snap.knn[key]

    def text_vectors(self, encoder: str, wanted, *, bulk: bool = False):
        found = self._state._from_memory(encoder, wanted)
        if len(found) < len(wanted):
            raise _NotInMemory()
        return found, {}

    def resolve(self, name):
        from registry.catalog.aliases import read_aliases

        if isinstance(name, str) and name in read_aliases(self.home):
            raise _NotInMemory()
        return name
