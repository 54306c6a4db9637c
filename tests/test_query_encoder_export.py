"""The exported fp32 copy of the query encoder (route's fast path, encoder.query_encoder._IRRunner):
the reference's vectors to 1e-5, loaded without torch, keyed to the weights and library versions so a
stale copy is never read, and never kept when its check fails."""
from __future__ import annotations

import json
import logging
import os
import shutil

import numpy as np
import pytest

import encoder.query_encoder as qe
from helpers import encode_in_a_fresh_process, need_openvino

need_openvino(module_level=True)

NAME = "all-MiniLM-L6-v2"
TEXTS = ["What is 2 + 2?", "Name the capital of France.",
         "A train leaves at 9:00 and travels 120 km at 80 km/h; when does it arrive? Options: A. 10:00 B. 10:30",
         "Which amendment to the US constitution protects free speech?", "  Ünïcödé, émojis 🙂 and\ttabs  ",
         "long " * 400]
TOLERANCE = 1e-5  # per component of unit vectors (qe._EXPORT_TOLERANCE)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache directory holding the exported copy of MiniLM, written by the first exported load."""
    directory = tmp_path_factory.mktemp("locus-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCUS_CACHE", str(directory))
        mp.delenv(qe.EXPORT_ENV, raising=False)
        mp.setattr(qe, "_LOADED", {})
        said = []
        handler = logging.Handler()
        handler.emit = lambda record: said.append(record.getMessage())
        qe.log.addHandler(handler)
        qe.log.setLevel(logging.INFO)
        orphan, kept = directory / "exported" / "0000000000000000", directory / "exported" / "1111111111111111"
        for copy, source in ((orphan, directory / "gone" / "model"), (kept, directory)):
            copy.mkdir(parents=True)
            (copy / "manifest.json").write_text(json.dumps({"source": str(source)}))
        try:
            first = qe.load_query_encoder(NAME, exported=True)
        finally:
            qe.log.removeHandler(handler)
        assert not first.exported and first.backend == "fp32"  # the reference answered, and wrote the copy
        # a copy made from a model directory that is gone (a removed virtual environment) is removed then
        assert not orphan.exists() and kept.exists()
        shutil.rmtree(kept)
        assert len(said) == 1 and "writing a torch-free copy" in said[0]  # the wait is announced, once
    return directory


@pytest.fixture
def fresh(monkeypatch, cache):
    monkeypatch.setenv("LOCUS_CACHE", str(cache))
    monkeypatch.delenv(qe.EXPORT_ENV, raising=False)
    monkeypatch.setattr(qe, "_LOADED", {})


