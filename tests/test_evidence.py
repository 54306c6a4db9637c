"""Thin evidence (issue 22, part 5): a model embedded from fewer than the documented minimum of evaluations
is warned about (CLI, API, HTTP), marked low evidence in its record, and ranked after the well-evidenced
models in search, route fallbacks and clusters unless `min_evals=0`; bad `min_evals` values are refused."""
from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import POOL_TRAINED_NO_COPY, own_evaluations, write_triple
from registry import InputError, Registry
from registry.evidence import MIN_EVALS, ThinEvidenceWarning, demote_thin

ROOT = Path(__file__).resolve().parents[1]
THIN = "thin-newcomer"
N_THIN = 2


@pytest.fixture(scope="module")
def pool_home(synthetic_home) -> Path:
    """A trained synthetic pool whose models all hold 100 evaluations (above the minimum)."""
    return synthetic_home("evidence", **POOL_TRAINED_NO_COPY)


@pytest.fixture(scope="module")
def thin_home(pool_home, tmp_path_factory) -> Path:
    """The pool with a model added from 2 evaluations (through the Python API)."""
    home = tmp_path_factory.mktemp("evidence") / "thin"
    shutil.copytree(pool_home, home)
    reg = Registry.open(home)
    evals = own_evaluations(reg, reg.list()[0].name)[:N_THIN]
    with pytest.warns(ThinEvidenceWarning, match=f"fewer than the documented minimum of {MIN_EVALS}"):
        change = reg.add_model(THIN, evals, {"family": "newcomer"})
    assert change.n_evals == N_THIN and change.low_evidence
    assert any(f"embedded from {N_THIN} evaluations" in w for w in change.warnings)
    return home


def _cli(home: Path, *args: str, code: int = 0):
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result


def _well(reg: Registry) -> list[str]:
    return [r.name for r in reg.list() if r.name != THIN]


def test_the_minimum_is_one_constant_used_by_the_web_table_and_stated_in_the_readme_and_results_page():
    from registry.analytics import browse

    assert browse.LOW_EVIDENCE_EVALS == MIN_EVALS
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "--min-evals" in readme and f"{MIN_EVALS} evaluations" in readme
    page = (ROOT / "docs" / "results" / "evidence.md").read_text("utf-8")
    assert f"documented minimum (`registry.evidence.MIN_EVALS`) is **{MIN_EVALS}**" in page
    # the page's own measurement picks the constant: the smallest n of its grid meeting its rule
    found = re.search(r"moved / NN < 1: \*\*(\d+)\*\*", page)
    assert found and int(found.group(1)) == MIN_EVALS


def test_demote_thin_keeps_order_within_groups_and_reports_what_it_pushed_out():
    ranked = ["a", "T1", "b", "T2", "c"]
    kept, pushed = demote_thin(ranked, lambda x: x.startswith("T"), 3)
    assert kept == ["a", "b", "c"] and pushed == ["T1"]  # T2 was not within the first 3 anyway
    kept, pushed = demote_thin(ranked, lambda x: x.startswith("T"), 5)
    assert kept == ["a", "b", "c", "T1", "T2"] and pushed == []


