"""What a new user meets first (issue 14): refine, aliases, labelled output, one size parser, limits,
a visible default task, the first import's encoder, import progress and interruption, fast read-only
commands, and set-up on a stock machine."""
from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import SMALL_TRAINED, write_triple
from registry import InputError, Registry, RegistryError

ROOT = Path(__file__).resolve().parents[1]


def _run(home: Path, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result.output


@pytest.fixture(scope="module")
def trained_home(synthetic_home) -> Path:
    return synthetic_home("ux", **SMALL_TRAINED)


@pytest.fixture
def home(trained_home, tmp_path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(trained_home, copy)
    return copy


def _evals_file(reg: Registry, name: str, path: Path, n: int | None = None, flip: bool = False) -> Path:
    """The model's own evaluations (`flip`: with every score flipped, a change a refine makes a version of)."""
    texts = {r["query_id"]: r["text"] for r in reg.store.read("queries").to_pylist()}
    rows = [{"query": texts[r["query_id"]], "score": 1 - r["score"] if flip else r["score"]}
            for r in reg.store.read("evaluations").to_pylist() if r["model"] == name][:n]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


# ------------------------------------------------------------------------------------------ refine
def test_add_model_on_an_existing_name_points_at_refine_and_refine_makes_a_new_version(home, tmp_path):
    reg = Registry.open(home)
    name = reg.models()[0].name
    evals = _evals_file(reg, reg.models()[1].name, tmp_path / "more.jsonl", n=10)
    out = _run(home, "add-model", name, "--evals", str(evals), code=2)
    assert f"registry refine {name} --evals FILE" in out
    out = _run(home, "refine", name, "--evals", str(evals))
    assert f"refine {name} (version 2)" in out and "embedded from" in out
    history = _run(home, "history", name)
    assert "v2" in history and "refine" in history
    refined = CliRunner().invoke(cli, ["--home", str(home), "refine", name, "--evals", str(evals), "--json"])
    again = json.loads(refined.stdout)  # stdout: a thin model's warning goes to stderr
    assert (again["version"], again["event"]) == (2, "unchanged")  # the same file again: nothing new, no version
    assert f"refine {name}: nothing new (version 2 stays)" in _run(home, "refine", name, "--evals", str(evals))
    assert "no model named 'nobody'" in _run(home, "refine", "nobody", "--evals", str(evals), code=2)


# ----------------------------------------------------------------------------------------- aliases
def test_alias_set_list_delete_and_every_name_taking_command_accepts_it(home):
    reg = Registry.open(home)
    names = [r.name for r in reg.models()]
    target, other = names[0], names[1]
    assert "alias production -> " + target in _run(home, "alias", "set", "production", target)
    listed = _run(home, "alias", "list")
    assert listed.splitlines()[0].split() == ["alias", "model"] and f"production  {target}" in listed
    assert json.loads(_run(home, "alias", "list", "--json")) == [{"alias": "production", "name": target,
                                                                   "version": None}]
    # show, history, search, compare, route --exclude, audit --model: all take the alias
    assert json.loads(_run(home, "show", "production", "--json"))["record"]["name"] == target
    assert "v1" in _run(home, "history", "production")
    hits = json.loads(_run(home, "search", "production", "-k", "3", "--json"))["neighbours"]
    assert target not in [h["name"] for h in hits] and hits
    assert reg.similar("production", k=3) == reg.similar(target, k=3)
    assert json.loads(_run(home, "compare", "production", other, "--json"))["a"] == target
    routed = json.loads(_run(home, "route", "Solve for x: 3x + 1 = 10.", "-k", "5", "--exclude", "production",
                             "--json"))
    assert target not in [r["name"] for r in routed["ranking"]]
    assert reg.get("production").name == target
    # re-point, pin a version, and delete
    _run(home, "alias", "set", "production", f"{other}@1")
    assert reg.resolve("production") == other
    assert "deleted alias production (was " + other + "@1)" in _run(home, "alias", "delete", "production")
    assert "no alias named 'production'" in _run(home, "alias", "delete", "production", code=2)
    assert reg.aliases() == []


def test_a_pinned_alias_refuses_a_version_that_is_no_longer_live(home, tmp_path):
    reg = Registry.open(home)
    name = reg.models()[0].name
    _run(home, "alias", "set", "stable", f"{name}@1")
    _run(home, "refine", name, "--evals", str(_evals_file(reg, name, tmp_path / "e.jsonl", n=5, flip=True)))
    out = _run(home, "show", "stable", code=2)
    assert f"alias 'stable' points to {name} version 1, but the live version is 2" in out
    assert f"registry restore {name} --version 1" in out


def test_alias_errors_name_the_problem(home):
    reg = Registry.open(home)
    name = reg.models()[0].name
    assert "is not a valid alias" in _run(home, "alias", "set", "bad alias!", name, code=2)
    assert "is a model's name" in _run(home, "alias", "set", reg.models()[1].name, name, code=2)
    assert "no model named 'nobody'" in _run(home, "alias", "set", "prod", "nobody", code=2)
    assert f"model {name!r} has no version 9" in _run(home, "alias", "set", "prod", f"{name}@9", code=2)


# ---------------------------------------------------------------------------------- labelled output
def test_search_prints_a_header_and_route_labels_its_fallback_distances(home):
    reg = Registry.open(home)
    name = reg.models()[0].name
    out = _run(home, "search", name, "-k", "2").splitlines()  # the default likeness vector: the fingerprint
    assert out[0] == "by fingerprint (euclidean)" and out[1].split()[:2] == ["euclidean", "d"]
    out = _run(home, "search", name, "-k", "2", "--by", "locus").splitlines()
    assert out[0] == "by locus (cosine)" and out[1].split() == ["cosine", "d", "model", "family", "access"]
    routed = _run(home, "route", "Solve for x: 3x + 1 = 10.", "-k", "2", "--fallback", "2")
    line = [x for x in routed.splitlines() if x.startswith("if ")][0]
    assert "is unavailable (behaviour distance to it):" in line and "(d 0." in line  # an expected disagreement
    routed = _run(home, "route", "Solve for x: 3x + 1 = 10.", "-k", "2", "--fallback", "2", "--by", "locus")
    line = [x for x in routed.splitlines() if x.startswith("if ")][0]
    assert "is unavailable (cosine distance to it):" in line and "(d 0." in line


def test_search_suggests_close_names(home):
    name = Registry.open(home).models()[0].name
    assert f"closest: {name}" in _run(home, "search", name[:-1], code=2)


def test_stats_shows_the_home_it_reads(home, monkeypatch):
    monkeypatch.setenv("LOCUS_HOME", str(home))
    out = CliRunner().invoke(cli, ["stats"]).output
    assert f"home:        {home}" in out and "(default)" not in out


def test_meta_params_b_takes_the_same_sizes_as_budget(home, tmp_path):
    from cli.portfolio import parse_budget
    from registry.records import ModelRecord, parse_params_b

    reg = Registry.open(home)
    evals = _evals_file(reg, reg.models()[0].name, tmp_path / "e.jsonl", n=5)
    _run(home, "add-model", "eight", "--evals", str(evals), "--meta", "params_b=8B")
    assert reg.get("eight").params_b == 8.0
    assert parse_params_b("1.5T") == parse_budget("1.5T") == 1500.0
    assert ModelRecord.from_flat("m", {"params_b": "350M"}).params_b == pytest.approx(0.35)
    assert "params_b 'big' is not a number" in _run(home, "add-model", "x", "--evals", str(evals), "--meta",
                                                     "params_b=big", code=2)


# ------------------------------------------------------------------------------------------- limits
def test_a_5000_character_model_name_is_refused_naming_file_line_and_field(tmp_path):
    from registry.limits import MAX_NAME_CHARS

    home = tmp_path / "h"
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"model": "ok", "query": "What is 2+2?", "score": 1}) + "\n"
                    + json.dumps({"model": "m" * 5000, "query": "What is 2+3?", "score": 1}) + "\n")
    out = _run(home, "import", str(path), "--no-encode", code=2)
    assert f"{path}, line 2, field 'model': model name of 5,000 characters" in out
    assert f"the limit is {MAX_NAME_CHARS}" in out
    assert not (home / "db" / "models.lance").exists()  # nothing stored


