"""The store: transactions (a failed or killed writer leaves every table as it was) and the encoding cache."""
from __future__ import annotations

import json
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from indexing.store import QUERIES, QUERY_SCHEMA, Store


def _query_rows(*ids: str) -> pa.Table:
    return pa.Table.from_pylist(
        [{"query_id": i, "text": f"text {i}", "task": "t", "text_hash": i} for i in ids], schema=QUERY_SCHEMA
    )


def test_transaction_commits(tmp_path):
    store = Store(tmp_path / "h")
    with store.transaction():
        store.table(QUERIES, QUERY_SCHEMA).add(_query_rows("a", "b"))
    assert store.count(QUERIES) == 2
    assert not (tmp_path / "h" / "journal.json").exists()


def test_failed_transaction_rolls_back_every_table(tmp_path):
    store = Store(tmp_path / "h")
    with store.transaction():
        store.table(QUERIES, QUERY_SCHEMA).add(_query_rows("a"))
    with pytest.raises(RuntimeError, match="boom"):
        with store.transaction():
            store.table(QUERIES, QUERY_SCHEMA).add(_query_rows("b", "c"))
            store.add_vectors("enc", ["a"], [[1.0, 0.0]])  # a table created inside the transaction
            raise RuntimeError("boom")
    assert store.read(QUERIES).column("query_id").to_pylist() == ["a"]
    assert store.vector_dim("enc") is None  # the new table is gone
    assert not (tmp_path / "h" / "journal.json").exists()


def test_a_refusal_before_any_write_leaves_the_generation_as_it_was(tmp_path):
    """Readers reload when the generation moves: a transaction refused before it wrote anything (a bad row
    found inside it) has nothing to disown and must not send them reloading; one that wrote and failed does."""
    store = Store(tmp_path / "h")
    with store.transaction():
        store.table(QUERIES, QUERY_SCHEMA).add(_query_rows("a"))
    before = store.landed_generation()
    with pytest.raises(RuntimeError, match="refused"):
        with store.transaction():
            raise RuntimeError("refused")
    assert store.landed_generation() == before
    with pytest.raises(RuntimeError, match="half-way"):
        with store.transaction():
            store.table(QUERIES, QUERY_SCHEMA).add(_query_rows("b"))
            raise RuntimeError("half-way")
    assert store.landed_generation() == before + 1
    assert store.read(QUERIES).column("query_id").to_pylist() == ["a"]


def test_journal_left_by_a_dead_writer_is_rolled_back_on_open(tmp_path):
    store = Store(tmp_path / "h")
    with store.transaction():
        store.table(QUERIES, QUERY_SCHEMA).add(_query_rows("a"))
    # What a process killed mid-write leaves behind: a journal, and a half-done write.
    versions = store.versions()
    (tmp_path / "h" / "journal.json").write_text(json.dumps({"versions": versions}))
    store._db.open_table(QUERIES).add(_query_rows("half-written"))
    reopened = Store(tmp_path / "h")
    assert reopened.read(QUERIES).column("query_id").to_pylist() == ["a"]
    assert not (tmp_path / "h" / "journal.json").exists()


def test_a_transaction_belongs_to_the_thread_that_opened_it(tmp_path):
    """One Store shared by threads (the service's writer thread and its request threads): a second thread's
    transaction waits for the first to end and lands on its own; it used to join the first one, skip the lock,
    and fail half-way once that one had ended."""
    store = Store(tmp_path / "h")
    first_open, first_may_end, second_open = threading.Event(), threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def first():
        with store.transaction():
            store.table(QUERIES, QUERY_SCHEMA).add(_query_rows("a"))
            first_open.set()
            first_may_end.wait(10)

    def second():
        first_open.wait(10)
        try:
            with store.transaction():
                second_open.set()
                store.table(QUERIES, QUERY_SCHEMA).add(_query_rows("b"))
                with pytest.raises(RuntimeError, match="boom"):
                    with store.transaction():  # nested in its own thread: joins its own transaction
                        raise RuntimeError("boom")
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread below
            failures.append(exc)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    before = store.landed_generation()
    for t in threads:
        t.start()
    assert first_open.wait(30)
    entered_early = second_open.wait(0.5)
    first_may_end.set()
    for t in threads:
        t.join(20)
    assert not entered_early, "the second thread's transaction opened inside the first one's"
    assert not failures and second_open.is_set()
    assert sorted(store.read(QUERIES).column("query_id").to_pylist()) == ["a", "b"]
    assert store.landed_generation() - before == 2  # two transactions, each committed on its own
    assert not (tmp_path / "h" / "journal.json").exists()


