"""Store format migrations, numbered, in one place (as simonw/llm migrates its database).

A home records its format in config.json (`indexing.store.STORE_FORMAT` is the one this version writes).
`registry migrate` runs every migration above the home's format, in order. Writes to a home of an older
format are refused with a message naming `registry migrate`; reads keep working on it (a missing column
reads as null), so a home is never half-usable while it waits.

Each migration runs inside one store transaction: its table changes land whole or are rolled back (a
crash mid-way leaves the journal, and the next open restores every table). The new format number is
written to config.json only after that transaction committed; a crash between the two leaves tables of
the new shape under the old number, which reads fine, and the next `migrate` (each migration is
idempotent) finishes the job.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa

from indexing.store import MODEL_SCHEMA, MODELS, STORE_FORMAT, VERSION_SCHEMA, VERSIONS, Store
from registry.results import MigrationReport

__all__ = ["MIGRATIONS", "migrate"]


def _conform(store: Store, name: str, schema: pa.Schema) -> bool:
    """Rewrite table `name` to `schema` (new columns null) unless it already has every column; a new
    version of the same table, so the transaction's rollback restores the old one."""
    if not store.has_table(name):
        return False
    if not store.has_table(name):
        return False
    data = store.read(name)
    present = set(data.schema.names)
    if all(f.name in present for f in schema):
        return False
    columns = [data.column(f.name).cast(f.type) if f.name in present else pa.nulls(data.num_rows, f.type)
               for f in schema]
    store.replace_table(name, pa.Table.from_arrays(columns, schema=schema))
    return True


def _m002_fingerprints(store: Store, report: MigrationReport) -> None:
    """2: `fingerprint` + `table_id` on the models table and its history; every live model's fingerprint
    filled from its evaluations when the active encoder has an item table (else null until one is fitted)."""
    from registry.catalog.fingerprint_store import load_item_table, rewrite_fingerprints

    _conform(store, MODELS, MODEL_SCHEMA)
    _conform(store, VERSIONS, VERSION_SCHEMA)
    table = load_item_table(store)
    report.fingerprints = rewrite_fingerprints(store, table, migrating=True) if table is not None else 0


def _m003_evaluation_log(store: Store, report: MigrationReport) -> None:
    """3: the `evaluation_log` table (which evaluations each version brought; registry.catalog.evaluation_log),
    filled from the evaluations table as it stands (scores a refine replaced earlier are not recoverable)."""
    from registry.catalog.evaluation_log import backfill

    backfill(store)


def _m004_behaviour(store: Store, report: MigrationReport) -> None:
    """4: `behaviour` on the models table and its history (the vector the behaviour index searches); every
    live model's fingerprint columns rewritten from its evaluations when the active encoder has an item
    table (else null until one is fitted)."""
    from registry.catalog.fingerprint_store import load_item_table, rewrite_fingerprints

    _conform(store, MODELS, MODEL_SCHEMA)
    _conform(store, VERSIONS, VERSION_SCHEMA)
    table = load_item_table(store)
    report.fingerprints = rewrite_fingerprints(store, table, migrating=True) if table is not None else 0


# (format it produces, what it does, the function): in order, one per format step
MIGRATIONS: list[tuple[int, str, Callable[[Store, MigrationReport], None]]] = [
    (2, "fingerprint columns on models and model_versions", _m002_fingerprints),
    (3, "evaluation_log: the evaluations each version brought (for drift)", _m003_evaluation_log),
    (4, "behaviour column on models and model_versions (the behaviour index)", _m004_behaviour),
]


def migrate(store: Store) -> MigrationReport:
    """Upgrade the home in place to `STORE_FORMAT`; nothing to do (an empty `applied`) when it is there."""
    from registry.errors import RegistryError

    found = store.format
    if found > STORE_FORMAT:
        raise RegistryError(f"registry home {store.home} has store format {found}, newer than this version's "
                            f"{STORE_FORMAT}: upgrade locus-registry")
    report = MigrationReport(home=str(store.home), from_format=found, to_format=found)
    for number, what, run in MIGRATIONS:
        if number <= store.format:
            continue
        with store.transaction(migrating=True):
            run(store, report)
        store.update_config(format=number)  # only after the tables committed (see the module docstring)
        report.applied = [*report.applied, f"{number}: {what}"]
        report.to_format = number
    return report