def test_a_20_mb_query_text_is_refused(tmp_path):
    home = tmp_path / "h"
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"model": "m", "query": "x" * (20 * 1024 * 1024), "score": 1}) + "\n")
    out = _run(home, "import", str(path), "--no-encode", code=2)
    assert f"{path}, line 1, field 'query': query text of 20,971,520 characters; the limit is 100,000" in out


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from registry import limits

    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 1000)
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(json.dumps({"model": "m", "query": f"q{i}?", "score": 1}) for i in range(100)))
    with pytest.raises(InputError, match="the limit is 0 GiB per file"):
        Registry.open(tmp_path / "h").import_path(path, encode=False)


def test_evaluations_per_model_are_limited(tmp_path, monkeypatch):
    from registry import limits

    monkeypatch.setattr(limits, "MAX_EVALS_PER_MODEL", 3)
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(json.dumps({"model": "m", "query": f"question {i}?", "score": 1}) for i in range(5)))
    reg = Registry.open(tmp_path / "h")
    with pytest.raises(InputError) as err:
        reg.import_path(path, encode=False)
    assert err.value.line == 4 and err.value.field == "model" and "more than 3 evaluations" in str(err.value)
    assert reg.stats().n_evaluations == 0


def test_a_file_without_a_task_column_gets_a_visible_default_task(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"model": "m", "query": "What is 2+2?", "score": 1}) + "\n")
    home = tmp_path / "h"
    _run(home, "import", str(path), "--no-encode")
    assert json.loads(_run(home, "stats", "--json"))["queries_per_task"] == {"default": 1}
    assert "  default " in _run(home, "stats")


