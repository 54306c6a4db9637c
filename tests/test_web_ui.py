"""The web UI of `registry serve`, in a real browser: Debian's headless Chromium driven by Playwright.

One small trained registry, one server (with a token) for the module. The browser tests skip, saying
why, when /usr/bin/chromium or Playwright is missing; the /v1 endpoints the pages added are tested
over HTTP either way.
"""
from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest


from helpers import own_evaluations
from service_harness import ROOT, TOKEN, Server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# What each page shows once its /v1 calls have answered.
PAGES = {"/": "#models-table tbody tr", "/map": "#map circle", "/audit": "#calibration", "/route": "#targets input",
         "/compare?a={a}&b={b}": "#compare-table tbody tr", "/families": "#clusters-table tbody tr",
         "/portfolio": "#portfolio-table tbody tr", "/add": "#suggest form", "/api": "section.operation",
         "/model?name={a}": "#near-behaviour tbody tr"}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A demo-like registry (families, a planted duplicate), trained briefly, every model embedded.
    Its stored query vectors are random unit vectors in MiniLM's 384 dimensions instead of MiniLM's
    own: nothing the UI shows depends on what they mean, and the test then never loads a sentence
    encoder itself (the server still loads MiniLM and encodes a new text with it)."""
    import tempfile

    import numpy as np

    from encoder.training import TrainConfig
    from registry import Registry
    from registry.lab.synthetic import synthetic_pool

    path = tmp_path_factory.mktemp("web") / "home"
    pool = synthetic_pool(n_families=3, models_per_family=2, queries_per_task=12, tasks=("math", "law", "biology"),
                          n_duplicates=1, seed=3)
    reg = Registry.open(path)
    reg.set_query_encoder("all-MiniLM-L6-v2")
    with tempfile.TemporaryDirectory() as scratch:
        triple = pool.write_triple(Path(scratch) / "pool")
        vectors = np.random.default_rng(0).normal(size=(len(pool.queries), 384)).astype(np.float32)
        np.save(Path(scratch) / "v.npy", vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        np.save(Path(scratch) / "ids.npy", np.array([q.id for q in pool.queries]))
        reg.import_path(triple, query_embeddings=Path(scratch) / "v.npy", query_ids=Path(scratch) / "ids.npy")
    reg.train(config=TrainConfig(epochs=6, max_seconds=None))
    reg.embed_all()
    return path


@pytest.fixture(scope="module")
def server(home):
    srv = Server(home)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def names(server) -> list[str]:
    with server.client(auth=False) as c:
        return [m["name"] for m in c.get("/v1/models").json()]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.skip(f"browser tests need Debian's chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests need Playwright for Python (pip install playwright; the test extra has it)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Watched:
    """A fresh browser tab that records console errors, uncaught exceptions, failed requests and
    error responses."""

    def __init__(self, browser, base: str) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=base)
        self.page = self.context.new_page()
        self.page.set_default_timeout(20_000)
        self.console, self.failed, self.statuses, self.requests = [], [], [], []
        self.page.on("console", lambda m: m.type == "error" and self.console.append(m.text))
        self.page.on("pageerror", lambda e: self.console.append(f"uncaught: {e}"))
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url}: {r.failure}"))
        self.page.on("response", lambda r: r.status >= 400 and self.statuses.append((r.status, r.url)))
        self.page.on("request", lambda r: self.requests.append(r))

    def problems(self) -> list:
        return self.console + self.failed + self.statuses

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tab(browser, server):
    watched = Watched(browser, server.url)
    yield watched
    watched.close()


# ------------------------------------------------------------------ in the browser
def test_every_page_loads_without_an_error(tab, names, server):
    a, b = names[0], names[1]
    for template, ready in PAGES.items():
        path = template.format(a=quote(a), b=quote(b))
        response = tab.page.goto(path)
        assert response.status == 200
        assert "script-src 'self'" in response.headers["content-security-policy"]
        tab.page.wait_for_selector(ready)
        tab.page.wait_for_load_state("networkidle")
        assert tab.page.locator(".error").count() == 0, (path, tab.page.locator(".error").all_inner_texts())
        assert tab.problems() == [], (path, tab.problems())
    assert tab.page.locator("#heading").inner_text() == a


def test_the_api_page_lists_every_operation_of_the_schema_and_filters_them(tab, server):
    with server.client(auth=False) as c:
        schema = c.get("/openapi.json").json()
        assert c.head("/api").status_code == 200 and c.head("/api").content == b""  # HEAD wherever GET
    operations = {(m.upper(), p) for p, item in schema["paths"].items() for m in item if m in ("get", "post", "put", "delete")}
    writes = {(m.upper(), p) for p, item in schema["paths"].items() for m, op in item.items() if op.get("security")}
    page = tab.page
    page.goto("/api")
    page.locator("section.operation").first.wait_for()
    shown = {tuple(t.split(" ", 1)) for t in page.locator("section.operation h3").evaluate_all(
        "els => els.map(e => e.querySelectorAll('code')[0].textContent + ' ' + e.querySelectorAll('code')[1].textContent)")}
    assert shown == operations and len(operations) > 20
    assert page.locator("section.operation .badge").count() == len(writes) > 0
    assert page.locator("#fields-AddModelRequest tbody tr").count() == len(schema["components"]["schemas"]["AddModelRequest"]["properties"])
    page.get_by_label("Filter").fill("aliases put")
    assert page.locator("section.operation:visible").count() == 1
    assert page.locator("section.operation:visible h3").inner_text().startswith("PUT /v1/aliases/{alias}")
    assert tab.problems() == []


def test_models_filter_narrows_the_table_and_shows_a_bad_filters_error(tab, server, names):
    page = tab.page
    page.goto("/")
    rows = page.locator("#models-table tbody tr")
    rows.first.wait_for()
    assert rows.count() == len(names)
    with server.client(auth=False) as c:
        family = c.get(f"/v1/models/{quote(names[0])}").json()["record"]["family"]
        expected = [m["name"] for m in c.get("/v1/models", params={"where": f"family == {family}"}).json()]
        bad = c.get("/v1/models", params={"where": "famly == x"}).json()["error"]["message"]
    assert 0 < len(expected) < len(names)
    page.get_by_label("Filter (where)").fill(f"family == {family}")
    page.get_by_label("Filter (where)").press("Enter")
    page.wait_for_function("n => document.querySelectorAll('#models-table tbody tr').length === n", arg=len(expected))
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.name)")) == sorted(expected)
    assert f"family+%3D%3D+{family}" in page.url or f"family%20%3D%3D%20{family}" in page.url  # a shareable address

    page.get_by_label("Filter (where)").fill("famly == x")
    page.get_by_role("button", name="Apply").click()
    error = page.locator("#table-message .error")
    error.wait_for()
    assert error.inner_text().strip() == bad  # as the API words it
    assert page.get_by_label("Filter (where)").get_attribute("aria-invalid") == "true"
    assert [s for s, _ in tab.statuses] == [422] and not tab.failed

    # Sorting is the server's: the accuracy column, descending, matches /v1/table's own order.
    page.get_by_role("button", name="Clear").click()
    page.wait_for_function("n => document.querySelectorAll('#models-table tbody tr').length === n", arg=len(names))
    page.get_by_role("button", name="Accuracy", exact=True).click()
    page.wait_for_selector("th[aria-sort='ascending'] >> text=Accuracy")
    page.get_by_role("button", name="Accuracy", exact=True).click()
    page.wait_for_selector("th[aria-sort='descending'] >> text=Accuracy")
    with server.client(auth=False) as c:
        order = [r["name"] for r in c.get("/v1/table", params={"sort": "accuracy", "order": "desc"}).json()["rows"]]
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.name)") == order

    # A search that matches nothing offers the closest names.
    page.get_by_label("Search names").fill(names[0] + "x")
    page.get_by_label("Search names").press("Enter")
    page.locator("#did-you-mean a").first.wait_for()
    assert names[0] in page.locator("#did-you-mean").inner_text()


def test_the_map_draws_every_model_and_a_click_opens_it(tab, server):
    page = tab.page
    page.goto("/map")
    page.locator("#map circle").first.wait_for()
    with server.client(auth=False) as c:
        embedded = c.get("/v1/health").json()["embedded"]
        share_of = c.get("/v1/map").json()["share_of"]
    circles = page.locator("#map circle")
    assert f"of {share_of}" in page.locator("#map-caption").inner_text()
    assert circles.count() == embedded
    assert page.get_by_label("Colour by").input_value() == "family"
    assert page.locator("#legend span").count() >= 2
    target = circles.nth(2)
    name = target.get_attribute("data-name")
    target.click()
    page.wait_for_url(re.compile(r"/model\?name="))
    page.locator("#accuracy-table").wait_for()
    assert page.locator("#heading").inner_text() == name
    page.wait_for_load_state("networkidle")  # the model page's own calls finish before the next page
    # Zoom changes the view and Reset brings it back.
    page.goto("/map")
    page.locator("#map circle").first.wait_for()
    before = page.locator("#map").get_attribute("viewBox")
    page.get_by_role("button", name="zoom in").click()
    assert page.locator("#map").get_attribute("viewBox") != before
    page.get_by_role("button", name="Reset view").click()
    assert page.locator("#map").get_attribute("viewBox") == before
    assert tab.problems() == []


def test_the_families_page_shows_the_clusters_the_library_cuts(tab, server, home):
    from registry import Registry

    expected = Registry.open(home).clusters(linkage="average", k=3)
    page = tab.page
    page.goto("/families")
    page.locator("#clusters-table tbody tr").first.wait_for()
    page.get_by_label("Linkage").select_option("average")
    page.get_by_label("Clusters").fill("3")
    page.get_by_role("button", name="Cluster").click()
    page.wait_for_url(re.compile(r"linkage=average"))
    page.locator("#clusters-summary", has_text="3 clusters").wait_for()
    rows = page.locator("#clusters-table tbody tr")
    assert rows.count() == 3
    shown = [[a.inner_text() for a in rows.nth(i).locator("td:nth-child(3) a").all()] for i in range(3)]
    assert shown == [c.members for c in expected.clusters]
    assert "adjusted Rand" in page.locator("#family-agreement").inner_text()
    page.get_by_label("Only models where").fill("colour == red")
    page.get_by_role("button", name="Cluster").click()
    page.locator(".error", has_text="unknown field 'colour'").wait_for()
    assert page.locator("#clusters-table").count() == 0  # the error replaced the table
    assert [s for s, _ in tab.statuses] == [422] and not tab.failed


def test_the_portfolio_page_shows_the_library_s_choice_and_refuses_bad_input(tab, server, home):
    from registry import Registry

    expected = Registry.open(home).portfolio(k=2, method="kmedoids", by="locus")
    page = tab.page
    page.goto("/portfolio")
    page.locator("#portfolio-table tbody tr").first.wait_for()
    page.locator("#pf-k").fill("2")
    page.get_by_label("Method").select_option("kmedoids")
    page.locator("#pf-by").select_option("locus")
    page.get_by_role("button", name="Choose").click()
    page.wait_for_url(re.compile(r"method=kmedoids"))
    page.locator("#portfolio-summary", has_text="kmedoids portfolio of 2 models").wait_for()
    rows = page.locator("#portfolio-table tbody tr")
    assert [rows.nth(i).locator("a").inner_text() for i in range(rows.count())] == expected.models
    shown = page.locator("#portfolio-accuracy").inner_text()
    assert f"{expected.routing_accuracy:.3f}" in shown and f"{expected.full_pool_routing_accuracy:.3f}" in shown
    # both limits at once is refused on the page; a bad filter by the server, naming the field
    page.get_by_label("Budget (B params)").fill("10")
    page.get_by_role("button", name="Choose").click()
    page.locator(".error", has_text="not both").wait_for()
    page.get_by_label("Budget (B params)").fill("")
    page.get_by_label("Only models where").fill("colour == red")
    page.get_by_role("button", name="Choose").click()
    page.locator(".error", has_text="unknown field 'colour'").wait_for()
    assert page.locator("#portfolio-table").count() == 0
    assert [s for s, _ in tab.statuses] == [422] and not tab.failed


def test_the_route_playground_returns_a_ranking(tab, server, home):
    from playwright.sync_api import expect

    from registry import Registry

    question = Registry.open(home).store.read("queries", ["text"]).column("text")[0].as_py()
    page = tab.page
    page.goto("/route")
    page.get_by_role("button", name="Try stored questions").click()  # a first visit: one of each of three tasks
    box = page.get_by_label("Questions (one per line)")
    expect(box).not_to_have_value("")  # (no wait_for_function: the pages' CSP refuses eval)
    with server.client(auth=False) as c:
        stored = c.get("/v1/queries", params={"limit": 1000}).json()["queries"]
    first: dict[str, str] = {}
    for q in stored:
        if q["task"] not in first and len(first) < 3:
            first[q["task"]] = q["text"]
    assert box.input_value().split("\n") == list(first.values()) and len(first) == 3
    box.fill(question + "\nWhich planet is the largest?")
    page.get_by_label("Top k").first.fill("2")
    page.get_by_role("button", name="Route").click()
    page.locator("#route-out ol").nth(1).wait_for()
    with server.client(auth=False) as c:
        answer = c.post("/v1/route", json={"queries": [question], "k": 2}).json()["results"][0]
    shown = page.locator("#route-out [data-query='0'] ol li")
    assert shown.count() == 2
    assert shown.first.locator("a").inner_text() == answer["ranking"][0]["name"]
    assert f"{answer['ranking'][0]['p_correct']:.3f}" in shown.first.inner_text()
    fallback = answer["fallbacks"][0]  # named in the metric of the index that found it, as the API says
    assert f"{fallback['metric']} d {fallback['distance']:.4f}" in page.locator("#route-out [data-query='0'] .fallbacks").inner_text()
    assert f"P(correct) from {answer['predictor_description']};" in page.locator("#route-out").inner_text()

    # a cost trade-off: ranked by utility, each model with its cost per call, as the API ranks them
    page.get_by_label("Willingness to pay λ").fill("0.01")
    page.get_by_role("button", name="Route").click()
    page.locator("#route-out li", has_text="a call").first.wait_for()
    with server.client(auth=False) as c:
        priced = c.post("/v1/route", json={"queries": [question], "k": 2, "willingness_to_pay": 0.01}).json()["results"][0]
    shown = page.locator("#route-out [data-query='0'] ol li")
    assert [shown.nth(i).locator("a").inner_text() for i in range(2)] == [m["name"] for m in priced["ranking"]]
    assert f"utility {priced['ranking'][0]['utility']:.3f}" in shown.first.inner_text()
    if priced["cost_note"]:
        assert priced["cost_note"] in page.locator("#route-out").inner_text()
    page.get_by_label("Willingness to pay λ").fill("")

    page.get_by_label("math accuracy").fill("0.9")
    page.get_by_role("button", name="Find models").click()
    page.locator("#profile-table tbody tr").first.wait_for()
    assert page.locator("#profile-table tbody tr").count() == 5
    assert tab.problems() == []


def test_restore_is_refused_without_the_token_and_works_with_it(tab, server, home, names):
    from registry import Registry

    name = names[-1]
    evaluations = [{**e, "score": 1 - e["score"]} for e in own_evaluations(Registry.open(home), name)[:5]]  # a change
    with server.client() as c:
        refined = c.post(f"/v1/models/{quote(name)}/refine", json={"evaluations": evaluations})
        assert refined.status_code == 201, refined.text
        assert refined.json()["version"] == 2
        drift = c.get(f"/v1/models/{quote(name)}/drift").json()
    page = tab.page
    page.goto(f"/model?name={quote(name)}")
    restore = page.get_by_role("button", name="Restore version 1")
    restore.wait_for()
    page.locator(f"#drift[data-status='{drift['status']}']").wait_for()  # the drift of version 2 against 1
    assert drift["sentence"] in page.locator("#drift").inner_text() and drift["newest_version"] == 2
    restore.click()
    error = page.locator("#write-status .error")
    error.wait_for()
    assert "bearer token is required" in error.inner_text()
    with server.client(auth=False) as c:
        assert c.get(f"/v1/models/{quote(name)}").json()["version"] == 2  # nothing changed

    page.get_by_label("Token").fill(TOKEN)
    page.get_by_label("Token").press("Enter")
    assert page.locator("#token-state").inner_text() == "token set for this tab"
    page.get_by_role("button", name="Restore version 1").click()
    page.locator("#write-status .notice").wait_for()
    assert "restored version 1" in page.locator("#write-status .notice").inner_text()
    with server.client(auth=False) as c:
        assert c.get(f"/v1/models/{quote(name)}").json()["version"] == 3
        assert c.get(f"/v1/models/{quote(name)}/accuracy").json()["version"] == 3  # the table's cache saw the write
    page.wait_for_function("() => document.getElementById('live-version')?.textContent === '3'")  # the record re-read

    page.get_by_label("Alias", exact=True).fill("web-prod")
    page.get_by_label("Points at").select_option("1")
    page.get_by_role("button", name="Set alias").click()
    page.locator("#aliases code", has_text="web-prod").wait_for()
    with server.client(auth=False) as c:
        assert {"alias": "web-prod", "name": name, "version": 1} in c.get("/v1/aliases").json()

    writes = [r for r in tab.requests if r.method in ("POST", "PUT")]
    assert [r.headers.get("authorization") for r in writes] == [None, f"Bearer {TOKEN}", f"Bearer {TOKEN}"]
    assert all(TOKEN not in r.url for r in tab.requests)  # the token travels in a header, never in a URL
    assert [s for s, _ in tab.statuses] == [401], tab.statuses


def test_add_a_model_from_the_suggested_queries_file(tab, server, home, names, tmp_path):
    """The onboarding flow in the browser: suggest, download the file to fill in, upload it with the token."""
    import json

    from registry import Registry

    page = tab.page
    page.goto("/add")
    page.get_by_label("Queries", exact=True).fill("8")
    page.get_by_role("button", name="Suggest").click()
    page.locator("#suggest-table tbody tr").first.wait_for()
    with server.client(auth=False) as c:
        expected = c.get("/v1/suggest-queries", params={"n": 8, "from_pool": True}).json()["queries"]
    rows = page.locator("#suggest-table tbody tr")
    assert [rows.nth(i).locator("code").inner_text() for i in range(rows.count())] == [q["query_id"] for q in expected]
    download = page.locator("#suggest-download")
    assert download.get_attribute("download") == "suggested-queries.jsonl"
    with page.expect_download() as saved:
        download.click()
    text = Path(saved.value.path()).read_text()
    template = [json.loads(line) for line in text.splitlines()]
    assert [(t["query_id"], t["query"], t["score"]) for t in template] == [(q["query_id"], q["text"], None) for q in expected]

    # the new model answers as the first stored one did
    reg = Registry.open(home)
    scores = {r["query_id"]: r["score"] for r in reg.store.read("evaluations").to_pylist() if r["model"] == names[0]}
    filled = [dict(t, score=scores[t["query_id"]]) for t in template if t["query_id"] in scores]
    assert len(filled) >= 4
    good = tmp_path / "answers.jsonl"
    good.write_text("".join(json.dumps(row) + "\n" for row in filled))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(dict(row, score=2 if i == 1 else row["score"])) + "\n" for i, row in enumerate(filled)))

    page.get_by_label("Name", exact=True).fill("web-added")
    page.get_by_label("Metadata").fill("family=web\nparams_b=7")
    page.locator("#add-file").set_input_files(str(good))
    page.get_by_role("button", name="Add model").click()
    page.locator("#add-out .error", has_text="bearer token is required").wait_for()  # writes need the token
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_label("Token").press("Enter")
    page.locator("#add-file").set_input_files(str(bad))
    page.get_by_role("button", name="Add model").click()
    page.locator("#add-out .error", has_text="line 2").wait_for()  # the file's own line, named
    page.get_by_label("Metadata").fill("family=web\noops")
    page.get_by_role("button", name="Add model").click()
    page.locator("#add-meta-problem", has_text="metadata line 2").wait_for()  # said next to the field, nothing sent
    with server.client(auth=False) as c:
        assert c.get("/v1/models/web-added").status_code == 404  # nothing half-written by the refusals
    page.get_by_label("Metadata").fill("family=web\nparams_b=7")
    page.locator("#add-file").set_input_files(str(good))
    page.get_by_role("button", name="Add model").click()
    page.locator("#add-result").wait_for()
    assert "web-added is version 1 (add)" in page.locator("#add-result").inner_text()
    with server.client() as c:
        info = c.get("/v1/models/web-added").json()
        assert (info["record"]["family"], info["record"]["params_b"], info["n_evals"]) == ("web", 7, len(filled))
        assert info["low_evidence"] and "fewer than" in page.locator("#add-result .warn").inner_text()  # thin: said so
        # the tab keeps the generation its write landed at and asks every later read for a state that new
        from indexing.home import generation, generation_number

        landed = generation_number(generation(home))
        assert page.evaluate("sessionStorage.getItem('locus-generation')") == str(landed) and landed > 0
        with page.expect_request(lambda r: r.url.endswith("/v1/models/web-added")) as asked:
            page.locator("#add-result a").click()
        assert asked.value.headers.get("x-locus-read") == str(landed)
        page.locator("#low-evidence").wait_for()  # its page shows it: thin, as the add said
        page.locator("#no-fingerprint", has_text="no behaviour fingerprint").wait_for()  # too few to fit one: said
        assert "--by" not in page.locator("#no-fingerprint").inner_text()  # in the page's words, not the CLI's
        assert c.delete("/v1/models/web-added").status_code == 200  # the module's other tests see the pool as it was
    # its behaviour neighbours are asked with the server's default vector: a note, no 409 in the console
    assert [s for s, _ in tab.statuses] == [401, 422], tab.statuses


def test_route_cost_limits_leave_out_models_without_a_price_and_profiles_take_any_value(tab, server, home, names):
    """A pool with a model of no price and no params_b (as the demo home has): a cost limit leaves it out
    (unpriced=exclude, ticked by default) instead of a refusal; unticked, the refusal says what to do here."""
    import json

    from registry import Registry

    question = Registry.open(home).store.read("queries", ["text"]).column("text")[0].as_py()
    unpriced = "web/unpriced"
    with server.client() as c:
        added = c.post("/v1/models", json={"name": unpriced, "evaluations": own_evaluations(Registry.open(home), names[0]),
                                           "metadata": {"family": "web"}})
        assert added.status_code == 201, added.text
    try:
        page = tab.page
        page.goto("/route")
        page.get_by_label("Questions (one per line)").fill(question)
        page.get_by_label("Max cost (USD/call)").fill("1000")
        box = page.get_by_label("Leave out models with no price", exact=False)
        assert box.is_checked()
        with page.expect_request(lambda r: r.url.endswith("/v1/route")) as asked:
            page.get_by_role("button", name="Route").click()
        assert json.loads(asked.value.post_data)["unpriced"] == "exclude"
        page.locator("#route-out .route-note", has_text=f"no price and no params_b: {unpriced}").wait_for()
        assert page.locator("#route-out [data-query='0'] ol li").count() == 3

        box.uncheck()  # the API's default: refused, naming the model, with this page's way out
        page.get_by_label("Max cost (USD/call)").fill("")
        page.get_by_label("Willingness to pay λ").fill("0.01")
        page.get_by_role("button", name="Route").click()
        error = page.locator("#route-out .error")
        error.wait_for()
        assert unpriced in error.inner_text() and "Tick “Leave out models with no price" in error.inner_text()

        # a profile target between the steps of 0.05 is taken as it is
        page.get_by_label("math accuracy").fill("0.33")
        with page.expect_request(lambda r: r.url.endswith("/v1/profile")) as profiled:
            page.get_by_role("button", name="Find models").click()
        assert json.loads(profiled.value.post_data)["targets"] == {"math": 0.33}
        page.locator("#profile-table tbody tr").first.wait_for()
        assert [s for s, _ in tab.statuses] == [422] and not tab.failed
    finally:
        with server.client() as c:
            assert c.delete(f"/v1/models/{quote(unpriced, safe='')}").status_code == 200


def test_every_page_fits_a_phone_screen(browser, server, names):
    """390 px wide: no page scrolls sideways and the token box stays inside the header bar."""
    phone = browser.new_context(viewport={"width": 390, "height": 844}, base_url=server.url)
    try:
        page = phone.new_page()
        page.set_default_timeout(20_000)
        for template, ready in PAGES.items():
            path = template.format(a=quote(names[0]), b=quote(names[1]))
            page.goto(path)
            page.wait_for_selector(ready)
            page.wait_for_load_state("networkidle")
            assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
            header, state = page.locator("header.top").bounding_box(), page.locator("#token-state").bounding_box()
            assert state["x"] + state["width"] <= header["x"] + header["width"], path
            assert state["y"] + state["height"] <= header["y"] + header["height"], path
    finally:
        phone.close()


def test_models_deep_links_are_clamped_and_an_error_clears_the_rows(tab, server, names):
    page = tab.page
    rows = page.locator("#models-table tbody tr")
    n = len(names)
    page.goto("/?offset=100")  # past the end: the last page
    page.locator("#summary", has_text=f"of {n} matching").wait_for()
    assert page.locator("#summary").inner_text().startswith(f"1–{n} ") and rows.count() == n
    assert "page 1 of 1" in page.locator(".pager").inner_text()
    page.goto("/?offset=abc")  # not a number: the first page, no offset=NaN sent
    page.locator("#summary", has_text=f"1–{n} of {n}").wait_for()
    page.goto("/?limit=3&offset=100")
    last = (n - 1) // 3 * 3
    page.locator("#summary", has_text=f"{last + 1}–{n} of {n}").wait_for()
    assert f"page {last // 3 + 1} of {(n + 2) // 3}" in page.locator(".pager").inner_text()
    assert page.get_by_label("Rows per page").input_value() == "3"  # the link's page size, kept by Apply
    page.get_by_role("button", name="Apply").click()
    page.locator("#summary", has_text=f"1–3 of {n}").wait_for()
    assert rows.count() == 3 and "limit=3" in page.url
    assert not tab.statuses

    # an error leaves no rows of the previous answer under it
    page.get_by_label("Filter (where)").fill("famly == x")
    page.get_by_role("button", name="Apply").click()
    page.locator("#table-message .error").wait_for()
    assert rows.count() == 0 and page.locator("#summary").inner_text() == "" and page.locator(".pager button").count() == 0
    assert [s for s, _ in tab.statuses] == [422]


def test_models_table_keeps_keyboard_focus_on_the_control_that_rebuilt_it(tab, names):
    assert len(names) > 6
    page = tab.page
    page.goto("/?limit=3")
    page.locator("#models-table tbody tr").first.wait_for()
    focused = "document.activeElement.textContent"
    page.get_by_role("button", name="Accuracy", exact=True).focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("th[aria-sort='ascending'] >> text=Accuracy")
    assert page.evaluate(focused).startswith("Accuracy")
    page.get_by_role("button", name="Next →").focus()
    page.keyboard.press("Enter")
    page.locator(".pager", has_text="page 2 of").wait_for()
    assert page.evaluate(focused) == "Next →"
    page.keyboard.press("Enter")
    page.locator(".pager", has_text="page 3 of").wait_for()
    assert page.evaluate(focused) == "← Previous"  # Next is disabled on the last page: focus moves beside it
    assert tab.problems() == []


def test_map_deep_links_survive_and_errors_clear_the_map(tab, server, names):
    page = tab.page
    circles = page.locator("#map circle")
    page.goto("/map?color_by=params_b")
    circles.first.wait_for()
    assert page.get_by_label("Colour by").input_value() == "params_b"
    page.wait_for_load_state("networkidle")
    assert "color_by=params_b" in page.url  # reload and share keep it

    # a first load that failed: a good Draw fills the fields (with the default colour) all the same
    page.goto("/map?where=" + quote("famly == x"))
    page.locator(".error", has_text="famly").wait_for()
    page.get_by_label("Only models where").fill("")
    page.get_by_role("button", name="Draw").click()
    circles.first.wait_for()
    assert page.get_by_label("Colour by").input_value() == "family"
    assert page.locator("#color-by option").count() > 2
    page.goto("/map?color_by=nosuch")
    page.locator(".error", has_text="nosuch").wait_for()
    page.get_by_label("Colour by").select_option("")
    circles.first.wait_for()
    assert page.locator("#color-by option").count() > 2 and "color_by" not in page.url

    # a filter that leaves too few models: the error, and no map of the earlier answer under it
    for where in (f"name == {names[0]}", "family == nobody"):
        page.get_by_label("Only models where").fill(where)
        page.get_by_role("button", name="Draw").click()
        page.locator(".error").wait_for()
        assert circles.count() == 0 and page.locator("#map-caption").inner_text() == ""
        assert page.locator("#legend span").count() == 0
        page.get_by_label("Only models where").fill("")
        page.get_by_role("button", name="Draw").click()
        circles.first.wait_for()
    assert sorted(s for s, _ in tab.statuses) == [409, 422, 422, 422], tab.statuses


def test_names_are_checked_before_they_are_sent(tab, server, home, names, tmp_path):
    """An alias or a model name the API would answer with a bare 404/405 (its path broken) is refused next to
    its field; a model name holding '/' goes percent-encoded and is added as typed."""
    import json

    from registry import Registry

    page = tab.page
    page.goto(f"/model?name={quote(names[0])}")
    page.get_by_role("button", name="Set alias").wait_for()
    alias = page.get_by_label("Alias", exact=True)
    for bad in ("   ", "..", "team/prod", "1st"):
        alias.fill(bad)
        page.get_by_role("button", name="Set alias").click()
        page.locator("#alias-name-problem:visible").wait_for()
        assert alias.get_attribute("aria-invalid") == "true"
    alias.fill("fine")
    assert page.locator("#alias-name-problem:visible").count() == 0  # typing clears it

    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps(e) + "\n" for e in own_evaluations(Registry.open(home), names[0])))
    page.goto("/add")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_label("Token").press("Enter")
    page.locator("#add-file").set_input_files(str(answers))
    name = page.get_by_label("Name", exact=True)
    for bad in ("   ", "..", " . "):
        name.fill(bad)
        page.get_by_role("button", name="Add model").click()
        page.locator("#add-name-problem:visible").wait_for()
    assert not [r for r in tab.requests if r.method in ("PUT", "POST")]
    name.fill("web/slashed")
    page.get_by_role("button", name="Add model").click()
    page.locator("#add-result").wait_for()
    assert page.locator("#add-result a").inner_text() == "web/slashed"
    with server.client() as c:
        assert c.delete("/v1/models/web%2Fslashed").status_code == 200
    assert tab.problems() == []


def test_portfolio_says_which_limit_is_missing(tab):
    page = tab.page
    page.goto("/portfolio?k=abc")
    error = page.locator("#portfolio-out .error")
    error.wait_for()
    assert "k=abc" in error.inner_text() and "not both" not in error.inner_text()
    page.locator("#pf-k").fill("")
    page.get_by_role("button", name="Choose").click()
    page.locator("#portfolio-out .error", has_text="both are empty").wait_for()
    assert all("/v1/portfolio" not in r.url for r in tab.requests)


def test_audit_of_a_model_with_nothing_flagged_says_so(tab, server, names):
    with server.client(auth=False) as c:
        quiet = next(n for n in names if c.get("/v1/audit", params={"model": n}).json()["flag_level_p"] == 0)
    page = tab.page
    page.goto(f"/audit?model={quote(quiet)}")
    text = page.locator("#calibration").inner_text()
    assert "e+0" not in text and "no pair's p-value passes Holm's test" in text
    assert tab.problems() == []


def _answers_file(home, name: str, where: Path) -> Path:
    """An evaluations file (JSON Lines) answering as the stored model `name` did."""
    import json

    from registry import Registry

    where.write_text("".join(json.dumps(e) + "\n" for e in own_evaluations(Registry.open(home), name)))
    return where


def _use_token(page) -> None:
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_label("Token").press("Enter")


def test_writes_from_the_page_work_on_a_server_without_a_token(browser, home, names, tmp_path):
    """Without a token the server takes a multipart upload or a bodiless POST from a page only with the
    X-Locus-Client header (a foreign page cannot send it without a preflight): the UI's writes carry it."""
    from service_harness import serving_copy

    answers = _answers_file(home, names[0], tmp_path / "answers.jsonl")
    with serving_copy(home, tmp_path, token=None) as srv:
        name = names[0]
        with srv.client() as c:
            assert c.delete(f"/v1/models/{quote(name, safe='')}").status_code == 200
        tab = Watched(browser, srv.url)
        try:
            page = tab.page
            page.goto(f"/model?name={quote(name)}")
            page.locator("[data-restore]").last.click()  # a bodiless POST
            status = page.locator("#write-status .notice, #write-status .error")
            status.wait_for()
            assert "restored version" in status.inner_text(), status.inner_text()

            page.goto("/add")  # a multipart POST
            page.get_by_label("Name", exact=True).fill("open-added")
            page.locator("#add-file").set_input_files(str(answers))
            page.get_by_role("button", name="Add model").click()
            out = page.locator("#add-result, #add-out .error")
            out.wait_for()
            assert "open-added is version 1 (add)" in out.inner_text(), out.inner_text()
            writes = [r for r in tab.requests if r.method == "POST"]
            assert len(writes) == 2 and all(r.headers.get("x-locus-client") == "web-ui" for r in writes)
            assert not [s for s, _ in tab.statuses if s in (401, 403)], tab.statuses
        finally:
            tab.close()
        with srv.client() as c:
            assert c.get(f"/v1/models/{quote(name, safe='')}").status_code == 200
            assert c.get("/v1/models/open-added").status_code == 200


