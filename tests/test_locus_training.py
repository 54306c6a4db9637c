"""Training LOCUS on a tiny synthetic pool: it learns, it is seeded, and the helpers are batched."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from encoder.data import EvalData, sample_per_model, split_queries
from encoder.locus import LocusConfig
from encoder.metrics import routing_accuracy
import dataclasses

from encoder.data import evals_by_model
from encoder.inference import embed_models, predict
from encoder.training import TrainConfig, train_locus

D = 16


def synthetic(n_models: int = 12, n_queries: int = 300, seed: int = 0) -> EvalData:
    """4 clusters of queries; model m is strong on cluster m % 4, with its own overall level."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, D))
    cluster = rng.integers(0, 4, size=n_queries)
    vectors = centres[cluster] + 0.3 * rng.normal(size=(n_queries, D))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    level = rng.normal(0, 0.5, size=n_models)
    ability = level[:, None] - 1.5 + 3.0 * (np.arange(4)[None, :] == (np.arange(n_models) % 4)[:, None])
    difficulty = rng.normal(0, 0.5, size=n_queries)
    p = 1 / (1 + np.exp(-(ability[:, cluster] - difficulty[None, :])))
    scores = (rng.random(p.shape) < p).astype(np.float32)
    observed = rng.random(p.shape) > 0.05  # holes
    m_idx, q_idx = np.nonzero(observed)
    return EvalData(
        models=[f"m{i}" for i in range(n_models)],
        query_ids=[str(q) for q in range(n_queries)],
        tasks=[f"t{c}" for c in cluster],
        query_vectors=vectors,
        model_index=m_idx.astype(np.int64),
        query_index=q_idx.astype(np.int64),
        scores=scores[m_idx, q_idx],
    )


TINY = LocusConfig(query_dim=D, d=16, latents=4, blocks=1, heads=2, predictor_hidden=16, dropout=0.0)
FAST = TrainConfig(enc_min=8, enc_max=96, dec_size=64, dec_min=16, lr_encoder=5e-3, lr_predictor=5e-3,
                   weight_decay=1e-4, noise=0.02, eval_every=10, threads=1, max_seconds=None, min_epochs=0)


def fast(**overrides) -> TrainConfig:
    return dataclasses.replace(FAST, **overrides)


@pytest.fixture(scope="module")
def problem():
    data = synthetic()
    split = split_queries(data.n_queries, seed=0)
    train_evals = sample_per_model(data, split.train, n_per_model=150, seed=0)
    return data, split, train_evals


@pytest.fixture(scope="module")
def trained(problem):
    data, split, train_evals = problem
    return train_locus(data, train_evals, split.val, config=fast(epochs=60, patience=1000), locus_config=TINY, seed=0)


def test_loss_falls_and_routing_beats_random(problem, trained):
    data, split, train_evals = problem
    losses = [h["loss"] for h in trained.history]
    assert np.mean(losses[-10:]) < np.mean(losses[:3]) - 0.05, losses
    assert 1 <= trained.best_epoch <= 60 and not trained.locus.training
    truth = data.dense()[:, split.test]
    pred = predict(trained.locus, embed_models(trained.locus, data, train_evals), data.query_vectors[split.test])
    assert pred.shape == truth.shape and ((pred >= 0) & (pred <= 1)).all()
    random_router = float(np.nanmean(truth, axis=0).mean())
    acc = routing_accuracy(pred, truth)
    assert acc > random_router + 0.15, (acc, random_router)
    assert trained.best_val_routing > random_router + 0.15


def test_seeded_training_is_bitwise_reproducible(problem):
    data, split, train_evals = problem
    runs = [
        train_locus(data, train_evals, split.val, config=fast(epochs=6), locus_config=TINY, seed=3) for _ in range(2)
    ]
    a, b = (r.locus.state_dict() for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [h["loss"] for h in runs[0].history] == [h["loss"] for h in runs[1].history]
    other = train_locus(data, train_evals, split.val, config=fast(epochs=2), locus_config=TINY, seed=4)
    assert not torch.equal(other.locus.state_dict()["encoder.head.weight"], a["encoder.head.weight"])


def test_embed_models_is_batched_and_order_free(problem, trained):
    data, _, train_evals = problem
    locus = trained.locus
    full = embed_models(locus, data, train_evals, batch_size=64)
    small_batches = embed_models(locus, data, train_evals, batch_size=3)
    assert full.shape == (data.n_models, 16)
    np.testing.assert_allclose(full, small_batches, atol=1e-5)
    import encoder.inference as inference

    saved, inference.MAX_BATCH_TOKENS = inference.MAX_BATCH_TOKENS, 1  # one model per batch: a token budget
    try:
        np.testing.assert_allclose(embed_models(locus, data, train_evals), full, atol=1e-5)
    finally:
        inference.MAX_BATCH_TOKENS = saved
    per_model = evals_by_model(data, train_evals)
    rng = np.random.default_rng(0)
    shuffled = [rng.permutation(e) for e in per_model]
    np.testing.assert_allclose(embed_models(locus, data, shuffled), full, atol=1e-5)
    one = [e if m == 5 else e[:0] for m, e in enumerate(per_model)]
    alone = embed_models(locus, data, one)
    np.testing.assert_allclose(alone[5], full[5], atol=1e-5)
    assert np.isnan(alone[0]).all()  # no evaluations, no embedding


def test_predict_batches_agree(problem, trained):
    data, split, train_evals = problem
    z = embed_models(trained.locus, data, train_evals)
    q = data.query_vectors[split.test]
    np.testing.assert_allclose(predict(trained.locus, z, q, batch_size=7), predict(trained.locus, z, q), atol=1e-6)


def test_rejects_wrong_query_dim(problem):
    data, split, train_evals = problem
    with pytest.raises(ValueError, match="query_dim"):
        train_locus(data, train_evals, split.val, config=fast(epochs=1), locus_config=LocusConfig(query_dim=D + 1))


def test_noisy_projections_match_noising_the_query_vectors():
    """W (phi + e) computed as W phi + correlated noise: same mean and covariance as noising phi,
    for a narrow group (k < D, Cholesky path) and a wide one (k >= D)."""
    from encoder.training import noisy_projections

    torch.manual_seed(0)
    narrow, wide = torch.nn.Linear(D, 4), torch.nn.Linear(D, 2 * D, bias=False)
    phi_all = torch.randn(5, D)
    idx = torch.tensor([[1, 3] * 4000])  # (1, 8000): many draws of two queries
    with torch.no_grad():
        clean = noisy_projections([([narrow], idx), ([wide, narrow], idx[:, :4])], phi_all, 0.0)
        assert torch.allclose(clean[0][0], narrow(phi_all[idx]), atol=1e-5)
        assert torch.allclose(clean[1][0], wide(phi_all[idx[:, :4]]), atol=1e-5)
        noisy = noisy_projections([([narrow], idx), ([wide], idx)], phi_all, 0.5)
    for (out,), layer in zip(noisy, (narrow, wide)):
        sample = out[0, 0::2] - layer(phi_all[1])  # the draws on query 1, centred on the clean output
        expected = 0.25 * layer.weight @ layer.weight.T  # sigma^2 W W^T
        assert sample.mean(0).abs().max() < 0.1
        torch.testing.assert_close(sample.T.cov(), expected, atol=0.08, rtol=0.1)
