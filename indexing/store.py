"""The registry home: an embedded LanceDB directory plus a small JSON config.

Tables
  queries            query_id, text, task, text_hash
  evaluations        model, query_id, score, source, time
  models             name, typed metadata, extra (JSON), added, and two vectors: `vector` (LOCUS, tagged
                     `encoder_id`) and `fingerprint` (behaviour, whitened, tagged `table_id`)
  qvec__<encoder>    text_hash, vector      one table per query encoder: the encoding cache

Writes go through `Store.transaction()`: one writer at a time (a file lock), and a journal of every
table's version taken before the first write. If the block raises, or the process dies inside it,
every table is restored to its journalled version (LanceDB keeps old versions), so an import lands
whole or not at all. Readers take no lock, except one that finds a journal (a write in flight): it waits
for the lock, so as never to read some tables of a half-landed write, and rolls back a dead writer's journal.

On an s3 home (`indexing.object_store`) the tables live under `s3://.../db`, the files beside them are
objects, and the lock is a lease taken with a conditional create; the journal works the same way.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

os.environ.setdefault("LANCEDB_LOG", "error")  # lance warns on every table creation otherwise

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from indexing.home import (  # noqa: E402
    GENERATION_FILE,
    HomePath,
    as_path,
    file_lock,
    generation,
    generation_number,
    is_remote,
    not_writable,
    read_config,
    transaction_open,
    write_text_atomic,
)
from indexing.home import JOURNAL_FILE as _JOURNAL  # noqa: E402
from indexing.errors import InputError, NotFoundError, RegistryError  # noqa: E402

__all__ = ["Store", "TableChange", "QUERIES", "EVALUATIONS", "MODELS", "VERSIONS", "vector_table_name", "sql_literal",
           "sql_in"]

QUERIES = "queries"
EVALUATIONS = "evaluations"
MODELS = "models"
VERSIONS = "model_versions"
_VECTOR_PREFIX = "qvec__"
_CONFIG = "config.json"
_LOCK = LOCK_FILE = ".lock"
# 2: the models table and its history carry `fingerprint` + `table_id` (registry.catalog.migrations upgrades 1 -> 2).
# 3: add/refine/replace also append their evaluations, with the version number, to `evaluation_log`
# (registry.catalog.evaluation_log): an older writer would land versions that drift cannot see.
# 4: the models table and its history carry `behaviour` (the vector of the behaviour index), written with
# `fingerprint`: an older writer would leave it null beside a new fingerprint.
STORE_FORMAT = 4
_FILTERED_READ_MAX = 4096  # up to this many wanted hashes, cached_vectors reads only their rows
_HEX = re.compile(r"[0-9a-f]{1,64}")
DEFAULT_QUERY_ENCODER = "all-mpnet-base-v2"
_ABSENT = object()  # Store._direct: the table does not exist
# pylance (a dependency since the direct reads; LanceDB itself lists it only as an extra): without it,
# every read goes through LanceDB's query path.
_HAVE_LANCE = importlib.util.find_spec("lance") is not None

QUERY_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),
    ]
)
EVALUATION_SCHEMA = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
EVALUATION_LOG = "evaluation_log"  # what each add/refine/replace/import brought (registry.catalog.evaluation_log)
EVALUATION_LOG_SCHEMA = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),
        pa.field("version", pa.int32(), nullable=False),
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
MODEL_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("family", pa.string()),
        pa.field("params_b", pa.float64()),
        pa.field("provider", pa.string()),
        pa.field("endpoint", pa.string()),
        pa.field("licence", pa.string()),
        pa.field("access", pa.string()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("extra", pa.string()),  # JSON object of free-form metadata
        pa.field("added", pa.timestamp("us", tz="UTC"), nullable=False),
        # The LOCUS embedding: null until `registry embed` (or add-model) computes it.
        pa.field("vector", pa.list_(pa.float32())),
        pa.field("encoder_id", pa.string()),
        pa.field("n_evals", pa.int32()),
        pa.field("embedded_at", pa.timestamp("us", tz="UTC")),
        pa.field("version", pa.int32()),  # 1 on add, +1 on every refine or replace
        # The behaviour fingerprint in its identity form (theta whitened by the item table's probe rows):
        # Euclidean distance between two of them is the RMS logit difference over the probe queries, so an
        # L2 index over this column answers "who behaves like this model" exactly. Null without an item
        # table or without enough evaluations (registry.catalog.fingerprint_store.MIN_FINGERPRINT_EVALS).
        pa.field("fingerprint", pa.list_(pa.float32())),
        pa.field("table_id", pa.string()),  # the item table that made `fingerprint` and `behaviour`
        # The model's answers on the item table's probe queries (recorded where it has them, else its
        # fingerprint's P(correct)) with its task coverage (encoder.fingerprint.ItemTable.behaviour_vectors):
        # an inner-product index over it finds who behaves like a model. Null when `fingerprint` is.
        pa.field("behaviour", pa.list_(pa.float32())),
    ]
)
# The behaviour vector is S + T floats a model (~2,000): as Python lists, ~1.5 s at 10,000 models. A reader
# of the models table that does not search by it reads `store.read(MODELS, without=HEAVY_MODEL_COLUMNS)`.
HEAVY_MODEL_COLUMNS = ("behaviour",)
# Every version of every model, append-only: what `registry history` lists and `restore` reads.
VERSION_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("version", pa.int32(), nullable=False),
        pa.field("event", pa.string(), nullable=False),  # add, refine, replace, embed, remove, restore
        pa.field("record", pa.string(), nullable=False),  # the ModelRecord as JSON
        pa.field("vector", pa.list_(pa.float32())),
        pa.field("encoder_id", pa.string()),
        pa.field("n_evals", pa.int32()),
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("fingerprint", pa.list_(pa.float32())),
        pa.field("table_id", pa.string()),
        pa.field("behaviour", pa.list_(pa.float32())),
    ]
)


def vector_table_name(encoder: str) -> str:
    """Table holding one encoder's query vectors; encoder names may be paths, so sanitise."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", encoder).strip("_").lower()
    return _VECTOR_PREFIX + slug


