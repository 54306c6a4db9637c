"""`registry serve`: the registry over HTTP (FastAPI + uvicorn), with the encoders kept warm."""
from __future__ import annotations

import os
from pathlib import Path

import click

from cli._common import json_option


def _read_token(token_file: Path | None) -> str | None:
    from registry.service.settings import TOKEN_ENV

    if token_file is not None:
        try:
            token = token_file.read_text("utf-8").strip()
        except OSError as err:
            raise click.BadParameter(f"cannot read the token file: {err.strerror}", param_hint="--token-file")
        except UnicodeDecodeError:
            raise click.BadParameter(f"{token_file} is not UTF-8 text (a token file holds the token, one line)",
                                     param_hint="--token-file") from None
        if len(token) < 16:
            raise click.BadParameter("the token must have at least 16 characters", param_hint="--token-file")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token and len(token) < 16:
        raise click.UsageError(f"${TOKEN_ENV} must have at least 16 characters")
    return token or None


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where LOCUS and the query encoder run: auto is CUDA when torch sees it (asked only where "
                   "an NVIDIA driver is loaded).")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="File holding the bearer token write endpoints need (else $LOCUS_TOKEN). Required to "
                   "listen beyond loopback.")
@click.option("--query-backend", type=click.Choice(["auto", "fp32", "bf16", "openvino"]), default="auto",
              show_default=True,
              help="Query-encoder engine and precision for new texts (auto: bf16 on CUDA, else openvino on CPU "
                   "when installed, else bf16 on a CPU with native bfloat16, else fp32; fp32 is the reference).")
@click.option("--max-body-mb", default=64.0, show_default=True, type=click.FloatRange(0.001, 4096),
              help="Largest request body (JSON or uploaded file) in MiB; larger ones are answered 413.")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Torch threads per call (requests already run in parallel; more can help a GPU-less "
                   "host with idle cores and few clients).")
@click.option("--compact-every", default=100, show_default=True, type=click.IntRange(0, None),
              help="Compact the store (`registry compact`) once this many writes have landed and the writer "
                   "is idle; 0: never.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@json_option(help="Once listening, print one JSON line on stdout: url, home, device, encoder_id, models, "
                  "writes (for scripts: with --port 0 it names the port chosen).")
@click.pass_context
def serve(ctx, host, port, device, token_file, query_backend, max_body_mb, threads, compact_every, log_level,
          as_json) -> None:
    """Serve the registry over HTTP: /v1 API, /docs, /openapi.json, /metrics.

    The same home the CLI uses; both can run side by side (writes take the store's lock, and the
    service reloads what changed)."""
    from indexing.home import resolve_home
    from registry.service.settings import TOKEN_ENV, is_loopback

    # Everything the user typed is checked before the seconds of imports below.
    home = resolve_home(ctx.obj["home"])
    if not (home / "config.json").is_file():
        raise click.ClickException(f"no registry at {home} (run `registry init`, then import and train)")
    token = _read_token(token_file)
    if token is None and not is_loopback(host):
        raise click.UsageError(f"refusing to listen on {host} without a token: pass --token-file or set "
                               f"${TOKEN_ENV} (without one, only a loopback address is allowed)")
    if port:
        _check_port_free(host, port)

    # Start-up takes seconds (the first with a new query encoder tens of seconds): each stage says
    # what it is doing on stderr, so that a silent terminal is never a mystery.
    stage = _Stages()
    stage.start(f"loading the registry at {home} (the LOCUS predictor, the index)")
    import uvicorn

    from registry.service.app import create_app
    from registry.service.settings import Limits, ServiceSettings, resolve_device
    from registry import Registry
    from registry.service.routes.health import model_counts
    from registry.service.state import WarmState

    settings = ServiceSettings(home=home, token=token, device=resolve_device(device), query_backend=query_backend,
                               limits=Limits(max_body_bytes=int(max_body_mb * 1024 * 1024)), torch_threads=threads,
                               port=port or None, compact_every=compact_every)  # port 0: any, chosen by the OS
    state = WarmState(settings)
    snap = state.snapshot()
    n_models, n_embedded = model_counts(snap, lambda: Registry.open(home).stats().n_models)  # as /v1/health
    stage.done(f"{n_embedded} embedded models, encoder {snap.encoder_id or '(none: run `registry train`)'}")
    if snap.active is not None:
        name = snap.active.query_encoder
        stage.start(f"warming the query encoder {name} ({query_backend})")
        loaded = state.query_encoder(name)
        loaded.encode(["warm-up"], progress=False)
        engine = getattr(loaded, "backend", query_backend)
        stage.done(f"engine {engine}" + (", the torch-free copy" if getattr(loaded, "exported", False) else ""))
    stage.start("starting the HTTP app")
    app = create_app(settings, state=state)  # finds the state warm: its own warm-up costs nothing now
    stage.done()
    writes = "need the bearer token" if token else "open to loopback only"

    def listening(url: str) -> None:
        click.echo(f"listening on {url} (home {home}; device {settings.device}; docs at {url}/docs; "
                   f"writes {writes})", err=True)
        _advertise(home, url, host)
        if as_json:
            import json

            click.echo(json.dumps({"url": url, "home": str(home), "device": settings.device,
                                   "encoder_id": snap.encoder_id, "models": n_models, "embedded": n_embedded,
                                   "writes": "token" if token else "loopback"}))

    server = _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False),
                     on_listening=listening, on_stopped=lambda: _withdraw(home))
    try:
        server.run()
    finally:
        _withdraw(home)  # also when start-up failed; after a SIGTERM uvicorn re-raises it: on_stopped did it


