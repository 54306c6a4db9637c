"""Portfolio selection (appendix E.4): the algorithms on hand-made matrices, then `Registry.portfolio`
and `registry portfolio` on a trained synthetic registry."""
from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from cli.main import cli
from cli.portfolio import parse_budget
from helpers import POOL_TRAINED, load_script
from registry import InputError, Registry, RegistryError
from registry.analytics.portfolio import (PortfolioSpace, coverage, greedy_budget, kcenter, kmedoids, pairwise_distances,
                                random_feasible, rbf_kernel)

torch.set_num_threads(1)


# ------------------------------------------------------------------ the algorithms, by hand
def line(*points: float) -> np.ndarray:
    return np.asarray(points, dtype=np.float64)[:, None]


def test_rbf_kernel_uses_the_median_distance_as_bandwidth():
    sim, sigma = rbf_kernel(line(0, 1, 3))  # distances 1, 3, 2
    assert sigma == 2.0
    assert np.allclose(np.diag(sim), 1.0) and np.allclose(sim, sim.T)
    assert sim[0, 2] == pytest.approx(np.exp(-(3 / 2) ** 2))
    assert rbf_kernel(line(5, 5))[1] == 1.0  # all distances 0: sigma falls back to 1


def test_kcenter_starts_central_and_then_goes_farthest_first():
    # three clusters: {0, 0.5, 1}, {10, 10.5}, {30}
    points = line(0, 0.5, 1, 10, 10.5, 30)
    sim, _ = rbf_kernel(points)
    chosen = kcenter(sim, 3)
    assert chosen[0] == int(np.argmax(sim.mean(axis=1)))
    assert chosen[1] == 5  # 30 is the farthest from any start
    cluster = {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    assert {cluster[i] for i in chosen} == {"a", "b", "c"}
    assert kcenter(-pairwise_distances(points), 3)[1] == 5  # the same with negated distances
    with pytest.raises(ValueError):
        kcenter(sim, 7)


def test_kmedoids_on_negated_distances_finds_the_true_medoids():
    points = line(0, 1, 2, 10, 11, 12)
    neg = -pairwise_distances(points)
    start = kcenter(neg, 2)
    assert sorted(start) == [2, 5]  # central point 2 (ties to the lower index), then the farthest, 12
    assert -coverage(neg, start) == pytest.approx(6.0)  # sum of distances to the nearest medoid
    chosen = kmedoids(neg, 2, start)
    assert sorted(chosen) == [1, 4] and -coverage(neg, chosen) == pytest.approx(4.0)


def test_kmedoids_never_loses_to_its_start_and_is_a_local_optimum():
    rng = np.random.default_rng(0)
    for trial in range(5):
        sim, _ = rbf_kernel(rng.normal(size=(12, 3)))
        start = kcenter(sim, 4)
        chosen = kmedoids(sim, 4, start)
        assert len(set(chosen)) == 4
        value = coverage(sim, chosen)
        assert value >= coverage(sim, start) - 1e-12
        for position, other in itertools.product(range(4), set(range(12)) - set(chosen)):
            swapped = chosen[:position] + [other] + chosen[position + 1:]
            assert coverage(sim, swapped) <= value + 1e-9
        best = max(coverage(sim, c) for c in itertools.combinations(range(12), 4))
        assert value >= 0.97 * best  # PAM lands at (or very near) the optimum on tiny pools


def test_greedy_budget_by_gain_per_parameter():
    sim = np.array([[1, .9, .9], [.9, 1, .1], [.9, .1, 1]])
    chosen, variant = greedy_budget(sim, [10, 1, 1], 10)
    # model 1 has gain 2.0 for 1B (ratio 2) against 2.8 for 10B; then model 0 no longer fits
    assert chosen == [1, 2] and variant == "gain per parameter"
    assert coverage(sim, chosen) == pytest.approx(2.9)


def test_greedy_budget_keeps_the_plain_gain_greedy_when_the_ratio_one_is_worse():
    # model 0 (10B) covers a tight cluster {0, 2, 3, 4}; model 1 (1B) only itself; 2-4 cost 20B each
    sim = np.full((5, 5), 0.0)
    cluster = [0, 2, 3, 4]
    sim[np.ix_(cluster, cluster)] = 0.95
    np.fill_diagonal(sim, 1.0)
    chosen, variant = greedy_budget(sim, [10, 1, 20, 20, 20], 10)
    assert chosen == [0] and variant == "gain"  # the ratio greedy takes model 1 and is stuck at J = 1


def test_greedy_budget_free_models_and_a_stop_when_nothing_adds_coverage():
    sim = np.eye(3)
    chosen, _ = greedy_budget(sim, [0, 0, 5], 1)  # model 2 does not fit; the free ones do
    assert sorted(chosen) == [0, 1]
    assert greedy_budget(np.ones((3, 3)), [1, 1, 1], 3)[0] == [0]  # duplicates add nothing


def test_answer_greedy_covers_the_most_answers_then_the_most_accurate():
    from registry.analytics.portfolio import answer_coverage, answer_greedy

    # queries x models: model 0 answers half, 1 the other half, 2 most of the first half, 3 nothing new
    answers = np.array([[1, 0, 1, 0], [1, 0, 1, 0], [1, 0, 0, 0], [0, 1, 0, 1], [0, 1, 0, 0], [0, 1, 0, 0.5]],
                       dtype=float)
    assert answer_greedy(answers, 2) == [0, 1]  # equal gains: the lower index first, then the other half
    assert answer_coverage(answers, [0, 1]) == 1.0
    # nothing left to cover after 0 and 1: the more accurate of 2 (2/6) and 3 (1.5/6)
    assert answer_greedy(answers, 4) == [0, 1, 2, 3]
    assert answer_greedy(answers[:, [2, 3, 0]], 1) == [2]  # the most coverage alone
    partial = np.array([[0.5, 1.0], [0.5, 0.0]])
    assert answer_greedy(partial, 2) == [0, 1] and answer_coverage(partial, [0, 1]) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="k must be in 1..4"):
        answer_greedy(answers, 5)