class _Held:
    """The first request to match `pattern` after this is made waits until `release()`: its answer comes
    after those of requests sent later."""

    def __init__(self, page, pattern) -> None:
        self.page, self.pattern, self.routes = page, pattern, []
        page.route(pattern, self._route)

    def _route(self, route) -> None:
        if self.routes:
            route.continue_()
        else:
            self.routes.append(route)

    def wait(self) -> None:
        for _ in range(200):
            if self.routes:
                return
            self.page.wait_for_timeout(50)
        raise AssertionError(f"no request matched {self.pattern}")

    def release(self) -> None:
        held = self.routes[0].request
        with self.page.expect_event("requestfinished", lambda r: r.url == held.url and r.post_data == held.post_data):
            self.routes[0].continue_()
        self.page.wait_for_timeout(500)  # time for the page to draw it, if it would
        self.page.unroute(self.pattern)


def _submit(label, name):
    def run(page, value):
        page.get_by_label(label, exact=True).fill(value)
        page.get_by_role("button", name=name, exact=True).click()
    return run


# form: (page, ready, the request, fill in and submit one run, the two runs' values, where the answer shows, what each shows)
STALE = {
    "audit": ("/audit", "#calibration", r"/v1/audit\?", _submit("Nearest neighbours (k)", "Run audit"), ("3", "5"),
              "#calibration", lambda v: f"{v} nearest"),
    "route": ("/route", "#targets input", r"/v1/route$", _submit("Questions (one per line)", "Route"),
              ("Which river is the longest?", "Which mountain is the highest?"), "#route-out", lambda v: v),
    "profile": ("/route", "#targets input", r"/v1/profile$", _submit("math accuracy", "Find models"), ("0.2", "0.8"),
                "#profile-out", lambda v: f"math {float(v):.2f} (sampled"),
    "compare": ("/compare", "#compare-out p", r"/v1/compare\?", None, (1, 2), "#compare-out", None),
    "families": ("/families", "#clusters-table tbody tr", r"/v1/clusters\?", _submit("Clusters", "Cluster"), ("2", "3"),
                 "#clusters-summary", lambda v: f"{v} clusters"),
    "portfolio": ("/portfolio", "#portfolio-table tbody tr", r"/v1/portfolio\?", _submit("Models", "Choose"), ("4", "2"),
                  "#portfolio-summary", lambda v: f"portfolio of {v} models"),
    "suggest": ("/add", "#suggest form", r"/v1/suggest-queries\?", _submit("Queries", "Suggest"), ("4", "6"),
                "#suggest-summary", lambda v: f"{v} of "),
}


