"""Cost-aware routing (issue 26 part 1): a model's cost from its metadata, `route --max-cost` /
`--willingness-to-pay` through the API, the CLI and HTTP, and the quality/cost curve on a prediction matrix
whose answer is known."""
from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import POOL_TRAINED_NO_COPY, own_evaluations
from service_harness import TOKEN, serving_copy

from cli.main import cli
from registry import InputError, ModelRecord, Registry
from registry.analytics.cost import (ASSUMED_TOKENS_IN, ASSUMED_TOKENS_OUT, PROXY_USD_PER_M_TOKENS_PER_B, model_cost,
                                     pool_costs)
from registry.lab.cost_curve import cost_curve

CHEAP = (0.1 * ASSUMED_TOKENS_IN + 0.2 * ASSUMED_TOKENS_OUT) / 1e6  # priced-cheap: price_in 0.1, price_out 0.2


def proxy(params_b: float) -> float:
    return params_b * PROXY_USD_PER_M_TOKENS_PER_B * (ASSUMED_TOKENS_IN + ASSUMED_TOKENS_OUT) / 1e6


# ------------------------------------------------------------------------------------ cost resolution
def test_cost_comes_from_price_then_price_call_then_the_params_proxy():
    priced = model_cost(ModelRecord.from_flat("a", {"price_in": "2", "price_out": "6", "params_b": "70"}))
    assert priced.source == "price" and math.isclose(priced.usd_per_call, (2 * 1000 + 6 * 500) / 1e6)
    per_call = model_cost(ModelRecord.from_flat("b", {"price_call": "0.01", "price_in": "2", "price_out": "6"}))
    assert per_call.source == "price_call" and per_call.usd_per_call == 0.01
    by_size = model_cost(ModelRecord.from_flat("c", {"params_b": "8B", "latency_ms": "350"}))
    assert by_size.source == "params_b" and by_size.by_proxy and math.isclose(by_size.usd_per_call, proxy(8))
    assert by_size.latency_ms == 350
    nothing = model_cost(ModelRecord.from_flat("d", {"family": "x"}))
    assert nothing.usd_per_call is None and nothing.source is None


def test_half_a_price_or_a_bad_price_is_refused_naming_the_key():
    with pytest.raises(InputError, match="has price_in but no price_out") as err:
        model_cost(ModelRecord.from_flat("a", {"price_in": "2"}))
    assert err.value.field == "price_out"
    # a record built in Python (not through --meta) can still carry a text: the cost says which key
    with pytest.raises(InputError, match="'a' has price_call='soon'") as err:
        model_cost(ModelRecord(name="a", extra={"price_call": "soon"}))
    assert err.value.field == "price_call"
    # through --meta / a metadata mapping it is refused when it arrives
    for bad in ({"price_in": "cheap"}, {"price_out": "-1"}, {"latency_ms": "true"}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} .* is not a number >= 0"):
            ModelRecord.from_flat("a", bad)


def test_unpriced_models_are_named_or_excluded():
    records = {n: ModelRecord.from_flat(n, meta) for n, meta in
               (("sized", {"params_b": 7}), ("bare", {}), ("also-bare", {"family": "f"}))}
    with pytest.raises(InputError, match="2 models have no price and no params_b.*bare, also-bare"):
        pool_costs(records, list(records))
    kept = pool_costs(records, list(records), unpriced="exclude")
    assert list(kept) == ["sized"]
    with pytest.raises(InputError, match="unpriced must be one of error, exclude"):
        pool_costs(records, list(records), unpriced="ignore")