def _check_port_free(host: str, port: int) -> None:
    """Refuse a port another process listens on now, before the seconds of loading (uvicorn would only
    find out after them). A probe bind, released at once; the race with another starter stays uvicorn's."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no clash
        try:
            probe.bind((host, port))
        except OSError as err:
            raise click.UsageError(f"cannot listen on {host}:{port}: {err.strerror or err} "
                                   "(another process has it? --port picks another; --port 0 any free one)") from None


def _advertise(home, url: str, host: str) -> None:
    """Say where this service listens, in the home, so that the CLI's route on this home can ask it
    instead of loading LOCUS itself (`cli._common._local_service`). A wildcard address
    is advertised as loopback, where the CLI on this machine reaches it."""
    import json

    from cli._common import ENDPOINT_FILE
    from indexing.home import is_remote, write_text_atomic

    if is_remote(home):
        return
    if host in ("0.0.0.0", "::"):
        url = url.replace(f"//{host}", "//127.0.0.1").replace("//[::]", "//127.0.0.1")
    try:
        write_text_atomic(home.joinpath(*ENDPOINT_FILE), json.dumps({"url": url, "pid": os.getpid()}))
    except OSError as err:  # a home we may read but not write: serve anyway
        click.echo(f"warning: cannot write {home.joinpath(*ENDPOINT_FILE)}: {err}", err=True)


def _withdraw(home) -> None:
    """Remove the endpoint file if it is still this process's (another service may have taken over)."""
    import json

    from cli._common import ENDPOINT_FILE
    from indexing.home import is_remote

    if is_remote(home):
        return
    path = home.joinpath(*ENDPOINT_FILE)
    try:
        if json.loads(path.read_text("utf-8")).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


class _Stages:
    """`name ...` when a stage starts, `  done in 1.2 s (detail)` when it ends, on stderr."""

    def start(self, name: str) -> None:
        import time

        self._started = time.perf_counter()
        click.echo(f"{name} ...", err=True)

    def done(self, detail: str = "") -> None:
        import time

        seconds = time.perf_counter() - self._started
        click.echo(f"  done in {seconds:.1f} s" + (f" ({detail})" if detail else ""), err=True)


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server that says where it listens once the socket is bound (the real port when
        --port 0 asked for any free one)."""

        def __init__(self, config, on_listening, on_stopped) -> None:
            super().__init__(config)
            self._on_listening, self._on_stopped = on_listening, on_stopped

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started and self.servers:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                self._on_listening(f"http://{shown}:{port}")

        async def shutdown(self, sockets=None) -> None:
            try:
                await super().shutdown(sockets=sockets)
            finally:
                self._on_stopped()

    return Server


def _Server(config, on_listening, on_stopped):
    return _server_class()(config, on_listening, on_stopped)


COMMANDS: list[click.Command] = [serve]