def vector_schema(encoder: str, dim: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("text_hash", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
        ],
        metadata={b"encoder": encoder.encode("utf-8")},
    )


def sql_literal(value: str) -> str:
    """A quoted SQL string literal for LanceDB filters (the one quoting rule: double the quotes)."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_in(column: str, values) -> str:
    """`column IN ('a', 'b')` over these values, quoted; a filter matching nothing when empty."""
    values = list(values)
    if not values:
        return "false"
    return f"{column} IN ({', '.join(sql_literal(v) for v in values)})"


class TableChange(NamedTuple):
    """`Store.changed_since`: what a table gained and lost after a version."""

    version: int  # the table's version now
    gained: pa.Table  # the rows added, in table order
    lost: frozenset  # the key values of the rows deleted
    rows_of: Callable[[Iterable], pa.Table]  # the rows of these key values now, in table order


_REWRITES_LOOKED_FOR = 256  # versions: `changed_since` reads each one's transaction to find compactions


def _fragment_files(fragment) -> tuple[str, ...]:
    """A fragment's data files: with its id, what it is (a restore can bring an id back with other files)."""
    return tuple(f.path for f in fragment.metadata.files)


def _fragment_change(before, now, columns: list[str], key: str) -> "tuple[pa.Table, frozenset] | None":
    """(rows added, key values of rows deleted) from Lance dataset `before` to `now`, a later version of it,
    told by fragment: a fragment of both (the same files) lost the rows its deletions gained, one that only
    `before` has lost all its rows (Lance drops a fragment once every row of it is deleted), and the rows of
    those only `now` has were added, in `now`'s order. None when a fragment of both has other files or fewer
    deleted rows, or a fragment only `now` has stands before one of both (a rewrite)."""
    import pyarrow.compute as pc

    def deleted(fragment) -> int:
        found = fragment.metadata.deletion_file
        return found.num_deleted_rows if found is not None else 0

    old = {f.fragment_id: f for f in before.get_fragments()}
    fragments = now.get_fragments()
    both = [f.fragment_id in old for f in fragments]
    if False in both and any(both[both.index(False):]):
        return None  # a new fragment before a kept one: rows rewritten, not appended
    lost: set = set()
    for fragment in fragments:
        was = old.pop(fragment.fragment_id, None)
        if was is None or deleted(fragment) == deleted(was):
            if was is not None and _fragment_files(fragment) != _fragment_files(was):
                return None
            continue
        if _fragment_files(fragment) != _fragment_files(was) or deleted(fragment) < deleted(was):
            return None

        def addresses(fragment) -> np.ndarray:
            return fragment.to_table(columns=[], with_row_address=True).column("_rowaddr").to_numpy()

        # `take` counts the rows a fragment still had then (not its physical offsets): positions in `then`
        gone = np.flatnonzero(~np.isin(addresses(was), addresses(fragment), assume_unique=True))
        lost.update(pc.unique(was.take(gone, columns=[key]).column(key)).to_pylist())
    for dropped in old.values():  # every row it had deleted
        lost.update(pc.unique(dropped.to_table(columns=[key]).column(key)).to_pylist())
    added = [f.to_table(columns=columns) for f, kept in zip(fragments, both) if not kept]
    rows = pa.concat_tables(added) if added else now.schema.empty_table().select(columns)
    return rows, frozenset(lost)


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


