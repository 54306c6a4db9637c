"""Checkpoints: round trip, and refusal of anything that does not match."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.numpy import load_file, save_file

from encoder.checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_checkpoint, save_checkpoint
from encoder.locus import Locus, LocusConfig
from registry.errors import RegistryError


def make(seed: int = 0, **overrides) -> Locus:
    torch.manual_seed(seed)
    return Locus(LocusConfig(query_dim=10, d=16, latents=4, blocks=1, heads=2, predictor_hidden=8, **overrides)).eval()


def outputs(locus: Locus) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    phi, y = torch.randn(2, 13, 10, generator=g), (torch.rand(2, 13, generator=g) > 0.5).float()
    with torch.no_grad():
        z = locus.embed(phi, y)
        return z, locus(z, phi[0])


def test_round_trip(tmp_path):
    locus = make()
    eid = save_checkpoint(locus, locus.config, tmp_path)
    assert len(eid) == 16 and (tmp_path / WEIGHTS_FILE).is_file() and (tmp_path / CONFIG_FILE).is_file()
    loaded, config, eid2 = load_checkpoint(tmp_path)
    assert config == locus.config and eid2 == eid and not loaded.training
    for a, b in zip(outputs(locus), outputs(loaded)):
        assert torch.equal(a, b)
    assert save_checkpoint(loaded, config, tmp_path / "again") == eid  # the id is a content hash
    assert save_checkpoint(make(seed=1), locus.config, tmp_path / "other") != eid


def test_no_pickle(tmp_path):
    locus = make()
    save_checkpoint(locus, locus.config, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]
    json.loads((tmp_path / CONFIG_FILE).read_text())


def test_mismatched_config_is_refused(tmp_path):
    locus = make()
    save_checkpoint(locus, locus.config, tmp_path)
    meta = json.loads((tmp_path / CONFIG_FILE).read_text())
    meta["config"]["d"] = 32
    (tmp_path / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(RegistryError, match="wrong shapes"):
        load_checkpoint(tmp_path)


def test_config_change_that_keeps_shapes_is_caught_by_the_id(tmp_path):
    locus = make()
    save_checkpoint(locus, locus.config, tmp_path)
    meta = json.loads((tmp_path / CONFIG_FILE).read_text())
    meta["config"]["dropout"] = 0.3
    (tmp_path / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(RegistryError, match="id mismatch"):
        load_checkpoint(tmp_path)


def test_missing_or_unexpected_tensors_are_refused(tmp_path):
    locus = make()
    save_checkpoint(locus, locus.config, tmp_path)
    tensors = load_file(str(tmp_path / WEIGHTS_FILE))
    missing = dict(tensors)
    missing.pop("predictor.difficulty.weight")
    save_file(missing, str(tmp_path / WEIGHTS_FILE))
    with pytest.raises(RegistryError, match="missing tensors: predictor.difficulty.weight"):
        load_checkpoint(tmp_path)
    extra = dict(tensors, bogus=tensors["encoder.head.bias"])
    save_file(extra, str(tmp_path / WEIGHTS_FILE))
    with pytest.raises(RegistryError, match="unexpected tensors: bogus"):
        load_checkpoint(tmp_path)


def test_changed_weights_are_refused(tmp_path):
    locus = make()
    save_checkpoint(locus, locus.config, tmp_path)
    tensors = load_file(str(tmp_path / WEIGHTS_FILE))
    tensors["encoder.head.bias"][0] += 1.0
    save_file(tensors, str(tmp_path / WEIGHTS_FILE))
    with pytest.raises(RegistryError, match="id mismatch"):
        load_checkpoint(tmp_path)


def test_corrupt_or_missing_files_are_refused(tmp_path):
    locus = make()
    save_checkpoint(locus, locus.config, tmp_path)
    (tmp_path / WEIGHTS_FILE).write_bytes(b"\x00garbage")
    with pytest.raises(RegistryError, match="unreadable weights"):
        load_checkpoint(tmp_path)
    (tmp_path / CONFIG_FILE).write_text("{not json")
    with pytest.raises(RegistryError, match="bad checkpoint config"):
        load_checkpoint(tmp_path)
    with pytest.raises(RegistryError, match="missing"):
        load_checkpoint(tmp_path / "nowhere")


def test_unknown_config_field_is_refused(tmp_path):
    locus = make()
    save_checkpoint(locus, locus.config, tmp_path)
    meta = json.loads((tmp_path / CONFIG_FILE).read_text())
    meta["config"]["bogus"] = 1
    (tmp_path / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(RegistryError, match="bogus"):
        load_checkpoint(tmp_path)