def _plain_answer_greedy():
    """The greedy as first written (every column's gain recomputed at every step), kept in the benchmark
    that compares the two."""
    return load_script("bench_portfolio").plain_greedy


@pytest.mark.parametrize("seed", range(12))
def test_the_lazy_answer_greedy_chooses_what_the_plain_one_does(seed):
    """Ties included: scores in quarters (exact in binary) over few queries make many equal gains, and the
    later steps run out of anything to cover (the most accurate of the rest)."""
    from registry.analytics.portfolio import answer_greedy

    plain = _plain_answer_greedy()
    rng = np.random.default_rng(seed)
    queries, models = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    ability = rng.uniform(0.05, 0.95, size=models)
    answers = (rng.random((queries, models)) < ability).astype(float)
    if seed % 3 == 0:
        answers *= rng.integers(1, 5, size=answers.shape) / 4.0  # partial credit, in quarters
    if seed % 4 == 1:
        answers[:, rng.integers(0, models)] = answers[:, 0]  # a duplicate column
    for k in range(1, models + 1):
        assert answer_greedy(answers, k) == plain(answers, k), (seed, k)


def test_every_face_of_portfolio_offers_the_same_methods():
    """METHODS is the one list; the CLI's choice, the HTTP pattern and the result's type spell it out."""
    import inspect
    import typing

    from registry.analytics.portfolio import METHODS
    from registry.results import PortfolioResult
    from registry.service.routes.analytics import portfolio as http_portfolio

    option = next(p for p in cli.commands["portfolio"].params if p.name == "method")
    assert tuple(option.type.choices) == METHODS
    assert set(typing.get_args(PortfolioResult.model_fields["method"].annotation)) == set(METHODS)
    pattern = inspect.signature(http_portfolio).parameters["method"].default.metadata
    assert any(getattr(m, "pattern", None) == f"^({'|'.join(METHODS)})$" for m in pattern)


