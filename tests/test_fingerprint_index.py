"""The behaviour fingerprint as a vector column of the models table with its own FAISS index (issue 22,
parts 1-2): written with the LOCUS vector by every write path, exact in the index, read by `--by`."""
from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import FINGERPRINT_INDEXED


@pytest.fixture
def reg(synthetic_home):
    from registry import Registry

    return Registry.open(synthetic_home("fpindex", **FINGERPRINT_INDEXED))


def _rows(reg) -> dict[str, dict]:
    return {r["name"]: r for r in reg.store.read("models").to_pylist()}


def test_training_and_embedding_fill_both_columns_tagged_with_their_ids(reg):
    from registry.catalog.fingerprint_store import load_item_table

    table = load_item_table(reg.store)
    rows = _rows(reg)
    assert rows and all(r["vector"] is not None and r["fingerprint"] is not None for r in rows.values())
    assert {r["table_id"] for r in rows.values()} == {table.table_id}
    assert {len(r["fingerprint"]) for r in rows.values()} == {table.rank + 1}
    assert {len(r["behaviour"]) for r in rows.values()} == {table.behaviour_dim}
    assert json_format(reg) == 4  # a fresh home is made at the current format (4: behaviour)


def json_format(reg) -> int:
    return reg.store.config["format"]


def test_index_distance_is_the_rms_logit_difference_over_the_probe_queries(reg):
    from indexing.model_index import ModelIndex
    from registry.catalog.fingerprint_store import compute, load_item_table

    table = load_item_table(reg.store)
    index = ModelIndex.open(reg.store, by="fingerprint")
    assert index.encoder_id == table.table_id and index.by == "fingerprint"
    a = index.names[0]
    thetas = compute(reg.store, table, list(index.names))
    f = table.factors[table.probe].astype(np.float64)
    for b, dist in index.neighbours(a, 4, metric="euclidean"):
        ta, tb = thetas[a][0], thetas[b][0]
        rms = np.sqrt(np.mean((f @ (ta[:-1] - tb[:-1]) + ta[-1] - tb[-1]) ** 2))  # the bias b_i cancels
        assert dist == pytest.approx(rms, rel=1e-4)


def test_add_model_writes_both_vectors_in_the_same_version(reg):
    from tests.helpers import own_evaluations

    reg.add_model("copy-endpoint", own_evaluations(reg, "syn-synfam1-7b"))
    row = _rows(reg)["copy-endpoint"]
    assert row["vector"] is not None and row["fingerprint"] is not None
    last = reg.store.read("model_versions").to_pylist()
    mine = [r for r in last if r["name"] == "copy-endpoint"][-1]
    assert mine["fingerprint"] == row["fingerprint"] and mine["table_id"] == row["table_id"]
    assert row["behaviour"] is not None and mine["behaviour"] == row["behaviour"]
    # the copy is its original's nearest in the fingerprint index, and the search says so
    result = reg.similar("copy-endpoint", k=3)
    assert result.by == "fingerprint" and result.metric == "euclidean"
    assert result.neighbours[0].name == "syn-synfam1-7b" and result.neighbours[0].vector == "fingerprint"


def test_queries_the_item_table_has_not_seen_are_placed_by_their_stored_vectors(reg):
    from registry.catalog.dataset import load_query_vectors
    from registry.catalog.fingerprint_store import load_item_table, place_queries
    from tests.helpers import own_evaluations

    known = own_evaluations(reg, "syn-synfam1-7b")
    new = [{"query": f"a question the item table never saw, number {i}", "score": i % 2} for i in range(6)]
    reg.add_model("with-new-queries", known + new)
    table = load_item_table(reg.store)
    queries = reg.store.read("queries", ["query_id", "text"]).to_pylist()
    new_ids = [q["query_id"] for q in queries if q["text"].startswith("a question the item table never saw")]
    assert len(new_ids) == 6 and not any(q in table._row for q in new_ids)
    some_known = [q for q in table.query_ids[:3]]
    ids = [some_known[0], new_ids[0], "no-such-query", *new_ids[1:], *some_known[1:]]
    kept, f, b = place_queries(reg.store, table, ids)
    assert kept == [i for i in ids if i != "no-such-query"]  # no vector and not in the table: left out
    every = load_query_vectors(reg.store, reg.store.query_encoder)  # what the placement reads, all of it
    vectors = np.stack([every.vectors[every.query_ids.index(q)] for q in kept])
    want_f, want_b = table.item_params(kept, vectors)
    assert np.allclose(f, want_f) and np.allclose(b, want_b)
    assert np.allclose(f[0], table.factors[table._row[some_known[0]]])
    # the new model's fingerprint reads every one of its evaluations, the new queries' included
    from registry.catalog.fingerprint_store import compute

    assert compute(reg.store, table, ["with-new-queries"])["with-new-queries"][2] == len(known) + 6


