"""Writes the bytecode of what the product imports: every module of its packages and the libraries they import
later (torch, LanceDB, the query encoder's runtimes, the service's), and nothing else.

`scripts/setup.sh` installs with --no-compile (about 300 MB of bytecode for modules the product never
imports) and Python would compile the rest on first use; but where PYTHONDONTWRITEBYTECODE is set it never
writes it, and every `registry` command, service start and worker compiled ~600 modules from source again
(about 2 s of CPU a command on 2 cores). Run with that variable unset: `env -u PYTHONDONTWRITEBYTECODE
.venv/bin/python scripts/compile_bytecode.py`. Prints what it compiled; a library that is not installed
(an optional extra) is skipped and named."""
from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "registry", "encoder", "indexing")
# imported inside functions (so that a command that does not need them never pays for them)
LATER = ("torch", "lance", "lancedb", "pyarrow.dataset", "faiss", "transformers", "tokenizers",
         "sentence_transformers", "safetensors", "sklearn.metrics", "scipy.stats", "fastapi", "uvicorn", "httpx",
         "multipart", "matplotlib.pyplot", "ray", "ray.data", "boto3", "moto", "schemathesis", "hypothesis")


def main() -> int:
    if sys.dont_write_bytecode:
        print("PYTHONDONTWRITEBYTECODE is set: run this with it unset (env -u PYTHONDONTWRITEBYTECODE ...)")
        return 2
    sys.path.insert(0, str(ROOT))
    started, before = time.perf_counter(), len(sys.modules)
    skipped = []
    from encoder.query_encoder import _openvino

    try:
        _openvino(converter=True)  # as the product imports it (the converter on a first export): no telemetry
    except ImportError as err:
        skipped.append(f"openvino ({type(err).__name__})")
    for name in LATER:
        try:
            importlib.import_module(name)
        except Exception as err:  # an optional extra not installed, or a library that cannot load here
            skipped.append(f"{name} ({type(err).__name__})")
    for package in PACKAGES:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, prefix=package + "."):
            try:
                importlib.import_module(info.name)
            except Exception as err:
                skipped.append(f"{info.name} ({type(err).__name__}: {err})")
    print(f"    bytecode written for {len(sys.modules) - before} modules in {time.perf_counter() - started:.0f} s"
          + (f"; not importable here: {', '.join(skipped)}" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