def test_exported_copy_gives_the_reference_vectors(fresh, cache):
    manifests = list(cache.glob("exported/*/manifest.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert manifest["probe_max_difference"] <= TOLERANCE and manifest["dim"] == 384
    assert manifest["weights_sha256"]["model.safetensors"]  # what the copy was made from
    fast = qe.load_query_encoder(NAME, exported=True)
    assert fast.exported and fast.name == NAME and fast.dim == 384
    reference = qe.load_query_encoder(NAME, backend="fp32")
    assert not reference.exported
    got, want = fast.encode(TEXTS), reference.encode(TEXTS)
    assert got.shape == want.shape == (len(TEXTS), 384) and got.dtype == np.float32
    assert np.abs(got - want).max() <= TOLERANCE
    singles = np.stack([fast.encode([t])[0] for t in TEXTS])  # a route encodes one text
    assert np.abs(singles - want).max() <= TOLERANCE
    assert qe.load_query_encoder(NAME, exported=True) is fast  # once per process


def test_exported_copy_loads_without_torch(fresh, cache, tmp_path):
    want = qe.load_query_encoder(NAME, backend="fp32").encode(TEXTS[:3])
    got, said = encode_in_a_fresh_process(NAME, TEXTS[:3], cache, tmp_path / "v.npy", "exported=True")
    assert (said["exported"], said["heavy"]) == (True, [])
    assert "fork" not in said["stderr"]  # openvino's telemetry process (and LanceDB's warning about it) is gone
    assert np.abs(got - want).max() <= TOLERANCE


def test_switched_off_by_the_environment(fresh, monkeypatch):
    monkeypatch.setenv(qe.EXPORT_ENV, "0")
    assert not qe.load_query_encoder(NAME, exported=True).exported


def test_a_process_with_the_reference_loaded_keeps_it(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCUS_CACHE", str(tmp_path))
    monkeypatch.delenv(qe.EXPORT_ENV, raising=False)
    monkeypatch.setattr(qe, "_LOADED", {})
    reference = qe.load_query_encoder(NAME, backend="fp32")
    assert qe.load_query_encoder(NAME, exported=True) is reference  # torch is paid for: no copy needed
    assert not (tmp_path / "exported").exists()


def test_the_key_follows_the_model_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "modules.json").write_text("[]")
    weights = model / "model.safetensors"
    weights.write_bytes(b"0" * 64)
    first = qe._export_key(str(model))
    assert first == qe._export_key(str(model))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # replaced weights
    second = qe._export_key(str(model))
    weights.write_bytes(b"0" * 65)
    third = qe._export_key(str(model))
    (model / "tokenizer.json").write_text("{}")  # a file added
    assert len({first, second, third, qe._export_key(str(model))}) == 4
    assert qe._export_key("sentence-transformers/all-MiniLM-L6-v2") is None  # no local files: no copy


def test_a_copy_for_other_files_or_a_damaged_one_is_not_read(fresh, cache, monkeypatch, tmp_path):
    source = qe.resolve_encoder_source(NAME)
    assert qe._load_exported(NAME, source) is not None
    with monkeypatch.context() as mp:
        mp.setattr(qe, "_export_key", lambda source, kind="exported": "0123456789abcdef")  # the weights changed since
        assert qe._load_exported(NAME, source) is None
    original = next(cache.glob("exported/*"))
    damaged = tmp_path / "exported" / original.name
    shutil.copytree(original, damaged)
    monkeypatch.setenv("LOCUS_CACHE", str(tmp_path))
    assert qe._load_exported(NAME, source) is not None  # the copy as written is read
    manifest = json.loads((damaged / "manifest.json").read_text())
    with open(damaged / "model.bin", "r+b") as handle:  # a weights file cut short
        handle.truncate(manifest["bin_size"] - 4)
    assert qe._load_exported(NAME, source) is None
    (damaged / "manifest.json").write_text("{not json")
    assert qe._load_exported(NAME, source) is None


def test_a_copy_that_fails_its_check_is_not_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCUS_CACHE", str(tmp_path))
    monkeypatch.delenv(qe.EXPORT_ENV, raising=False)
    monkeypatch.setattr(qe, "_LOADED", {})
    monkeypatch.setattr(qe, "_EXPORT_TOLERANCE", -1.0)  # no copy can pass
    with pytest.warns(UserWarning, match="no exported copy .*differs from torch"):
        encoder = qe.load_query_encoder(NAME, exported=True)
    assert not encoder.exported and encoder.encode(["What is 2 + 2?"]).shape == (1, 384)  # the reference answers
    assert not list(tmp_path.glob("exported/*/manifest.json"))
    assert [p.name for p in (tmp_path / "exported").iterdir()] == []  # no scratch left behind


def test_the_conversion_posts_no_openvino_telemetry():
    """openvino's converter posts usage events from a forked process (openvino_telemetry, on without a
    consent file): a network call from the user's machine, and a fork with LanceDB loaded. The registry
    imports openvino and its converter with the telemetry module blocked, so their own stub stands in."""
    import subprocess
    import sys

    code = ("import sys, encoder.query_encoder as qe\n"
            "qe._openvino(converter=True)\n"
            "impl = sys.modules['openvino.tools.ovc.convert_impl']\n"
            "print('openvino_telemetry' in sys.modules, impl.tm.__name__)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert out.stdout.split() == ["False", "openvino.tools.ovc.telemetry_stub"], out.stdout + out.stderr