def test_a_write_fingerprints_the_rows_it_holds_as_a_read_of_the_store_would(reg):
    """add-model and refine fingerprint the evaluations in hand (HeldEvaluations), not read back: the columns
    equal those computed from the store afterwards, new queries and a replaced score included."""
    from registry.catalog.fingerprint_store import fingerprint_columns, load_item_table
    from tests.helpers import own_evaluations

    evals = own_evaluations(reg, "syn-synfam2-13b")
    new = [{"query": f"an unseen question {i}", "score": float(i % 2), "task": "math"} for i in range(5)]
    reg.add_model("held-copy", evals[:40] + new)
    flipped = [{"query": e["query"], "score": 1.0 - e["score"]} for e in evals[:3]]
    reg.refine("held-copy", flipped + evals[40:60])
    table = load_item_table(reg.store)
    row = _rows(reg)["held-copy"]
    again = fingerprint_columns(reg.store, table, ["held-copy"])["held-copy"]
    assert row["n_evals"] == 65 and again["fingerprint"] is not None
    assert np.allclose(row["fingerprint"], again["fingerprint"], atol=1e-6)
    assert np.allclose(row["behaviour"], again["behaviour"], atol=1e-6)


def test_a_thin_model_gets_no_fingerprint_and_is_searched_by_locus(reg):
    from registry.errors import RegistryError
    from registry.catalog.fingerprint_store import MIN_FINGERPRINT_EVALS
    from tests.helpers import own_evaluations

    reg.add_model("thin", own_evaluations(reg, "syn-synfam0-7b")[:MIN_FINGERPRINT_EVALS - 1])
    row = _rows(reg)["thin"]
    assert row["vector"] is not None and row["fingerprint"] is None and row["table_id"] is None
    assert row["behaviour"] is None
    assert reg.similar("thin", k=2).by == "locus"  # the default falls back, and says so
    with pytest.raises(RegistryError, match="--by locus"):
        reg.similar("thin", k=2, by="fingerprint")
    # and it is never a fingerprint neighbour of anyone
    assert all(h.name != "thin" for h in reg.similar("syn-synfam0-7b", k=10, by="fingerprint").neighbours)


def test_fingerprint_candidates_come_exactly_from_the_behaviour_index(reg):
    from indexing.model_index import ModelIndex
    from registry.analytics.search import BEHAVIOUR_CANDIDATES, behaviour_neighbours
    from registry.catalog.fingerprint_store import load_item_table

    index = ModelIndex.open(reg.store, by="fingerprint")
    name = index.names[0]
    proposed = {n for n, _ in behaviour_neighbours(reg.store, load_item_table(reg.store), name, BEHAVIOUR_CANDIDATES)}
    hits = reg.similar(name, k=4, by="fingerprint").neighbours
    assert {h.name for h in hits} <= proposed
    for h in hits:  # the distance reported is the fingerprint index's own
        assert h.distance == pytest.approx(dict(index.neighbours(name, len(index.names), metric="euclidean"))[h.name],
                                          rel=1e-5)


def test_a_batch_of_behaviour_searches_answers_as_one_search_each(reg):
    from registry.analytics.search import behaviour_neighbours, behaviour_neighbours_many
    from registry.catalog.fingerprint_store import load_item_table

    table = load_item_table(reg.store)
    names = [r["name"] for r in reg.store.read("models", ["name"]).to_pylist()]
    many = behaviour_neighbours_many(reg.store, table, [*names, "not-a-model"], 4, batch=3)  # several batches
    assert set(many) == set(names)
    for name in names:
        one = behaviour_neighbours(reg.store, table, name, 4)
        assert [n for n, _ in many[name]] == [n for n, _ in one]
        assert np.allclose([d for _, d in many[name]], [d for _, d in one], atol=1e-6)
    from dataclasses import replace

    refitted = replace(table, config=replace(table.config, seed=table.config.seed + 1))  # another table id
    assert refitted.table_id != table.table_id
    assert behaviour_neighbours_many(reg.store, refitted, names, 4) is None  # not the index's table


