"""The evaluation harness behind `registry evaluate` and the results page.

One protocol for every method (paper section 3.1, EmbedLLM's split): queries split 80/10/10 by seed;
each model contributes at most N random evaluations from the training queries; the validation
queries choose hyperparameters, stop training and fit the registry's blend (every model's validation
evaluations are read, beyond the N training ones); metrics are measured on the test queries, each query
routed among the models scored on it, models tied at the top sharing it (encoder.metrics).

With `holdout_models=K`, K random models of the pool are left out of all training. Afterwards each is
embedded (one forward pass) from n of its training-query evaluations, for each n in
`onboard_evals`; "onboarding" then reports, on the test queries, those models' correctness accuracy
and the routing accuracy of the whole pool with them included.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from encoder.blend import fit_blend, fit_routing_blend
from encoder.data import EvalData, sample_per_model, split_queries, truth_on
from encoder.metrics import correctness_accuracy, oracle_accuracy, routed_scores, routing_accuracy
from encoder.router import ROUTER_PARTS, router_part_predictions
from registry.errors import InputError

__all__ = ["run_evaluation", "score_predictions", "truth_on"]

BASELINES = ("embedllm_mf", "irt_net", "knn")


def _baseline(name: str):
    from encoder.baselines import EmbedLLMMF, IRTNet, KNNRouter

    return {"embedllm_mf": EmbedLLMMF, "irt_net": IRTNet, "knn": KNNRouter}[name]()


def run_evaluation(
    data: EvalData,
    *,
    evals_per_model: int | None = 1024,
    seed: int = 0,
    holdout_models: int = 0,
    onboard_evals: tuple[int, ...] = (),
    baselines: tuple[str, ...] = BASELINES,
    train_config: Any = None,
    progress: Callable | None = None,
    log: Callable[[str], None] = lambda message: None,
    keep_routed: bool = False,
    keep_predictions: bool = False,
) -> dict[str, Any]:
    """LOCUS and the baselines under one split (see the module docstring). With `keep_routed`,
    `result["routed"][method]` is the score each method's routing got on each test query (encoder.metrics.
    routed_scores: the queries some model is scored on, in order; `result["routed_queries"]` their indices
    into `data`'s queries), for paired tests between methods. With
    `keep_predictions`, `result["predictions"]` holds every component's P(correct) on the validation and
    test queries and the truth they are scored against (`score_predictions`' input)."""
    from encoder.inference import embed_models
    from encoder.training import train_locus

    if data.n_models < 2:
        raise InputError(f"evaluation needs a pool of at least 2 models, not {data.n_models}", field="pool")
    split = split_queries(data.n_queries, seed=seed)
    rng = np.random.default_rng(seed + 7919)
    held_out: list[str] = []
    if holdout_models:
        if holdout_models >= data.n_models - 1:
            raise InputError(f"{holdout_models} held-out models leave fewer than 2 of {data.n_models} models to "
                             "train on", field="holdout_models")
        held_out = sorted(rng.choice(data.models, size=holdout_models, replace=False).tolist())
    trained = [m for m in data.models if m not in held_out]
    train_data = data.select_models(trained)
    train_evals = sample_per_model(train_data, split.train, n_per_model=evals_per_model, seed=seed)
    test_truth = truth_on(train_data, split.test)
    result: dict[str, Any] = {
        "pool": list(data.models), "held_out": held_out, "evals_per_model": evals_per_model, "seed": seed,
        "n_train_queries": int(len(split.train)), "n_val_queries": int(len(split.val)),
        "n_test_queries": int((~np.isnan(test_truth)).any(axis=0).sum()),
        "routing_accuracy": {}, "correctness_accuracy": {}, "seconds": {},
    }

    started = time.perf_counter()
    trained_locus = train_locus(train_data, train_evals, split.val, config=train_config, seed=seed,
                                progress=progress)
    z = embed_models(trained_locus.locus, train_data, train_evals)
    result["seconds"]["locus"] = round(time.perf_counter() - started, 1)
    result["locus_best_epoch"] = trained_locus.best_epoch
    result["locus_stopped"] = trained_locus.stopped

    val_b, test_b, fitted = {}, {}, {}
    for name in baselines:
        started = time.perf_counter()
        fitted[name] = _baseline(name).fit(train_data, train_evals, split.val, seed=seed)
        test_b[name], val_b[name] = fitted[name].predict(split.test), fitted[name].predict(split.val)
        result["seconds"][name] = round(time.perf_counter() - started, 1)
    # the registry's predictor: the router's parts (encoder.router, what `registry train` blends) blended on
    # the validation queries (score_predictions); kNN over the stored queries is one of them whether or not
    # it is also reported as a baseline (the same fit when it is)
    started = time.perf_counter()
    (val_parts, test_parts), knn = router_part_predictions(trained_locus.locus, z, train_data, train_evals, split.val,
                                                           (split.val, split.test), knn=fitted.get("knn"))
    # the item table's fit, and the kNN's when it is not also a baseline (timed above then)
    result["seconds"]["item"] = round(time.perf_counter() - started, 1)
    val_p, test_p = {**val_parts, **val_b}, {**test_parts, **test_b}
    train_truth = truth_on(train_data, split.train, train_evals)
    predictions = {"val": val_p, "test": test_p, "val_truth": truth_on(train_data, split.val),
                   "test_truth": test_truth, "train_mean": np.nanmean(train_truth, axis=1)}
    scored = score_predictions(predictions, keep_routed=keep_routed)
    if "knn" not in baselines:
        for key in ("routing_accuracy", "correctness_accuracy"):
            scored[key].pop("knn", None)
    for key in ("routing_accuracy", "correctness_accuracy"):
        result[key].update(scored[key])
    result["blend"] = scored["blend"]
    result["blend"]["registry"]["settings"] = {"knn": knn.settings}  # as router_blend.json records them
    if keep_routed:
        result["routed"] = scored["routed"]
        result["routed_queries"] = split.test[scored["routed_queries"]].tolist()
    if keep_predictions:
        result["predictions"] = predictions
    for name, value in result["routing_accuracy"].items():
        log(f"{name}: routing {value:.4f}")

    if held_out:
        result["onboarding"] = _onboarding(data, held_out, trained_locus.locus, z, trained, split, onboard_evals, seed)
    return result


# method -> (components, fit). "registry" is the router `route` uses (the blend `registry train` stores,
# registry.catalog.embedding._fit_router_blend); the others show what each part adds or would add, and
# "baselines blended" what the same fit makes of the baselines alone (a lead of the registry's over each
# baseline could be the blend's, not its parts': a reviewer found this one ahead on MMLU-Pro at 256)
BLENDS = {"registry": (ROUTER_PARTS, fit_routing_blend),
          "locus+item": (("locus", "item"), fit_routing_blend),
          "locus+item (logistic)": (("locus", "item"), fit_blend),
          "item": (("item",), fit_blend),
          "baselines blended": (BASELINES, fit_routing_blend)}


def score_predictions(predictions: dict[str, Any], *, keep_routed: bool = False) -> dict[str, Any]:
    """Routing and correctness accuracy on the test queries of every component in `predictions`
    (`run_evaluation(keep_predictions=True)`), of the blends fitted on its validation queries, and of
    the best single model by training accuracy; the oracle's routing accuracy. With `keep_routed`, each
    method's `routed_scores` ("routed") and the positions among the test queries they are for."""
    val_p, test_p = predictions["val"], predictions["test"]
    val_truth, test_truth = predictions["val_truth"], predictions["test_truth"]
    out: dict[str, Any] = {"routing_accuracy": {}, "correctness_accuracy": {}, "blend": {}}
    routed = {}
    methods = dict(test_p)
    for method, (parts, fit) in BLENDS.items():
        if all(c in val_p for c in parts):
            blend = fit({c: val_p[c] for c in parts}, val_truth)
            methods[method] = blend.predict({c: test_p[c] for c in parts})
            out["blend"][method] = {"weights": dict(zip(blend.components, blend.weights)),
                                    "intercept": blend.intercept, "fit": blend.fit,
                                    "query_weights": dict(zip(blend.components, blend.query_weights))}
    for method, pred in methods.items():
        out["routing_accuracy"][method] = routing_accuracy(pred, test_truth)
        out["correctness_accuracy"][method] = correctness_accuracy(pred, test_truth)
        routed[method] = routed_scores(pred, test_truth).tolist()
    train_mean = np.asarray(predictions["train_mean"], np.float64)
    ranking = np.broadcast_to(np.where(np.isnan(train_mean), -np.inf, train_mean)[:, None], test_truth.shape)
    out["routing_accuracy"]["best_single"] = routing_accuracy(ranking, test_truth)
    routed["best_single"] = routed_scores(ranking, test_truth).tolist()
    out["routing_accuracy"]["oracle"] = oracle_accuracy(test_truth)
    if keep_routed:
        out["routed"] = routed
        out["routed_queries"] = np.flatnonzero(~np.isnan(test_truth).all(axis=0))  # positions among the test queries
    return out


def _onboarding(data, held_out, locus, z_trained, trained, split, onboard_evals, seed) -> dict[str, dict[str, float]]:
    """Embed the held-out models from n of their training-query evaluations, n in onboard_evals."""
    from encoder.data import evals_by_model
    from encoder.inference import embed_models, predict

    pool_truth = truth_on(data, split.test)
    row_of = {m: i for i, m in enumerate(data.models)}
    held_rows = [row_of[m] for m in held_out]
    out: dict[str, dict[str, float]] = {}
    for n in onboard_evals:
        evals = sample_per_model(data, split.train, n_per_model=n, seed=seed + n)
        per_model = evals_by_model(data, evals)
        z = np.zeros((data.n_models, z_trained.shape[1]), dtype=np.float32)
        z[[row_of[m] for m in trained]] = np.nan_to_num(z_trained)
        only_held = [e if r in held_rows else e[:0] for r, e in enumerate(per_model)]
        z[held_rows] = embed_models(locus, data, only_held)[held_rows]
        pred = predict(locus, z, data.query_vectors[split.test])
        out[str(n)] = {
            "correctness_accuracy": correctness_accuracy(pred[held_rows], pool_truth[held_rows]),
            "routing_accuracy": routing_accuracy(pred, pool_truth),
            "evals_used": int(min(n, min(len(per_model[r]) for r in held_rows))),
        }
    return out
