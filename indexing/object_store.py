"""A registry home on S3 (or an S3-compatible store): `--home s3://bucket/prefix`.

`ObjectPath` is the part of `pathlib.Path` the home uses (join, read, write, exists, unlink, list),
over boto3; `indexing.home.as_path` hands one out for an `s3://` location and a plain `Path` otherwise,
so the local home's code and speed are untouched (boto3 is imported only here, and only for an s3 home).
LanceDB opens the tables itself from `<home>/db` with `lance_storage_options()`.

Why this is as safe as the local home
  * A PUT replaces an object whole: a reader sees the old or the new bytes, never half. So what the
    local home writes to a temporary file and renames (config.json, the generation token, the journal,
    the saved index, snapshot.json, checkpoints) is one PUT here.
  * The writer lock is a lease object `<home>/.lock`, taken with a conditional create (PUT with
    `If-None-Match: *`): of two writers exactly one creates it, the other waits, as on the local
    home's flock. The holder renews the lease in a background thread (a conditional PUT with
    `If-Match` on its own ETag). A holder that stops renewing for `LOCUS_S3_LEASE_SECONDS` (default 30)
    is taken to be dead: a waiter that has watched the lease unchanged that long (by its own monotonic
    clock, so machines' clocks need not agree) takes it over with `If-Match` on the ETag it watched,
    and then rolls back the dead writer's journal exactly as the local home does.
  * A waiter gives up after `LOCUS_S3_LOCK_WAIT_SECONDS` (default 300) with a RegistryError that names
    the holder (host, pid, since when).

What needs a single writer (and is enforced): the lease is the single writer. The one gap a lease
has and a flock has not: a holder whose whole process stalls (or whose network is cut) for longer
than the lease, while another writer takes over. The stalled writer finds its lease gone at its next
renewal or, at the latest, before it commits (`Lease.check`, a conditional renewal), and then stops
with a RegistryError without committing or rolling back anything (the new holder rolls its journal
back). Table writes it makes after the takeover and before it notices can interleave with the new
holder's: keep the lease (renewed every third of it) well above the longest stall a writer may have.

Credentials and endpoint come from the standard AWS_* environment variables (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, and AWS_ENDPOINT_URL for an S3-compatible store or an emulator),
read by boto3 for the home's files and passed on to LanceDB for the tables.
"""
from __future__ import annotations

import fnmatch
import io
import json
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Iterator

from indexing.errors import RegistryError

__all__ = ["ObjectPath", "Lease", "LeaseLost", "lance_storage_options", "lease_alive", "remove_tree"]

SCHEME = "s3://"
LEASE_ENV = "LOCUS_S3_LEASE_SECONDS"
WAIT_ENV = "LOCUS_S3_LOCK_WAIT_SECONDS"
_LEASE_SECONDS = 30.0
_WAIT_SECONDS = 300.0

_client = None
_client_lock = threading.Lock()


def _endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def client():
    """One boto3 S3 client per process (boto3 clients are thread-safe; creating one is not)."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:  # pragma: no cover - boto3 comes with the package
                raise RegistryError("an s3:// home needs boto3: pip install 'locus-registry[s3]'") from None
            _client = boto3.client("s3", endpoint_url=_endpoint(),
                                   config=Config(retries={"max_attempts": 5, "mode": "standard"}))
        return _client


def reset_client() -> None:
    """Forget the client (tests point AWS_ENDPOINT_URL at a new emulator)."""
    global _client
    with _client_lock:
        _client = None


def lance_storage_options() -> dict[str, str]:
    """LanceDB's storage options for the same store boto3 talks to (it reads the keys from AWS_* itself)."""
    options: dict[str, str] = {}
    endpoint = _endpoint()
    if endpoint:
        options["aws_endpoint"] = endpoint
        if endpoint.startswith("http://"):
            options["allow_http"] = "true"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["aws_region"] = region
    return options


def _code(exc) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _missing(exc) -> bool:
    return _code(exc) in ("NoSuchKey", "404", "NotFound")