class Store:
    """An opened registry home. Cheap to open; tables are created on first use."""

    def __init__(self, home: HomePath, *, create: bool = True) -> None:
        self.home = as_path(home)
        self._lease = None  # the held lease of an s3 home, inside _writer_lock
        self._connection = None  # LanceDB, connected (and imported: 1.5-4 s) on first use of a table
        if is_remote(self.home):
            self._check_remote(create)
        else:
            if not self.home.exists():
                if not create:
                    raise RegistryError(f"no registry at {self.home} (run `registry init`)")
                self.home.mkdir(parents=True)
            elif not self.home.is_dir():
                raise RegistryError(f"registry home {self.home} is not a directory")
            elif not create and not (self.home / _CONFIG).is_file() and not (self.home / "db").is_dir():
                # a directory that is no registry: a read must not make it one (writing config.json and db/)
                raise RegistryError(f"no registry at {self.home} (run `registry init`)")
        # Whether a transaction is open, and its kept handles, belong to the thread that opened it: a service
        # shares one Store between its writer thread and request threads, and a second thread that took the
        # first one's open transaction for its own would skip the lock and write into it (or, once it ended,
        # fail half-way with nothing to roll its earlier writes back)
        self._thread_state = _ThreadTransaction()
        self._kept_vectors: dict[str, tuple[int, list[str], np.ndarray]] = {}  # see _all_vectors
        if (self.home / _JOURNAL).is_file():
            with self._writer_lock():
                self._recover()
        if not (self.home / _CONFIG).is_file():
            self._write_config({"format": STORE_FORMAT, "query_encoder": DEFAULT_QUERY_ENCODER})

    # Inside a transaction: one LanceDB handle per table and the table names, kept until it ends (the
    # writer lock keeps every other writer out, and a handle sees its own writes). A landing opened
    # ~30 tables and listed them ~13 times, ~50 ms of an add-model; None outside transactions.
    @property
    def _in_transaction(self) -> bool:
        return self._thread_state.open

    @_in_transaction.setter
    def _in_transaction(self, value: bool) -> None:
        self._thread_state.open = value

    @property
    def _handles(self) -> dict[str, Any] | None:
        return self._thread_state.handles

    @_handles.setter
    def _handles(self, value: dict[str, Any] | None) -> None:
        self._thread_state.handles = value

    @property
    def _names(self) -> list[str] | None:
        return self._thread_state.names

    @_names.setter
    def _names(self, value: list[str] | None) -> None:
        self._thread_state.names = value

    def _check_remote(self, create: bool) -> None:
        if not (self.home / _CONFIG).is_file():
            if not create:
                raise RegistryError(f"no registry at {self.home} (run `registry init`)")
            self.home.is_dir()  # a LIST: a clear error now when the bucket is missing or not ours

    @property
    def _db(self):
        """The LanceDB connection, made on first use: a command that only reads or edits config.json
        (aliases, the query encoder) never imports LanceDB."""
        if self._connection is None:
            import lancedb

            if is_remote(self.home):
                from indexing.object_store import lance_storage_options

                self._connection = lancedb.connect(str(self.home / "db"), storage_options=lance_storage_options())
            else:
                self._connection = lancedb.connect(str(self.home / "db"))
        return self._connection

    # ----------------------------------------------------------------- config
    @property
    def config(self) -> dict[str, Any]:
        return read_config(self.home)

    def _write_config(self, config: dict[str, Any]) -> None:
        _atomic_write(self.home / _CONFIG, json.dumps(config, indent=2, sort_keys=True))

    def update_config(self, **changes: Any) -> None:
        with self._writer_lock():
            config = self.config
            config.update(changes)
            self._write_config(config)

    def modify_config(self, change) -> Any:
        """Read-modify-write of config.json under the writer lock: `change(config)` edits the dict
        in place (and may raise to write nothing); returns what it returns."""
        with self._writer_lock():
            config = self.config
            result = change(config)
            self._write_config(config)
            return result

    @property
    def format(self) -> int:
        """The store format of this home (1 when config.json predates the field)."""
        try:
            return int(self.config.get("format", 1))
        except (OSError, ValueError):
            return STORE_FORMAT

    def check_format(self) -> None:
        """Refuse to write a home of another store format: an older one is upgraded by
        `registry migrate` (reads keep working on it meanwhile); a newer one needs newer software."""
        found = self.format
        if found < STORE_FORMAT:
            raise RegistryError(f"registry home {self.home} has store format {found}; this version writes format "
                                f"{STORE_FORMAT}: run `registry migrate` (reads work meanwhile; nothing was written)")
        if found > STORE_FORMAT:
            raise RegistryError(f"registry home {self.home} has store format {found}, newer than this version's "
                                f"{STORE_FORMAT}: upgrade locus-registry to write to it")

    @property
    def query_encoder(self) -> str:
        return self.config.get("query_encoder", DEFAULT_QUERY_ENCODER)

    # ----------------------------------------------------------------- tables
    def table_names(self) -> list[str]:
        if self._names is not None:
            return list(self._names)
        names: list[str] = []
        page_token = None
        while True:
            page = self._db.list_tables(page_token=page_token)
            names.extend(page.tables)
            page_token = page.page_token
            if not page_token:
                if self._handles is not None:
                    self._names = sorted(names)
                return sorted(names)

    def _open(self, name: str):
        """A table's LanceDB handle: inside a transaction the one kept for it (see __init__)."""
        if self._handles is None:
            return self._db.open_table(name)
        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles[name] = self._db.open_table(name)
        return handle

    def _created(self, name: str, handle):
        if self._handles is not None:
            self._handles[name] = handle
            if self._names is not None and name not in self._names:
                self._names = sorted(self._names + [name])
        return handle

    def has_table(self, name: str) -> bool:
        if self._connection is None and not is_remote(self.home):
            return self._lance_path(name).is_dir()  # what LanceDB would list, without importing it (`_direct`)
        return name in self.table_names()

    def table(self, name: str, schema: pa.Schema | None = None):
        """Open a table, creating it empty (only inside a transaction) when a schema is given."""
        if self.has_table(name):
            return self._open(name)
        if schema is None:
            raise NotFoundError(f"the registry has no table {name!r} yet")
        self._require_transaction()
        return self._created(name, self._db.create_table(name, schema=schema))

    def _direct(self, name: str):
        """For a read while nothing in this process has needed LanceDB yet, on a local home: the table's
        Lance dataset opened directly (`_ABSENT` when the table does not exist), else None. Importing
        `lance` costs ~0.5 CPU-s, LanceDB ~1.7 (pandas and its namespace clients), which was most of a
        CLI read such as `route` or `compare`. The same files and the same latest version LanceDB reads;
        writes go through LanceDB, and so does the choice of version of any read after the first write
        (`_scan` then reads that version's rows from its Lance dataset)."""
        if self._connection is not None or is_remote(self.home) or not _HAVE_LANCE:
            return None
        path = self._lance_path(name)
        if not path.is_dir():
            return _ABSENT
        import lance

        return lance.dataset(str(path))

    def _lance_path(self, name: str) -> Path:
        return self.home / "db" / f"{name}.lance"

    def _committed_here(self) -> bool:
        """Whether what is read now is a committed state of a local home: no transaction open, here or in
        another process (a reader that keeps what it read checks `transaction_open` again after reading)."""
        return not (is_remote(self.home) or self._in_transaction or transaction_open(self.home))

    def read(self, name: str, columns: list[str] | None = None, *, without: tuple[str, ...] = ()) -> pa.Table:
        """A whole table as Arrow (empty with the right schema when it does not exist yet): `columns`, or
        every column the table has less `without` (a home of an older format lacks some)."""
        direct = self._direct(name)
        if direct is not None and direct is not _ABSENT:
            if without and columns is None:
                columns = [c for c in direct.schema.names if c not in without]
            return direct.to_table(columns=columns)
        if direct is _ABSENT or not self.has_table(name):
            schema = {QUERIES: QUERY_SCHEMA, EVALUATIONS: EVALUATION_SCHEMA, MODELS: MODEL_SCHEMA,
                      VERSIONS: VERSION_SCHEMA}.get(name)
            if schema is None:
                raise NotFoundError(f"the registry has no table {name!r}")
            empty = schema.empty_table()
            if without and columns is None:
                columns = [c for c in empty.schema.names if c not in without]
            return empty.select(columns) if columns else empty
        table = self._open(name)
        if without and columns is None:
            columns = [c for c in table.schema.names if c not in without]
        return self._scan(table, columns)

    def _scan(self, table, columns: list[str] | None = None, where: str | None = None) -> pa.Table:
        """Rows of an open LanceDB table, on a local home read from its Lance dataset at the handle's version
        (the same rows): LanceDB's query path streams each batch through its event loop, several times slower
        for a whole table, and the service reads all the evaluations after a landing."""
        if _HAVE_LANCE and not is_remote(self.home):
            return table.to_lance().to_table(columns=columns, filter=where)
        if columns is None and where is None:
            return table.to_arrow()
        query = table.search()
        if where is not None:
            query = query.where(where)
        if columns is not None:
            query = query.select(columns)
        return query.limit(None).to_arrow()

    def read_committed(self, name: str, columns: list[str]) -> tuple[int | None, pa.Table]:
        """A whole table's `columns` and the version they are (from one handle); the version is None unless
        it is a committed state of a local home (no transaction open before the read or after it), the
        only kind `changed_since` can go on from."""
        # the table's directory, not `has_table`: that connects LanceDB, a second's import for a CLI route
        if not (self._committed_here() and _HAVE_LANCE) or not self._lance_path(name).is_dir():
            return None, self.read(name, columns)
        import lance

        dataset = lance.dataset(str(self._lance_path(name)))
        rows = dataset.to_table(columns=columns)
        return (int(dataset.version) if not transaction_open(self.home) else None), rows

    def changed_since(self, name: str, version: int, columns: list[str], key: str) -> "TableChange | None":
        """What a table gained and lost after `version` (from `read_committed`): the rows added (fragments after
        the old ones) and the `key` values of the rows deleted (a refine that replaces scores, a removal), told
        by fragment (`_fragment_change`). Across a compaction (a Lance rewrite: the same rows in new files) the
        changes before it and after it are told apart, each from the versions either side, and every key
        either touched counts as lost, its rows as they are now gained.
        `TableChange.rows_of` reads the rows of some keys as the table holds them now, in its order. None when
        it cannot be told here (a remote home, a transaction open, a version needed gone: cleaned up by
        `compact`, or the table made again)."""
        if not (self._committed_here() and _HAVE_LANCE):
            return None
        import lance

        path = str(self._lance_path(name))
        try:
            before, now = lance.dataset(path, version=version), lance.dataset(path)
        except (OSError, ValueError, RuntimeError):
            return None  # the version is gone (cleaned up) or the table was made again
        if transaction_open(self.home):
            return None

        def rows_of(values) -> pa.Table:
            return now.to_table(columns=columns, filter=sql_in(key, values))

        # A compaction in between? The same rows before and after each rewrite: tell the spans apart. Only
        # when a fragment of `before` is gone (else no rewrite touched what it held), and only over a few
        # versions (a transaction file each): past that, the rewritten rows count as deleted and added
        def fragments(dataset) -> set:
            return {(f.fragment_id, _fragment_files(f)) for f in dataset.get_fragments()}

        rewrites = []
        if int(now.version) - version <= _REWRITES_LOOKED_FOR and not fragments(before) <= fragments(now):
            try:
                rewrites = [v for v in range(version + 1, int(now.version) + 1)
                            if type(getattr(now.read_transaction(v), "operation", None)).__name__ == "Rewrite"]
            except (OSError, ValueError, RuntimeError):
                return None
        if not rewrites:
            found = _fragment_change(before, now, columns, key)
            return TableChange(int(now.version), *found, rows_of) if found is not None else None
        try:
            touched: set = set()
            for start, end in zip([version] + rewrites, [r - 1 for r in rewrites] + [int(now.version)]):
                if start == end:
                    continue
                span = _fragment_change(lance.dataset(path, version=start), lance.dataset(path, version=end),
                                        [key], key)
                if span is None:
                    return None
                gained, lost = span
                touched |= lost | set(gained.column(key).unique().to_pylist())
        except (OSError, ValueError, RuntimeError):
            return None
        if transaction_open(self.home):
            return None
        touched = frozenset(touched)
        return TableChange(int(now.version), rows_of(touched), touched, rows_of)

    def read_settled(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """`read` under the writer lock: no transaction is half landed then, so every row read has been
        committed and no rollback takes it away later (an unlocked read can see a transaction's appended
        rows before it fails). For a marker that counts rows (drift's); writers wait while it reads."""
        if self._in_transaction:
            return self.read(name, columns)  # this store's own lock is held already
        with self._writer_lock():
            self._recover()
            return self.read(name, columns)

    def read_where(self, name: str, columns: list[str], where: str) -> pa.Table:
        """The rows of a table matching a SQL filter (built by the caller from validated values only),
        read directly from Lance when nothing here needed LanceDB yet (see `_direct`); empty with the
        right schema when the table does not exist."""
        direct = self._direct(name)
        if direct is not None and direct is not _ABSENT:
            return direct.to_table(columns=columns, filter=where)
        if direct is _ABSENT or not self.has_table(name):
            return self.read(name, columns)
        return self._scan(self._open(name), columns, where)

    def read_in(self, name: str, columns: list[str], column: str, values) -> pa.Table:
        """The rows whose `column` is one of `values` (quoted here: the one place that builds such a filter)."""
        return self.read_where(name, columns, sql_in(column, values))

    # Typed writes: the only way code outside `indexing` changes a table, each inside `transaction()`.
    def append(self, name: str, rows: "pa.Table | list[dict[str, Any]]", schema: pa.Schema) -> None:
        """Add rows to table `name` (created with `schema` when missing)."""
        self._require_transaction()
        data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        if data.num_rows:
            self.table(name, schema).add(data)

    def upsert(self, name: str, rows: "pa.Table | list[dict[str, Any]]", schema: pa.Schema, on: str | list[str],
               *, insert: bool = True) -> None:
        """Update the rows matching on `on` and (unless `insert=False`) add the others."""
        self._require_transaction()
        data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        if not data.num_rows:
            return
        merge = self.table(name, schema).merge_insert(on).when_matched_update_all()
        (merge.when_not_matched_insert_all() if insert else merge).execute(data)

    def delete_in(self, name: str, column: str, values) -> None:
        """Delete the rows whose `column` is one of `values`."""
        self._require_transaction()
        values = list(values)
        if values and self.has_table(name):
            self._open(name).delete(sql_in(column, values))

    def replace_table(self, name: str, data: pa.Table) -> None:
        """Rewrite a whole table as `data` (a new version of it: the transaction's rollback restores the old)."""
        self._require_transaction()
        self._created(name, self._db.create_table(name, data, mode="overwrite"))

    def table_uri(self, name: str) -> str:
        """Where a table's Lance files are (for readers in other processes, e.g. Ray workers)."""
        return self.table(name).uri

    def count(self, name: str) -> int:
        direct = self._direct(name)
        if direct is not None:
            return 0 if direct is _ABSENT else direct.count_rows()
        return self._open(name).count_rows() if self.has_table(name) else 0

    def versions(self) -> dict[str, int]:
        return {name: self._open(name).version for name in self.table_names()}

    def version(self, name: str) -> int:
        """One table's version (0 when it does not exist): `versions()[name]` without opening every table
        (nor LanceDB, while nothing here has needed it: `_direct`)."""
        direct = self._direct(name)
        if direct is not None:
            return 0 if direct is _ABSENT else int(direct.version)
        return self._open(name).version if self.has_table(name) else 0

    # ------------------------------------------------------------- encodings
    def vector_dim(self, encoder: str) -> int | None:
        name = vector_table_name(encoder)
        if not self.has_table(name):
            return None
        return self._open(name).schema.field("vector").type.list_size

    def cached_vectors(self, encoder: str, hashes: list[str]) -> dict[str, np.ndarray]:
        """Vectors already stored for these text hashes (missing hashes are simply absent)."""
        name = vector_table_name(encoder)
        if not hashes:
            return {}
        wanted = set(hashes)
        few = len(wanted) <= _FILTERED_READ_MAX and all(_HEX.fullmatch(h) for h in wanted)
        # A few texts (add-model, route): read only their rows. The hashes are our own hex digests,
        # checked above, so the filter holds no user text.
        where = f"text_hash IN ({', '.join(repr(h) for h in sorted(wanted))})" if few else None
        if not few:
            found = self._all_vectors(name)
            if found is None:
                return {}
            keys, matrix = found
        else:
            direct = self._direct(name)
            if direct is _ABSENT:
                return {}
            if direct is not None:
                table = direct.to_table(filter=where)
            elif not self.has_table(name):
                return {}
            else:
                table = self._scan(self._open(name), where=where)
            keys, matrix = _keys_and_vectors(table)
        return {key: matrix[i] for i, key in enumerate(keys) if key in wanted}

    def vector_rows(self, encoder: str, hashes: pa.Array | list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every stored vector of `encoder` as one read-only (N, D) matrix, and for each of `hashes` its row
        there (-1 where it has none): `cached_vectors` for a whole table's worth of texts without a dict of
        arrays (the router's kNN reads every query's vector after each landing)."""
        found = self._all_vectors(vector_table_name(encoder))
        if found is None:
            return np.full(len(hashes), -1, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        import pyarrow.compute as pc  # not at import: a CLI read that never needs it starts faster

        keys, matrix = found
        hashes = hashes if isinstance(hashes, (pa.Array, pa.ChunkedArray)) else pa.array(hashes, pa.string())
        rows = pc.index_in(hashes, value_set=pa.array(keys, pa.string()))
        return rows.fill_null(-1).to_numpy().astype(np.int64, copy=False), matrix

    def _all_vectors(self, name: str) -> tuple[list[str], np.ndarray] | None:
        """Every vector of table `name`: (text hashes, (N, D) read-only matrix), None when it does not exist.
        Kept per table version in this Store: a whole read is ~0.1 s at 12k 768-d vectors, and the service
        rebuilds its router's kNN from them after each landing, which seldom adds a text. The version and
        the rows come from one handle (one version of the table); kept only for a committed state of a local
        home (no transaction open before the read or after it): a table that a rolled-back transaction
        created is dropped, and a new one starts its version numbers again."""
        committed = self._committed_here()
        handle = self._direct(name)
        if handle is _ABSENT or (handle is None and not self.has_table(name)):
            return None
        lance_dataset = handle is not None
        handle = handle if lance_dataset else self._open(name)
        version = int(handle.version)
        kept = self._kept_vectors.get(name)
        if committed and kept is not None and kept[0] == version:
            return kept[1], kept[2]
        keys, matrix = _keys_and_vectors(handle.to_table() if lance_dataset else self._scan(handle))
        matrix.setflags(write=False)  # handed out as rows of the kept matrix: nobody may write into them
        if committed and not transaction_open(self.home):
            self._kept_vectors[name] = (version, keys, matrix)
        return keys, matrix

    def add_vectors(self, encoder: str, hashes: list[str], vectors: np.ndarray) -> None:
        """Store new encodings (caller passes only hashes not yet stored)."""
        if not hashes:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dim = vectors.shape[1]
        stored_dim = self.vector_dim(encoder)
        if stored_dim is not None and stored_dim != dim:
            raise InputError(
                f"encoder {encoder!r} already stores {stored_dim}-d vectors; these are {dim}-d"
            )
        table = self.table(vector_table_name(encoder), vector_schema(encoder, dim))
        column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)
        table.add(pa.table({"text_hash": pa.array(hashes, pa.string()), "vector": column}))

    def vector_encoders(self) -> list[str]:
        """Names of the encoders with a vector table, as recorded in each table's schema."""
        names = []
        for table_name in self.table_names():
            if table_name.startswith(_VECTOR_PREFIX):
                meta = self._open(table_name).schema.metadata or {}
                names.append(meta.get(b"encoder", table_name.encode()).decode("utf-8"))
        return names

    # ------------------------------------------------------------ maintenance
    def storage(self, *, sizes: bool = True) -> list[dict[str, Any]]:
        """Per table: {"table", "fragments", "versions", "bytes"} (bytes None on an s3 home, or without
        `sizes`: they walk every file). Every write transaction leaves at least one fragment and one version
        in each table it writes: scans pay per fragment and old versions keep their files (`compact`)."""
        out = []
        for name in self.table_names():
            dataset = self._dataset(name)
            out.append({"table": name, "fragments": len(dataset.get_fragments()), "versions": len(dataset.versions()),
                        "bytes": self._bytes_of(name) if sizes else None})
        return out

    def compact(self, *, keep_versions_for: timedelta) -> list[dict[str, Any]]:
        """Merge each table's fragments (and rows deleted by upserts) into as few files as its size needs,
        then remove the versions superseded more than `keep_versions_for` ago, with the files only they
        held; the latest version is always kept. Per table: {"table", "fragments", "versions", "bytes"},
        each [before, after] (bytes None on an s3 home). The rows, and their order, are unchanged.

        Compaction is a write: it runs in a transaction, so a process that dies inside it is rolled back to
        the same rows. The removal runs under the writer lock once it has committed: no transaction is live
        then, so no journal names a version removed; a reader that opened a version within the window can
        still read it (a long-lived reader re-opens the tables after any write, compaction included)."""
        if keep_versions_for < timedelta(0):
            raise InputError("the time to keep old versions for must not be negative", field="keep_versions_for")
        before = {row["table"]: row for row in self.storage()}
        with self.transaction():  # refuses a home of an older format, as every write does
            for name in self.table_names():
                dataset = self._dataset(name)
                fragments = dataset.get_fragments()
                if len(fragments) > 1 or any(f.metadata.deletion_file is not None for f in fragments):
                    dataset.optimize.compact_files()
        cutoff = None
        with self._writer_lock():
            self._recover()
            for name in self.table_names():
                dataset = self._dataset(name)
                listed = sorted(dataset.versions(), key=lambda v: v["version"])
                if cutoff is None:  # lance stamps versions in local time, naive (or aware, in some versions)
                    stamp = listed[-1]["timestamp"]
                    cutoff = (datetime.now(stamp.tzinfo) if stamp.tzinfo else datetime.now()) - keep_versions_for
                # a version stopped being the latest when the next one was made
                old = [v["version"] for v, after in zip(listed, listed[1:]) if after["timestamp"] <= cutoff]
                if old:
                    dataset.cleanup_old_versions(versions=old, error_if_tagged_old_versions=False)
        after = {row["table"]: row for row in self.storage()}
        return [{"table": name, **{key: [before[name][key] if name in before else None, after[name][key]]
                                   for key in ("fragments", "versions", "bytes")}} for name in sorted(after)]

    def _dataset(self, name: str):
        """A table's Lance dataset at its latest version (local or s3: LanceDB's own storage options;
        opened directly where LanceDB is not needed yet, see `_direct`)."""
        direct = self._direct(name)
        if direct is not None and direct is not _ABSENT:
            return direct
        return self._db.open_table(name).to_lance()

    def _bytes_of(self, name: str) -> int | None:
        if is_remote(self.home):
            return None
        return sum(path.stat().st_size for path in self._lance_path(name).rglob("*") if path.is_file())

    # ----------------------------------------------------------- transactions
    @contextmanager
    def transaction(self, *, migrating: bool = False) -> Iterator["Store"]:
        """All writes inside land together or not at all (see module docstring). A home of another
        store format is refused (`check_format`), except by the migration that upgrades it."""
        if self._in_transaction:
            yield self
            return
        if not migrating:
            self.check_format()
        with self._writer_lock():
            self._recover()
            self._handles, self._names = {}, None  # opened fresh under the lock, kept to the end
            try:
                yield from self._transaction_body()
            finally:
                self._handles = self._names = None

    def _transaction_body(self) -> Iterator["Store"]:
        journal = {"versions": self.versions(), "started": now_utc().isoformat(), "pid": os.getpid()}
        _atomic_write(self.home / _JOURNAL, json.dumps(journal))
        self._in_transaction = True
        try:
            yield self
        except BaseException as exc:
            self._in_transaction = False
            self._handles = self._names = None  # the rollback reads the tables as they are on disk
            if _lease_lost(exc):
                raise  # another writer holds the home now and has rolled this journal back
            try:
                wrote = self.versions() != journal["versions"]  # a refusal before any write has nothing to undo
            except Exception:  # noqa: BLE001 - the tables unreadable now: roll back as before, to be sure
                wrote = True
            if wrote:
                self._rollback(journal["versions"])
                # a new token disowns what a reader cached of the half-written tables
                self._bump_generation()
            # Only a finished rollback may drop the journal: if it failed, the next open retries.
            (self.home / _JOURNAL).unlink()
            raise
        self._in_transaction = False
        if self._lease is not None:
            self._lease.check()  # an s3 writer commits only while it provably still holds the lease
        self._bump_generation()
        (self.home / _JOURNAL).unlink()

    def landed_generation(self) -> int:
        """The number of the last finished transaction (`generation_number` of the home's token): a write
        reads it after it committed, and a service answers `X-Locus-Read: N` from a state holding it."""
        return generation_number(generation(self.home))

    def _bump_generation(self) -> None:
        """A token that changes with every finished transaction: readers that cache something
        derived from the tables (the FAISS index) compare it without opening LanceDB. It starts with the
        count of finished transactions (`generation_number`; under the writer's lock, so it only grows)."""
        number = self.landed_generation() + 1
        _atomic_write(self.home / GENERATION_FILE, f"{number} {now_utc().isoformat()} {os.getpid()} {id(self)}")

    def _require_transaction(self) -> None:
        if not self._in_transaction:
            raise RuntimeError("store writes must happen inside Store.transaction()")

    def _recover(self) -> None:
        """Undo a writer that died inside a transaction (its journal is still there)."""
        path = self.home / _JOURNAL
        if not path.is_file():
            return
        journal = json.loads(path.read_text("utf-8"))
        self._rollback(journal["versions"])
        # a reader may have cached what the dead writer had half written, under the token of before it
        # (an unlocked read sees appended rows before they are rolled back): a new token disowns that cache
        self._bump_generation()
        path.unlink()

    def _rollback(self, versions: dict[str, int]) -> None:
        for name in self.table_names():
            if name not in versions:
                self._db.drop_table(name)
                continue
            table = self._db.open_table(name)
            if table.version != versions[name]:
                table.restore(versions[name])

    def check_writable(self) -> None:
        """A RegistryError now when this process cannot write a local home (read-only, not its own), for a
        write that does long work first: it said so only at its end, as a traceback. Waits for no one."""
        if is_remote(self.home):
            return  # the lease says so when taken; an object store has no read-only mount
        try:
            open(self.home / _LOCK, "a").close()
        except OSError as err:
            raise not_writable(self.home, err) from None

    @contextmanager
    def _writer_lock(self) -> Iterator[None]:
        if is_remote(self.home):
            from indexing.object_store import lease

            with lease(self.home, _LOCK) as held:
                self._lease = held
                try:
                    yield
                finally:
                    self._lease = None
            return
        with file_lock(self.home / _LOCK):
            yield


class _ThreadTransaction(threading.local):
    """A Store's transaction as one thread sees it (see Store.__init__)."""

    open: bool = False
    handles: dict[str, Any] | None = None
    names: list[str] | None = None


def _atomic_write(path: HomePath, text: str) -> None:
    write_text_atomic(path, text)


def _lease_lost(exc: BaseException) -> bool:
    return type(exc).__name__ == "LeaseLost"  # without importing the s3 module on a local home


def _keys_and_vectors(table: pa.Table) -> tuple[list[str], np.ndarray]:
    """A vector table's text hashes and its (N, D) float32 matrix, in the table's row order."""
    keys = table.column("text_hash").to_pylist()
    dim = table.schema.field("vector").type.list_size
    flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return keys, flat.reshape(-1, dim)
