"""The LOCUS config and the checkpoint id, without torch: route reads a checkpoint's predictor G with
numpy (`encoder.predictor`), and importing torch for a config would cost it most of a second.

`encoder.locus` re-exports `LocusConfig`; `encoder.checkpoint` uses `encoder_id` from here.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields

import numpy as np

from indexing.errors import RegistryError
from indexing.home import as_path, is_remote

__all__ = ["LocusConfig", "encoder_id", "read_checkpoint_files", "check_checkpoint_id", "WEIGHTS_FILE", "CONFIG_FILE",
           "FORMAT"]

WEIGHTS_FILE = "weights.safetensors"
CONFIG_FILE = "config.json"
FORMAT = "locus-checkpoint/1"
_ID_LENGTH = 16


@dataclass(frozen=True)
class LocusConfig:
    query_dim: int  # D, width of phi(x)
    d: int = 128  # embedding and token width
    latents: int = 64  # r, learned latents per ISAB block
    blocks: int = 2  # L, ISAB blocks
    heads: int = 4
    predictor_hidden: int = 64
    dropout: float = 0.1  # predictor MLP dropout (the release's)
    encoder_dropout: float = 0.0  # dropout inside the encoder's attention and FFN
    predictor_d: int | None = None  # width of G's query/model path (None: d)
    difficulty: bool = True  # add the per-query bias b(phi) to G's logit
    topics: int = 0  # > 0: add a soft-topic term sum_k softmax(T phi)_k (S z)_k to G's logit

    def __post_init__(self) -> None:
        if self.query_dim <= 0 or self.d <= 0 or self.latents <= 0 or self.blocks <= 0:
            raise ValueError("query_dim, d, latents and blocks must be positive")
        if self.d % self.heads:
            raise ValueError(f"d={self.d} is not divisible by heads={self.heads}")
        if not (0.0 <= self.dropout < 1.0 and 0.0 <= self.encoder_dropout < 1.0):
            raise ValueError("dropout must lie in [0, 1)")

    @property
    def g_dim(self) -> int:
        return self.predictor_d or self.d

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "LocusConfig":
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown LocusConfig field(s): {', '.join(unknown)}")
        return cls(**raw)


def encoder_id(config: LocusConfig, tensors: dict[str, np.ndarray]) -> str:
    """Short hex hash of the config JSON and the weights."""
    h = hashlib.sha256()
    h.update(config.to_json().encode("utf-8"))
    for key in sorted(tensors):
        array = np.ascontiguousarray(tensors[key], dtype="<f4")
        h.update(key.encode("utf-8"))
        h.update(str(array.shape).encode("ascii"))
        h.update(array.tobytes())
    return h.hexdigest()[:_ID_LENGTH]


def read_checkpoint_files(directory) -> tuple[LocusConfig, dict[str, np.ndarray], str]:
    """A checkpoint directory's (config, tensors as numpy, recorded encoder id); errors name the file."""
    from safetensors import SafetensorError
    from safetensors.numpy import load, load_file

    directory = as_path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise RegistryError(f"{path}: checkpoint file missing")
    try:
        meta = json.loads(config_path.read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        config = LocusConfig.from_json(json.dumps(meta["config"]))
        recorded = str(meta["encoder_id"])
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"{config_path}: bad checkpoint config: {exc}") from exc
    try:
        tensors = load(weights_path.read_bytes()) if is_remote(weights_path) else load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise RegistryError(f"{weights_path}: unreadable weights: {exc}") from exc
    return config, tensors, recorded


def check_checkpoint_id(directory, config: LocusConfig, tensors: dict[str, np.ndarray], recorded: str) -> str:
    """The id the contents hash to, refusing non-float32 weights and an id other than the recorded one."""
    if any(v.dtype != np.float32 for v in tensors.values()):
        raise RegistryError(f"{as_path(directory) / WEIGHTS_FILE}: weights must be float32")
    actual = encoder_id(config, tensors)
    if actual != recorded:
        raise RegistryError(
            f"{directory}: checkpoint id mismatch: config.json records {recorded}, contents hash to {actual} "
            "(weights or config changed since saving)"
        )
    return actual