# ------------------------------------------------------------------------------ route, three faces
@pytest.fixture(scope="module")
def home(synthetic_home) -> Path:
    """The routing tests' synthetic pool (sizes only: costed by the proxy) plus three added models: two
    priced, one with neither price nor size."""
    home = synthetic_home("cost", **POOL_TRAINED_NO_COPY)
    reg = Registry.open(home)
    reg.add_model("priced-cheap", own_evaluations(reg, "syn-synfam0-13b"), {"price_in": "0.1", "price_out": "0.2"})
    reg.add_model("priced-dear", own_evaluations(reg, "syn-synfam1-13b"), {"price_call": "0.05", "latency_ms": "900"})
    reg.add_model("mystery", own_evaluations(reg, "syn-synfam2-13b"), {"provider": "nobody"})
    return home


@pytest.fixture(scope="module")
def reg(home) -> Registry:
    return Registry.open(home)


@pytest.fixture(scope="module")
def text(reg) -> str:
    return reg.store.read("queries").to_pylist()[0]["text"]


def test_route_without_a_trade_off_carries_no_cost(reg, text):
    result = reg.route(text, k=3)
    assert set(result.model_dump()) == {"query", "ranking", "fallbacks", "min_evals", "evidence_note", "predictor",
                                        "predictor_description"}
    assert all(set(r.model_dump()) == {"name", "p_correct", "low_evidence"} for r in result.ranking)


def test_max_cost_keeps_only_models_within_it(reg, text):
    ceiling = proxy(1) * 1.5  # the 1b models (the proxy) and nothing else
    result = reg.route(text, k=20, fallback=5, max_cost=ceiling, unpriced="exclude")
    names = {r.name for r in result.ranking}
    assert names == {n for n in reg.store.read("models").column("name").to_pylist() if n.endswith("-1b")}
    assert all(r.cost_usd <= ceiling and r.cost_source == "params_b" for r in result.ranking)
    assert {f.name for f in result.fallbacks} <= names  # fallbacks are candidates too
    p = [r.p_correct for r in result.ranking]
    assert p == sorted(p, reverse=True)  # no λ: ranked by P(correct)
    assert result.max_cost == ceiling and result.willingness_to_pay is None
    assert "left out, no price and no params_b: mystery" in result.cost_note
    assert "costed by the params_b proxy" in result.cost_note
    # a ceiling that admits the priced model: it is there, costed by its price
    wider = reg.route(text, k=20, max_cost=CHEAP, unpriced="exclude")
    cheap = [r for r in wider.ranking if r.name == "priced-cheap"]
    assert cheap and cheap[0].cost_source == "price" and math.isclose(cheap[0].cost_usd, CHEAP)
    assert "priced-dear" not in {r.name for r in wider.ranking}


def test_willingness_to_pay_trades_p_correct_for_cost(reg, text):
    plain = reg.route(text, k=20, fallback=0, unpriced="exclude", willingness_to_pay=0)
    assert [r.name for r in plain.ranking] == [r.name for r in reg.route(text, k=20, fallback=0).ranking
                                               if r.name != "mystery"]
    assert all(r.utility == r.p_correct for r in plain.ranking)
    dear = next(r for r in plain.ranking if r.name == "priced-dear")
    assert dear.cost_source == "price_call" and dear.cost_usd == 0.05 and dear.latency_ms == 900
    lam = 50.0  # 0.05 USD costs 2.5 in probability: the per-call model goes last
    traded = reg.route(text, k=20, fallback=0, unpriced="exclude", willingness_to_pay=lam)
    u = [r.utility for r in traded.ranking]
    assert u == sorted(u, reverse=True)
    assert all(math.isclose(r.utility, r.p_correct - lam * r.cost_usd, abs_tol=2e-6) for r in traded.ranking)
    assert traded.ranking[-1].name == "priced-dear"
    # a λ so large that cost alone decides: the cheapest models (1b, by the proxy) come first
    cheapest = reg.route(text, k=3, fallback=0, unpriced="exclude", willingness_to_pay=1e9)
    assert all(r.name.endswith("-1b") for r in cheapest.ranking)
    # at the largest λ, the equally cheap 1b models' utilities tie: the likelier ranks first, not the first by name
    most = reg.route(text, k=20, fallback=0, unpriced="exclude", willingness_to_pay=1e12)
    small = [r for r in most.ranking if r.name.endswith("-1b")]
    assert [r.name for r in most.ranking[:len(small)]] == [r.name for r in small]
    assert [r.p_correct for r in small] == sorted((r.p_correct for r in small), reverse=True), small
    # where λ·cost swamps P(correct) in a float (a cost of $1,000 a call at λ 1e12), utilities tie exactly: then
    # P(correct) orders them, its own near-ties by name
    from registry.analytics.routing import _rank

    utility = np.array([-1e15, -1e15, -1e15, -2e15])
    p = np.array([0.2, 0.9, 0.9 + 1e-9, 0.99])
    assert _rank(utility, np.array(["a", "z", "b", "c"]), then=p) == [2, 1, 0, 3]
    assert _rank(utility, np.array(["a", "z", "b", "c"])) == [0, 2, 1, 3]  # no `then`: by name
    out = run(reg.home, text, "-k", "2", "--willingness-to-pay", "1e12", "--unpriced", "exclude")
    assert out.exit_code == 0 and "-1.500e+07  " in out.output, out.output  # e-notation, not 8 digits and 4 decimals