def test_writes_outside_a_transaction_are_refused(tmp_path):
    store = Store(tmp_path / "h")
    with pytest.raises(RuntimeError, match="transaction"):
        store.table(QUERIES, QUERY_SCHEMA)


def test_vector_dimension_is_fixed_per_encoder(tmp_path):
    from registry.errors import InputError

    store = Store(tmp_path / "h")
    with store.transaction():
        store.add_vectors("enc", ["x"], [[1.0, 0.0, 0.0]])
    with pytest.raises(InputError, match="3-d"):
        with store.transaction():
            store.add_vectors("enc", ["y"], [[1.0, 0.0]])
    assert store.cached_vectors("enc", ["x", "y"]).keys() == {"x"}


def test_cached_vectors_reads_the_same_rows_filtered_or_whole(tmp_path, monkeypatch):
    import indexing.store as store_module

    store = Store(tmp_path / "home")
    hashes = [f"{i:032x}" for i in range(50)]
    vectors = np.arange(100, dtype=np.float32).reshape(50, 2)
    with store.transaction():
        store.add_vectors("enc", hashes, vectors)
    wanted = hashes[3:9] + ["f" * 32]  # six stored, one not
    filtered = store.cached_vectors("enc", wanted)
    monkeypatch.setattr(store_module, "_FILTERED_READ_MAX", 0)  # force the whole-table read
    whole = store.cached_vectors("enc", wanted)
    assert filtered.keys() == whole.keys() == set(hashes[3:9])
    for h in hashes[3:9]:
        np.testing.assert_array_equal(filtered[h], vectors[hashes.index(h)])
        np.testing.assert_array_equal(whole[h], filtered[h])
    assert store.cached_vectors("enc", ["not hex; drop table"]) == {}  # never reaches a filter


@pytest.mark.parametrize("through_lancedb", [False, True], ids=["direct", "lancedb"])
def test_a_whole_read_of_the_vectors_is_kept_until_the_table_changes(tmp_path, monkeypatch, through_lancedb):
    """The service's router rebuilds from every stored vector after each landing, which seldom adds a
    text: the whole read is kept per table version, read again when a write (here or in another process)
    adds rows, never kept while a transaction is open, and handed out read-only."""
    import indexing.store as store_module

    monkeypatch.setattr(store_module, "_FILTERED_READ_MAX", 0)  # every read below is a whole one
    writer = Store(tmp_path / "h")
    hashes = [f"{i:032x}" for i in range(20)]
    with writer.transaction():
        writer.add_vectors("enc", hashes[:10], np.arange(20, dtype=np.float32).reshape(10, 2))
    reader = Store(tmp_path / "h", create=False)
    if through_lancedb:
        reader.table_names()  # connects LanceDB: the reads below go through it, not the Lance files
    reads = []
    real = store_module._keys_and_vectors
    monkeypatch.setattr(store_module, "_keys_and_vectors", lambda table: reads.append(1) or real(table))
    first = reader.cached_vectors("enc", hashes)
    again = reader.cached_vectors("enc", hashes[:3])
    assert len(reads) == 1 and set(first) == set(hashes[:10]) and set(again) == set(hashes[:3])
    np.testing.assert_array_equal(again[hashes[2]], [4.0, 5.0])
    with pytest.raises(ValueError):
        again[hashes[2]][0] = 9.0  # rows of the kept matrix
    with writer.transaction():  # another process's write: a new version of the table
        writer.add_vectors("enc", hashes[10:12], np.ones((2, 2), dtype=np.float32))
    assert set(reader.cached_vectors("enc", hashes)) == set(hashes[:12]) and len(reads) == 2
    (tmp_path / "h" / store_module._JOURNAL).write_text("{}")  # a transaction open elsewhere: read, not kept
    monkeypatch.setattr(store_module, "transaction_open", lambda home: True)
    reader.cached_vectors("enc", hashes)
    reader.cached_vectors("enc", hashes)
    assert len(reads) == 4
    monkeypatch.setattr(store_module, "transaction_open", lambda home: False)
    (tmp_path / "h" / store_module._JOURNAL).unlink()
    assert set(reader.cached_vectors("enc", hashes)) == set(hashes[:12]) and len(reads) == 4  # kept before