def test_the_behaviour_index_ranks_by_expected_disagreement_over_the_models_tasks(reg):
    from indexing.model_index import ModelIndex
    from registry.analytics.search import behaviour_neighbours
    from registry.catalog.fingerprint_store import compute, load_item_table

    table = load_item_table(reg.store)
    index = ModelIndex.open(reg.store, by="behaviour")
    assert index.encoder_id == table.table_id and index.vectors.shape[1] == table.behaviour_dim
    made = compute(reg.store, table, list(index.names))
    # what each model "answers" on a probe: its recorded score where it has one, else its fingerprint's P
    answers = {}
    for n, (theta, cover, _, recorded) in made.items():
        p = table.probe_probabilities(theta[None])[0]
        answers[n] = (np.where(np.isnan(recorded), p, recorded), cover)
    name = index.names[0]
    y, mine = answers[name]
    expected = {}
    for other, (q, theirs) in answers.items():
        if other != name:
            both = mine & theirs
            expected[other] = (np.sum((y + q - 2 * y * q)[both]) + 0.5 * np.sum(mine & ~theirs)) / mine.sum()
    found = behaviour_neighbours(reg.store, table, name, len(expected))
    assert len(found) == len(expected)  # every other model, exactly as far as counted by hand, nearest first
    for other, d in found:
        assert d == pytest.approx(expected[other], abs=1e-5)
    assert [d for _, d in found] == sorted(d for _, d in found)
    with pytest.raises(Exception, match="query vector"):
        index.neighbours(name, 2, metric="inner")  # its stored vectors are not their own queries


def test_by_takes_the_old_names_and_refuses_others(reg):
    from registry.errors import InputError

    name = reg.models()[0].name
    assert reg.similar(name, k=3, by="behaviour").by == "fingerprint"
    assert [h.name for h in reg.similar(name, k=3, by="behaviour").neighbours] == \
        [h.name for h in reg.similar(name, k=3, by="fingerprint").neighbours]
    old = reg.similar(name, k=3, by="embedding")
    assert old.by == "locus" and old.metric == "cosine" and all(h.vector == "locus" for h in old.neighbours)
    with pytest.raises(InputError, match="by must be one of"):
        reg.similar(name, k=3, by="vibes")


def test_a_new_item_table_rewrites_every_fingerprint_and_embed_all_writes_them(reg):
    from registry.catalog.fingerprint_store import rewrite_fingerprints

    rewrite_fingerprints(reg.store, None)  # as if no table had ever read them
    assert all(r["fingerprint"] is None for r in _rows(reg).values())
    assert reg.similar(reg.models()[0].name, k=2).by == "locus"
    report = reg.fit_fingerprints()
    rows = _rows(reg)
    assert all(r["fingerprint"] is not None and r["behaviour"] is not None and r["table_id"] == report.table_id
               for r in rows.values())
    rewrite_fingerprints(reg.store, None)
    reg.embed_all()
    assert all(r["fingerprint"] is not None for r in _rows(reg).values())


def test_restore_brings_back_the_fingerprint_of_the_same_table(reg):
    name = reg.models()[0].name
    before = _rows(reg)[name]
    reg.remove(name)
    reg.restore(name)
    after = _rows(reg)[name]
    assert after["fingerprint"] == before["fingerprint"] and after["table_id"] == before["table_id"]
    assert after["behaviour"] == before["behaviour"]


def test_likeness_operations_say_which_vector_they_read(reg, tmp_path):
    a, b = reg.models()[0].name, reg.models()[1].name
    assert reg.clusters().by == "fingerprint" and reg.clusters().metric == "behaviour"
    assert reg.clusters(by="locus").by == "locus"
    cmp = reg.compare(a, b)
    assert cmp.by == "fingerprint" and cmp.distance > 0
    assert reg.compare(a, b, by="locus").by == "locus"
    drawn = reg.map(tmp_path / "m.png")
    assert drawn.by == "fingerprint" and "behaviour distances" in drawn.projection
    decision = reg.route("What is 7 times 8?", fallback=2)
    assert decision.fallbacks and {f.by for f in decision.fallbacks} == {"fingerprint"}
    assert {f.by for f in reg.route("What is 7 times 8?", fallback=2, by="locus").fallbacks} == {"locus"}