def _failed(exc: Exception, path) -> RegistryError:
    """A clear error for what the store refused (no bucket, no access, unreachable)."""
    code = _code(exc)
    if code in ("NoSuchBucket",):
        return RegistryError(f"{path}: the bucket {path.bucket!r} does not exist (create it first)")
    if code:
        return RegistryError(f"{path}: the object store answered {code}: {exc}")
    return RegistryError(f"{path}: cannot reach the object store ({type(exc).__name__}: {exc}); "
                         "check AWS_ENDPOINT_URL and the AWS_* credentials")


def _precondition(exc) -> bool:
    return _code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def _prefix_problem(key: str) -> str | None:
    """Why an s3 home's prefix cannot be one (None: it can). The tables are opened by LanceDB through a URL,
    which reads '?' as a query, '#' as a fragment and '%' as an escape and folds '.' and '..' segments, while
    the home's own files (config.json, the lock) are keys as written: with any of these, the tables of
    s3://b/x?a and s3://b/x?b were one, under two locks."""
    for bad, what in (("?", "a '?'"), ("#", "a '#'"), ("%", "a '%'"), ("\\", "a backslash")):
        if bad in key:
            return f"an s3 home's prefix cannot hold {what} (LanceDB reads the home as a URL): choose another prefix"
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        return "an s3 home's prefix cannot hold a control character"
    if any(part in ("", ".", "..") for part in key.split("/")) and key:
        return "an s3 home's prefix cannot have an empty, '.' or '..' segment (a URL folds them away)"
    return None