def test_a_whole_read_with_a_write_landing_inside_it_is_not_kept(tmp_path, monkeypatch):
    """Rows read as a write lands are kept under the version they were read at, never under the newer one
    (the index's race of the seventeenth session), so the next read sees the write."""
    import indexing.store as store_module

    monkeypatch.setattr(store_module, "_FILTERED_READ_MAX", 0)
    writer = Store(tmp_path / "h")
    hashes = [f"{i:032x}" for i in range(4)]
    with writer.transaction():
        writer.add_vectors("enc", hashes[:2], np.zeros((2, 2), dtype=np.float32))
    reader = Store(tmp_path / "h", create=False)
    real = store_module._keys_and_vectors

    def read_then_a_write_lands(table):
        out = real(table)
        if len(out[0]) == 2:
            with writer.transaction():
                writer.add_vectors("enc", hashes[2:], np.ones((2, 2), dtype=np.float32))
        return out

    monkeypatch.setattr(store_module, "_keys_and_vectors", read_then_a_write_lands)
    assert set(reader.cached_vectors("enc", hashes)) == set(hashes[:2])  # what the read saw
    assert set(reader.cached_vectors("enc", hashes)) == set(hashes)  # not kept: read again at the new version


def test_a_fresh_store_reads_without_lancedb_what_lancedb_reads(tmp_path):
    """Until a write (or a LanceDB-only call), reads go to the Lance datasets directly: the same rows,
    columns and counts as through LanceDB, including a second version of a table and a missing one."""
    from indexing.store import EVALUATIONS, vector_table_name

    writer = Store(tmp_path / "h")
    with writer.transaction():
        writer.table(QUERIES, QUERY_SCHEMA).add(_query_rows("a", "b"))
        writer.add_vectors("enc", ["aa", "bb"], np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    with writer.transaction():
        writer.table(QUERIES, QUERY_SCHEMA).add(_query_rows("c"))
    reader = Store(tmp_path / "h", create=False)
    direct = (reader.read(QUERIES), reader.read(QUERIES, ["query_id"]), reader.count(QUERIES),
              reader.read(EVALUATIONS, ["model"]).num_rows, reader.count(vector_table_name("other")),
              reader.cached_vectors("enc", ["bb", "ee"]))
    assert reader._connection is None  # nothing above needed LanceDB
    through_lancedb = (writer.read(QUERIES), writer.read(QUERIES, ["query_id"]), writer.count(QUERIES),
                       writer.read(EVALUATIONS, ["model"]).num_rows, writer.count(vector_table_name("other")),
                       writer.cached_vectors("enc", ["bb", "ee"]))
    assert writer._connection is not None
    assert direct[0].sort_by("query_id").equals(through_lancedb[0].sort_by("query_id"))
    assert direct[1].column_names == ["query_id"] and sorted(direct[1].column("query_id").to_pylist()) == ["a", "b", "c"]
    assert direct[2:5] == through_lancedb[2:5] == (3, 0, 0)
    assert set(direct[5]) == set(through_lancedb[5]) == {"bb"}
    assert np.array_equal(direct[5]["bb"], through_lancedb[5]["bb"])


def test_read_settled_never_sees_rows_a_failing_transaction_takes_back(tmp_path):
    import threading

    writer, reader = Store(tmp_path / "h"), Store(tmp_path / "h")
    with writer.transaction():
        writer.table(QUERIES, QUERY_SCHEMA).add(_query_rows("a"))
    appended, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def fail_after_appending() -> None:
        try:
            with writer.transaction():
                writer.table(QUERIES, QUERY_SCHEMA).add(_query_rows("b"))
                appended.set()
                release.wait(30)
                raise RuntimeError("boom")
        except RuntimeError as exc:
            failures.append(exc)

    thread = threading.Thread(target=fail_after_appending)
    thread.start()
    assert appended.wait(30)
    assert reader.read(QUERIES).num_rows == 2  # an unlocked read sees the row that is about to go
    settled: list[list[str]] = []
    waiting = threading.Thread(target=lambda: settled.append(reader.read_settled(QUERIES).column("query_id").to_pylist()))
    waiting.start()
    waiting.join(1.0)
    assert waiting.is_alive() and not settled  # it waits for the writer ...
    release.set()
    thread.join(30)
    waiting.join(30)
    assert settled == [["a"]] and len(failures) == 1  # ... then reads what stays


def test_a_transaction_opens_each_table_once_and_reads_afresh_after_it(tmp_path):
    """Inside a transaction one LanceDB handle per table (the writer lock keeps other writers out; a
    landing opened ~30 handles and listed the tables ~13 times); after it, reads see other writers."""
    home = tmp_path / "h"
    store = Store(home)
    with store.transaction():
        store.append(QUERIES, _query_rows("a"), QUERY_SCHEMA)
    connection = store._db
    opened, listed = [], []
    real_open, real_list = connection.open_table, connection.list_tables
    connection.open_table = lambda name, *a, **k: (opened.append(name), real_open(name, *a, **k))[1]
    connection.list_tables = lambda *a, **k: (listed.append(1), real_list(*a, **k))[1]
    with store.transaction():
        before = store.versions()
        store.append(QUERIES, _query_rows("b"), QUERY_SCHEMA)
        assert store.count(QUERIES) == 2 and store.read(QUERIES).num_rows == 2  # its own write, seen
        assert store.versions()[QUERIES] == before[QUERIES] + 1
        store.delete_in(QUERIES, "query_id", ["a"])
        assert store.read_where(QUERIES, ["query_id"], "task = 't'").column("query_id").to_pylist() == ["b"]
        store.add_vectors("enc", ["b"], [[1.0, 0.0]])  # a table made inside it joins the kept names
        assert "qvec__enc" in store.table_names() and store.vector_dim("enc") == 2
    assert opened.count(QUERIES) == 1 and len(listed) == 1
    other = Store(home)
    with other.transaction():
        other.append(QUERIES, _query_rows("c"), QUERY_SCHEMA)
    assert sorted(store.read(QUERIES).column("query_id").to_pylist()) == ["b", "c"]
    assert opened.count(QUERIES) >= 2  # opened afresh: the transaction's handle was let go


def test_reads_through_a_lancedb_handle_give_lancedbs_rows(tmp_path):
    """Once LanceDB is open, a local store reads a table from its Lance dataset at the handle's version
    (LanceDB's query path streams batches through its event loop, ~6x slower for a whole table): the rows
    LanceDB's own query gives, whole or filtered, after a deletion, inside a transaction (its own writes)
    and after it."""
    def lancedb_rows(handle, columns, where=None):
        query = handle.search().select(columns)
        return (query.where(where) if where else query).limit(None).to_arrow().sort_by("query_id")

    store = Store(tmp_path / "h")
    with store.transaction():
        store.append(QUERIES, _query_rows("a", "b", "c"), QUERY_SCHEMA)
        store.add_vectors("enc", ["a", "b"], np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32))
    with store.transaction():
        store.delete_in(QUERIES, "query_id", ["b"])
        store.append(QUERIES, _query_rows("d"), QUERY_SCHEMA)
        inside = lancedb_rows(store._open(QUERIES), ["query_id", "task"])
        assert store.read(QUERIES, ["query_id", "task"]).sort_by("query_id").equals(inside)
        assert inside.column("query_id").to_pylist() == ["a", "c", "d"]
    assert store._connection is not None
    handle = store._db.open_table(QUERIES)
    assert store.read(QUERIES).sort_by("query_id").equals(
        lancedb_rows(handle, QUERY_SCHEMA.names).select(store.read(QUERIES).column_names))
    where = "query_id IN ('a', 'd', 'zz')"
    assert store.read_where(QUERIES, ["query_id"], where).sort_by("query_id").equals(
        lancedb_rows(handle, ["query_id"], where))
    found = store.cached_vectors("enc", ["b", "zz"])
    assert set(found) == {"b"} and np.allclose(found["b"], [0.6, 0.8])


