"""One predictor from several: a logistic blend of P(correct) estimates, fitted on validation queries.

The registry holds two predictors of whether model m answers query q: LOCUS (G(z_m, phi(q)), from the
query's text) and the item table (F_q . a_m + c_m + b_q, from the pool's score matrix, with the text
map placing a query the table has not seen). They err differently: LOCUS generalises across texts,
the item table knows which questions a model's fellow models fail. The blend is

    logit P = w_0 + sum_k w_k * clip(logit p_k),

a ridge logistic regression on the observed cells of the validation queries (never the training or
test queries), so it is calibrated by construction, and a component that adds nothing gets a weight
near zero. Deterministic (Newton's method from zero); a few numbers, stored as JSON.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Blend", "fit_blend", "logit"]

FORMAT = "locus-blend/1"
_CLIP = 12.0  # |logit| bound: a component that says 0 or 1 must not dominate by overflow


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), 1e-6, 1 - 1e-6)
    return np.clip(np.log(p) - np.log1p(-p), -_CLIP, _CLIP)


@dataclass(frozen=True)
class Blend:
    components: tuple[str, ...]  # the predictors blended, in weight order
    weights: tuple[float, ...]  # (len(components),)
    intercept: float
    cells: int = 0  # validation cells it was fitted on
    val_loss: float = float("nan")  # its BCE on them (in-sample)

    def predict(self, probabilities: dict[str, np.ndarray]) -> np.ndarray:
        """P(correct) from each component's probabilities (arrays of one shape), float32."""
        missing = [c for c in self.components if c not in probabilities]
        if missing:
            raise ValueError(f"blend needs {', '.join(missing)}")
        z = np.full(np.shape(probabilities[self.components[0]]), self.intercept, np.float64)
        for name, w in zip(self.components, self.weights):
            z += w * logit(probabilities[name])
        return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **asdict(self)})

    @classmethod
    def from_json(cls, text: str) -> "Blend":
        raw = json.loads(text)
        if raw.pop("format", None) != FORMAT:
            raise ValueError(f"not a blend (expected format {FORMAT!r})")
        blend = cls(components=tuple(raw["components"]), weights=tuple(float(w) for w in raw["weights"]),
                    intercept=float(raw["intercept"]), cells=int(raw.get("cells", 0)),
                    val_loss=float(raw.get("val_loss", float("nan"))))
        if len(blend.components) != len(blend.weights) or not all(np.isfinite(blend.weights)):
            raise ValueError("blend weights do not match its components")
        return blend


def fit_blend(probabilities: dict[str, np.ndarray], truth: np.ndarray, *, ridge: float = 1e-3,
              iterations: int = 50) -> Blend:
    """Fit the blend of `probabilities` (name -> (M, V) P(correct) on the validation queries) to
    `truth` ((M, V) scores in [0, 1], NaN where a model is not scored). Needs at least one scored cell."""
    names = tuple(probabilities)
    seen = ~np.isnan(truth)
    if not names or not seen.any():
        raise ValueError("a blend needs at least one component and one scored validation cell")
    x = np.stack([logit(probabilities[n][seen]) for n in names] + [np.ones(int(seen.sum()))], axis=1)  # (n, k+1)
    y = np.asarray(truth[seen], np.float64)
    n = len(y)
    penalty = np.full(x.shape[1], ridge * n)
    penalty[-1] = 0.0  # the intercept is free
    w = np.zeros(x.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -30, 30)))
        grad = x.T @ (p - y) + penalty * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    p = np.clip(1.0 / (1.0 + np.exp(-(x @ w))), 1e-9, 1 - 1e-9)
    loss = float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
    return Blend(components=names, weights=tuple(float(v) for v in w[:-1]), intercept=float(w[-1]), cells=n,
                 val_loss=loss)