def test_random_feasible_subsets_fit_and_are_maximal():
    rng = np.random.default_rng(1)
    costs = np.array([1.0, 2.0, 3.0, 7.0, 8.0])
    for _ in range(50):
        chosen = random_feasible(costs, 10.0, rng)
        spent = costs[chosen].sum()
        assert spent <= 10.0 and len(set(chosen)) == len(chosen)
        assert all(costs[j] > 10.0 - spent for j in set(range(5)) - set(chosen))


def test_parse_budget():
    assert parse_budget("150B") == parse_budget("150b") == parse_budget("150") == 150.0
    assert parse_budget("1.5T") == parse_budget("1.5t") == 1500.0
    for bad in ("", "B", "150GB", "-5B", "0", "abc"):
        with pytest.raises(ValueError, match="budget"):
            parse_budget(bad)


# ------------------------------------------------------------- on a trained synthetic registry
@pytest.fixture(scope="module")
def trained_home(synthetic_home) -> Path:
    """10 synthetic models (3 families x 3 sizes + a near-duplicate), encoder briefly trained."""
    return synthetic_home("portfolio", **POOL_TRAINED)


@pytest.fixture(scope="module")
def reg(trained_home) -> Registry:
    return Registry.open(trained_home, create=False)


@pytest.fixture(scope="module")
def space(trained_home) -> PortfolioSpace:
    return PortfolioSpace.load(Registry.open(trained_home, create=False).store)


@pytest.fixture(scope="module")
def extended(trained_home, tmp_path_factory) -> Registry:
    """A copy with two more models: 'no-size' (no params_b) and 'train-only' (evaluated only outside
    the held-out test queries)."""
    from registry.analytics.heldout import held_out

    copy = tmp_path_factory.mktemp("portfolio-extended") / "home"
    shutil.copytree(trained_home, copy)
    reg = Registry.open(copy, create=False)
    held = held_out(reg.store)
    test_ids = {held.data.query_ids[q] for q in held.test_queries}
    texts = {r["query_id"]: r["text"] for r in reg.store.read("queries").to_pylist()}
    own = [r for r in reg.store.read("evaluations").to_pylist() if r["model"] == "syn-synfam0-7b"]
    evals = [{"query": texts[r["query_id"]], "score": r["score"]} for r in own]
    reg.add_model("no-size", evals, {"family": "mystery"})
    reg.add_model("train-only", [e for e, r in zip(evals, own) if r["query_id"] not in test_ids],
                  {"family": "mystery", "params_b": "5"})
    return reg


def test_kcenter_picks_distinct_models_far_apart(reg, space):
    result = reg.portfolio(k=3, method="kcenter")
    assert len(result.models) == len(set(result.models)) == 3 == result.k
    first, second = (space.names.index(n) for n in result.models[:2])
    assert first == int(np.argmax(space.sim.mean(axis=1)))
    distances = pairwise_distances(space.embeddings)
    assert distances[first, second] == pytest.approx(distances[first].max())  # farthest from the first
    assert distances[first, second] > np.median(distances[np.triu_indices(space.size, 1)])
    assert result.kernel.sigma == pytest.approx(space.sigma)


def test_kmedoids_improves_on_its_kcenter_start(reg, space):
    result = reg.portfolio(k=3, method="kmedoids")
    assert result.method == "kmedoids" and len(set(result.models)) == 3
    assert result.kcenter_start == reg.portfolio(k=3, method="kcenter").models
    assert result.coverage >= result.kcenter_coverage - 1e-12
    chosen = [space.names.index(n) for n in result.models]
    assert result.coverage == pytest.approx(coverage(space.sim, chosen) / space.size)