@pytest.mark.parametrize("form", list(STALE))
def test_a_slow_earlier_answer_never_replaces_a_later_one(tab, names, form):
    path, ready, pattern, run, values, out, shows = STALE[form]
    if form == "compare":  # model B is the run's value
        def run(page, value):
            page.get_by_label("Model A").fill(names[0])
            page.get_by_label("Model B").fill(names[value])
            page.get_by_role("button", name="Compare").click()

        def shows(value):
            return f"{names[0]} vs {names[value]}:"
    page = tab.page
    page.goto(path)
    page.locator(ready).first.wait_for()
    page.wait_for_load_state("networkidle")
    held = _Held(page, re.compile(pattern))
    run(page, values[0])
    held.wait()
    run(page, values[1])
    page.locator(out, has_text=shows(values[1])).first.wait_for()
    held.release()
    text = page.locator(out).first.inner_text()
    assert shows(values[1]) in text and shows(values[0]) not in text, text


def test_a_double_click_on_add_model_sends_one_upload(tab, server, home, names, tmp_path):
    answers = _answers_file(home, names[0], tmp_path / "answers.jsonl")
    page = tab.page
    page.goto("/add")
    _use_token(page)
    _fill_add_form(page, "web-once", answers)
    try:
        page.get_by_role("button", name="Add model").dblclick()
        page.locator("#add-result").wait_for()
        page.wait_for_load_state("networkidle")
        assert len([r for r in tab.requests if r.method == "POST"]) == 1
        assert page.locator("#add-out .error").count() == 0 and tab.problems() == []
        assert page.get_by_role("button", name="Add model").is_enabled()  # enabled again once answered
    finally:
        with server.client() as c:
            c.delete("/v1/models/web-once")


