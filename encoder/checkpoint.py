"""LOCUS checkpoints: `weights.safetensors` + `config.json` in a directory (never pickle).

The encoder id is a short hash of the canonical config JSON and the weight bytes (tensors in sorted
key order, float32, little-endian), so two checkpoints share an id exactly when they embed alike.
`config.json` records the id; loading recomputes it and refuses a checkpoint whose weights do not fit
the config (missing, unexpected or mis-shaped tensors) or whose id does not match.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from encoder.locus import Locus, LocusConfig
from indexing.errors import RegistryError
from indexing.home import as_path, is_remote

__all__ = ["save_checkpoint", "load_checkpoint", "encoder_id", "WEIGHTS_FILE", "CONFIG_FILE"]

WEIGHTS_FILE = "weights.safetensors"
CONFIG_FILE = "config.json"
FORMAT = "locus-checkpoint/1"
_ID_LENGTH = 16


def _tensors(locus: Locus) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().float().contiguous().numpy() for k, v in locus.state_dict().items()}


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


def _atomic_write(path, data: bytes) -> None:
    if is_remote(path):
        path.write_bytes(data)  # one PUT: atomic by itself
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_checkpoint(locus: Locus, config: LocusConfig, directory: str | Path) -> str:
    """Write the checkpoint; returns its encoder id."""
    from safetensors.numpy import save

    if locus.config != config:
        raise RegistryError("save_checkpoint: the config given differs from the model's own config")
    directory = as_path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = _tensors(locus)
    eid = encoder_id(config, tensors)
    meta = {"format": FORMAT, "encoder_id": eid, "config": json.loads(config.to_json())}
    _atomic_write(directory / WEIGHTS_FILE, save(tensors, metadata={"encoder_id": eid}))
    _atomic_write(directory / CONFIG_FILE, (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return eid


def load_checkpoint(
    directory: str | Path, *, device: str | torch.device | None = None
) -> tuple[Locus, LocusConfig, str]:
    """Read and verify a checkpoint -> (Locus in eval mode, its config, its encoder id)."""
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

    locus = Locus(config)
    expected = {k: tuple(v.shape) for k, v in locus.state_dict().items()}
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    wrong = sorted(k for k in set(expected) & set(tensors) if tuple(tensors[k].shape) != expected[k])
    problems = []
    if missing:
        problems.append(f"missing tensors: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    if unexpected:
        problems.append(f"unexpected tensors: {', '.join(unexpected[:5])}{' ...' if len(unexpected) > 5 else ''}")
    if wrong:
        problems.append(
            "wrong shapes: "
            + ", ".join(f"{k} {tuple(tensors[k].shape)} != {expected[k]}" for k in wrong[:5])
        )
    if problems:
        raise RegistryError(f"{weights_path}: weights do not match {config_path}: " + "; ".join(problems))
    if any(v.dtype != np.float32 for v in tensors.values()):
        raise RegistryError(f"{weights_path}: weights must be float32")
    actual = encoder_id(config, tensors)
    if actual != recorded:
        raise RegistryError(
            f"{directory}: checkpoint id mismatch: config.json records {recorded}, contents hash to {actual} "
            "(weights or config changed since saving)"
        )
    locus.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items()})
    if device is not None:
        locus.to(device)
    locus.eval()
    return locus, config, actual