def test_the_map_by_fingerprint_draws_the_distances_clusters_cut(reg, tmp_path):
    """Classical MDS of the answer distances: the reported fidelity is the correlation of the map's
    distances with that matrix, and models that answer alike are drawn nearer than models that do not."""
    from scipy.spatial.distance import pdist, squareform
    from scipy.stats import pearsonr

    from registry.analytics.search import answer_distance_matrix

    drawn = reg.map(tmp_path / "m.png")
    names = [c.name for c in drawn.coordinates]
    d = answer_distance_matrix(reg.store, names)
    flat = pdist(np.array([[c.x, c.y] for c in drawn.coordinates]))
    assert drawn.distance_correlation == pytest.approx(pearsonr(squareform(d, checks=False), flat)[0], abs=1e-9)
    assert drawn.distance_correlation > 0.5
    assert 0 < drawn.explained_variance.y <= drawn.explained_variance.x and drawn.explained_variance.total <= 1
    assert drawn.share_of == "the positive eigenvalues"  # classical MDS: a non-Euclidean d has negative ones too
    by_locus = reg.map(tmp_path / "l.png", by="locus")
    assert by_locus.by == "locus" and by_locus.projection.startswith("PCA of L2-normalised")
    assert by_locus.share_of == "the variance"


def test_compare_by_fingerprint_reads_the_behaviour_index_as_route_s_fallbacks_do(reg):
    from registry.analytics.search import behaviour_neighbours
    from registry.catalog.fingerprint_store import load_item_table

    table = load_item_table(reg.store)
    names = [m.name for m in reg.models()]
    a = names[0]
    order = behaviour_neighbours(reg.store, table, a, len(names))
    b, far = order[1][0], order[-1][0]
    cmp = reg.compare(a, b)
    assert (cmp.by, cmp.distance_metric) == ("fingerprint", "behaviour")
    assert cmp.distance == pytest.approx(dict(order)[b]) and cmp.n_neighbours == len(order)
    assert cmp.rank_of_b_among_a_neighbours == 2  # the ranks are the behaviour index's order from each side
    from_far = behaviour_neighbours(reg.store, table, far, len(names))
    assert reg.compare(a, far).rank_of_a_among_b_neighbours == [n for n, _ in from_far].index(a) + 1
    assert reg.compare(a, b, by="locus").distance_metric == "cosine"
    out = _cli(reg, "compare", a, b)
    assert f"behaviour distance (expected disagreement) {cmp.distance:.4f}" in out