def test_a_restore_fills_every_section_of_the_model_page(tab, server, names):
    name = names[2]
    with server.client() as c:
        assert c.delete(f"/v1/models/{quote(name, safe='')}").status_code == 200
    page = tab.page
    page.goto(f"/model?name={quote(name)}")
    page.locator("#audit .error").wait_for()  # removed: every section says so
    page.locator("#neighbours .error").first.wait_for()
    _use_token(page)
    page.locator("[data-restore]").last.click()
    page.locator("#write-status .notice", has_text="restored version").wait_for()
    page.locator("#near-locus tbody tr").first.wait_for(timeout=10_000)
    page.locator("#near-behaviour tbody tr").first.wait_for(timeout=10_000)
    page.locator("#audit p", has_text="candidate pairs").wait_for(timeout=10_000)
    assert page.locator("#neighbours .error, #audit .error, #record .error, #accuracy .error").count() == 0


def _fill_add_form(page, name: str, answers) -> None:
    page.get_by_label("Name", exact=True).fill(name)
    page.locator("#add-file").set_input_files(str(answers))


@pytest.mark.parametrize("dots", [".", ".."])
def test_a_model_link_to_a_dot_segment_says_so_and_asks_nothing(tab, dots):
    page = tab.page
    page.goto(f"/model?name={dots}")
    page.locator("#app .error", has_text=f"cannot be named “{dots}”").wait_for()
    page.wait_for_load_state("networkidle")
    assert not [r for r in tab.requests if "/v1/models" in r.url]
    assert tab.problems() == []


