"""One predictor from several: a logistic blend of P(correct) estimates, fitted on validation queries.

The registry holds two predictors of whether model m answers query q: LOCUS (G(z_m, phi(q)), from the
query's text) and the item table (F_q . a_m + c_m + b_q, from the pool's score matrix, with the text
map placing a query the table has not seen). They err differently: LOCUS generalises across texts,
the item table knows which questions a model's fellow models fail. The blend is

    logit P = w_0 + sum_k w_k * clip(logit p_k),

fitted on the observed cells of the validation queries (never the training or test queries). Two fits:

- `fit_blend`: a ridge logistic regression, calibrated by construction; a component that adds nothing
  gets a weight near zero. Best for P(correct) itself.
- `fit_routing_blend`: the router's. Routing takes the argmax over models per query, which a
  cell-wise log loss does not aim at: the mixing direction (non-negative weights summing to 1, on a grid)
  and a temperature are chosen to maximise the validation queries' routing likelihood, log sum_m
  softmax(t * s)_m * y_m (the chance that a soft router picks a model that answered), then one scale and
  intercept are fitted on s by logistic regression, so P(correct) is calibrated and its argmax is the
  routing choice.

Deterministic (grids and Newton's method from zero); a few numbers, stored as JSON.
"""
from __future__ import annotations

import json
import itertools
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["Blend", "fit_blend", "fit_routing_blend", "logit"]

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
    fit: str = "logistic"  # or "routing" (fit_routing_blend)
    query_weights: tuple[float, ...] = ()  # per component: weight of its mean logit over the rows (models)
    # how a component with settings of its own is computed where the blend is used (the router's kNN:
    # {"knn": {"mode": ..., "k": ..., "pseudo_count": ...}}): the weights were fitted on those predictions
    settings: dict = field(default_factory=dict)

    def predict(self, probabilities: dict[str, np.ndarray], *, reference: np.ndarray | None = None) -> np.ndarray:
        """P(correct) from each component's probabilities (arrays of one shape, (M, Q)), float32. The query
        term reads each component's mean logit over the rows `reference` (indices; None: every row): the
        fit's rows were the training pool's models, so a registry passes the rows of those, and a model
        added or removed later then changes no other model's P(correct)."""
        missing = [c for c in self.components if c not in probabilities]
        if missing:
            raise ValueError(f"blend needs {', '.join(missing)}")
        z = np.full(np.shape(probabilities[self.components[0]]), self.intercept, np.float64)
        for name, w in zip(self.components, self.weights):
            z += w * logit(probabilities[name])
        for name, v in zip(self.components, self.query_weights):  # the same for every row: no change of argmax
            rows = probabilities[name] if reference is None else np.asarray(probabilities[name])[reference]
            z += v * logit(rows).mean(axis=0, keepdims=True)
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
                    val_loss=float(raw.get("val_loss", float("nan"))), fit=str(raw.get("fit", "logistic")),
                    query_weights=tuple(float(v) for v in raw.get("query_weights", ())),
                    settings=raw.get("settings") or {})
        if not isinstance(blend.settings, dict):
            raise ValueError("blend settings must be an object")
        if (len(blend.components) != len(blend.weights) or not all(np.isfinite(blend.weights))
                or len(blend.query_weights) not in (0, len(blend.components)) or not all(np.isfinite(blend.query_weights))):
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


_TEMPERATURES = tuple(float(t) for t in np.geomspace(0.25, 16.0, 13))
_EPS = 1e-2  # keeps a query no mix can route well from dominating the routing likelihood


def _simplex(k: int, step: float):
    n = int(round(1.0 / step))
    for head in itertools.product(range(n + 1), repeat=k - 1):
        if sum(head) <= n:
            yield np.array([*head, n - sum(head)], np.float64) / n


def fit_routing_blend(probabilities: dict[str, np.ndarray], truth: np.ndarray, *, step: float | None = None,
                      temperatures: tuple[float, ...] = _TEMPERATURES) -> Blend:
    """The router's blend of `probabilities` (name -> (M, V) P(correct) on the validation queries) for
    `truth` ((M, V) in [0, 1], NaN where a model is not scored): see the module docstring. `step` is the
    grid step of the mixing weights (default 0.05 for up to 3 components, 0.1 above)."""
    names = tuple(probabilities)
    seen = ~np.isnan(truth)
    if not names or not seen.any():
        raise ValueError("a blend needs at least one component and one scored validation cell")
    queries = seen.any(axis=0)
    mask = seen[:, queries]
    y = np.where(mask, np.nan_to_num(truth[:, queries]), 0.0)
    parts = np.stack([logit(probabilities[n][:, queries]) for n in names])  # (k, M, V)
    step = step or (0.05 if len(names) <= 3 else 0.1)
    best: tuple[float, np.ndarray] | None = None
    for mix in _simplex(len(names), step):
        score = np.tensordot(mix, parts, 1)  # (M, V)
        for t in temperatures:
            z = np.where(mask, t * score, -np.inf)
            e = np.exp(z - z.max(axis=0))
            loss = -np.log((e * y).sum(axis=0) / e.sum(axis=0) + _EPS).mean()
            if best is None or loss < best[0] - 1e-12:
                best = (float(loss), mix)
    mix = best[1]
    logits = np.stack([logit(probabilities[n]) for n in names])  # (k, M, V)
    features = {"mix": _sigmoid(np.tensordot(mix, logits, 1))}
    for n, part in zip(names, logits):
        features["query:" + n] = _sigmoid(np.broadcast_to(part.mean(axis=0, keepdims=True), part.shape))
    calibration = fit_blend(features, truth)
    alpha = max(calibration.weights[0], 1e-6)  # a non-positive scale would invert the ranking the mix chose
    return Blend(components=names, weights=tuple(float(alpha * w) for w in mix), intercept=calibration.intercept,
                 cells=calibration.cells, val_loss=calibration.val_loss, fit="routing",
                 query_weights=tuple(calibration.weights[1:]))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))