def test_trade_off_errors_name_what_is_wrong(reg, text):
    with pytest.raises(InputError, match="no price and no params_b, so no cost: mystery") as err:
        reg.route(text, max_cost=1.0)
    assert err.value.field == "max_cost"
    with pytest.raises(InputError, match=r"no candidate model costs at most \$1e-06 per call: the cheapest is "
                                         r"syn-synfam\d-1b at \$1\.5e-05 \(by the params_b proxy\)") as err:
        reg.route(text, max_cost=1e-6, unpriced="exclude")
    assert err.value.field == "max_cost"
    for value, name in ((-1, "max_cost"), (float("nan"), "max_cost"), ("cheap", "max_cost"), (True, "max_cost"),
                        (-0.5, "willingness_to_pay"), (float("inf"), "willingness_to_pay"),
                        (1.1e12, "willingness_to_pay")):
        with pytest.raises(InputError, match=f"{name} must be a") as err:
            reg.route(text, **{name: value}, unpriced="exclude")
        assert err.value.field == name
    with pytest.raises(InputError, match="unpriced must be one of"):
        reg.route(text, max_cost=1, unpriced="maybe")


def run(home: Path, *args: str):
    return CliRunner().invoke(cli, ["--home", str(home), "--server", "none", "route", *args])


def test_cli_route_with_a_trade_off(reg, home, text):
    out = run(home, text, "-k", "4", "--willingness-to-pay", "50", "--unpriced", "exclude", "--json")
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload == reg.route(text, k=4, willingness_to_pay=50, unpriced="exclude").model_dump(mode="json")
    assert all({"cost_usd", "cost_source", "utility"} <= set(r) for r in payload["ranking"])
    shown = run(home, text, "-k", "3", "--max-cost", "0.001", "--unpriced", "exclude")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0] == "max cost $0.001 per call" and lines[1].startswith("P(correct)  cost $/call  source")
    assert all(line.split()[2] in ("price", "params_b") for line in lines[2:5])
    assert lines[5].startswith("note: ") and lines[5].endswith("left out, no price and no params_b: mystery")


@pytest.mark.parametrize("args, option, message", [
    (("--max-cost", "-1"), "--max-cost", "must be a finite number >= 0"),
    (("--max-cost", "cheap"), "--max-cost", "is not a valid float"),
    (("--willingness-to-pay", "-2"), "--willingness-to-pay", "must be a finite number >= 0"),
    (("--willingness-to-pay", "1e308"), "--willingness-to-pay", "must be at most 1e+12"),
    (("--max-cost", "nan"), "--max-cost", "must be a finite number >= 0"),
    (("--max-cost", "1e-6", "--unpriced", "exclude"), "--max-cost", "the cheapest is"),
    (("--max-cost", "1"), "--max-cost", "mystery"),
])
def test_cli_route_refuses_bad_trade_offs(home, text, args, option, message):
    out = run(home, text, *args, "--json")
    assert out.exit_code != 0
    error = json.loads(out.stdout)["error"]
    assert error.get("option") == option and message in error["message"], error


