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