def test_add_refuses_a_metadata_key_given_twice(tab, home, names, tmp_path):
    answers = _answers_file(home, names[0], tmp_path / "answers.jsonl")
    page = tab.page
    page.goto("/add")
    _fill_add_form(page, "web-twice", answers)
    page.get_by_label("Metadata").fill("family=alpha\nfamily=beta")
    page.get_by_role("button", name="Add model").click()
    page.locator("#add-meta-problem", has_text="key 'family' appears more than once").wait_for()
    assert page.get_by_label("Metadata").get_attribute("aria-invalid") == "true"
    assert not [r for r in tab.requests if r.method == "POST"]


def test_link_values_a_page_cannot_take_are_said_not_dropped(tab):
    page = tab.page
    for path, said, asked in (("/families?k=abc", "k=abc in the link: not a number", "/v1/clusters"),
                              ("/families?by=bogus", "by=bogus in the link: not one of", "/v1/clusters"),
                              ("/families?linkage=nope", "linkage=nope in the link: not one of", "/v1/clusters"),
                              ("/audit?alpha=abc", "alpha=abc in the link: not a number", "/v1/audit"),
                              ("/audit?k=abc", "k=abc in the link: not a number", "/v1/audit")):
        page.goto(path)
        page.locator(".error[role=alert]", has_text=said).wait_for()
        page.wait_for_load_state("networkidle")
        assert page.url.endswith(path), page.url  # the link stays as given
        assert not [r for r in tab.requests if asked in r.url], path
    page.goto("/add")  # a number box takes 1e9; the API would answer "unable to parse string as an integer"
    page.get_by_label("Queries", exact=True).fill("1e9")
    page.get_by_role("button", name="Suggest").click()
    page.locator("#suggest-n-problem", has_text="whole number").wait_for()
    page.wait_for_load_state("networkidle")
    assert not [r for r in tab.requests if "/v1/suggest-queries" in r.url]
    assert tab.problems() == []


