"""Selection and early stopping: TrainConfig checks, the Selector's rules, a skewed pool where
routing-based selection stops at a collapsed predictor, progress lines and the collapse warning."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from encoder.data import EvalData, sample_per_model, split_queries
from encoder.locus import LocusConfig
from encoder.metrics import correctness_accuracy
from encoder.data import evals_by_model
from encoder.inference import embed_models, predict
from encoder.training import Selector, TrainConfig, Validation, collapse_warnings, embedding_spread, train_locus

D = 16
TINY = LocusConfig(query_dim=D, d=16, latents=4, blocks=1, heads=2, predictor_hidden=16, dropout=0.0)


def v(loss: float, auc: float = 0.7, routing: float = 0.5) -> Validation:
    return Validation(loss=loss, auc=auc, routing=routing, chance_loss=0.7)


def test_config_checks_and_round_trip():
    cfg = TrainConfig(epochs=7, select="auc")
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="bogus"):
        TrainConfig.from_dict({"epochs": 3, "bogus": 1})
    with pytest.raises(ValueError, match="select"):
        TrainConfig(select="accuracy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_seconds"):
        TrainConfig(max_seconds=0)
    with pytest.raises(ValueError, match="epochs"):
        TrainConfig(epochs=0)


def test_selector_ignores_epochs_before_min_epochs():
    s = Selector(TrainConfig(min_epochs=30, patience=1000, patience_seconds=None, max_seconds=None))
    assert s.update(10, 1.0, v(0.30))
    assert not s.update(20, 2.0, v(0.40))
    assert s.stop_reason(20, 2.0) is None
    assert s.update(30, 3.0, v(0.50))  # the first validation past min_epochs wins, however bad
    assert s.best_epoch == 30
    assert s.update(40, 4.0, v(0.45)) and s.best_epoch == 40


def test_selector_patience_in_epochs_and_seconds_and_the_time_cap():
    cfg = TrainConfig(min_epochs=0, patience=30, patience_seconds=None, max_seconds=None, min_delta=0.01)
    s = Selector(cfg)
    s.update(10, 1.0, v(0.50))
    s.update(20, 2.0, v(0.499))  # better, so kept, but less than 1% better: the patience clock runs on
    assert s.best_epoch == 20
    assert s.stop_reason(39, 3.9) is None and s.stop_reason(40, 4.0) == "patience"
    s = Selector(dataclasses.replace(cfg, patience=10_000, patience_seconds=5.0))
    s.update(10, 1.0, v(0.5))
    assert s.stop_reason(50, 5.9) is None and s.stop_reason(60, 6.1) == "patience_seconds"
    s = Selector(dataclasses.replace(cfg, max_seconds=3.0))
    assert s.stop_reason(1, 3.5) == "max_seconds"
    # auc and routing are maximised
    s = Selector(dataclasses.replace(cfg, select="auc"))
    s.update(10, 1.0, v(0.5, auc=0.6))
    assert s.update(20, 2.0, v(0.9, auc=0.7)) and not s.update(30, 3.0, v(0.1, auc=0.65))


def skewed_pool(n_models: int = 12, n_queries: int = 400, seed: int = 0) -> EvalData:
    """~15% positive labels, 81% of the matrix observed, and one model best on nearly every query,
    so routing accuracy is at its plateau as soon as the predictor knows each model's level, while
    correctness needs each model's strong cluster (model m is strong on cluster m % 4)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, D))
    cluster = rng.integers(0, 4, size=n_queries)
    vectors = centres[cluster] + 0.3 * rng.normal(size=(n_queries, D))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    level = np.linspace(-1, 1, n_models)
    level[0] = 6.0
    ability = level[:, None] - 4.5 + 3.5 * (np.arange(4)[None, :] == (np.arange(n_models) % 4)[:, None])
    p = 1 / (1 + np.exp(-ability[:, cluster]))
    scores = (rng.random(p.shape) < p).astype(np.float32)
    m, q = np.nonzero(rng.random(p.shape) < 0.81)
    return EvalData([f"m{i}" for i in range(n_models)], [str(i) for i in range(n_queries)],
                    [f"t{c}" for c in cluster], vectors, m.astype(np.int64), q.astype(np.int64), scores[m, q])


def test_default_selection_does_not_stop_at_a_base_rate_predictor():
    """With the old rule (select on validation routing, no minimum) this pool stops at epoch 10 with
    correctness accuracy equal to the majority rate; the defaults must not."""
    data = skewed_pool()
    split = split_queries(data.n_queries, seed=0)
    train = sample_per_model(data, split.train, n_per_model=None, seed=0)
    cfg = TrainConfig(epochs=150, min_epochs=50, max_seconds=None, threads=1)
    result = train_locus(data, train, split.val, config=cfg, locus_config=TINY, seed=0)
    truth = data.dense()[:, split.test]
    labels = truth[~np.isnan(truth)] >= 0.5
    majority = max(labels.mean(), 1 - labels.mean())
    assert labels.mean() < 0.2
    pred = predict(result.locus, embed_models(result.locus, data, train), data.query_vectors[split.test])
    assert result.best_epoch >= 50
    assert correctness_accuracy(pred, truth) > majority + 0.03, (correctness_accuracy(pred, truth), majority)
    assert result.best.loss < 0.9 * result.best.chance_loss
    assert collapse_warnings(result.best, None) == []


