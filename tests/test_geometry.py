"""The scorecard's metrics (registry/lab/geometry.py) on tiny hand-made data whose answers are known."""
from __future__ import annotations

import math

import numpy as np
import pytest

from registry.lab import geometry as g
from registry.analytics.clusters import cosine_distances


def test_disagreement_counts_only_common_queries():
    nan = np.nan
    truth = np.array([[1, 0, 1, nan],
                      [1, 1, nan, 0],
                      [nan, nan, nan, 1]], dtype=float)
    d, n = g.disagreement_matrix(truth)
    assert n[0, 1] == 2 and n[0, 2] == 0 and n[1, 2] == 1
    assert d[0, 1] == pytest.approx(0.5)  # agree on q0, disagree on q1
    assert d[1, 2] == pytest.approx(1.0)
    assert math.isnan(d[0, 2])  # nothing in common
    assert np.all(np.diag(d) == 0)
    assert d[1, 0] == d[0, 1]


def test_disagreement_soft_scores_are_expected_disagreement():
    d, _ = g.disagreement_matrix(np.array([[0.5], [0.5]]))
    assert d[0, 1] == pytest.approx(0.5)


def test_nearest_skips_self_and_undefined():
    d = np.array([[0, 0.2, np.nan], [0.2, 0, 0.1], [np.nan, 0.1, 0]])
    assert g.nearest(d)[:, 0].tolist() == [1, 2, 1]


def test_self_retrieval_ranks():
    stored = np.eye(3)
    copies = np.array([[1.0, 0.1, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 1.0]])  # model 1's copy lands on model 0
    assert g.self_retrieval_ranks(copies, stored).tolist() == [1, 2, 1]


def test_mutual_pairs():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.05]])
    b = np.array([[1.0, 0.02], [0.02, 1.0], [0.7, 0.7]])  # model 2's second sample lands elsewhere
    assert g.mutual_pair_rate(a, b) == pytest.approx(2 / 3)
    assert g.mutual_pair_rate(a[:2], b[:2]) == 1.0


def test_behavioural_neighbour_rate_and_cross_dataset_miss():
    # four models on a line by behaviour; the embedding swaps model 0's neighbour to the far end
    raw = np.abs(np.subtract.outer(np.arange(5.0), np.arange(5.0))) / 10
    emb = raw.copy()
    emb[0, 4] = emb[4, 0] = 0.01
    rate, hits = g.behavioural_nn_rate(emb, raw, k=3)
    # 0 and 4 now see each other first, but each is the other's farthest by behaviour
    assert hits.tolist() == [False, True, True, True, False]
    assert rate == pytest.approx(0.6)
    raw_nan = raw.copy()
    raw_nan[1, 0] = raw_nan[0, 1] = np.nan  # no common queries: that neighbour is a miss
    _, hits = g.behavioural_nn_rate(raw, raw_nan, k=3)
    assert g.nearest(raw)[1, 0] == 0 and not hits[1]


def test_family_purity_nn_and_siblings():
    z = np.array([[1, 0], [0.99, 0.1], [0, 1], [0.1, 0.99]], dtype=float)
    d = cosine_distances(z)
    fam = ["a", "a", "b", None]
    assert g.nn_shares_label(d, fam) == 2  # models 0, 1 (model 2's neighbour has no family)
    assert g.label_purity(d, fam, 1) == pytest.approx(2 / 3)
    hits, n = g.sibling_rate(d, ["x", "y", "y", "z"])
    assert (hits, n) == (0, 2)  # 1 and 2 are siblings but not each other's nearest


def test_distance_correlations_perfect_and_pairs():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(6, 3))
    dist = g.euclidean_distances(z)
    out = g.distance_correlations(dist, dist * 2 + 1)
    assert out["pearson"] == pytest.approx(1.0) and out["spearman"] == pytest.approx(1.0)
    assert out["kendall"] == pytest.approx(1.0) and out["pairs"] == 15
    noisy = dist.copy()
    noisy[0, 1] = noisy[1, 0] = np.nan
    assert g.distance_correlations(dist, noisy)["pairs"] == 14


def test_nn_agreement():
    dist = np.array([[0, 1, 2], [1, 0, 3], [2, 3, 0]], dtype=float)
    dis = np.array([[0, 0.2, 0.5], [0.2, 0, 0.4], [0.5, 0.4, 0]])
    # neighbours by dist: 0->1, 1->0, 2->0 ; agreement 0.8, 0.8, 0.5
    assert g.nn_agreement(dist, dis) == pytest.approx((0.8 + 0.8 + 0.5) / 3)