def test_a_form_s_own_refusal_clears_an_earlier_answer_s_error(tab, home, names, tmp_path):
    answers = _answers_file(home, names[0], tmp_path / "answers.jsonl")
    page = tab.page
    page.goto("/add")  # no token: the server refuses
    _fill_add_form(page, "web-cleared", answers)
    page.get_by_role("button", name="Add model").click()
    page.locator("#add-out .error", has_text="bearer token").wait_for()
    page.get_by_label("Name", exact=True).fill(".")
    page.get_by_role("button", name="Add model").click()
    page.locator("#add-name-problem:visible").wait_for()
    assert page.locator("#add-out .error").count() == 0

    page.goto(f"/model?name={quote(names[0])}")
    page.get_by_label("Alias", exact=True).fill("web-cleared")
    page.get_by_role("button", name="Set alias").click()
    page.locator("#write-status .error", has_text="bearer token").wait_for()
    page.get_by_label("Alias", exact=True).fill("1st")
    page.get_by_role("button", name="Set alias").click()
    page.locator("#alias-name-problem:visible").wait_for()
    assert page.locator("#write-status .error").count() == 0


def test_a_model_page_reached_by_an_alias_names_the_model(tab, server, names):
    with server.client() as c:
        assert c.put("/v1/aliases/web-heading", json={"target": names[0]}).status_code == 200
    try:
        page = tab.page
        page.goto("/model?name=web-heading")
        page.locator("#heading", has_text="→").wait_for()
        assert page.locator("#heading").inner_text() == f"web-heading → {names[0]}"
    finally:
        with server.client() as c:
            c.delete("/v1/aliases/web-heading")