def test_collapse_warnings_for_chance_loss_and_embeddings_within_noise():
    assert collapse_warnings(v(0.70), None)[0].startswith("validation loss 0.7000 is at chance")
    assert "AUC" in collapse_warnings(v(0.5, auc=0.51), None)[0]
    spread = {"self": 0.1, "between": 0.12, "ratio": 1.2}
    assert "within noise" in collapse_warnings(None, spread)[0]
    assert collapse_warnings(v(0.5), {"self": 0.1, "between": 1.0, "ratio": 10.0}) == []


def test_an_untrained_encoder_on_random_labels_is_flagged():
    """Labels independent of model and query: nothing to learn, and the report must say so."""
    rng = np.random.default_rng(1)
    n_models, n_queries = 8, 200
    m, q = np.meshgrid(np.arange(n_models), np.arange(n_queries), indexing="ij")
    vectors = rng.normal(size=(n_queries, D)).astype(np.float32)
    data = EvalData([f"m{i}" for i in range(n_models)], [str(i) for i in range(n_queries)], ["t"] * n_queries,
                    vectors / np.linalg.norm(vectors, axis=1, keepdims=True), m.ravel().astype(np.int64),
                    q.ravel().astype(np.int64), (rng.random(m.size) < 0.5).astype(np.float32))
    split = split_queries(n_queries, seed=0)
    train = sample_per_model(data, split.train, n_per_model=None, seed=0)
    result = train_locus(data, train, split.val, config=TrainConfig(epochs=20, max_seconds=None, threads=1),
                         locus_config=TINY, seed=0)
    spread = embedding_spread(result.locus, data, evals_by_model(data, train))
    warnings = collapse_warnings(result.best, spread)
    assert any("at chance" in w for w in warnings), (result.best, warnings)
    assert math.isfinite(spread["ratio"])


def test_progress_is_called_after_every_validation():
    data = skewed_pool(n_models=6, n_queries=120)
    split = split_queries(data.n_queries, seed=0)
    train = sample_per_model(data, split.train, n_per_model=None, seed=0)
    seen = []
    result = train_locus(data, train, split.val, locus_config=TINY, seed=0, progress=seen.append,
                         config=TrainConfig(epochs=25, eval_every=10, max_seconds=None, threads=1))
    assert [p.epoch for p in seen] == [10, 20, 25]
    assert seen[-1].best_epoch == result.best_epoch and result.stopped == "epochs"
    assert all(p.seconds > 0 and p.validation.loss > 0 for p in seen)

    from registry.catalog.embedding import progress_printer

    lines = []
    printer = progress_printer(lines.append, every_seconds=1e9)
    for p in seen:
        printer(p)
    assert len(lines) == sum(p.improved for p in seen)  # only new bests when the clock allows nothing else
    assert lines[0].startswith("epoch 10/25  train loss") and "best" in lines[0] and lines[0].endswith(" s")


def _graded_pool(n_models: int = 8, n_queries: int = 300, seed: int = 2) -> EvalData:
    """Models of clearly different accuracy (0.1 to 0.9), every one scored on every query."""
    rng = np.random.default_rng(seed)
    m, q = np.meshgrid(np.arange(n_models), np.arange(n_queries), indexing="ij")
    vectors = rng.normal(size=(n_queries, D)).astype(np.float32)
    rates = np.linspace(0.1, 0.9, n_models)
    return EvalData([f"m{i}" for i in range(n_models)], [str(i) for i in range(n_queries)], ["t"] * n_queries,
                    vectors / np.linalg.norm(vectors, axis=1, keepdims=True), m.ravel().astype(np.int64),
                    q.ravel().astype(np.int64), (rng.random(m.size) < rates[m.ravel()]).astype(np.float32))


def test_models_of_different_accuracy_at_one_point_are_flagged_and_a_trained_encoder_separates_them():
    """The spread's median over all pairs hides a pool whose models of different accuracy share a point
    (the demo's families did): pairs within one self-spread whose accuracies differ beyond doubt are
    counted and named. An encoder that has not learnt (one epoch) is flagged; a trained one is not."""
    from encoder.locus import Locus

    data = _graded_pool()
    split = split_queries(data.n_queries, seed=0)
    train = sample_per_model(data, split.train, n_per_model=None, seed=0)
    per_model = evals_by_model(data, train)
    flat = Locus(TINY)
    torch = pytest.importorskip("torch")
    with torch.no_grad():  # every model's embedding the same point: all 28 pairs merged
        for parameter in flat.encoder.parameters():
            parameter.zero_()
    merged = embedding_spread(flat, data, per_model)
    assert merged["pairs"] == 28 and merged["indistinct_pairs"] > 20 and len(merged["indistinct_examples"]) == 3
    [warning] = [w for w in collapse_warnings(None, merged) if "do not tell" in w or "does not tell" in w]
    assert f"{merged['indistinct_pairs']} of 28 model pairs" in warning and " ~ " in warning
    result = train_locus(data, train, split.val, locus_config=TINY, seed=0,
                         config=TrainConfig(epochs=150, min_epochs=50, max_seconds=None, threads=1))
    trained = embedding_spread(result.locus, data, per_model)
    assert trained["indistinct_pairs"] < 0.05 * trained["pairs"], trained
    assert not [w for w in collapse_warnings(result.best, trained) if "does not tell" in w]