# ------------------------------------------------------------------------------------------- import
def test_the_first_import_with_an_encoder_makes_it_the_registrys(tmp_path):
    home = tmp_path / "h"
    data = write_triple(tmp_path / "d")
    result = CliRunner().invoke(cli, ["--home", str(home), "import", str(data), "--encoder", "all-MiniLM-L6-v2"])
    assert result.exit_code == 0, result.output
    assert Registry.open(home).query_encoder == "all-MiniLM-L6-v2"
    assert "query encoder is now all-MiniLM-L6-v2" in result.output
    for stage in ("reading ", "checking 10 evaluations", "encoding 5 new texts", "encoded 5/5 texts", "writing "):
        assert stage in result.stderr, stage
    # a second import with another encoder is refused (its texts would have no vector the registry reads)
    other = write_triple(tmp_path / "d2", queries=[("z1", "math", "What is 9 times 9?")])
    with pytest.raises(InputError, match="query encoder is all-MiniLM-L6-v2") as refused:
        Registry.open(home).import_path(other, encoder="all-mpnet-base-v2", encode=False)
    assert refused.value.field == "encoder"
    assert Registry.open(home).query_encoder == "all-MiniLM-L6-v2"


def test_train_on_a_home_without_its_encoders_vectors_says_how_to_fix_it(tmp_path):
    from encoder.training import TrainConfig

    reg = Registry.open(tmp_path / "h")
    reg.import_path(write_triple(tmp_path / "d"), encoder="all-MiniLM-L6-v2")
    # a home switched before `init --encoder` refused that (or by hand): its config names another encoder
    reg.store.update_config(query_encoder="all-mpnet-base-v2")
    with pytest.raises(RegistryError, match="registry init --encoder all-MiniLM-L6-v2"):
        reg.train(config=TrainConfig(epochs=1, max_seconds=None))


