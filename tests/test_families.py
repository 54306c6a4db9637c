"""Model families: clusters (dendrogram + heatmap), the 2-D map, and compare; the pure parts on
hand-made inputs, the registry parts on a small trained synthetic registry, the CLI end to end."""
from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import synthetic_registry
from registry import InputError, NotFoundError, Registry, RegistryError
from registry.analytics.clusters import adjusted_rand_index, cluster_distances, cosine_distances, purity, silhouette
from registry.analytics.compare import holm, paired_test, two_proportion_test
from registry.analytics.embedding_map import pca_2d

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trained_home(tmp_path_factory) -> Path:
    """Three synthetic families of three models, each model scored on ~80% of 100 queries."""
    home = tmp_path_factory.mktemp("families") / "home"
    synthetic_registry(home, train_epochs=20, n_families=3, models_per_family=3, queries_per_task=25,
                       tasks=("math", "law", "biology", "code"), n_duplicates=0, coverage=0.8, seed=5)
    return home


@pytest.fixture
def reg(trained_home) -> Registry:
    return Registry.open(trained_home, create=False)


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 10_000


def run_cli(home: Path, *args: str):
    return CliRunner().invoke(cli, ["--home", str(home), *args])


# ------------------------------------------------------------------ the pure parts
def three_groups() -> tuple[np.ndarray, list[int]]:
    """Nine points in three tight groups, the first group three identical vectors."""
    rng = np.random.default_rng(0)
    centres = np.eye(6)[:3] * 5
    z = np.concatenate([np.repeat(centres[:1], 3, axis=0),
                        centres[1] + 0.05 * rng.normal(size=(3, 6)),
                        centres[2] + 0.05 * rng.normal(size=(3, 6))])
    return z, [0, 0, 0, 1, 1, 1, 2, 2, 2]


@pytest.mark.parametrize("linkage", ["average", "complete", "single", "ward"])
def test_obvious_groups_are_found_by_every_linkage(linkage):
    z, truth = three_groups()
    d = cosine_distances(z)
    assert np.allclose(d, d.T) and np.all(np.diag(d) == 0) and d[0, 1] == pytest.approx(0, abs=1e-12)
    tree = cluster_distances(d, linkage=linkage)
    assert tree["k"] == 3 and len(set(tree["labels"][:3])) == 1  # the identical vectors share a cluster
    assert adjusted_rand_index(truth, tree["labels"]) == 1.0
    assert tree["silhouette"] > 0.9 and -1 <= tree["cophenetic_correlation"] <= 1
    # clusters are numbered along the dendrogram's leaves
    seen = [tree["labels"][i] for i in tree["order"]]
    assert [c for i, c in enumerate(seen) if i == 0 or c != seen[i - 1]] == [1, 2, 3]


def test_ward_reads_a_euclidean_distance_as_it_is_and_others_as_sqrt_2d():
    from scipy.cluster import hierarchy
    from scipy.spatial.distance import pdist, squareform

    points = np.array([[0.0, 0.0], [0.0, 1.0], [5.0, 0.0], [5.0, 1.5], [9.0, 9.0]])
    d = squareform(pdist(points))
    own = cluster_distances(d, linkage="ward", euclidean=True)["Z"]
    np.testing.assert_allclose(own[:, 2], hierarchy.linkage(points, method="ward")[:, 2])  # scipy on the points
    cosine_like = cluster_distances(d, linkage="ward")["Z"]
    np.testing.assert_allclose(cosine_like[:, 2], hierarchy.linkage(squareform(np.sqrt(2 * d)), method="ward")[:, 2])


def test_ward_by_behaviour_says_its_heights_are_of_sqrt_2d(trained_home):
    out = run_cli(trained_home, "clusters", "--by", "fingerprint", "--linkage", "ward", "--json")
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["metric"] == "behaviour" and result["heights"].startswith("sqrt(2 x behaviour distance")
    complete = json.loads(run_cli(trained_home, "clusters", "--by", "fingerprint", "--json").output)
    assert complete["heights"].startswith("behaviour distance")
    assert max(m["height"] for m in complete["merges"]) <= 1.0