def _cli(reg, *args) -> str:
    from click.testing import CliRunner

    from cli.main import cli

    result = CliRunner().invoke(cli, ["--home", str(reg.home), *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_clusters_of_fingerprints_read_answer_distances_up_to_a_pool_size(reg, monkeypatch):
    """Each pair's distance is the mean of its two answer distances (the same figure search ranks by);
    a pool beyond ANSWER_MATRIX_MAX clusters by the behaviour index's own distance (the stored vectors,
    as route's fallbacks read them), and says so."""
    import registry.analytics.search as search

    names = [m.name for m in reg.models()]
    d = search.answer_distance_matrix(reg.store, names)
    assert np.allclose(d, d.T) and np.all(np.diag(d) == 0) and ((d >= 0) & (d <= 1)).all()
    a, b = names[0], names[1]
    found = {h.name: h.behaviour_distance for h in reg.similar(a, k=len(names) - 1).neighbours}
    back = {h.name: h.behaviour_distance for h in reg.similar(b, k=len(names) - 1).neighbours}
    assert d[0, 1] == pytest.approx((found[b] + back[a]) / 2, abs=0.02)  # 1,024 answers here, 4,096 in search
    clustered = reg.clusters(k=3)
    assert clustered.metric == "behaviour" and "behaviour distance" in clustered.heights
    monkeypatch.setattr(search, "ANSWER_MATRIX_MAX", len(names) - 1)
    assert search.answer_distance_matrix(reg.store, names) is None
    larger = reg.clusters(k=3)
    assert larger.metric == "behaviour" and "stored behaviour vectors" in larger.heights
    from registry.catalog.fingerprint_store import load_item_table

    stored = search.behaviour_distance_matrix(reg.store, names, batch=2)  # batches give the one matrix
    assert np.allclose(stored, stored.T) and np.all(np.diag(stored) == 0) and ((stored >= 0) & (stored <= 1)).all()
    assert np.allclose(stored, search.behaviour_distance_matrix(reg.store, names))
    table = load_item_table(reg.store, reg.store.config["active_encoder"])
    near = {n: dict(search.behaviour_neighbours(reg.store, table, n, len(names) - 1)) for n in (a, b)}
    assert stored[0, 1] == pytest.approx((near[a][b] + near[b][a]) / 2, abs=1e-9)
    # the merge heights are that matrix's: the root of a complete-linkage tree is its largest distance
    assert larger.merges[-1].height == pytest.approx(stored.max(), abs=1e-9)


def test_the_cli_search_says_which_vector_answered(reg):
    from click.testing import CliRunner

    from cli.main import cli

    name = reg.models()[0].name
    out = CliRunner().invoke(cli, ["--home", str(reg.store.home), "search", name, "-k", "2"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0] == "by fingerprint (euclidean)"
    out = CliRunner().invoke(cli, ["--home", str(reg.store.home), "search", name, "--by", "locus", "--json"])
    assert '"by": "locus"' in out.output


def test_readers_that_do_not_search_by_behaviour_leave_its_column_out(reg, tmp_path):
    from indexing.store import HEAVY_MODEL_COLUMNS, MODELS, Store

    light = reg.store.read(MODELS, without=HEAVY_MODEL_COLUMNS)
    assert "behaviour" not in light.schema.names and "fingerprint" in light.schema.names
    assert light.num_rows == reg.store.read(MODELS).num_rows
    empty = Store(tmp_path / "new").read(MODELS, without=HEAVY_MODEL_COLUMNS)  # no table yet: the schema less it
    assert empty.num_rows == 0 and "behaviour" not in empty.schema.names and "name" in empty.schema.names
    # the rows the list, the index and add-model read still say everything they said
    assert [m.name for m in reg.models()] == sorted(_rows(reg))


def test_the_three_indexes_open_from_one_read_of_the_models_table(reg, monkeypatch):
    """What a service's reload after a write reads: the models table once for every vector kind, and each
    kind's index as opening it alone gives it."""
    from indexing.model_index import VECTOR_KINDS, ModelIndex
    from indexing.store import MODELS
    from registry.analytics.search import open_indexes

    reg.remove(sorted(_rows(reg))[0])  # a write: every saved index is stale now
    reads = []
    read = type(reg.store).read
    monkeypatch.setattr(type(reg.store), "read",
                        lambda self, table, **kw: reads.append(table) or read(self, table, **kw))
    together = open_indexes(reg.store)
    assert reads.count(MODELS) == 1 and set(together) == set(VECTOR_KINDS)
    monkeypatch.undo()
    for by, index in together.items():
        alone = ModelIndex.open(reg.store, by=by, rebuild=True)
        assert (index.by, index.encoder_id, index.names, index.rows) == (by, alone.encoder_id, alone.names, alone.rows)
        assert index.names and np.array_equal(index.vectors, alone.vectors)
    # saved with the generation's rows in one file every kind's metadata names (not in each kind's metadata)
    index_dir = reg.home / "index"
    assert len(list(index_dir.glob("rows-*.json"))) == 1
    metas = [index_dir / (f"{i.encoder_id}.json" if by == "locus" else f"{by}-{i.encoder_id}.json")
             for by, i in together.items()]
    assert all("rows" not in json.loads(p.read_text()) and json.loads(p.read_text())["rows_file"] for p in metas)
    saved = {by: ModelIndex._load_current(reg.home, by) for by in VECTOR_KINDS}  # what a fresh process reads
    assert all(saved[by].rows == together[by].rows and saved[by].names == together[by].names for by in saved)
    reg.remove(sorted(_rows(reg))[0])
    open_indexes(reg.store)
    assert len(list(index_dir.glob("rows-*.json"))) == 1  # the earlier generation's rows went with it


def test_an_index_saved_in_an_earlier_format_is_saved_again_by_the_first_open(reg, monkeypatch):
    """After an upgrade that changes the saved form, the first open updates the old graph and saves this
    format's, so that later opens (a cold CLI search) read it without LanceDB instead of each going back to
    the table."""
    import indexing.model_index as model_index
    from indexing.model_index import ModelIndex
    from registry.analytics.search import open_indexes

    reg.remove(sorted(_rows(reg))[0])
    monkeypatch.setattr(model_index, "_FORMAT", model_index._FORMAT - 1)
    open_indexes(reg.store)  # saved as the earlier format would be
    assert ModelIndex._load_current(reg.home, "locus") is not None
    monkeypatch.undo()
    assert ModelIndex._load_current(reg.home, "locus") is None  # not this format's
    opened = open_indexes(reg.store)
    for by, index in opened.items():
        saved = ModelIndex._load_current(reg.home, by)
        assert saved is not None and saved.names == index.names and saved.rows == index.rows
    assert len(list((reg.home / "index").glob("rows-*.json"))) == 1  # the earlier format's rows went