def test_route_over_http_matches_the_api(home, reg, text, tmp_path_factory):
    from registry.client import RegistryClient

    with serving_copy(home, tmp_path_factory.mktemp("cost-server")) as server:
        with RegistryClient(server.url, token=TOKEN) as client:
            for options in ({"max_cost": 0.001, "unpriced": "exclude"},
                            {"willingness_to_pay": 50, "unpriced": "exclude", "k": 5},
                            {"k": 2}):
                assert client.route(text, **options) == reg.route(text, **options), options
            with pytest.raises(InputError, match="mystery"):
                client.route(text, max_cost=1)
            with pytest.raises(InputError, match="max_cost must be a finite number"):
                client.route(text, max_cost=-1)  # refused before it is sent
        for body, field in (({"max_cost": -1}, "max_cost"), ({"max_cost": "cheap"}, "max_cost"),
                            ({"willingness_to_pay": -3}, "willingness_to_pay"), ({"unpriced": "maybe"}, "unpriced"),
                            ({"max_cost": 1e-6, "unpriced": "exclude"}, "max_cost"), ({"max_cost": 1}, "max_cost")):
            answer = httpx.post(server.url + "/v1/route", json={"query": text, **body}, timeout=60)
            assert answer.status_code == 422, (body, answer.text)
            assert field in answer.text, (body, answer.text)
        with_cost = httpx.post(server.url + "/v1/route", json={"query": text, "max_cost": 1, "unpriced": "exclude"},
                               timeout=60).json()["results"][0]
        assert with_cost["max_cost"] == 1 and "cost_usd" in with_cost["ranking"][0]


# ------------------------------------------------------------------------------------- the curve
def test_cost_curve_on_a_matrix_with_a_known_answer():
    # rows: best (cost 10, right on all 10 queries), mid (cost 2, right on 0-7), cheap (cost 1, right on 0-4);
    # the router predicts 0.95 where a model is right, 0.05 where wrong
    truth = np.zeros((3, 10))
    truth[0, :], truth[1, :8], truth[2, :5] = 1, 1, 1
    router = 0.05 + 0.9 * truth
    predictions = {"test_truth": truth, "train_mean": np.array([1.0, 0.8, 0.5])}
    c = cost_curve(predictions, [10.0, 2.0, 1.0], ["best", "mid", "cheap"], proxy=["mid"], router=router)
    assert c["always_best"] == {"model": "best", "routing_accuracy": 1.0, "cost_usd": 10.0}
    assert c["always_cheapest"] == {"model": "cheap", "routing_accuracy": 0.5, "cost_usd": 1.0}
    assert c["gap"] == 0.5 and c["costed_by_proxy"] == ["mid"]
    # λ = 0: tied models share a query, as a router breaking ties at random would send it: queries 0-4 to
    # all three, 5-7 to best and mid, 8-9 to best: (5 * 13/3 + 3 * 6 + 2 * 10) / 10, all right
    assert math.isclose(c["router"]["cost_usd"], (5 * 13 / 3 + 3 * 6 + 2 * 10) / 10) and c["router"]["routing_accuracy"] == 1.0
    # λ in (0, 0.1): each query to its cheapest right model: cost (5*1 + 3*2 + 2*10)/10 = 3.1, all right;
    # λ in (0.1, 0.9): 8 right at (5*1 + 3*2 + 2*1)/10 = 1.3; beyond: always-cheapest
    costs = {round(p["cost_usd"], 9): p["routing_accuracy"] for p in c["points"]}
    assert costs == {round((5 * 13 / 3 + 3 * 6 + 2 * 10) / 10, 9): 1.0, 3.1: 1.0, 1.3: 0.8, 1.0: 0.5}
    half = c["half_cost"]  # budget 5: the 3.1 point
    assert math.isclose(half["cost_usd"], 3.1) and half["gap_recovered"] == 1.0 and c["target_met"] is True
    assert math.isclose(half["random_mix_accuracy"], 0.5 + 0.5 * 2.1 / 9)
    share = {k: (round(v["cost_usd"], 9), v["gap_recovered"]) for k, v in c["at_share"].items()}
    # budgets 2.8, 5.5, 8.2: the last takes λ = 0 itself
    assert share == {"20%": (1.3, 0.6), "50%": (3.1, 1.0), "80%": (round((5 * 13 / 3 + 3 * 6 + 2 * 10) / 10, 9), 1.0)}
    # gap recovered over x = 0, 0.05, ..., 1 (budget 1 + 9x): 0; 0.6 for x in 0.05..0.2; 1 from 0.25
    assert math.isclose(c["apgr"], 0.05 * (4 * 0.6 + 15 * 1.0 + 0.5))
    pair = c["pair"]  # best vs cheap: queries 5-9 are where best is predicted ahead
    assert (pair["strong"], pair["weak"], pair["n_queries"], pair["gap"]) == ("best", "cheap", 10, 0.5)
    assert pair["at_share"] == {"20%": 0.4, "50%": 1.0, "80%": 1.0}
    assert pair["cpt"] == {"50%": 0.25, "80%": 0.35}


