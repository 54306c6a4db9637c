"""Fast reads for the read-only commands (`stats`, `models list`, `show`, `history`).

Importing LanceDB alone takes 1-3 s on a small machine, longer than these commands should. So what they
show is also kept in `<home>/snapshot.json`, stamped with the store's generation token (which changes
with every finished transaction, see `indexing.store`). A read first tries that file: when no
transaction is open and the token is unchanged, nothing in the tables has changed and the answer comes
from JSON without importing LanceDB, torch or pyarrow. Otherwise the store is opened, the snapshot is
rebuilt from the tables (through the same `Registry` reads the API uses) and saved for the next
command. The same pattern as the saved FAISS index in `indexing.model_index`. What it holds is the
JSON of the typed results (`registry.results`), so a read answers with the same objects as the API.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from indexing.home import as_path, scratch_path, transaction_open, write_text_atomic
from indexing.home import generation as _generation
from registry.errors import NotFoundError, RegistryError

__all__ = ["load", "stats", "model_list", "model_info", "history", "live_versions"]

SNAPSHOT_FILE = "snapshot.json"
_FORMAT = 3  # 2: the typed results' JSON (registry.results); 3: stats count removed models' evaluations apart


def _current(home: Path) -> dict[str, Any] | None:
    if transaction_open(home):
        return None
    generation = _generation(home)
    if generation is None:
        return None
    try:
        snap = json.loads((home / SNAPSHOT_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if snap.get("format") != _FORMAT or snap.get("generation") != generation:
        return None
    return snap


def _build(home: Path) -> dict[str, Any]:
    from indexing.store import VERSIONS
    from registry.api import Registry
    from registry.records import ModelRecord
    from registry.catalog.rows import info_of_row, model_rows, record_of

    generation = _generation(home)  # read before the tables: a write in between leaves it stale, not wrong
    reg = Registry.open(home, create=False)
    store = reg.store
    rows = model_rows(store, light=True)
    infos = [info_of_row(record_of(row), row).model_dump(mode="json") for _, row in sorted(rows.items())]
    # home and query_encoder are read at use: `init --encoder` does not bump the generation token
    summary = reg.stats().model_dump(mode="json", exclude={"home", "query_encoder"})
    versions = store.read(VERSIONS, ["name", "version", "event", "encoder_id", "n_evals", "time", "record"]).to_pylist()
    history: dict[str, list] = {}
    for v in sorted(versions, key=lambda v: v["time"]):
        history.setdefault(v["name"], []).append({
            "version": v["version"], "event": v["event"], "time": v["time"].isoformat(),
            "encoder_id": v["encoder_id"], "n_evals": v["n_evals"],
            "record": ModelRecord.model_validate_json(v["record"]).model_dump(mode="json")})
    snap = {"format": _FORMAT, "generation": generation, "stats": summary, "models": infos, "history": history}
    if generation is not None and generation == _generation(home) and not transaction_open(home):
        try:
            write_text_atomic(home / SNAPSHOT_FILE, json.dumps(snap), fsync=False)  # a cache, rebuilt when lost
        except (OSError, RegistryError):  # a home we may read but not write: answer anyway, just not faster next time
            with contextlib.suppress(OSError):  # a read-only file system refuses the unlink too
                scratch_path(home / SNAPSHOT_FILE).unlink(missing_ok=True)
    return snap


def load(home: str | os.PathLike[str]) -> dict[str, Any]:
    """The snapshot of the tables as they are now (saved one if current, else rebuilt)."""
    home = as_path(home)
    if not home.is_dir():
        raise RegistryError(f"no registry at {home} (run `registry init`)")
    return _current(home) or _build(home)


def _query_encoder(home: Path) -> str:
    from indexing.home import read_config

    try:
        config = read_config(home)
    except OSError:  # no config yet: the default
        return "all-mpnet-base-v2"
    return config.get("query_encoder") or "all-mpnet-base-v2"


def stats(home):
    """What `Registry.stats()` returns (a `Stats`), from the snapshot."""
    from registry.results import Stats

    home = as_path(home)
    return Stats(home=str(home), query_encoder=_query_encoder(home), **load(home)["stats"])


def model_list(home):
    """Every live model's record, by name (a `ModelList`, as `Registry.list()`)."""
    from registry.results import ModelList

    return ModelList.model_validate([{**m["record"], "n_evals": m.get("n_evals")} for m in load(home)["models"]])


def live_versions(home) -> dict[str, int]:
    return {m["record"]["name"]: int(m["version"] or 1) for m in load(home)["models"]}


def model_info(home, name: str):
    """One live model (name or alias) as `Registry.show` returns it (a `ModelInfo`)."""
    from registry.catalog.aliases import resolve
    from registry.results import ModelInfo

    home = as_path(home)
    rows = load(home)["models"]
    live = {m["record"]["name"]: int(m["version"] or 1) for m in rows}
    try:
        target = resolve(home, name, live=live)
    except RegistryError:  # a pinned alias whose live version may be a restore of the pin: the store decides
        from registry import Registry

        return Registry.open(home, create=False).show(name)
    for row in rows:
        if row["record"]["name"] == target:
            return ModelInfo.model_validate(row)
    if target in load(home)["history"]:  # a removed model keeps its history
        raise NotFoundError.removed(target)
    raise NotFoundError.model(name, list(live))


def history(home, name: str):
    """Every version of a model (name or alias), oldest first (a `ModelHistory`)."""
    from registry.catalog.aliases import resolve
    from registry.results import ModelHistory

    home = as_path(home)
    snapshot = load(home)
    by_name = snapshot["history"]
    target = name if name in by_name else resolve(home, name)  # a model's own name wins over an alias
    if target not in by_name:
        if any(m["record"]["name"] == target for m in snapshot["models"]):
            from registry.catalog.models import no_history_yet

            raise no_history_yet(target)
        raise NotFoundError.model(name, sorted(by_name))
    return ModelHistory.model_validate({"name": target, "versions": by_name[target]})
