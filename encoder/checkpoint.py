"""LOCUS checkpoints: `weights.safetensors` + `config.json` in a directory (never pickle).

The encoder id is a short hash of the canonical config JSON and the weight bytes (tensors in sorted
key order, float32, little-endian), so two checkpoints share an id exactly when they embed alike.
`config.json` records the id; loading recomputes it and refuses a checkpoint whose weights do not fit
the config (missing, unexpected or mis-shaped tensors) or whose id does not match.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from encoder.locus import Locus, LocusConfig
from encoder.locus_config import (CONFIG_FILE, FORMAT, WEIGHTS_FILE, check_checkpoint_id, encoder_id,
                                  read_checkpoint_files)
from indexing.errors import RegistryError
from indexing.home import as_path, is_remote

__all__ = ["save_checkpoint", "load_checkpoint", "encoder_id", "WEIGHTS_FILE", "CONFIG_FILE"]


def _tensors(locus: Locus) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().float().contiguous().numpy() for k, v in locus.state_dict().items()}


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
    directory = as_path(directory)
    config, tensors, recorded = read_checkpoint_files(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
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
    actual = check_checkpoint_id(directory, config, tensors, recorded)
    locus.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items()})
    if device is not None:
        locus.to(device)
    locus.eval()
    return locus, config, actual