def test_the_end_of_the_curve_sends_each_query_to_the_likelier_of_equally_cheap_models():
    # rows: an expensive model right everywhere, and two equally cheap ones: "a-weak" (named first) never
    # right, "b-strong" always right; at λ = ∞ (every query to its cheapest model) b-strong must take them
    truth = np.array([[1.0] * 6, [0.0] * 6, [1.0] * 6])
    router = np.array([[0.95] * 6, [0.1] * 6, [0.9] * 6])
    predictions = {"test_truth": truth, "train_mean": np.array([1.0, 0.0, 1.0])}
    c = cost_curve(predictions, [10.0, 0.001, 0.001], ["big", "a-weak", "b-strong"], router=router)
    end = c["points"][-1]
    assert end["lam"] is None and math.isclose(end["cost_usd"], 0.001) and end["routing_accuracy"] == 1.0
    assert all(p["routing_accuracy"] == 1.0 for p in c["points"])


def test_cost_curve_says_when_there_is_no_gap_and_refuses_bad_costs():
    truth = np.array([[1.0, 0.0], [1.0, 0.0]])
    predictions = {"test_truth": truth, "train_mean": np.array([0.5, 0.5])}
    c = cost_curve(predictions, [2.0, 1.0], ["a", "b"], router=truth)
    assert c["gap"] <= 0 and c["half_cost_gap_recovered"] is None and c["target_met"] is None and c["apgr"] is None
    with pytest.raises(InputError, match="2 costs and 1 names for 2 models"):
        cost_curve(predictions, [2.0, 1.0], ["a"], router=truth)
    with pytest.raises(InputError, match="finite number >= 0"):
        cost_curve(predictions, [2.0, -1.0], ["a", "b"], router=truth)


# ------------------------------------------------------------------------------ evaluate --cost
def test_evaluate_cost_refuses_an_unpriced_pool_before_training(home):
    out = CliRunner().invoke(cli, ["--home", str(home), "evaluate", "--cost", "--json"])
    assert out.exit_code != 0
    error = json.loads(out.stdout)["error"]
    assert "mystery" in error["message"] and error.get("option") == "--cost", error


