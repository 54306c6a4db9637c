"""`registry serve`: the registry over HTTP (FastAPI + uvicorn), with the encoders kept warm."""
from __future__ import annotations

import os
from pathlib import Path

import click



def _read_token(token_file: Path | None) -> str | None:
    from registry.service.settings import TOKEN_ENV

    if token_file is not None:
        try:
            token = token_file.read_text("utf-8").strip()
        except OSError as err:
            raise click.BadParameter(f"cannot read the token file: {err.strerror}", param_hint="--token-file")
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
              help="Where LOCUS and the query encoder run: auto is CUDA when torch sees it.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
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
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.pass_context
def serve(ctx, host, port, device, token_file, query_backend, max_body_mb, threads, log_level) -> None:
    """Serve the registry over HTTP: /v1 API, /docs, /openapi.json, /metrics.

    The same home the CLI uses; both can run side by side (writes take the store's lock, and the
    service reloads what changed)."""
    import uvicorn

    from indexing.home import resolve_home
    from registry.service.app import create_app
    from registry.service.settings import TOKEN_ENV, Limits, ServiceSettings, is_loopback, resolve_device

    home = resolve_home(ctx.obj["home"])
    if not (home / "config.json").is_file():
        raise click.ClickException(f"no registry at {home} (run `registry init`, then import and train)")
    token = _read_token(token_file)
    if token is None and not is_loopback(host):
        raise click.UsageError(f"refusing to listen on {host} without a token: pass --token-file or set "
                               f"${TOKEN_ENV} (without one, only a loopback address is allowed)")
    settings = ServiceSettings(home=home, token=token, device=resolve_device(device), query_backend=query_backend,
                               limits=Limits(max_body_bytes=int(max_body_mb * 1024 * 1024)), torch_threads=threads,
                               port=port)
    app = create_app(settings)
    click.echo(f"serving {home} on http://{host}:{port} (device {settings.device}; docs at /docs; "
               f"writes {'need the bearer token' if token else 'open to loopback only'})", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


COMMANDS: list[click.Command] = [serve]
