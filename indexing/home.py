"""Where the registry lives (`--home DIR` or `--home s3://BUCKET/PREFIX`, else `$LOCUS_HOME`, else
`~/.locus`), and the two files through which readers learn about writers without opening LanceDB.

The store's multi-table journal (`indexing.store.Store.transaction`) writes both: `journal.json` while a
transaction is open (or its writer died), and a new `generation` token when one finishes. Whatever is
derived from the tables and cached beside them (the FAISS index, `indexing.model_index`) is current
when no transaction is open and the token has not changed since it was saved.

A home is a `pathlib.Path` for a local directory, or an `indexing.object_store.ObjectPath` for an
`s3://` location (the same path methods; see that module for its lock and guarantees). Code that writes
beside the tables goes through `write_text_atomic` / `write_bytes_atomic`, which rename a temporary
file on a local home and PUT the object (atomic by itself) on an s3 home.
"""
from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Union

if TYPE_CHECKING:
    from indexing.object_store import ObjectPath

__all__ = ["resolve_home", "as_path", "is_remote", "HomePath", "HOME_ENV", "GENERATION_FILE", "JOURNAL_FILE",
           "generation", "generation_number", "transaction_open", "write_text_atomic", "write_bytes_atomic",
           "remove_tree", "scratch_path", "file_lock"]

HOME_ENV = "LOCUS_HOME"
GENERATION_FILE = "generation"  # changes with every finished store transaction
CONFIG_FILE = "config.json"  # the home's settings: query encoder, active encoder, aliases, store format
JOURNAL_FILE = "journal.json"  # present while a transaction is open (or its writer died)
REMOTE_SCHEMES = ("s3://",)

HomePath = Union[Path, "ObjectPath"]


def as_path(location) -> HomePath:
    """A Path, or an ObjectPath for an s3:// location (already-made paths pass through)."""
    if isinstance(location, Path) or type(location).__name__ == "ObjectPath":
        return location
    text = os.fspath(location) if not isinstance(location, str) else location
    if text.startswith(REMOTE_SCHEMES):
        from indexing.object_store import ObjectPath  # boto3 only for an s3 home

        return ObjectPath.parse(text)
    return Path(text)


def read_config(home: HomePath) -> dict:
    """The home's settings, config.json: a RegistryError naming it when it is not a JSON object, so that
    no command reads a damaged one as defaults (stats named the default query encoder) or writes over it.
    A missing file raises FileNotFoundError (a directory that is no registry, a home not made yet)."""
    import json

    from indexing.errors import RegistryError

    path = home / CONFIG_FILE
    try:
        config = json.loads(path.read_text("utf-8"))
    except UnicodeDecodeError:
        config = None
    except json.JSONDecodeError as err:
        raise RegistryError(f"{path} is not readable JSON ({err.msg}, line {err.lineno}): the home's settings "
                            "(query encoder, active encoder, aliases) are in it; restore it from a backup or fix "
                            "it by hand") from None
    if not isinstance(config, dict):
        raise RegistryError(f"{path} does not hold the home's settings (a JSON object): restore it from a backup "
                            "or fix it by hand")
    return config


def is_remote(path) -> bool:
    return not isinstance(path, Path)


def resolve_home(home: str | os.PathLike[str] | None = None) -> HomePath:
    if home is not None:
        return as_path(home).expanduser()
    if os.environ.get(HOME_ENV):
        return as_path(os.environ[HOME_ENV]).expanduser()
    return Path.home() / ".locus"


def generation(home: HomePath) -> str | None:
    """The token of the last finished transaction (None before the first one)."""
    try:
        return (as_path(home) / GENERATION_FILE).read_text()
    except OSError:
        return None


def generation_number(token: str | None) -> int:
    """How many transactions had finished when `token` was written: it only grows, so a client can ask for a
    state at least as new as the one it wrote (0 before the first, and for a token written before tokens
    were counted)."""
    head = (token or "").split(" ", 1)[0]
    return int(head) if head.isdigit() else 0


def transaction_open(home: HomePath) -> bool:
    """A writer is inside a transaction, or died inside one (the next open of the store rolls it back)."""
    return (as_path(home) / JOURNAL_FILE).is_file()


def write_bytes_atomic(path: HomePath, data: bytes, *, fsync: bool = True) -> None:
    """Readers see the old content or the new, whole: a temporary file renamed over it (local; fsynced
    unless `fsync=False`, for caches that are rebuilt when lost), or one PUT (s3)."""
    if is_remote(path):
        path.write_bytes(data)
        return
    tmp = scratch_path(path)
    with open(tmp, "wb") as handle:
        handle.write(data)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def scratch_path(path: Path, suffix: str = "") -> Path:
    """A temporary name beside `path` that no other process or thread writing it uses (a name of the
    process alone let two threads of the service rename one file from under each other)."""
    return path.with_name(f"{path.name}.tmp{os.getpid()}-{threading.get_ident()}{suffix}")


def not_writable(home, err: OSError):
    """The RegistryError for a home this process cannot write (read-only, not its own)."""
    from indexing.errors import RegistryError

    return RegistryError(f"cannot write to the registry at {home}: {err.strerror} (a home this process may only "
                         "read takes reads only)")


@contextmanager
def file_lock(path: Path, *, shared: bool = False) -> Iterator[None]:
    """An advisory lock on a local file (created if missing), exclusive or `shared`, across processes and
    threads alike (each holder opens the file itself). A shared lock whose file this process may not make
    (a home it may only read) is skipped: the read goes ahead unlocked, as every read did before; an
    exclusive one is refused as a RegistryError saying so."""
    try:
        handle = open(path, "a+")
    except OSError as err:  # not ours to write, or a read-only file system (EROFS)
        if not shared:
            raise not_writable(path.parent, err) from None
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_text_atomic(path: HomePath, text: str, *, fsync: bool = True) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync)


def remove_tree(path: HomePath) -> None:
    if is_remote(path):
        from indexing.object_store import remove_tree as remove_objects

        remove_objects(path)
    else:
        import shutil

        shutil.rmtree(path)