def test_evaluate_cost_prints_the_curve(home, tmp_path, monkeypatch, capsys):
    # the report, not LOCUS's quality: 20 epochs instead of the default schedule (as test_train_embed_evaluate)
    import shutil

    import registry.lab.evaluation as evaluation
    from encoder.training import TrainConfig

    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    real = evaluation.run_evaluation
    short = TrainConfig(epochs=20, min_epochs=0)
    monkeypatch.setattr(evaluation, "run_evaluation", lambda data, **kw: real(data, **{**kw, "train_config": short}))
    out = CliRunner().invoke(cli, ["--home", str(copy), "evaluate", "--cost", "--unpriced", "exclude",
                                   "--evals-per-model", "60", "--json"])
    assert out.exit_code == 0, out.output
    curve = json.loads(out.stdout)["cost_curve"]
    assert curve["excluded_unpriced"] == ["mystery"] and "mystery" not in curve["models"]
    assert set(curve["costed_by_proxy"]) == set(curve["models"]) - {"priced-cheap", "priced-dear"}
    assert curve["costs_usd"]["priced-dear"] == 0.05 and math.isclose(curve["costs_usd"]["syn-synfam0-7b"], proxy(7))
    assert math.isclose(curve["always_cheapest"]["cost_usd"], min(curve["costs_usd"].values()))
    assert set(curve["at_share"]) == {"20%", "50%", "80%"} and curve["points"][0]["lam"] == 0
    cost = [p["cost_usd"] for p in curve["points"]]
    assert cost == sorted(cost, reverse=True)  # a larger λ never costs more
    assert curve["points"][-1]["cost_usd"] <= curve["always_cheapest"]["cost_usd"] + 1e-12
    # the text the command prints for the same report (not a second training)
    from cli.main import _echo_evaluation
    from registry.results import EvaluationReport

    capsys.readouterr()
    _echo_evaluation(EvaluationReport.model_validate(json.loads(out.stdout)))
    text = capsys.readouterr().out
    assert "always-best" in text and "APGR" in text and "at half always-best's cost" in text
    assert "costed by the params_b proxy (no price): 9 of 11 models" in text
    assert "left out, no price and no params_b: mystery" in text


def test_the_cost_curve_does_not_depend_on_the_order_of_the_pool_s_models():
    """always-best is the cheaper of equally accurate models, and a tie in the router's scores is shared, so
    the curve's figures agree with `best_single` and do not move when the pool's rows are permuted (argmax
    gave each tie to the first row: always-best 0.5 or 0.75 by the order)."""
    from registry.lab.cost_curve import cost_curve

    rng = np.random.default_rng(0)
    truth = (rng.random((3, 40)) < np.array([[0.6], [0.6], [0.3]])).astype(float)
    val_truth = (rng.random((3, 20)) < 0.5).astype(float)
    tied = np.full((3, 40), 0.5)  # a router with no opinion: every query a three-way tie
    predictions = {"test_truth": truth, "train_mean": np.array([0.7, 0.7, 0.4]),
                   "val": {c: np.full((3, 20), 0.5) for c in ("locus", "item", "knn")}, "val_truth": val_truth,
                   "test": {c: tied for c in ("locus", "item", "knn")}}
    names, costs = ["a", "b", "c"], [2.0, 1.0, 0.5]
    curves = []
    for order in ([0, 1, 2], [1, 0, 2], [2, 1, 0]):
        permuted = {"test_truth": truth[order], "train_mean": predictions["train_mean"][order],
                    "val_truth": val_truth[order], "val": {c: v[order] for c, v in predictions["val"].items()},
                    "test": {c: v[order] for c, v in predictions["test"].items()}}
        curves.append(cost_curve(permuted, [costs[i] for i in order], [names[i] for i in order], router=tied[order]))
    for curve in curves:
        assert curve["always_best"]["model"] == "b" and curve["always_best"]["routing_accuracy"] == truth[1].mean()
        assert curve["router"]["routing_accuracy"] == pytest.approx(truth.mean(axis=0).mean())  # λ=0: a 3-way tie
        assert curve["router"]["cost_usd"] == pytest.approx(np.mean(costs))
