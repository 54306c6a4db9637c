"""Starting the real service (uvicorn in a subprocess on a free loopback port) for the service tests."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from encoder.query_encoder import EXPORT_ENV

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "test-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`registry --home HOME serve` on a free port; `stop()` ends it (SIGTERM, or `kill()` SIGKILL)."""

    def __init__(self, home: Path, *, token: str | None = TOKEN, extra: tuple[str, ...] = (), log: Path | None = None):
        self.home, self.token, self.extra = home, token, extra
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._start(log)

    def restart(self) -> None:
        """A new server process on the same home and port (after `kill()` or `stop()`)."""
        self._start(self.log.with_name(self.log.stem + "-restart.log"))

    def _start(self, log: Path | None) -> None:
        home, token, extra = self.home, self.token, self.extra
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        env.pop("LOCUS_TOKEN", None)
        # The product's own start: fp32 from the torch-free copy of the query encoder (the first server of a
        # run writes it under the cache, once), not torch: seconds off every start (conftest keeps the
        # in-process routes on torch). LOCUS_TEST_SERVER_EXPORT=0 keeps the servers on torch too.
        env[EXPORT_ENV] = os.environ.get("LOCUS_TEST_SERVER_EXPORT", "1")
        if token is not None:
            env["LOCUS_TOKEN"] = token
        self.log = log or home.parent / f"server-{self.port}.log"
        self._log = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "--home", str(home), "serve", "--port", str(self.port),
             "--device", "cpu", "--query-backend", "fp32", "--log-level", "warning", *extra],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"the server did not answer within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def client(self, *, auth: bool = True, timeout: float = 120.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if auth and self.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL: no cleanup of any kind
            self.proc.wait()
        self._log.close()


def copy_home(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


@contextmanager
def serving_copy(base: Path, where: Path, **options) -> Iterator[Server]:
    """A Server (`options` as Server takes them) on a copy of `base` made in `where`, stopped on exit:
    the server writes to its own home, never to a home other tests copy from."""
    srv = Server(copy_home(base, where / "home"), **options)
    try:
        yield srv
    finally:
        srv.stop()


def held_reload(state) -> tuple[threading.Event, threading.Event]:
    """Make the service state's reloads wait until the second event is set; the first is set when one starts."""
    reloading, release = threading.Event(), threading.Event()
    load = state._load

    def held(key, previous):
        reloading.set()
        assert release.wait(120)
        return load(key, previous)

    state._load = held
    return reloading, release