def test_answers_cover_the_recorded_scores_outside_the_test_queries(reg, space):
    """The default with k: the greedy cover of the models' recorded answers, never the test queries'."""
    from registry.analytics.heldout import held_out
    from registry.analytics.portfolio import answer_coverage, answer_greedy

    result = reg.portfolio(k=3, random_draws=20)
    assert result.method == "answers" and len(set(result.models)) == 3
    held = held_out(reg.store, models=space.names)
    dense = held.data.dense()
    outside = np.setdiff1d(np.arange(dense.shape[1]), held.test_queries)
    rows = dense[[held.data.models.index(n) for n in space.names]][:, outside]
    rows = rows[:, ~np.isnan(rows).all(axis=0)]  # a query no pool model answered covers nothing
    mine = np.nan_to_num(rows, nan=0.0).T  # (Q, M) as the method reads them
    assert result.models == [space.names[i] for i in answer_greedy(mine, 3)]
    assert result.answer_coverage == pytest.approx(answer_coverage(mine, [space.names.index(n) for n in result.models]))
    assert result.answer_queries == len(mine) > 0
    # a test query's scores never move the choice: the method's matrix has no row of them
    loaded = PortfolioSpace.load(reg.store, answers=True)
    assert loaded.answers.shape == mine.shape and len(mine) <= len(outside)
    assert space.answers is None  # the vector methods do not load it
    assert result.routing_accuracy is not None and result.random_routing_accuracy_mean is not None


def test_by_fingerprint_compares_held_out_fingerprints_and_routes_with_locus(reg, space):
    """--by fingerprint: the kernel is over fingerprints built without the test queries; routing
    accuracy is LOCUS's either way, so the two choices are scored alike."""
    from encoder.data import evals_by_model
    from registry.analytics.heldout import held_out
    from registry.catalog.fingerprint_store import load_item_table

    by_print = reg.portfolio(k=3, method="kmedoids", by="fingerprint", random_draws=20)
    assert by_print.by == "fingerprint" and reg.portfolio(k=3, random_draws=20).by == "locus"
    held = held_out(reg.store, models=space.names)
    table = load_item_table(reg.store)
    outside = np.flatnonzero(~np.isin(held.data.query_index, held.test_queries))
    thetas = table.fingerprints(held.data.query_ids, held.data.query_vectors, evals_by_model(held.data, outside),
                                held.data.query_index, held.data.scores)
    sim, sigma = rbf_kernel(table.identity_vectors(thetas))
    assert by_print.kernel.sigma == pytest.approx(sigma)
    assert by_print.models == [space.names[i] for i in kmedoids(sim, 3, kcenter(sim, 3))]
    assert by_print.full_pool_routing_accuracy == pytest.approx(space.accuracy(range(space.size)))
    assert by_print.routing_accuracy == pytest.approx(space.accuracy([space.names.index(n) for n in by_print.models]))
    with pytest.raises(InputError, match="field 'by'"):
        reg.portfolio(k=3, by="colour")
    out = CliRunner().invoke(cli, ["--home", str(reg.home), "portfolio", "-k", "2", "--by", "fingerprint", "--draws", "5"])
    assert out.exit_code == 0 and "kmedoids portfolio (k = 2)" in out.output and "(by fingerprint)" in out.output
    with pytest.raises(InputError, match="method 'answers' compares the models' recorded answers") as refused:
        reg.portfolio(k=2, method="answers", by="fingerprint")
    assert refused.value.field == "by"


def test_accuracies_against_the_full_pool_and_random_subsets(reg, space):
    result = reg.portfolio(k=2, method="kcenter", random_draws=50, seed=4)
    for key in ("routing_accuracy", "full_pool_routing_accuracy", "random_routing_accuracy_mean"):
        assert 0.0 <= getattr(result, key) <= 1.0
    assert result.random_routing_accuracy_sd > 0 and 0.0 <= result.random_below_fraction <= 1.0
    assert result.scoring == "common" and result.n_test_queries == space.test_queries > 0
    # the portfolio's accuracy is the routing among its models on the counted test queries
    chosen = [space.names.index(n) for n in result.models]
    picked = np.asarray(chosen)[space.pred[chosen].argmax(axis=0)]
    assert result.routing_accuracy == pytest.approx(space.truth[picked, np.arange(space.test_queries)].mean())
    full = reg.portfolio(k=space.size, method="kcenter", random_draws=3)
    assert full.routing_accuracy == full.full_pool_routing_accuracy == full.random_routing_accuracy_mean
    assert full.random_routing_accuracy_sd == 0.0
    again = reg.portfolio(k=2, method="kcenter", random_draws=50, seed=4)
    assert again.random_routing_accuracy_mean == result.random_routing_accuracy_mean  # seeded


