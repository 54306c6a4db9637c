"""Fast reads for the read-only commands (`stats`, `models list`, `show`, `history`).

Importing LanceDB alone takes 1-3 s on a small machine, longer than these commands should. So what they
show is also kept in `<home>/snapshot.json`, stamped with the store's generation token (which changes
with every finished transaction, see `indexing.store`). A read first tries that file: when no
transaction is open and the token is unchanged, nothing in the tables has changed and the answer comes
from JSON without importing LanceDB, torch or pyarrow. Otherwise the store is opened, the snapshot is
rebuilt from the tables (through the same `Registry` reads the API uses) and saved for the next
command. The same pattern as the saved FAISS index in `registry.search`.
"""
from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from indexing.home import GENERATION_FILE, JOURNAL_FILE
from registry.errors import NotFoundError, RegistryError

__all__ = ["load", "stats", "models", "model_records", "model_info", "history", "live_versions"]

SNAPSHOT_FILE = "snapshot.json"
_FORMAT = 1


def _generation(home: Path) -> str | None:
    try:
        return (home / GENERATION_FILE).read_text()
    except OSError:
        return None


def _current(home: Path) -> dict[str, Any] | None:
    if (home / JOURNAL_FILE).exists():
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
    from indexing.store import MODELS, VERSIONS
    from registry.api import Registry

    generation = _generation(home)  # read before the tables: a write in between leaves it stale, not wrong
    reg = Registry.open(home, create=False)
    store = reg.store
    rows = store.read(MODELS, ["name", "version", "encoder_id", "n_evals", "embedded_at"]).to_pylist()
    live = {r["name"]: r for r in rows}
    records = reg.models()
    summary = reg.stats()
    summary.pop("query_encoder", None)  # read from config.json at use: `init --encoder` does not bump the token
    versions = store.read(VERSIONS, ["name", "version", "event", "encoder_id", "n_evals", "time"]).to_pylist()
    snap = {
        "format": _FORMAT,
        "generation": generation,
        "stats": summary,
        "record_fields": list(type(records[0]).model_fields) if records else [],
        "models": [{**r.model_dump(), "version": live[r.name]["version"], "encoder_id": live[r.name]["encoder_id"],
                    "n_evals": live[r.name]["n_evals"], "embedded": live[r.name]["embedded_at"] is not None}
                   for r in records],
        "history": [{**v, "time": v["time"].isoformat()} for v in sorted(versions, key=lambda v: v["time"])],
    }
    if generation is not None and generation == _generation(home) and not (home / JOURNAL_FILE).exists():
        tmp = home / f"{SNAPSHOT_FILE}.tmp{os.getpid()}"
        try:
            tmp.write_text(json.dumps(snap), "utf-8")
            os.replace(tmp, home / SNAPSHOT_FILE)
        except OSError:  # a home we may read but not write: answer anyway, just not faster next time
            tmp.unlink(missing_ok=True)
    return snap


def load(home: str | os.PathLike[str]) -> dict[str, Any]:
    """The snapshot of the tables as they are now (saved one if current, else rebuilt)."""
    home = Path(home)
    if not home.is_dir():
        raise RegistryError(f"no registry at {home} (run `registry init`)")
    return _current(home) or _build(home)


def _query_encoder(home: Path) -> str:
    try:
        return json.loads((home / "config.json").read_text("utf-8")).get("query_encoder") or "all-mpnet-base-v2"
    except (OSError, ValueError):
        return "all-mpnet-base-v2"


def stats(home) -> dict[str, Any]:
    """What `Registry.stats()` returns, from the snapshot."""
    home = Path(home)
    summary = dict(load(home)["stats"])
    encoder = _query_encoder(home)
    ordered = {}
    for key in ("models", "queries", "evaluations", "tasks", "coverage"):
        ordered[key] = summary.pop(key)
    ordered["query_encoder"] = encoder
    ordered.update(summary)
    return ordered


def models(home) -> list[dict[str, Any]]:
    """Every live model: its record fields plus version, encoder_id, n_evals, embedded; by name."""
    return list(load(home)["models"])


def model_records(home) -> list[dict[str, Any]]:
    """`ModelRecord.model_dump()` of every live model, by name (without importing pydantic)."""
    snap = load(home)
    fields = snap.get("record_fields") or []
    return [{k: m[k] for k in fields} for m in snap["models"]]


def live_versions(home) -> dict[str, int]:
    return {m["name"]: int(m["version"] or 1) for m in models(home)}


def model_info(home, name: str) -> dict[str, Any]:
    """One live model (name or alias) as `registry show` prints it."""
    from registry.aliases import resolve

    home = Path(home)
    rows = models(home)
    live = {m["name"]: int(m["version"] or 1) for m in rows}
    target = resolve(home, name, live=live)
    for row in rows:
        if row["name"] == target:
            return row
    raise NotFoundError.model(name, list(live))


def history(home, name: str) -> list[dict[str, Any]]:
    """Every version of a model (name or alias), oldest first; `time` is a datetime."""
    from registry.aliases import resolve

    home = Path(home)
    rows = load(home)["history"]
    target = resolve(home, name)
    mine = [{**r, "time": datetime.fromisoformat(r["time"])} for r in rows if r["name"] == target]
    if not mine:
        raise NotFoundError.model(name, sorted({r["name"] for r in rows}))
    return mine