def test_a_given_k_cuts_the_tree_there():
    z, _ = three_groups()
    tree = cluster_distances(cosine_distances(z), k=2)
    assert tree["k"] == 2 and sorted(np.bincount(tree["labels"])[1:].tolist()) == [3, 6]
    one = cluster_distances(cosine_distances(z), k=1)  # silhouette is undefined for one cluster
    assert one["k"] == 1 and one["silhouette"] is None and set(one["labels"]) == {1}


def test_adjusted_rand_and_purity_known_values():
    assert adjusted_rand_index([0, 0, 1, 1], [0, 0, 1, 2]) == pytest.approx(0.5714285714)
    assert adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(-0.5)
    assert adjusted_rand_index(["a", "a", "b"], [7, 7, 3]) == 1.0  # names of labels do not matter
    assert purity([1, 1, 2, 2], ["x", "y", "y", "y"]) == 0.75


def test_silhouette_by_hand():
    d = np.array([[0, 1, 4, 5], [1, 0, 4, 5], [4, 4, 0, 1], [5, 5, 1, 0]], dtype=float)
    # points 0,1: a = 1, b = 4.5; points 2,3: a = 1, b = 4 and 5
    expected = np.mean([(4.5 - 1) / 4.5, (4.5 - 1) / 4.5, (4 - 1) / 4, (5 - 1) / 5])
    assert silhouette(d, np.array([1, 1, 2, 2])) == pytest.approx(expected)
    # a singleton counts 0; point 1: a = 4.5, b = 1; point 2: a = 2.5, b = 4; point 3: a = 3, b = 5
    expected = np.mean([0, (1 - 4.5) / 4.5, (4 - 2.5) / 4, (5 - 3) / 5])
    assert silhouette(d, np.array([1, 2, 2, 2])) == pytest.approx(expected)


def test_paired_test_is_mcnemar_for_binary_scores_and_holm_is_monotone():
    a = np.array([1] * 15 + [0] * 5 + [1] * 30)
    b = np.array([0] * 15 + [1] * 5 + [1] * 30)
    z, p = paired_test(a, b)
    assert z == pytest.approx(10 / math.sqrt(20)) and p == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert paired_test(a, a) == (0.0, 1.0)
    z2, _ = two_proportion_test(0.6, 100, 0.4, 100)
    assert z2 == pytest.approx(0.2 / math.sqrt(0.25 * 0.02))
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_pca_map_of_directions_in_a_plane_keeps_all_the_variance():
    rng = np.random.default_rng(1)
    t = rng.uniform(0, 2 * np.pi, 8)
    plane = np.linalg.qr(rng.normal(size=(7, 2)))[0].T  # two orthonormal directions in 7-d
    z = (np.stack([np.cos(t), np.sin(t)], 1) @ plane) * rng.uniform(0.5, 3, (8, 1))  # length does not count
    coords, explained = pca_2d(z)
    assert coords.shape == (8, 2) and explained["total"] == pytest.approx(1.0) and explained["x"] >= explained["y"]


# ------------------------------------------------------------------ clusters on a registry
def test_clusters_partition_the_embedded_models_and_draw_the_figure(reg, tmp_path):
    plot = tmp_path / "out" / "clusters.png"
    result = reg.clusters(plot=plot)
    names = [r.name for r in reg.models()]
    members = [m for c in result.clusters for m in c.members]
    assert sorted(members) == sorted(names) and len(members) == len(set(members)) == result.n_models == 9
    assert result.k == len(result.clusters) and 2 <= result.k <= 8
    assert reg.clusters(k=3).k_rule == "given"
    capped = reg.clusters(k=1000)  # as many clusters as models, and it says so
    assert capped.k == 9 and capped.k_rule == "given (1000; at most the 9 models clustered)"
    printed = CliRunner().invoke(cli, ["--home", str(reg.store.home), "clusters", "-k", "1000"]).output
    assert "(given (1000; at most the 9 models clustered);" in printed, printed  # not "silhouette maximum"
    assert [c.id for c in result.clusters] == list(range(1, result.k + 1))
    assert -1 <= result.cophenetic_correlation <= 1 and -1 <= result.silhouette <= 1
    assert sorted(result.order) == sorted(names) and len(result.merges) == len(names) - 1
    assert result.merges[-1].size == len(names)
    heights = [m.height for m in result.merges]
    assert heights == sorted(heights)
    spread = [c for c in result.clusters if c.size > 1]
    assert spread and all(0 < c.mean_distance <= heights[-1] for c in spread)  # in the clustered metric
    assert all(c.mean_distance_cosine == c.mean_distance for c in result.clusters)  # the old name, kept
    agreement = result.family_agreement
    assert agreement.field == "family" and agreement.n_families == 3 and agreement.n_models == 9
    assert -1 <= agreement.adjusted_rand <= 1 and 0 < agreement.p_value <= 1
    assert agreement.at_family_count.k == 3
    assert sum(f.n_models for f in agreement.by_family.values()) == 9
    assert result.plot == str(plot) and is_png(plot)