def test_the_api_warns_on_refine_and_a_refine_above_the_minimum_clears_the_mark(thin_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(thin_home, home)
    reg = Registry.open(home)
    donor = _well(reg)[0]
    evals = own_evaluations(reg, donor)
    with pytest.warns(ThinEvidenceWarning):
        still = reg.refine(THIN, evals[N_THIN:N_THIN + 3])
    assert still.low_evidence and still.warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", ThinEvidenceWarning)  # no warning once above the minimum
        enough = reg.refine(THIN, evals[:MIN_EVALS + 5])
    assert enough.n_evals >= MIN_EVALS and not enough.low_evidence and not enough.warnings
    assert not reg.show(THIN).low_evidence


def test_the_record_carries_the_mark_in_show_and_models_list(thin_home):
    reg = Registry.open(thin_home)
    assert reg.show(THIN).low_evidence and reg.show(THIN).n_evals == N_THIN
    assert not reg.show(_well(reg)[0]).low_evidence
    listed = {r.name: r for r in reg.list()}
    assert listed[THIN].low_evidence and listed[THIN].n_evals == N_THIN
    assert not any(r.low_evidence for n, r in listed.items() if n != THIN)
    assert "low_evidence" not in listed[THIN].metadata() and "n_evals" not in listed[THIN].metadata()

    shown = json.loads(_cli(thin_home, "show", THIN, "--json").stdout)
    assert shown["low_evidence"] is True and shown["n_evals"] == N_THIN
    rows = {r["name"]: r for r in json.loads(_cli(thin_home, "models", "list", "--json").stdout)}
    assert rows[THIN]["low_evidence"] is True and rows[THIN]["n_evals"] == N_THIN
    assert not any(r["low_evidence"] for n, r in rows.items() if n != THIN)
    text = _cli(thin_home, "models", "list").stdout
    assert re.search(rf"^{THIN}\s.*\s{N_THIN}\*\s", text, re.M) and "* low evidence" in text
    assert "low_evidence True" in _cli(thin_home, "show", THIN).stdout


def test_a_thin_model_does_not_outrank_the_pool_in_search_unless_min_evals_0(thin_home):
    reg = Registry.open(thin_home)
    others = _well(reg)
    k_all = len(others) + 1
    # The default likeness vector, the fingerprint, is not made from so few evaluations: the thin model
    # is not in that index at all. In the LOCUS index it is, and it comes last.
    assert all(THIN not in [h.name for h in reg.similar(n, k=k_all).neighbours] for n in others[:3])
    # A well-evidenced model whose nearest models, ranked by distance alone, have the thin one before the last place.
    chosen = None
    for name in others:
        plain = [h.name for h in reg.similar(name, k=k_all, min_evals=0, by="locus").neighbours]
        if plain.index(THIN) < len(plain) - 1:
            chosen, position = name, plain.index(THIN)
            break
    assert chosen is not None, "the thin model is every model's farthest: the test cannot tell demotion apart"
    default = reg.similar(chosen, k=k_all, by="locus")
    names = [h.name for h in default.neighbours]
    assert names[-1] == THIN and names[:-1] == [n for n in plain if n != THIN]  # after all, order kept
    assert default.neighbours[-1].low_evidence and default.neighbours[-1].n_evals == N_THIN
    assert not any(h.low_evidence for h in default.neighbours[:-1])
    assert default.min_evals == MIN_EVALS and default.evidence_note is None  # listed, so nothing to say

    cut = reg.similar(chosen, k=position + 1, by="locus")
    assert THIN not in [h.name for h in cut.neighbours] and len(cut.neighbours) == position + 1
    assert THIN in cut.evidence_note and "--min-evals 0" in cut.evidence_note
    assert reg.similar(chosen, k=position + 1, min_evals=0, by="locus").neighbours[-1].name == THIN

    # By vector: the thin model's own vector finds it first (distance 0) only with min_evals=0.
    vector = reg.store.read("models").to_pylist()
    vector = next(r["vector"] for r in vector if r["name"] == THIN)
    assert reg.similar(np.asarray(vector), k=1, min_evals=0, by="locus").neighbours[0].name == THIN
    first = reg.similar(np.asarray(vector), k=1)
    assert first.neighbours[0].name != THIN and THIN in first.evidence_note

    # The CLI: the mark, the note on stderr, and --min-evals 0.
    out = _cli(thin_home, "search", chosen, "--by", "locus", "-k", str(position + 1))
    assert THIN not in out.stdout and THIN in out.stderr and "note:" in out.stderr
    out = _cli(thin_home, "search", chosen, "--by", "locus", "-k", str(position + 1), "--min-evals", "0")
    assert f"{THIN} *" in out.stdout and "* low evidence" in out.stdout
    listed = json.loads(_cli(thin_home, "search", chosen, "--by", "locus", "-k", str(k_all), "--json").stdout)
    assert listed["neighbours"][-1]["name"] == THIN and listed["neighbours"][-1]["low_evidence"] is True


def test_route_ranks_the_thin_model_after_the_pool_in_ranking_and_fallbacks_unless_min_evals_0(thin_home):
    reg = Registry.open(thin_home)
    n_all = len(reg.list())
    texts = [r["text"] for r in reg.store.read("queries", ["text"]).to_pylist()[:4]]
    seen_before_last = False
    for text in texts:
        plain = reg.route(text, k=n_all, fallback=n_all, min_evals=0, by="locus")
        default = reg.route(text, k=n_all, fallback=n_all, by="locus")
        ranked = [r.name for r in plain.ranking]
        assert [r.name for r in default.ranking] == [n for n in ranked if n != THIN] + [THIN]
        assert default.ranking[-1].low_evidence and not any(r.low_evidence for r in default.ranking[:-1])
        p = [r.p_correct for r in plain.ranking]
        assert p == sorted(p, reverse=True)  # min_evals=0: by P(correct) alone, as before
        if ranked[0] == THIN:  # the thin model tops the ranking by P(correct): only with min_evals=0
            short = reg.route(text, k=1)
            assert short.ranking[0].name == ranked[1] and THIN in short.evidence_note
        # the fallbacks: the top model's nearest by cosine distance, the thin model after the others
        top = default.ranking[0].name
        by_distance = [h.name for h in reg.similar(top, k=n_all, min_evals=0, by="locus").neighbours]
        assert [f.name for f in default.fallbacks] == [n for n in by_distance if n != THIN] + [THIN]
        assert default.fallbacks[-1].low_evidence
        if by_distance.index(THIN) < len(by_distance) - 1:
            seen_before_last = True
            cut = by_distance.index(THIN) + 1
            short = reg.route(text, k=1, fallback=cut, by="locus")
            assert THIN not in [f.name for f in short.fallbacks] and len(short.fallbacks) == cut
            assert THIN in short.evidence_note
    assert seen_before_last, "the thin model was never a fallback before the last: demotion untested"
    out = _cli(thin_home, "route", texts[0], "-k", "2", "--server", "none")
    assert THIN not in out.stdout
    out = _cli(thin_home, "route", texts[0], "-k", str(n_all), "--min-evals", "0", "--server", "none")
    assert f"{THIN} (low evidence)" in out.stdout


def test_clusters_leave_the_thin_model_out_and_say_so_unless_min_evals_0(thin_home):
    reg = Registry.open(thin_home)
    default = reg.clusters(by="locus")  # the thin model has no fingerprint: only LOCUS can cluster it
    assert THIN not in default.order and default.left_out == [THIN] and THIN in default.evidence_note
    assert default.n_models == len(reg.list()) - 1
    everyone = reg.clusters(min_evals=0, by="locus")
    assert THIN in everyone.order and everyone.left_out == [] and everyone.evidence_note is None
    out = _cli(thin_home, "clusters", "--by", "locus")
    assert THIN in out.stderr and "left out of the clustering" in out.stderr


def test_bad_min_evals_values_are_refused_naming_the_option(thin_home):
    reg = Registry.open(thin_home)
    name = _well(reg)[0]
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(InputError) as err:
            reg.similar(name, min_evals=bad)
        assert err.value.field == "min_evals" and "min_evals" in str(err.value)
    with pytest.raises(InputError, match="min_evals"):
        reg.clusters(min_evals=-2)
    with pytest.raises(InputError, match="min_evals"):
        reg.route("What is 2 + 2?", min_evals=-1)
    for command in (("search", name), ("route", "What is 2 + 2?"), ("clusters",)):
        for bad in ("-1", "1.5", "many"):
            out = _cli(thin_home, *command, "--min-evals", bad, code=2)
            assert "--min-evals" in out.output
        payload = json.loads(_cli(thin_home, *command, "--min-evals", "-3", "--json", code=2).stdout)
        assert payload["error"]["option"] == "--min-evals"


def test_cli_add_model_and_refine_warn_on_stderr_and_in_json(pool_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(pool_home, home)
    reg = Registry.open(home)
    evals = own_evaluations(reg, reg.list()[0].name)
    path = tmp_path / "few.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in evals[:3]), "utf-8")
    out = _cli(home, "add-model", "cli-thin", "--evals", str(path))
    assert f"warning: cli-thin is embedded from 3 evaluations, fewer than the documented minimum of {MIN_EVALS}" \
        in out.stderr
    assert "ThinEvidenceWarning" not in out.output  # said once, in the CLI's words
    change = json.loads(_cli(home, "add-model", "cli-thin", "--evals", str(path), "--replace", "--json").stdout)
    assert change["event"] == "replace" and change["low_evidence"] is True
    assert any("fewer than the documented minimum" in w for w in change["warnings"])
    refined = json.loads(_cli(home, "refine", "cli-thin", "--evals", str(path), "--json").stdout)
    assert refined["warnings"] and refined["low_evidence"] is True
    embedded = json.loads(_cli(home, "embed", "--all", "--json").stdout)
    assert embedded["low_evidence"] == ["cli-thin"] and "cli-thin (3)" in embedded["warnings"][0]


def test_an_import_of_thin_models_warns(tmp_path, home):
    data = write_triple(tmp_path / "data")  # two models, five queries each
    out = _cli(home, "import", str(data), "--json")
    report = json.loads(out.stdout)
    assert any("2 models with fewer than the documented minimum" in w and "alpha-7b (5)" in w
               for w in report["warnings"])


def test_http_add_warns_and_marks_and_min_evals_is_a_query_parameter(thin_home, tmp_path):
    from service_harness import Server, copy_home

    home = copy_home(thin_home, tmp_path / "served")
    reg = Registry.open(home)
    name = _well(reg)[0]
    evals = [{"query": e["query"], "score": e["score"]} for e in own_evaluations(reg, name)[:4]]
    server = Server(home)
    try:
        with server.client() as c:
            r = c.post("/v1/models", json={"name": "http-thin", "evaluations": evals})
            assert r.status_code == 201, r.text
            body = r.json()
            assert body["low_evidence"] is True and any("fewer than the documented minimum" in w
                                                        for w in body["warnings"])
            assert c.get("/v1/models/http-thin").json()["low_evidence"] is True
            listed = {m["name"]: m for m in c.get("/v1/models").json()}
            assert listed["http-thin"]["low_evidence"] and not listed[name]["low_evidence"]
            table = {row["name"]: row for row in c.get("/v1/table", params={"limit": 100}).json()["rows"]}
            assert table["http-thin"]["thin_evidence"] and table[THIN]["thin_evidence"]
            assert not table[name]["thin_evidence"]

            k_all = len(listed) - 1
            default = c.get("/v1/similar", params={"name": name, "k": k_all, "by": "locus"}).json()
            assert [h["name"] for h in default["neighbours"]][-2:] in (["http-thin", THIN], [THIN, "http-thin"])
            assert default["min_evals"] == MIN_EVALS
            plain = c.get("/v1/similar", params={"name": name, "k": k_all, "min_evals": 0, "by": "locus"}).json()
            assert plain["min_evals"] == 0
            assert sorted(h["name"] for h in plain["neighbours"]) == sorted(h["name"] for h in default["neighbours"])
            for bad in ("-1", "1.5", "x"):
                refused = c.get("/v1/similar", params={"name": name, "min_evals": bad})
                assert refused.status_code == 422 and refused.json()["error"]["field"] == "min_evals"
            refused = c.post("/v1/route", json={"query": "What is 2 + 2?", "min_evals": -1})
            assert refused.status_code == 422 and refused.json()["error"]["field"] == "min_evals"
            routed = c.post("/v1/route", json={"query": "What is 2 + 2?", "fallback": k_all, "by": "locus"}).json()["results"][0]
            assert routed["min_evals"] == MIN_EVALS
            marks = [f["low_evidence"] for f in routed["fallbacks"]]
            assert marks == sorted(marks)  # every thin fallback after every well-evidenced one
    finally:
        server.stop()