class ObjectPath:
    """`s3://bucket/key`: the subset of `pathlib.Path` the registry home uses. A "directory" is a key
    prefix; it exists when some object lies under it."""

    __slots__ = ("bucket", "key")

    def __init__(self, bucket: str, key: str = "") -> None:
        self.bucket = bucket
        self.key = key.strip("/")

    @classmethod
    def parse(cls, uri: str) -> "ObjectPath":
        rest = uri[len(SCHEME):]
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise RegistryError(f"{uri!r}: an s3 home is s3://BUCKET/PREFIX")
        problem = _prefix_problem(key.strip("/"))
        if problem:
            from indexing.errors import InputError

            raise InputError(f"{uri!r}: {problem}", field="home")
        return cls(bucket, key)

    # ------------------------------------------------------------------ the path
    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ObjectPath) and (self.bucket, self.key) == (other.bucket, other.key)

    def __hash__(self) -> int:
        return hash((self.bucket, self.key))

    def __truediv__(self, name) -> "ObjectPath":
        name = str(name).strip("/")
        return ObjectPath(self.bucket, f"{self.key}/{name}" if self.key else name)

    @property
    def name(self) -> str:
        return self.key.rpartition("/")[2]

    @property
    def suffix(self) -> str:
        name = self.name
        return name[name.rfind("."):] if "." in name.lstrip(".") else ""

    @property
    def parent(self) -> "ObjectPath":
        return ObjectPath(self.bucket, self.key.rpartition("/")[0])

    def with_name(self, name: str) -> "ObjectPath":
        return self.parent / name

    def with_suffix(self, suffix: str) -> "ObjectPath":
        name = self.name
        stem = name[: len(name) - len(self.suffix)] if self.suffix else name
        return self.with_name(stem + suffix)

    def expanduser(self) -> "ObjectPath":
        return self

    def resolve(self) -> "ObjectPath":
        return self

    absolute = resolve

    @property
    def uri(self) -> str:
        return str(self)

    # ------------------------------------------------------------------ objects
    def read_bytes(self) -> bytes:
        try:
            return client().get_object(Bucket=self.bucket, Key=self.key)["Body"].read()
        except Exception as exc:
            if _missing(exc):
                raise FileNotFoundError(str(self)) from None
            raise _failed(exc, self) from exc

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> int:
        try:
            client().put_object(Bucket=self.bucket, Key=self.key, Body=bytes(data))
        except Exception as exc:
            raise _failed(exc, self) from exc
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def is_file(self) -> bool:
        try:
            client().head_object(Bucket=self.bucket, Key=self.key)
            return True
        except Exception as exc:
            if _missing(exc):
                return False
            raise _failed(exc, self) from exc

    def is_dir(self) -> bool:
        prefix = f"{self.key}/" if self.key else ""
        try:
            listed = client().list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=1)
        except Exception as exc:
            raise _failed(exc, self) from exc
        return bool(listed.get("KeyCount", 0))

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def stat(self):
        head = client().head_object(Bucket=self.bucket, Key=self.key)
        return SimpleNamespace(st_mtime=head["LastModified"].timestamp(), st_size=head["ContentLength"])

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: prefixes exist by holding objects."""

    def unlink(self, missing_ok: bool = False) -> None:
        if not missing_ok and not self.is_file():
            raise FileNotFoundError(str(self))
        client().delete_object(Bucket=self.bucket, Key=self.key)

    def walk_keys(self) -> Iterator[str]:
        """Every key under this prefix, recursively."""
        prefix = f"{self.key}/" if self.key else ""
        for page in client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                yield item["Key"]

    def iterdir(self) -> Iterator["ObjectPath"]:
        prefix = f"{self.key}/" if self.key else ""
        pages = client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/")
        for page in pages:
            for item in page.get("CommonPrefixes", []):
                yield ObjectPath(self.bucket, item["Prefix"])
            for item in page.get("Contents", []):
                yield ObjectPath(self.bucket, item["Key"])

    def glob(self, pattern: str) -> Iterator["ObjectPath"]:
        return (p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern))

    def rename(self, target: "ObjectPath") -> "ObjectPath":
        """Copy then delete (S3 has no rename): not atomic. Callers copy into a place nothing points to
        yet, and `training.json` goes last, so a checkpoint directory is whole once it holds that."""
        keys = sorted(self.walk_keys(), key=lambda k: (k.endswith("/training.json"), k))
        if not keys:
            keys = [self.key]
        for key in keys:
            dest = target.key + key[len(self.key):]
            client().copy_object(Bucket=target.bucket, Key=dest, CopySource={"Bucket": self.bucket, "Key": key})
        for key in keys:
            client().delete_object(Bucket=self.bucket, Key=key)
        return target


def remove_tree(path: ObjectPath) -> None:
    keys = list(path.walk_keys())
    for start in range(0, len(keys), 1000):
        client().delete_objects(Bucket=path.bucket,
                                Delete={"Objects": [{"Key": k} for k in keys[start:start + 1000]], "Quiet": True})


def write_npy(path: ObjectPath, array) -> None:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    path.write_bytes(buffer.getvalue())


# ---------------------------------------------------------------------- the lease
class LeaseLost(RegistryError):
    """This writer's lease lapsed and another writer took it: nothing more may be written or undone."""