def test_greedy_respects_the_budget(reg, space):
    sizes = dict(zip(space.names, space.params_b))
    for budget in (8, 20, 40):
        result = reg.portfolio(budget_b=budget, method="greedy-budget", random_draws=50)
        assert result.budget_b == budget and result.method == "greedy-budget"
        assert result.total_params_b == pytest.approx(sum(sizes[n] for n in result.models))
        assert result.total_params_b <= budget
        assert result.params_b == {n: sizes[n] for n in result.models}
        assert result.greedy_variant in ("gain per parameter", "gain")
        assert result.random_mean_params_b <= budget
    assert reg.portfolio(budget_b=20, method="greedy-budget", random_draws=50).random_routing_accuracy_sd > 0


def test_bad_requests_fail_clearly(reg, space):
    with pytest.raises(InputError, match=rf"larger than the pool: {space.size} embedded model"):
        reg.portfolio(k=space.size + 1)
    with pytest.raises(InputError, match="at least 1"):
        reg.portfolio(k=0)
    smallest = min(zip(space.params_b, space.names))
    with pytest.raises(InputError, match=rf"fits no model: the smallest in the pool is {smallest[1]} with 1B"):
        reg.portfolio(budget_b=0.5, method="greedy-budget")
    with pytest.raises(RegistryError, match="matches no model"):
        reg.portfolio(k=2, where="family == nowhere")
    with pytest.raises(InputError, match="unknown method 'kmeans'; choose one of kcenter, kmedoids, greedy-budget, answers"):
        reg.portfolio(k=2, method="kmeans")
    with pytest.raises(InputError, match="exactly one of k"):
        reg.portfolio(k=2, budget_b=10, method="greedy-budget")
    with pytest.raises(InputError, match="exactly one of k"):
        reg.portfolio()
    with pytest.raises(InputError, match="greedy-budget"):
        reg.portfolio(budget_b=10, method="kmedoids")
    with pytest.raises(InputError, match="greedy-budget"):
        reg.portfolio(budget_b=10, method="answers")
    assert reg.portfolio(budget_b=100, random_draws=5).method == "greedy-budget"  # the default under a budget
    with pytest.raises(InputError, match="positive"):
        reg.portfolio(budget_b=-3, method="greedy-budget")


def test_where_narrows_the_pool(reg):
    result = reg.portfolio(k=2, where="family == synfam1")
    assert result.pool_size == 3 and all("synfam1" in n for n in result.models)
    with pytest.raises(InputError, match="larger than the pool: 3 embedded model.*matching 'family == synfam1'"):
        reg.portfolio(k=4, where="family == synfam1")


def test_models_without_params_under_a_budget(extended):
    result = extended.portfolio(budget_b=200, method="greedy-budget", random_draws=20)
    assert result.excluded_unknown_params == ["no-size"] and "no-size" not in result.models
    assert any("no-size" in w and "params_b" in w for w in result.warnings)
    kept = extended.portfolio(budget_b=200, method="greedy-budget", include_unknown_params=True, random_draws=20)
    assert kept.excluded_unknown_params == [] and kept.pool_size == result.pool_size + 1
    assert "no-size" in kept.models  # it costs nothing against the budget and adds coverage
    assert kept.total_params_b_is_lower_bound and kept.total_params_b <= 200
    assert kept.random_mean_params_b_is_lower_bound and not result.random_mean_params_b_is_lower_bound
    with pytest.raises(RegistryError, match="lacks params_b"):
        extended.portfolio(budget_b=200, method="greedy-budget", where="name == no-size")
    counted = extended.portfolio(k=2, where="family == mystery")  # count methods ignore sizes
    assert sorted(counted.models) == ["no-size", "train-only"]