def test_vector_rows_are_what_cached_vectors_finds_and_version_is_one_tables(tmp_path):
    store = Store(tmp_path / "h")
    assert store.vector_rows("enc", ["a"])[0].tolist() == [-1] and store.version(QUERIES) == 0
    with store.transaction():
        store.append(QUERIES, _query_rows("a", "b"), QUERY_SCHEMA)
        store.add_vectors("enc", ["aa", "bb", "cc"], np.array([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32))
    hashes = ["cc", "zz", "aa", "cc"]
    rows, matrix = store.vector_rows("enc", hashes)
    found = store.cached_vectors("enc", hashes)
    assert rows.tolist()[1] == -1 and set(found) == {"aa", "cc"}
    for h, row in zip(hashes, rows):
        assert row < 0 or np.array_equal(matrix[row], found[h])
    assert not matrix.flags.writeable  # the store's kept read: nobody writes into it
    assert store.version(QUERIES) == store.versions()[QUERIES] and store.version("no_such_table") == 0


def test_changed_since_gives_what_a_table_gained_from_a_committed_version(tmp_path):
    store = Store(tmp_path / "h")
    with store.transaction():
        store.append(QUERIES, _query_rows("a", "b"), QUERY_SCHEMA)
    version, rows = store.read_committed(QUERIES, ["query_id"])
    assert rows.column("query_id").to_pylist() == ["a", "b"] and version == store.version(QUERIES)
    since = store.changed_since(QUERIES, version, ["query_id"], "query_id")
    assert since.gained.num_rows == 0 and not since.lost  # nothing since
    for ids in (["c"], ["d", "e"]):
        with store.transaction():
            store.append(QUERIES, _query_rows(*ids), QUERY_SCHEMA)
    since = store.changed_since(QUERIES, version, ["query_id"], "query_id")
    assert since.gained.column("query_id").to_pylist() == ["c", "d", "e"] and since.version == store.version(QUERIES)
    assert not since.lost and store.read(QUERIES, ["query_id"]).column("query_id").to_pylist() == list("abcde")
    now = since.version
    with store.transaction():
        assert store.read_committed(QUERIES, ["query_id"])[0] is None  # not a committed state
        assert store.changed_since(QUERIES, version, ["query_id"], "query_id") is None
        store.delete_in(QUERIES, "query_id", ["a"])
    assert store.changed_since(QUERIES, version, ["query_id"], "query_id").lost == {"a"}  # a row of it is gone
    assert store.changed_since(QUERIES, now, ["query_id"], "query_id").lost == {"a"}
    assert store.changed_since(QUERIES, 10_000, ["query_id"], "query_id") is None  # no such version


def test_changed_since_names_the_keys_of_deleted_rows_and_reads_theirs_as_they_are_now(tmp_path, monkeypatch):
    from datetime import timedelta

    from indexing.store import EVALUATION_SCHEMA, EVALUATIONS, now_utc

    def rows(*cells):
        return [{"model": m, "query_id": q, "score": s, "source": "test", "time": now_utc()} for m, q, s in cells]

    columns = ["model", "query_id", "score"]
    store = Store(tmp_path / "h")
    with store.transaction():
        store.append(EVALUATIONS, rows(("m1", "a", 1.0), ("m2", "a", 0.0), ("m1", "b", 0.0), ("m3", "b", 1.0)),
                     EVALUATION_SCHEMA)
    version, _ = store.read_committed(EVALUATIONS, columns)
    with store.transaction():  # what a refine that replaces m1's score on b does, and an add for m2
        store.upsert(EVALUATIONS, rows(("m1", "b", 1.0)), EVALUATION_SCHEMA, ["model", "query_id"])
        store.append(EVALUATIONS, rows(("m2", "c", 1.0)), EVALUATION_SCHEMA)
    change = store.changed_since(EVALUATIONS, version, columns, "model")
    assert change.lost == {"m1"} and change.version == store.version(EVALUATIONS)
    assert change.gained.to_pylist() == [{"model": "m1", "query_id": "b", "score": 1.0},
                                         {"model": "m2", "query_id": "c", "score": 1.0}]
    assert change.rows_of(["m1"]).to_pylist() == [{"model": "m1", "query_id": "a", "score": 1.0},
                                                   {"model": "m1", "query_id": "b", "score": 1.0}]
    with store.transaction():  # a fragment that had lost rows before `version`: the rows it lost since
        store.delete_in(EVALUATIONS, "model", ["m3"])
    assert store.changed_since(EVALUATIONS, change.version, columns, "model").lost == {"m3"}
    store.compact(keep_versions_for=timedelta(days=1))  # the same rows in new files
    with store.transaction():
        store.append(EVALUATIONS, rows(("m4", "a", 0.0)), EVALUATION_SCHEMA)
    # across the compaction: every model touched before it or after it, its rows as they are now
    across = store.changed_since(EVALUATIONS, version, columns, "model")
    assert across.lost == {"m1", "m2", "m3", "m4"} and across.version == store.version(EVALUATIONS)
    assert across.gained.to_pylist() == store.read(EVALUATIONS, columns).filter(
        pc.is_in(store.read(EVALUATIONS, columns).column("model"), pa.array(["m1", "m2", "m4"]))).to_pylist()
    assert store.changed_since(EVALUATIONS, across.version, columns, "model").lost == frozenset()
    # further back than it looks for compactions: the rewritten rows count as deleted and added (more read)
    import indexing.store as store_module

    monkeypatch.setattr(store_module, "_REWRITES_LOOKED_FOR", 0)
    wide = store.changed_since(EVALUATIONS, version, columns, "model")
    assert wide.lost == {"m1", "m2", "m3"} and wide.gained.to_pylist() == store.read(EVALUATIONS, columns).to_pylist()
    monkeypatch.undo()
    store.compact(keep_versions_for=timedelta(0))  # the versions before it removed: what changed is unknown
    assert store.changed_since(EVALUATIONS, version, columns, "model") is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_changed_since_accounts_for_every_row_after_any_sequence_of_writes(tmp_path, seed):
    """Random writes to a table (appends, a model's rows deleted, scores upserted, a compaction keeping or
    removing old versions): from any earlier committed version, what `changed_since` says (rows gained, keys
    lost) rebuilds every key's rows now: a lost key's rows read now, any other key's the old ones and then its
    gained ones, in table order; None only when a version it needs is gone."""
    import random
    from datetime import timedelta

    import lance

    from indexing.store import EVALUATION_SCHEMA, EVALUATIONS, now_utc

    rng = random.Random(seed)
    columns = ["model", "query_id", "score"]
    store = Store(tmp_path / "h")

    def rows(cells):
        return [{"model": m, "query_id": q, "score": s, "source": "test", "time": now_utc()} for m, q, s in cells]

    def by_key(table) -> dict:
        out: dict = {}
        for row in table.to_pylist():
            out.setdefault(row["model"], []).append((row["query_id"], row["score"]))
        return out

    with store.transaction():
        store.append(EVALUATIONS, rows([("m0", "q0", 1.0)]), EVALUATION_SCHEMA)
    seen = [store.read_committed(EVALUATIONS, columns)]  # (version, rows) of earlier committed states
    told = cleaned_away = 0
    for step in range(40):
        op = rng.choice(["append", "append", "delete", "upsert", "compact"])
        models = sorted(by_key(store.read(EVALUATIONS, columns)))
        with store.transaction():
            if op == "append":
                model = rng.choice(models + [f"m{step + 1}"])
                store.append(EVALUATIONS, rows([(model, f"q{rng.randrange(30)}", float(rng.randint(0, 1)))
                                                for _ in range(rng.randint(1, 4))]), EVALUATION_SCHEMA)
            elif op == "delete" and len(models) > 1:
                store.delete_in(EVALUATIONS, "model", [rng.choice(models)])
            elif op == "upsert":
                model = rng.choice(models)
                store.upsert(EVALUATIONS, rows([(model, f"q{rng.randrange(30)}", 0.5)]), EVALUATION_SCHEMA,
                             ["model", "query_id"])
        if op == "compact":
            store.compact(keep_versions_for=timedelta(0) if rng.random() < 0.2 else timedelta(days=1))
        now = by_key(store.read(EVALUATIONS, columns))
        for version, then in rng.sample(seen, min(3, len(seen))):
            change = store.changed_since(EVALUATIONS, version, columns, "model")
            if change is None:  # only for a version that compact removed
                with pytest.raises((OSError, ValueError)):
                    lance.dataset(str(store._lance_path(EVALUATIONS)), version=version)
                cleaned_away += 1
                continue
            told += 1
            gained, old = by_key(change.gained), by_key(then)
            for key in set(now) | set(old) | set(gained):
                expected = by_key(change.rows_of([key])).get(key, []) if key in change.lost else \
                    old.get(key, []) + gained.get(key, [])
                assert expected == now.get(key, []), (step, op, version, key)
        seen.append(store.read_committed(EVALUATIONS, columns))
    assert told > 60