def test_a_search_matching_nothing_says_so_in_words(tab, names):
    page = tab.page
    page.goto("/?q=zzz-no-such-model")
    page.locator("#summary", has_text="matching").wait_for()
    assert page.locator("#summary").inner_text() == f"no matching models ({len(names)} in the registry)"


def test_focus_rings_contrast_3_to_1_with_the_page_and_the_bar(tab):
    """WCAG 1.4.11: a focus indicator contrasts at least 3:1 with the colours next to it."""
    def luminance(rgb: str) -> float:
        channels = [int(x) / 255 for x in re.findall(r"\d+", rgb)[:3]]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    def contrast(a: str, b: str) -> float:
        la, lb = sorted((luminance(a), luminance(b)), reverse=True)
        return (la + 0.05) / (lb + 0.05)

    page = tab.page
    page.goto("/")
    page.locator("#models-table tbody tr").first.wait_for()
    style = "(el, p) => getComputedStyle(el)[p]"
    for field_, area in (("#q", "main"), ("#token-input", "header.top")):
        page.locator(field_).focus()
        ring = page.locator(field_).evaluate(style, "outlineColor")
        assert page.locator(field_).evaluate(style, "outlineStyle") == "solid"
        behind = page.locator(area).evaluate(style, "backgroundColor")
        behind = "rgb(255, 255, 255)" if behind == "rgba(0, 0, 0, 0)" else behind  # main is the white page
        assert contrast(ring, behind) >= 3, (field_, ring, behind)