def test_accuracies_are_none_without_test_scores(extended):
    result = extended.portfolio(k=1, where="name == train-only")
    assert result.models == ["train-only"]
    assert result.routing_accuracy is None and result.full_pool_routing_accuracy is None
    assert result.random_routing_accuracy_mean is None and result.random_routing_accuracy_sd is None
    assert "no model of the pool has a score" in result.accuracy_reason
    # in the whole pool 'train-only' leaves no query scored by every model: routing among scored members
    mixed = extended.portfolio(k=3, method="kcenter", random_draws=20)
    assert mixed.scoring == "scored-members" and mixed.routing_accuracy is not None
    assert any("routed among" in w for w in mixed.warnings)


def test_cli_json_and_text(trained_home):
    runner = CliRunner()
    out = runner.invoke(cli, ["--home", str(trained_home), "portfolio", "--k", "3", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    for key in ("models", "method", "total_params_b", "routing_accuracy", "full_pool_routing_accuracy",
                "random_routing_accuracy_mean", "random_routing_accuracy_sd", "pool_size", "n_test_queries",
                "warnings"):
        assert key in result
    assert result["method"] == "answers" and len(result["models"]) == 3  # the default with --k
    assert 0 < result["answer_coverage"] <= 1 and result["answer_queries"] > 0
    out = runner.invoke(cli, ["--home", str(trained_home), "portfolio", "--k", "2", "--draws", "20"])
    assert out.exit_code == 0 and "answers portfolio (k = 2)" in out.output and "answer coverage" in out.output
    assert "(by recorded answers)" in out.output
    out = runner.invoke(cli, ["--home", str(trained_home), "portfolio", "--budget", "0.05T", "--draws", "20"])
    assert out.exit_code == 0, out.output
    assert "greedy-budget portfolio (budget 50B)" in out.output
    assert "full pool" in out.output and "random" in out.output and " ± " in out.output
    out = runner.invoke(cli, ["--home", str(trained_home), "portfolio", "-k", "2", "--method", "kcenter"])
    assert out.exit_code == 0 and "kcenter portfolio (k = 2)" in out.output


def test_cli_errors(trained_home):
    runner = CliRunner()
    home = ["--home", str(trained_home), "portfolio"]
    out = runner.invoke(cli, home + ["--budget", "lots"])
    assert out.exit_code == 2 and "'lots' is not a parameter budget" in out.output
    out = runner.invoke(cli, home + ["--k", "3", "--budget", "10B"])
    assert out.exit_code == 2 and "exactly one of --k" in out.output
    out = runner.invoke(cli, home + ["--k", "99"])
    assert out.exit_code == 2 and "option -k: 99 is larger than the pool: 10 embedded model" in out.output  # not "-k: = 99"
    out = runner.invoke(cli, home + ["--budget", "0.2B"])
    assert out.exit_code == 2 and "fits no model" in out.output
    out = runner.invoke(cli, home + ["--k", "2", "--where", "family == nowhere"])
    assert out.exit_code == 2 and "matches no model" in out.output


def test_a_subset_s_routing_accuracy_shares_a_tie_whatever_the_order_of_its_members():
    """The portfolio's vectorised routing over many subsets and its per-subset routing with holes agree with
    encoder.metrics: models tied at the top share the query."""
    from encoder.metrics import routing_accuracy
    from registry.analytics.portfolio import _routing_common, _routing_scored

    pred = np.array([[0.8, 0.1], [0.8, 0.6], [0.3, 0.6]])
    truth = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    subsets = np.array([[0, 1, 2], [2, 1, 0], [1, 0, 2]])
    assert np.allclose(_routing_common(pred, truth, subsets), 0.5)
    assert _routing_scored(pred, truth, [2, 1, 0]) == _routing_scored(pred, truth, [0, 1, 2]) == 0.5
    assert routing_accuracy(pred, truth) == 0.5
