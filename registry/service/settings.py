"""The service's options and request limits: one dataclass, passed down from `registry serve`."""
from __future__ import annotations

import ipaddress
import threading
from dataclasses import dataclass, field
from pathlib import Path

from registry.limits import MAX_NAME_CHARS, MAX_QUERY_CHARS

__all__ = ["Limits", "ServiceSettings", "TOKEN_ENV", "SERVER_ENV", "CLIENT_HEADER", "READ_HEADER",
           "READ_PATTERN", "GENERATION_HEADER", "is_loopback", "loopback_host", "configure_torch"]

TOKEN_ENV = "LOCUS_TOKEN"  # the bearer token when no --token-file is given
SERVER_ENV = "LOCUS_SERVER"  # the CLI goes through this service URL when set (or --server)
# Without a token, a write that a web page could send without asking (a form, a multipart upload, a
# text/plain or bodiless POST) is accepted only with this header: a browser sends a custom header
# cross-origin only after a CORS preflight, which this server never grants. The client always sends it.
CLIENT_HEADER = "X-Locus-Client"
# Which state a read takes: "fresh" (the default: every write landed before it), "loaded" (whatever is
# loaded), or a generation number N (a state of N or newer: what the client's own writes answered with,
# read-your-writes without waiting for other clients' writes). Up to 18 digits: generations never get there.
READ_HEADER = "X-Locus-Read"
READ_PATTERN = "^(fresh|loaded|0|[1-9][0-9]{0,17})$"
# On an answer: the generation of the state a read took, or the home's once a write landed.
GENERATION_HEADER = "X-Locus-Generation"


@dataclass(frozen=True)
class Limits:
    """What one request may carry. Over a limit: 413 (body) or 422 naming the field."""

    max_body_bytes: int = 64 * 1024 * 1024  # a request body, JSON or an uploaded file
    max_name_chars: int = MAX_NAME_CHARS  # a model name (the registry's own limit, registry.limits)
    max_query_chars: int = MAX_QUERY_CHARS  # one query text (route, evaluations), as registry.limits
    max_evaluations: int = 100_000  # evaluations in one add or refine
    max_listed_queries: int = 100_000  # stored queries in one GET /v1/queries (offset pages past it)
    max_route_queries: int = 1_024  # texts in one route call
    max_k: int = 1_000  # k / fallback of search and route
    max_random_draws: int = 10_000  # portfolio's random subsets (each routes the test queries once)
    max_where_chars: int = 2_000  # a metadata filter expression
    max_wait_s: float = 60.0  # longest a request may wait for its job


@dataclass(frozen=True)
class ServiceSettings:
    home: Path
    token: str | None = None
    device: str = "cpu"  # resolved: "cpu" or "cuda"
    limits: Limits = field(default_factory=Limits)
    query_backend: str = "auto"  # query encoder: "fp32", "bf16", "openvino" or "auto" (see encoder.query_encoder)
    max_batch_jobs: int = 64  # jobs the writer lands in one transaction and one forward pass
    text_cache_size: int = 100_000  # encoded query texts kept in memory
    # Writer batches after which the writer, once idle, compacts the store (Registry.compact; 0: never):
    # each batch leaves a fragment and a version in five tables, and 300 of them made an add-model 4.6x
    # slower (scripts/bench_compact.py)
    compact_every: int = 100
    # Torch intra-op threads. One: requests run in parallel across threads already, and on a busy
    # 2-core machine two OpenMP threads per call spin against each other (a cached route measured
    # 31 CPU-ms with 2 threads, 3 CPU-ms with 1; an add-model forward pass 0.55 against 0.18 CPU-s).
    torch_threads: int = 1
    port: int | None = None  # the port served on: without a token, a request's Host must name it


def loopback_host(host: str, port: int | None) -> bool:
    """Whether an HTTP Host header names this loopback server (`localhost`, `127.0.0.1`, `[::1]`, with
    its port): a DNS-rebinding page reaches the server under its own host name, which is refused."""
    name, _, given = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name or (name.startswith("[") != name.endswith("]")):
        name, given = host, ""
    name = name.strip("[]").lower()
    if not is_loopback(name):
        return False
    if not given:
        return port in (None, 80)
    return given.isdigit() and (port is None or int(given) == port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_device(device: str) -> str:
    """"auto" is CUDA when torch sees it, else CPU; "cuda" without CUDA is refused."""
    from registry.errors import InputError

    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"device must be auto, cpu or cuda, not {device!r}", field="device")
    if device == "cpu" or (device == "auto" and not _may_have_cuda()):
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise InputError("--device cuda: torch sees no CUDA device", field="device")
    return "cpu"


def _may_have_cuda() -> bool:
    """False when this is Linux and no NVIDIA driver is loaded: "auto" is then the CPU without importing
    torch (1.4 s of a 2.4 s start). Elsewhere, or with a driver, torch is asked."""
    import sys

    if not sys.platform.startswith("linux"):
        return True
    return Path("/proc/driver/nvidia/version").exists() or any(Path("/dev").glob("nvidia[0-9]*"))


_TORCH_CONFIGURED = threading.Lock()


def configure_torch(settings: "ServiceSettings") -> None:
    """Import torch and give it the service's thread count: before the first write on CPU (the writer
    embeds with the torch LOCUS; routes read G in numpy), at start on a GPU. Idempotent."""
    import torch

    with _TORCH_CONFIGURED:
        if torch.get_num_threads() != settings.torch_threads:
            torch.set_num_threads(settings.torch_threads)