# ------------------------------------------------------------------ the /v1 endpoints the pages use
def test_table_pages_sorts_filters_and_agrees_with_the_evaluations(server, home, names):
    from registry import Registry

    reg = Registry.open(home)
    evals = reg.store.read("evaluations", ["model", "query_id", "score"]).to_pylist()
    task_of = {q["query_id"]: q["task"] for q in reg.store.read("queries", ["query_id", "task"]).to_pylist()}
    with server.client(auth=False) as c:
        first = c.get("/v1/table", params={"limit": 3}).json()
        second = c.get("/v1/table", params={"limit": 3, "offset": 3}).json()
        assert first["total"] == first["matched"] == len(names)
        assert [r["name"] for r in first["rows"] + second["rows"]] == sorted(names, key=str.lower)[:6]
        row = first["rows"][0]
        mine = [e for e in evals if e["model"] == row["name"]]
        assert row["n_evals"] == len(mine)
        assert row["accuracy"] == pytest.approx(sum(e["score"] for e in mine) / len(mine))
        math = [e["score"] for e in mine if task_of[e["query_id"]] == "math"]
        assert row["tasks"]["math"] == {"accuracy": pytest.approx(sum(math) / len(math)), "n": len(math)}
        assert row["low_evidence"] == sorted(row["tasks"])  # 12 queries per task: every task is thin
        assert c.get(f"/v1/models/{quote(row['name'])}/accuracy").json() == row

        by_math = c.get("/v1/table", params={"sort": "task:math", "order": "desc"}).json()["rows"]
        values = [r["tasks"]["math"]["accuracy"] for r in by_math]
        assert values == sorted(values, reverse=True)
        family = row["record"]["family"]
        narrowed = c.get("/v1/table", params={"where": f"family == {family}"}).json()
        assert {r["name"] for r in narrowed["rows"]} == {m["name"] for m in
                                                          c.get("/v1/models", params={"where": f"family == {family}"}).json()}
        for params, field in (({"where": "famly == x"}, "where"), ({"sort": "colour"}, "sort"),
                              ({"sort": "task:poetry"}, "sort"), ({"limit": 0}, "limit"), ({"order": "up"}, "order")):
            r = c.get("/v1/table", params=params)
            assert r.status_code == 422 and r.json()["error"]["field"] == field, (params, r.text)
        assert c.get("/v1/models/nobody/accuracy").status_code == 404


def test_map_compare_and_alias_endpoints(server, home, names, tmp_path):
    from registry import Registry

    reg = Registry.open(home)
    drawn = reg.map(tmp_path / "map.png", color_by="family")
    with server.client(auth=False) as c:
        served = c.get("/v1/map", params={"color_by": "family"}).json()
        assert [(p["name"], p["x"], p["y"]) for p in served["points"]] == [
            (p.name, pytest.approx(p.x), pytest.approx(p.y)) for p in drawn.coordinates]
        assert {p["value"] for p in served["points"]} == {reg.get(n).family for n in names}
        assert (served["by"], served["share_of"]) == (drawn.by, drawn.share_of)
        bad = c.get("/v1/map", params={"color_by": "colour"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "color_by"

        compared = c.get("/v1/compare", params={"a": names[0], "b": names[1]}).json()
        assert compared == reg.compare(names[0], names[1]).model_dump(mode="json")
        assert c.get("/v1/compare", params={"a": names[0], "b": names[0]}).status_code == 422

        assert c.put("/v1/aliases/api-alias", json={"target": names[0]}).status_code == 401
    with server.client() as c:
        assert c.put("/v1/aliases/api-alias", json={"target": names[0]}).json() == {
            "alias": "api-alias", "name": names[0], "version": None}
        assert c.get("/v1/models/api-alias/accuracy").json()["name"] == names[0]
        assert c.put("/v1/aliases/api-alias", json={"target": names[0] + "@99"}).status_code == 404
        assert c.delete("/v1/aliases/api-alias").status_code == 200
        assert c.delete("/v1/aliases/api-alias").status_code == 404


def test_pages_and_static_files_answer_with_a_content_security_policy(server):
    with httpx.Client(base_url=server.url) as c:
        for path in ("/", "/map", "/static/app.js", "/static/app.css"):
            r = c.get(path)
            assert r.status_code == 200 and "default-src 'self'" in r.headers["content-security-policy"], path
        assert c.get("/static/app.js").headers["content-type"].startswith("text/javascript")
        assert c.get("/static/..%2Fpage.html").status_code == 404
        assert c.get("/static/nothing.js").status_code == 404


def test_the_ui_files_ship_as_package_data():
    """A non-editable install carries every file of the UI: each matches a package-data pattern."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["registry.service"]
    base = ROOT / "registry" / "service"
    files = [p.relative_to(base).as_posix() for p in (base / "webui").rglob("*") if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in files), files