def test_cluster_ari_recovers_clear_families():
    z = np.array([[1, 0, 0], [0.98, 0.05, 0], [0.97, 0, 0.05],
                  [0, 1, 0], [0.05, 0.98, 0], [0, 0.97, 0.05]], dtype=float)
    out = g.cluster_ari(cosine_distances(z), ["a", "a", "a", "b", "b", "b"])
    assert out["ari"] == pytest.approx(1.0) and out["k"] == 2
    shuffled = g.cluster_ari(cosine_distances(z), ["a", "b", "a", "b", "a", "b"])
    assert shuffled["ari"] < 0.2


def test_view_card_on_a_small_trained_registry(tmp_path):
    """The registry side end to end on a synthetic pool: the card reads the view only, and its
    figures are what the pure functions give on the same matrices."""
    from registry.catalog.dataset import load_eval_data
    from tests.helpers import synthetic_registry

    reg = synthetic_registry(tmp_path / "home", train_epochs=5, n_families=3, models_per_family=3,
                             queries_per_task=25, n_duplicates=0)
    names = [r.name for r in reg.list()]
    where = "family in (synfam0, synfam1)"
    card = g.view_card(reg.store, where=where, copy_evals=32, draws=1)
    view = [r.name for r in reg.list(where)]
    assert card.models == len(view) == 6 < len(names)
    assert 0 <= card.self_top1 <= card.self_top3 <= 1 and card.mutual_pair_models == 6
    data = load_eval_data(reg.store, reg.query_encoder, models=view)
    raw, _ = g.disagreement_matrix(data.dense())
    fam = [r.family for r in reg.list(where)]
    assert card.family_nn_raw == g.nn_shares_label(raw, fam)
    assert card.family_purity_raw == pytest.approx(g.label_purity(raw, fam, 3))
    assert card.cosine["pairs"] == 15 and -1 <= card.cosine["spearman"] <= 1
    assert card.sibling_field is None  # synthetic models carry no base_model
    f = card.fingerprint  # training fitted an item table: the fingerprint's figures come with the card
    assert f is not None and f.rank == 16 and 0 <= f.self_top1 <= f.self_top3 <= 1
    assert f.correlations["pairs"] == 15 and f.held_out is None
    # the search row is the registry's own search within the view: its first answer among the 3 nearest
    near = g.nearest(raw, 3)
    pos = {n: i for i, n in enumerate(data.models)}
    expected = sum(pos[reg.similar(n, k=1, where=where).neighbours[0].name] in near[pos[n]] for n in view)
    assert f.index["search_behavioural_nn_hits"] == expected and f.index["models"] == 6
    with_folds = g.view_card(reg.store, where=where, copy_evals=32, draws=1, holdout_folds=2)
    held = with_folds.fingerprint.held_out
    assert held["folds"] == 2 and 0 <= held["self_top1"] <= 1 and 0 <= held["search_behavioural_nn"] <= 1


def test_import_meta_tags_every_model_and_views_select_them(tmp_path):
    from click.testing import CliRunner

    from cli.main import cli
    from tests.helpers import write_triple

    home = str(tmp_path / "home")
    first = write_triple(tmp_path / "a")
    second = write_triple(tmp_path / "b", models=[("0", "gamma-1b", "gamma", "1", "open")])
    run = CliRunner()
    for path, name in ((first, "one"), (second, "two")):
        result = run.invoke(cli, ["--home", home, "import", str(path), "--no-encode", "--id-prefix", f"{name}:",
                                  "--meta", f"dataset={name}", "--meta", "source=test"])
        assert result.exit_code == 0, result.output
    out = run.invoke(cli, ["--home", home, "models", "list", "--where", "dataset == one", "--json"])
    assert out.exit_code == 0, out.output
    import json

    listed = json.loads(out.output)
    assert sorted(m["name"] for m in listed) == ["alpha-7b", "beta-13b"]
    assert all(m["extra"]["source"] == "test" and m["family"] in ("alpha", "beta") for m in listed)
    bad = run.invoke(cli, ["--home", home, "import", str(first), "--meta", "dataset"])
    assert bad.exit_code != 0 and "--meta" in bad.output
    bad = run.invoke(cli, ["--home", home, "import", str(first), "--no-encode", "--meta", "params_b=big"])
    assert bad.exit_code != 0 and "params_b" in bad.output
