"""The logistic blend of predictors (encoder/blend.py): what it learns, and its file form."""
from __future__ import annotations

import numpy as np
import pytest

from encoder.blend import Blend, fit_blend, logit


def _truth(rng, p):
    return (rng.random(p.shape) < p).astype(np.float32)


def test_the_blend_weights_the_informative_predictor_and_ignores_noise():
    rng = np.random.default_rng(0)
    true_logit = rng.normal(0, 2, size=(20, 400))
    truth = _truth(rng, 1 / (1 + np.exp(-true_logit)))
    truth[rng.random(truth.shape) < 0.1] = np.nan  # holes are skipped, not read as wrong
    good = 1 / (1 + np.exp(-(0.5 * true_logit)))  # right direction, under-confident
    noise = rng.random(truth.shape)
    blend = fit_blend({"good": good, "noise": noise}, truth)
    w = dict(zip(blend.components, blend.weights))
    assert 1.6 < w["good"] < 2.4  # undoes the 0.5 shrinkage: calibrated
    assert abs(w["noise"]) < 0.1
    seen = ~np.isnan(truth)
    p = blend.predict({"good": good, "noise": noise})
    bce = lambda q: float(-(truth[seen] * np.log(q[seen]) + (1 - truth[seen]) * np.log(1 - q[seen])).mean())
    assert bce(p) < bce(good)
    assert blend.cells == int(seen.sum())


def test_a_blend_round_trips_through_json_and_refuses_another_format():
    blend = Blend(components=("locus", "item"), weights=(0.7, 0.4), intercept=-0.1, cells=10, val_loss=0.6)
    again = Blend.from_json(blend.to_json())
    assert again == blend
    with pytest.raises(ValueError, match="not a blend"):
        Blend.from_json('{"format": "something-else"}')
    with pytest.raises(ValueError, match="needs item"):
        blend.predict({"locus": np.array([0.5])})


def test_fit_refuses_no_scored_cell_and_logit_stays_finite():
    with pytest.raises(ValueError, match="scored validation cell"):
        fit_blend({"a": np.full((2, 3), 0.5)}, np.full((2, 3), np.nan))
    assert np.isfinite(logit(np.array([0.0, 1.0]))).all()


def _routing_world(seed=0, models=12, queries=300):
    """Truth drawn from per-model ability + a per-query interaction. 'router' knows the interaction
    (which model suits which query) but is badly scaled; 'ability' knows only each model's overall
    ability, calibrated: the cell-wise log loss prefers 'ability', routing needs 'router'."""
    rng = np.random.default_rng(seed)
    ability = rng.normal(0, 1.0, size=(models, 1))
    interaction = rng.normal(0, 1.5, size=(models, queries))
    difficulty = rng.normal(0, 1.0, size=(1, queries))
    true_logit = ability + interaction - difficulty
    truth = _truth(rng, 1 / (1 + np.exp(-true_logit)))
    sig = lambda z: 1 / (1 + np.exp(-z))
    router = sig(0.3 * (interaction + ability) + 2.0)  # right order within a query, far from calibrated
    ability_only = sig(np.broadcast_to(ability - difficulty, truth.shape) + rng.normal(0, 0.3, truth.shape))
    return {"router": router, "ability": ability_only}, truth


def test_the_routing_blend_routes_at_least_as_well_as_the_logistic_one_and_stays_calibrated():
    from encoder.blend import fit_routing_blend
    from encoder.metrics import routing_accuracy

    val_p, val_truth = _routing_world(seed=1)
    test_p, test_truth = _routing_world(seed=1)  # same models and components, fresh truth draws
    routed = fit_routing_blend(val_p, val_truth)
    cellwise = fit_blend(val_p, val_truth)
    assert routed.fit == "routing" and len(routed.query_weights) == 2
    w = dict(zip(routed.components, routed.weights))
    assert w["router"] > w["ability"] >= 0  # the mix leans on the component that orders models per query
    p_route, p_cell = routed.predict(test_p), cellwise.predict(test_p)
    assert routing_accuracy(p_route, test_truth) >= routing_accuracy(p_cell, test_truth)
    # calibrated: the mean prediction tracks the mean truth
    assert abs(float(p_route.mean()) - float(np.nanmean(test_truth))) < 0.05


def test_query_terms_never_change_the_model_a_query_is_routed_to():
    from encoder.blend import fit_routing_blend

    val_p, val_truth = _routing_world(seed=2)
    blend = fit_routing_blend(val_p, val_truth)
    without = Blend(components=blend.components, weights=blend.weights, intercept=blend.intercept)
    with_terms = blend.predict(val_p)
    assert any(abs(v) > 1e-6 for v in blend.query_weights)
    assert (with_terms.argmax(axis=0) == without.predict(val_p).argmax(axis=0)).all()
    assert not np.allclose(with_terms, without.predict(val_p))  # they do move P(correct)


def test_the_routing_blend_is_deterministic_round_trips_and_refuses_nothing_scored():
    from encoder.blend import fit_routing_blend

    val_p, val_truth = _routing_world(seed=3, models=5, queries=60)
    a, b = fit_routing_blend(val_p, val_truth), fit_routing_blend(val_p, val_truth)
    assert a == b
    assert Blend.from_json(a.to_json()) == a
    with pytest.raises(ValueError, match="blend weights"):
        Blend.from_json(a.to_json().replace('"query_weights": [', '"query_weights": [1.0, '))
    with pytest.raises(ValueError, match="scored validation cell"):
        fit_routing_blend({"a": np.full((2, 3), 0.5)}, np.full((2, 3), np.nan))