class _FailingEncoder:
    """Encodes like a tiny fake model, then fails after `limit` texts (an interrupted import)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.done = limit, 0

    def encode(self, texts):
        if self.done + len(texts) > self.limit:
            raise KeyboardInterrupt
        self.done += len(texts)
        return np.stack([np.full(4, float(len(t)), dtype=np.float32) for t in texts])


def test_an_interrupted_import_keeps_the_encoded_texts_and_writes_no_table_rows(tmp_path):
    from registry.importers import read_batch
    from registry.catalog.ingest import ingest

    reg = Registry.open(tmp_path / "h")
    batch = read_batch(write_triple(tmp_path / "d"), format="triple")
    encoder = _FailingEncoder(limit=4)
    with pytest.raises(KeyboardInterrupt):
        ingest(reg.store, batch, encoder="fake", load_encoder=lambda name: encoder, encode_chunk=2)
    assert reg.store.count("qvec__fake") == 4  # two chunks of two were committed to the cache
    assert reg.store.count("queries") == reg.store.count("evaluations") == reg.store.count("models") == 0
    checked = reg.check()
    assert checked.ok and checked.problems == []
    # the rerun encodes only the last text
    again = _FailingEncoder(limit=10)
    report = ingest(reg.store, batch, encoder="fake", load_encoder=lambda name: again, encode_chunk=2)
    assert again.done == 1 and report.encoded_texts == 1 and report.new_evaluations == 10


# ------------------------------------------------------------------------------------ fast commands
@pytest.mark.parametrize("command", [["stats"], ["models", "list"], ["show", "NAME"], ["history", "NAME"]])
def test_read_only_commands_import_neither_torch_nor_lancedb_once_the_snapshot_is_current(home, command):
    name = Registry.open(home).models()[0].name
    args = [name if a == "NAME" else a for a in command]
    code = ("import sys, runpy; sys.argv = ['registry', '--home', sys.argv[1], *sys.argv[2:]]\n"
            "try:\n    runpy.run_module('cli.main', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('torch', 'lancedb', 'sentence_transformers', 'pyarrow', 'faiss')"
            " if m in sys.modules))")  # pydantic is accepted: the answers are the typed results
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.run([sys.executable, "-c", code, str(home), *args], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=120)
    assert first.returncode == 0 and "HEAVY" in first.stdout, first.stderr
    assert "'torch'" not in first.stdout  # even while rebuilding the snapshot
    second = subprocess.run([sys.executable, "-c", code, str(home), *args], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=120)
    assert second.stdout.strip().endswith("HEAVY []"), second.stdout
    assert second.stdout.split("HEAVY")[0] == first.stdout.split("HEAVY")[0]  # the same answer


def test_the_snapshot_follows_every_write(home, tmp_path):
    reg = Registry.open(home)
    name = reg.models()[0].name
    before = json.loads(_run(home, "stats", "--json"))
    reg.remove(name)
    after = json.loads(_run(home, "stats", "--json"))
    assert after["n_models"] == before["n_models"] - 1
    listed = _run(home, "models", "list")
    assert name not in listed
    assert all(r.name in listed for r in reg.models())  # every other model still listed
    assert "remove" in _run(home, "history", name)
    assert f"model {name!r} was removed" in _run(home, "show", name, code=2)


# ------------------------------------------------------------------------------------------- set-up
def _setup_dry_run(index: str) -> str:
    env = {**os.environ, "LOCUS_TORCH_INDEX": index, "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--dry-run"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_setup_uses_pytorchs_cpu_index_when_it_answers(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<html></html>")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = _setup_dry_run(f"http://127.0.0.1:{server.server_port}/cpu-index/..")
    finally:
        server.shutdown()
    assert "torch from: PyTorch's CPU index" in out and "--index-url" in out
    assert "dry run: nothing installed" in out


def test_setup_falls_back_to_the_package_index_and_says_what_it_costs():
    out = _setup_dry_run("http://127.0.0.1:9/unreachable")
    assert "is unreachable from here" in out and "2.7 GB" in out
    assert "torch==2.13.0+cpu" in out and "--index-url" not in out
    # a printed command pastes back into a shell as itself: `.[test,ray,s3]` is no glob, `<2.15` no redirection
    import shlex

    printed = [shlex.split(line.strip()[1:]) for line in out.splitlines() if line.strip().startswith("$ ")]
    assert [".[test,ray,s3]"] in [w[w.index("-e") + 1:] for w in printed if "-e" in w]
    assert any(any(word.startswith("torch>=") and "<" in word for word in w) for w in printed)
    assert [line.split("]")[1].strip()[:3] for line in out.splitlines() if line.startswith("==>")] == [
        "1/6", "2/6", "3/6", "4/6", "5/6", "6/6"]


def test_pyproject_uses_the_spdx_licence_string():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])


# ------------------------------------------------------------------------------------------- figures
def _points(seed: int = 0) -> tuple[list[str], np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    coords = np.concatenate([rng.normal(0.0, 0.02, (20, 2)), rng.normal(0.5, 0.05, (13, 2))])
    names = [f"Model-{i}-{'x' * (i % 7)}-Instruct" for i in range(len(coords))]
    return names, coords, [f"family{i % 5}" for i in range(len(coords))]


def test_map_labels_do_not_overlap(tmp_path, monkeypatch):
    from matplotlib.text import Text

    from registry.analytics import plots

    names, coords, families = _points()
    kept = {}
    place = plots._place_labels

    def spy(ax, fig, *args):
        annotations = place(ax, fig, *args)
        fig.canvas.draw()  # lays the annotations out; measured before the figure is saved and closed
        renderer = fig.canvas.get_renderer()
        # the text's own box (an Annotation's extent also spans its leader line)
        kept["boxes"] = [Text.get_window_extent(a, renderer) for a in annotations]
        return annotations

    monkeypatch.setattr(plots, "_place_labels", spy)
    plots.scatter_map(tmp_path / "map.png", names, coords, {"x": 0.5, "y": 0.3, "total": 0.8}, field="family",
                      values=families)
    boxes = kept["boxes"]
    assert len(boxes) == len(names)
    overlaps = [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]
    assert overlaps == []


def test_clusters_figure_keeps_family_colours_for_families_and_runs_the_diagonal_top_left(tmp_path, monkeypatch):
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_hex

    from registry.analytics import plots
    from registry.analytics.clusters import cluster_distances, cosine_distances

    names, coords, families = _points(1)
    z = np.concatenate([coords, np.ones((len(coords), 1))], axis=1)
    d = cosine_distances(z)
    tree = cluster_distances(d, k=4)
    saved = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: saved.setdefault("fig", fig))
    plots.dendrogram_heatmap(tmp_path / "c.png", names, d, tree, families=families, linkage="average",
                             heights_label="cosine distance")
    fig = saved["fig"]
    ax_d, ax_h = fig.axes[0], fig.axes[1]
    family_colours = {to_hex(c) for c in plots._palette(len(set(families)))}
    branch_colours = {to_hex(c) for coll in ax_d.collections if isinstance(coll, LineCollection)
                      for c in coll.get_colors()}
    branch_colours |= {to_hex(line.get_color()) for line in ax_d.get_lines()}
    assert branch_colours and not branch_colours & family_colours
    image = ax_h.images[0].get_array()  # origin="lower": row 0 is the bottom row
    n = len(names)
    assert np.allclose([image[n - 1 - j, j] for j in range(n)], 0.0)  # top-left to bottom-right
    assert not np.allclose([image[j, j] for j in range(n)], 0.0)


# ------------------------------------------------------------------------------------------- the demo
@pytest.fixture(scope="module")
def demo_registry(demo_home, tmp_path_factory) -> Registry:
    """The demo's synthetic pool, trained as `registry demo` trains it (conftest's demo_home), on a copy."""
    return Registry.open(shutil.copytree(demo_home, tmp_path_factory.mktemp("demo") / "h"))


@pytest.mark.slow
def test_the_demo_pool_shows_the_features_working(demo_registry):
    """Its 3-model portfolio routes better than random 3-model subsets do on average, and its clusters follow
    the planted families (docs/results/demo.md: 0.778 against 0.677 +- 0.175). On 36 test queries one query
    is 0.028: a margin of half an sd (0.78 against 0.78 on an AMD EPYC, where the encoder's floats differ from
    the machine the page was made on) is noise, and the portfolio's real test is docs/results/portfolio.md."""
    reg = demo_registry
    chosen = reg.portfolio(k=3, method="kmedoids")
    assert chosen.routing_accuracy > chosen.random_routing_accuracy_mean
    agreement = reg.clusters().family_agreement
    assert agreement.adjusted_rand >= 0.4 and agreement.p_value < 0.05


