"""Route's predictor G in numpy (encoder.predictor) against the torch Locus it replaces there: the same
P(correct) to 1e-6 and the same rankings, and a route of a stored text that never imports torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import need_openvino, synthetic_registry

from encoder.checkpoint import _tensors, save_checkpoint
from encoder.inference import predict as torch_predict
from encoder.locus import Locus, LocusConfig
from encoder.predictor import NumpyPredictor, load_predictor, predict
from registry import RegistryError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [
    LocusConfig(query_dim=48, d=32, latents=4, heads=4),  # the release's G with the difficulty bias
    LocusConfig(query_dim=48, d=32, latents=4, heads=4, predictor_d=16, difficulty=False),  # P z
    LocusConfig(query_dim=48, d=32, latents=4, heads=4, predictor_d=16, topics=5),  # soft-topic skill
]


@pytest.mark.parametrize("config", CONFIGS, ids=["release", "projected", "topics"])
def test_numpy_g_is_torch_g(config):
    torch.manual_seed(1)
    locus = Locus(config).eval()
    rng = np.random.default_rng(1)
    z = rng.normal(size=(40, config.d)).astype(np.float32)
    phi = rng.normal(size=(9, config.query_dim)).astype(np.float32)
    reference = torch_predict(locus, z, phi)
    fast = NumpyPredictor(config, _tensors(locus)).predict(z, phi)
    assert fast.shape == reference.shape == (40, 9) and fast.dtype == np.float32
    assert reference.std() > 0.01  # not a flat output that any G would match
    np.testing.assert_allclose(fast, reference, atol=1e-6, rtol=0)
    # `predict` takes either: the torch Locus still goes through torch
    np.testing.assert_array_equal(predict(locus, z, phi), reference)


def test_load_predictor_verifies_the_checkpoint(tmp_path):
    config = CONFIGS[0]
    torch.manual_seed(2)
    locus = Locus(config).eval()
    eid = save_checkpoint(locus, config, tmp_path / "ck")
    predictor, loaded_config, loaded_id = load_predictor(tmp_path / "ck")
    assert loaded_id == eid and loaded_config == config
    meta = json.loads((tmp_path / "ck" / "config.json").read_text())
    meta["encoder_id"] = "0" * 16
    (tmp_path / "ck" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(RegistryError, match="checkpoint id mismatch"):
        load_predictor(tmp_path / "ck")
    (tmp_path / "ck" / "weights.safetensors").unlink()
    with pytest.raises(RegistryError, match="weights.safetensors: checkpoint file missing"):
        load_predictor(tmp_path / "ck")


def test_near_ties_rank_by_name_and_gaps_by_p():
    from registry.analytics.routing import TIE, _rank

    names = np.array(["d", "c", "b", "a"])
    p = np.array([0.5, 0.5 + TIE / 4, 0.9, 0.5 - TIE / 4])  # a, c, d within TIE of each other
    assert [names[i] for i in _rank(p, names)] == ["b", "a", "c", "d"]
    p = np.array([0.5, 0.5 + 3 * TIE, 0.9, 0.5 - 3 * TIE])  # apart: by P(correct)
    assert [names[i] for i in _rank(p, names)] == ["b", "c", "d", "a"]


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    home = tmp_path_factory.mktemp("route-numpy") / "home"
    return synthetic_registry(home, train_epochs=10, n_families=3, models_per_family=3, queries_per_task=20,
                              tasks=("math", "law", "code"), n_duplicates=2, seed=5)


def test_route_rankings_match_the_torch_locus(reg):
    """Every stored text routed with the numpy G and with the torch Locus (the service's): the same
    rankings, P(correct) within 1e-6 (the result reports 6 decimals: at most one unit of the last)."""
    from registry.catalog.dataset import load_query_vectors
    from registry.analytics.routing import candidate_rows, decide
    from registry.catalog.embedding import active_encoder, active_predictor
    from registry.analytics.search import open_index

    store = reg.store
    models = open_index(store)
    fast, slow = active_predictor(store), active_encoder(store)
    assert isinstance(fast.locus, NumpyPredictor) and isinstance(slow.locus, Locus)
    assert (fast.encoder_id, fast.query_encoder) == (slow.encoder_id, slow.query_encoder)
    phi = load_query_vectors(store, slow.query_encoder).vectors
    texts = [f"q{i}" for i in range(len(phi))]
    rows = candidate_rows(models, slow, (), None)
    a = decide(models, fast, rows, phi, texts, k=len(rows), fallback=3)
    b = decide(models, slow, rows, phi, texts, k=len(rows), fallback=3)
    assert len(a) == len(phi) > 30
    for x, y in zip(a, b):
        assert [r.name for r in x.ranking] == [r.name for r in y.ranking]
        assert np.allclose([r.p_correct for r in x.ranking], [r.p_correct for r in y.ranking], atol=1.01e-6, rtol=0)
        assert [f.name for f in x.fallbacks] == [f.name for f in y.fallbacks]


def test_route_of_a_stored_text_imports_no_torch(reg):
    text = reg.store.read("queries", ["text"]).column("text")[0].as_py()
    code = ("import sys, json\nfrom registry import Registry\n"
            "d = Registry.open(sys.argv[1], create=False).route(sys.argv[2], k=3)\n"
            "print(json.dumps({'torch': 'torch' in sys.modules, 'top': d.ranking[0].name}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, str(reg.home), text], capture_output=True, text=True,
                         env=env, check=True, cwd=ROOT).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"torch": False, "top": reg.route(text, k=3).ranking[0].name}


NEW_TEXTS = ["Write a Python function that counts the vowels in a string in linear time.",
             "Is a verbal agreement to sell a house binding?", "Integrate x squared from 0 to 3."]


def test_new_texts_route_alike_with_the_exported_query_encoder(reg, monkeypatch, tmp_path):
    """A new text encoded by the exported copy (route's default once written) and by torch: the same
    rankings and P(correct) within 1e-5."""
    need_openvino()
    import encoder.query_encoder as qe

    monkeypatch.setenv("LOCUS_CACHE", str(tmp_path))
    monkeypatch.setenv(qe.EXPORT_ENV, "0")
    monkeypatch.setattr(qe, "_LOADED", {})
    reference = reg.route(NEW_TEXTS, k=9)
    monkeypatch.delenv(qe.EXPORT_ENV)
    monkeypatch.setattr(qe, "_LOADED", {})  # a fresh process: loads torch once more, and writes the copy
    reg.route(NEW_TEXTS[:1])
    monkeypatch.setattr(qe, "_LOADED", {})
    fast = reg.route(NEW_TEXTS, k=9)
    assert qe.load_query_encoder("all-MiniLM-L6-v2", exported=True).exported  # the copy answered
    for x, y in zip(fast, reference):
        assert [r.name for r in x.ranking] == [r.name for r in y.ranking]
        assert np.allclose([r.p_correct for r in x.ranking], [r.p_correct for r in y.ranking], atol=1e-5, rtol=0)
        assert [f.name for f in x.fallbacks] == [f.name for f in y.fallbacks]