def _seconds(env: str, default: float) -> float:
    try:
        return float(os.environ.get(env, default))
    except ValueError:
        raise RegistryError(f"${env} must be a number of seconds, not {os.environ[env]!r}") from None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Lease:
    """The writer lock of an s3 home (see the module docstring)."""

    def __init__(self, path: ObjectPath, home: ObjectPath) -> None:
        self.path = path
        self.home = home
        self.ttl = _seconds(LEASE_ENV, _LEASE_SECONDS)
        self.wait = _seconds(WAIT_ENV, _WAIT_SECONDS)
        self.holder = f"{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"
        self.etag: str | None = None
        self.lost = False
        self._renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._etag_lock = threading.Lock()

    def _body(self) -> bytes:
        self._renewals += 1
        return json.dumps({"holder": self.holder, "pid": os.getpid(), "host": socket.gethostname(),
                           "acquired": self._acquired, "renewed": _now(), "renewals": self._renewals,
                           "ttl": self.ttl}).encode("utf-8")

    def acquire(self) -> None:
        s3 = client()
        self._acquired = _now()
        deadline = time.monotonic() + self.wait
        watched: tuple[str, float] | None = None  # (the holder's ETag, when this waiter first saw it)
        pause = 0.05
        while True:
            try:
                self.etag = s3.put_object(Bucket=self.path.bucket, Key=self.path.key, Body=self._body(),
                                          IfNoneMatch="*")["ETag"]
                break
            except Exception as exc:
                if not _precondition(exc):
                    raise
            try:
                got = s3.get_object(Bucket=self.path.bucket, Key=self.path.key)
                etag, info = got["ETag"], json.loads(got["Body"].read() or b"{}")
            except Exception as exc:
                if _missing(exc):
                    continue  # released meanwhile: try again at once
                raise
            now = time.monotonic()
            if watched is None or watched[0] != etag:
                watched = (etag, now)
            elif now - watched[1] >= self.ttl:
                # Not renewed for a whole lease: its holder is dead. Take it over, unless someone else
                # just did (then the ETag no longer matches and we keep waiting).
                try:
                    self.etag = s3.put_object(Bucket=self.path.bucket, Key=self.path.key, Body=self._body(),
                                              IfMatch=etag)["ETag"]
                    break
                except Exception as exc:
                    if not (_precondition(exc) or _missing(exc)):
                        raise
                    watched = None
            if now >= deadline:
                raise RegistryError(
                    f"the registry home {self.home} is locked by another writer: {info.get('holder', '?')}, "
                    f"holding it since {info.get('acquired', '?')} (last renewed {info.get('renewed', '?')}); "
                    f"waited {self.wait:g} s (${WAIT_ENV}). A writer that died releases it "
                    f"{info.get('ttl', self.ttl):g} s after its last renewal.")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
        self._stop.clear()
        self._thread = threading.Thread(target=self._keep, name="locus-s3-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        with self._etag_lock:
            if self.lost:
                raise LeaseLost(self._lost_message())
            try:
                self.etag = client().put_object(Bucket=self.path.bucket, Key=self.path.key, Body=self._body(),
                                                IfMatch=self.etag)["ETag"]
            except Exception as exc:
                if _precondition(exc) or _missing(exc):
                    self.lost = True
                    raise LeaseLost(self._lost_message()) from None
                raise

    def _lost_message(self) -> str:
        return (f"this writer ({self.holder}) lost its lease on {self.home}: it did not renew it for "
                f"{self.ttl:g} s and another writer took over (and rolled back this writer's open "
                "transaction); nothing was committed")

    def _keep(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self._renew()
            except LeaseLost:
                return
            except Exception:  # a network blip: try again at the next tick, while the lease still runs
                continue

    def check(self) -> None:
        """Prove the lease is still ours right now (a conditional renewal), else raise LeaseLost."""
        self._renew()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost or self.etag is None:
            return
        try:
            client().delete_object(Bucket=self.path.bucket, Key=self.path.key, IfMatch=self.etag)
        except Exception as exc:
            if _code(exc) in ("NotImplemented", "InvalidArgument"):  # a store without conditional deletes
                try:
                    if client().head_object(Bucket=self.path.bucket, Key=self.path.key)["ETag"] == self.etag:
                        client().delete_object(Bucket=self.path.bucket, Key=self.path.key)
                except Exception:
                    pass
            elif not (_precondition(exc) or _missing(exc)):
                raise


@contextmanager
def lease(home: ObjectPath, name: str) -> Iterator[Lease]:
    held = Lease(home / name, home)
    held.acquire()
    try:
        yield held
    finally:
        held.release()


def lease_alive(path: ObjectPath) -> bool:
    """Whether a lease object is there and was renewed within its term (by the wall clock: only a hint,
    for the service's choice to keep answering from its last snapshot while a writer works)."""
    try:
        info = json.loads(path.read_bytes())
        renewed = datetime.fromisoformat(info["renewed"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return (datetime.now(timezone.utc) - renewed).total_seconds() < float(info.get("ttl", _LEASE_SECONDS)) + 5