def test_the_demo_encoder_tells_models_apart_on_every_question(demo_registry):
    """The demo's encoder has not collapsed: for questions of every task (the first three of each,
    the demo's own route question among them), `route` over all models gives P(correct) that differ by
    at least 0.1 between the best and the worst model, not one value for all."""
    import pyarrow.compute as pc

    reg = demo_registry
    queries = reg.store.read("queries", ["text", "task"])
    questions = []
    for task in sorted(set(queries.column("task").to_pylist())):
        questions += queries.filter(pc.equal(queries["task"], task)).column("text").to_pylist()[:3]
    assert queries.column("text")[0].as_py() in questions and len(questions) >= 12
    n_models = reg.stats().n_models
    for question, decision in zip(questions, reg.route(questions, k=n_models)):
        p = [r.p_correct for r in decision.ranking]
        assert len(p) == n_models
        assert max(p) - min(p) >= 0.1, (question[:60], p)


def test_show_prints_lists_metadata_and_times_as_text(home, tmp_path):
    reg = Registry.open(home)
    first = reg.queries(limit=1).queries[0].id
    evals = tmp_path / "e.csv"
    evals.write_text(f"query_id,score\n{first},1\n", encoding="utf-8")
    _run(home, "add-model", "shown", "--evals", str(evals), "--meta", "tags=a,b", "--meta", "price_in=0.5",
         "--meta", "note=hi\nthere")
    text = _run(home, "show", "shown")
    lines = dict(line.split(None, 1) for line in text.splitlines() if not line.startswith((" ", "*")))
    assert lines["tags"] == "a, b" and lines["extra"] == "note=hi"  # a free-text line break stays in its column:
    assert "extra        note=hi\n             there, price_in=0.5\n" in text
    added = json.loads(_run(home, "show", "shown", "--json"))["added"]
    assert lines["added"] == f"{added[:10]} {added[11:19]} UTC"  # to the second, with its zone