def test_cluster_families_by_field_are_the_records_families(reg):
    result = reg.clusters(linkage="ward")
    family = {r.name: r.family for r in reg.models()}
    for c in result.clusters:
        counted = defaultdict(int)
        for m in c.members:
            counted[family[m]] += 1
        assert c.families == dict(counted) and c.size == len(c.members)
    assert result.plot is None and result.linkage == "ward"


def test_copies_of_one_model_land_in_one_cluster(trained_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(trained_home, home)
    reg = Registry.open(home)
    original = "syn-synfam1-7b"
    queries = {r["query_id"]: r["text"] for r in reg.store.read("queries").to_pylist()}
    evals = [{"query": queries[r["query_id"]], "score": r["score"]}
             for r in reg.store.read("evaluations").to_pylist() if r["model"] == original]
    for name in ("copy-one", "copy-two"):
        reg.add_model(name, evals, {"family": "copies"})
    result = reg.clusters()
    home_cluster = next(c for c in result.clusters if original in c.members)
    assert {"copy-one", "copy-two"} <= set(home_cluster.members)


def test_where_selects_the_models_and_too_few_is_an_error(reg):
    families = sorted({r.family for r in reg.models()})
    result = reg.clusters(where=f"family in ({families[0]}, {families[1]})")
    assert result.n_models == 6
    with pytest.raises(RegistryError, match="at least 3"):
        reg.clusters(where=f"family == {families[0]} and params_b <= 7")
    with pytest.raises(RegistryError, match="no embedded model matches"):
        reg.clusters(where="family == nosuch")
    with pytest.raises(InputError, match="unknown field"):
        reg.clusters(where="colour == red")
    with pytest.raises(InputError, match="linkage"):
        reg.clusters(linkage="centroidish")


# ------------------------------------------------------------------ the map
def test_classical_mds_keeps_distances_that_are_planar_and_orders_axes_by_share():
    from scipy.spatial.distance import pdist, squareform

    from registry.analytics.embedding_map import classical_mds

    rng = np.random.default_rng(3)
    points = rng.normal(size=(12, 2)) * [3.0, 1.0]
    d = squareform(pdist(points))
    coords, share = classical_mds(d)
    assert np.allclose(pdist(coords), pdist(points), atol=1e-9)  # exact up to rotation and reflection
    assert share["total"] == pytest.approx(1.0) and share["x"] > share["y"] > 0
    again, _ = classical_mds(d)
    assert np.array_equal(coords, again)
    # three dimensions: two axes keep part of it, and say how much
    cube = squareform(pdist(rng.normal(size=(12, 3))))
    _, part = classical_mds(cube)
    assert 0 < part["total"] < 1


def test_map_returns_every_model_and_colours_by_category_or_number(reg, tmp_path):
    names = [r.name for r in reg.models()]
    result = reg.map(tmp_path / "family.png", color_by="family")
    assert sorted(c.name for c in result.coordinates) == sorted(names)
    assert all(np.isfinite([c.x, c.y]).all() for c in result.coordinates)
    assert 0 <= result.explained_variance.y <= result.explained_variance.x <= 1
    assert result.colouring["kind"] == "categorical" and len(result.colouring["categories"]) == 3
    assert is_png(tmp_path / "family.png")
    numeric = reg.map(tmp_path / "params.png", color_by="params_b")
    assert numeric.colouring["kind"] == "numeric" and is_png(tmp_path / "params.png")
    plain = reg.map(tmp_path / "plain", where="params_b >= 7")  # no suffix: a PNG
    assert plain.plot.endswith("plain.png") and len(plain.coordinates) == plain.n_models < len(names)


def test_map_of_a_field_no_model_has_lists_the_fields(reg, tmp_path):
    with pytest.raises(InputError, match=r"no model has a value for 'licence'.*family.*params_b"):
        reg.map(tmp_path / "x.png", color_by="licence")
    assert not (tmp_path / "x.png").exists()


# ------------------------------------------------------------------ compare
def test_compare_accuracies_are_the_stored_evaluations(reg):
    a, b = "syn-synfam0-1b", "syn-synfam2-13b"
    result = reg.compare(a, b)
    task_of = {r["query_id"]: r["task"] for r in reg.store.read("queries").to_pylist()}
    scores = {a: defaultdict(dict), b: defaultdict(dict)}
    for r in reg.store.read("evaluations").to_pylist():
        if r["model"] in scores:
            scores[r["model"]][task_of[r["query_id"]]][r["query_id"]] = r["score"]
    assert sorted(t.task for t in result.tasks) == ["biology", "code", "law", "math"]
    for row in result.tasks:
        sa, sb = scores[a][row.task], scores[b][row.task]
        assert row.a_accuracy == pytest.approx(np.mean(list(sa.values())))
        assert row.b_accuracy == pytest.approx(np.mean(list(sb.values())))
        assert (row.a_n, row.b_n, row.shared_n) == (len(sa), len(sb), len(set(sa) & set(sb)))
        assert row.difference == pytest.approx(row.a_accuracy - row.b_accuracy)
        assert 0 <= row.p_value <= row.p_adjusted <= 1
        assert 0 <= row.a_predicted <= 1 and 0 <= row.b_predicted <= 1
        shared = sorted(set(sa) & set(sb))
        assert row.disagreement_rate == pytest.approx(np.mean([abs(sa[q] - sb[q]) for q in shared]))
    diffs = [abs(t.difference) for t in result.tasks]
    assert diffs == sorted(diffs, reverse=True)
    assert result.distance_cosine == pytest.approx(reg.distance(a, b), abs=1e-6)
    near = [h.name for h in reg.similar(a, k=8).neighbours]
    assert near.index(b) + 1 == result.rank_of_b_among_a_neighbours
    g = result.agreement
    assert g.both_correct + g.only_a + g.only_b + g.both_wrong == g.shared_queries > 0


def test_compare_leaves_untestable_tasks_out_of_holm_and_tests_overall_only_on_shared_queries(trained_home, tmp_path):
    """A task one model never answered was "tested" (z 0, p 1) and counted in Holm, inflating the others' p; the
    overall test was unpaired over different tasks when the two shared few queries."""
    home = shutil.copytree(trained_home, tmp_path / "home")
    reg = Registry.open(home, create=False)
    queries = reg.store.read("queries").to_pylist()
    math_ids = [q["query_id"] for q in queries if q["task"] == "math"]
    own = {r["query_id"]: r["score"] for r in reg.store.read("evaluations").to_pylist() if r["model"] == "syn-synfam0-1b"}
    shared = [q for q in math_ids if q in own][:12]
    reg.add_model("math-only", [{"query_id": q, "score": 1.0 - own[q]} for q in shared])  # disagrees on all 12
    result = reg.compare("syn-synfam0-1b", "math-only")
    rows = {t.task: t for t in result.tasks}
    assert rows["math"].test == "paired" and rows["math"].shared_n == 12
    assert rows["math"].p_adjusted == pytest.approx(rows["math"].p_value)  # the only test: Holm leaves it
    for task in ("law", "biology", "code"):
        assert (rows[task].test, rows[task].z, rows[task].p_value, rows[task].p_adjusted) == ("none", None, None, None)
    assert result.overall.test == "paired" and result.overall.shared_difference is not None
    out = run_cli(home, "compare", "syn-synfam0-1b", "math-only")
    assert out.exit_code == 0, out.output
    assert "on the 12 shared queries A-B" in out.output
    law = next(line for line in out.output.splitlines() if line.startswith("law "))
    assert law.split()[8:10] == ["-", "-"], law  # z and p: untested

    other = [q for q in math_ids if q not in shared][:5]
    reg.add_model("few-shared", [{"query_id": q, "score": 1.0} for q in other])
    few = reg.compare("math-only", "few-shared")
    assert few.overall.shared_n < 10 and (few.overall.test, few.overall.z, few.overall.p_value) == ("none", None, None)
    out = run_cli(home, "compare", "math-only", "few-shared")
    assert out.exit_code == 0 and "no overall test: " in out.output, out.output


def test_compare_refuses_unknown_names_and_a_model_with_itself(reg):
    with pytest.raises(NotFoundError, match="closest: syn-synfam0-1b"):
        reg.compare("syn-synfam0-1B", "syn-synfam2-13b")
    with pytest.raises(InputError, match="two different models"):
        reg.compare("syn-synfam0-1b", "syn-synfam0-1b")


# ------------------------------------------------------------------ the CLI
def test_cli_clusters_map_and_compare(trained_home, tmp_path):
    out = run_cli(trained_home, "clusters", "--json")
    assert out.exit_code == 0, out.output
    default = json.loads(out.output)
    assert default["n_models"] == 9 and default["linkage"] == "complete"
    out = run_cli(trained_home, "clusters", "--linkage", "average", "--plot", str(tmp_path / "c.png"))
    assert out.exit_code == 0, out.output
    assert "clusters" in out.output and "agreement with family" in out.output and is_png(tmp_path / "c.png")
    out = run_cli(trained_home, "clusters", "-k", "9", "--plot", str(tmp_path / "k9.png"), "--json")
    assert out.exit_code == 0, out.output
    nine = json.loads(out.output)
    assert nine["k"] == 9 and nine["silhouette"] is None and is_png(tmp_path / "k9.png")
    out = run_cli(trained_home, "map", "--plot", str(tmp_path / "m.png"), "--color-by", "access", "--json")
    assert out.exit_code == 0, out.output
    assert len(json.loads(out.output)["coordinates"]) == 9 and is_png(tmp_path / "m.png")
    out = run_cli(trained_home, "compare", "syn-synfam0-1b", "syn-synfam1-7b")
    assert out.exit_code == 0, out.output
    assert "cosine distance" in out.output and "math" in out.output and "p (Holm)" in out.output


def test_every_face_of_clusters_defaults_to_one_linkage():
    """Complete linkage (registry.defaults; the scorecard's part (i) measured it against average on both
    datasets and joint): the library, the Registry method and the CLI take it from one place."""
    import inspect

    from cli.families import clusters as cli_clusters
    from registry.analytics.clusters import DEFAULT_LINKAGE, LINKAGES, clusters
    from registry.defaults import CLUSTER_LINKAGE

    assert CLUSTER_LINKAGE == DEFAULT_LINKAGE == "complete" and CLUSTER_LINKAGE in LINKAGES
    for fn in (clusters, cluster_distances, Registry.clusters):
        assert inspect.signature(fn).parameters["linkage"].default == CLUSTER_LINKAGE, fn
    option = next(p for p in cli_clusters.params if p.name == "linkage")
    assert option.default == CLUSTER_LINKAGE and tuple(option.type.choices) == LINKAGES


@pytest.mark.parametrize("args, message", [
    (["clusters", "--where", "family == nosuch"], "no embedded model matches"),
    (["clusters", "--where", "family =="], "filter"),
    (["clusters", "--linkage", "median"], "Invalid value for '--linkage'"),
    (["map", "--color-by", "family"], "Missing option '--plot'"),
    (["map", "--plot", "PLOT", "--color-by", "colour"], "fields present"),
    (["compare", "syn-synfam0-1b", "nobody"], "no model named 'nobody'"),
    (["compare", "syn-synfam0-1b"], "Missing argument"),
])
def test_cli_errors_are_clear_and_exit_non_zero(trained_home, tmp_path, args, message):
    args = [str(tmp_path / "p.png") if a == "PLOT" else a for a in args]
    out = run_cli(trained_home, *args)
    assert out.exit_code != 0 and message in out.output, out.output


def test_cli_on_a_registry_without_embeddings_says_what_to_do(home):
    out = run_cli(home, "clusters")
    assert out.exit_code == 2 and "registry embed --all" in out.output


def test_names_the_plot_font_lacks_are_said_once_not_per_glyph(tmp_path):
    import warnings

    from registry.analytics.plots import scatter_map

    names = ["模型-ünï 🚀", "统一-b", "plain"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scatter_map(tmp_path / "m.png", names, np.array([[0.0, 0.0], [1.0, 0.5], [0.3, 1.0]]),
                    {"x": 0.5, "y": 0.3, "total": 0.8}, field="family", values=["统一", "a", "b"])
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "no glyph for 5 character(s)" in said[0] and "they show as boxes" in said[0], said
    assert is_png(tmp_path / "m.png")
