"""The app's route table as the routers build it (issue 24): each method and path served once,
every write behind the token check, OPTIONS seeing into every included router, and limits that the
request schemas fix refused rather than silently ignored."""
from __future__ import annotations

from collections import Counter

import pytest

# POSTs that only read (their arguments are too big or too structured for a query string).
POST_READS = {("POST", "/v1/similar"), ("POST", "/v1/route"), ("POST", "/v1/profile")}
POST_READS |= {("POST", "/v1/suggest-queries")}  # with the answers a model not yet added has so far


def _flat(routes):
    for route in routes:
        inner = getattr(route, "original_router", None)
        yield from (_flat(inner.routes) if inner is not None else (route,))


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from registry import Registry
    from registry.service.app import create_app
    from registry.service.settings import Limits, ServiceSettings

    home = tmp_path_factory.mktemp("routes") / "home"
    Registry.open(home)
    app = create_app(ServiceSettings(home=home, token="t" * 24, limits=Limits(max_body_bytes=4096)))
    yield app
    app.state.jobs.stop()


def _api_routes(app):
    from fastapi.routing import APIRoute

    return [route for route in _flat(app.routes) if isinstance(route, APIRoute)]


def test_each_method_and_path_is_served_by_one_route(app):
    from registry.service.routes import ROUTERS

    served = Counter((method, route.path) for route in _api_routes(app) for method in route.methods)
    assert served and not [key for key, n in served.items() if n > 1]
    included = Counter(id(route.original_router) for route in app.routes if hasattr(route, "original_router"))
    assert all(included[id(router)] == 1 for router in ROUTERS)
    # every area's routes reach the app (a router left out of ROUTERS would drop its paths)
    assert {("GET", "/v1/jobs/{job_id}"), ("GET", "/v1/models/{name}/history"), ("POST", "/v1/route"),
            ("GET", "/v1/portfolio"), ("GET", "/metrics"), ("GET", "/v1/table")} <= set(served)
    ids = Counter(op["operationId"] for item in app.openapi()["paths"].values() for op in item.values())
    assert not [op for op, n in ids.items() if n > 1]


def test_the_schema_links_lead_to_operations_that_take_what_they_pass(app):
    """The OpenAPI links (a created model to its reads and writes, a removed one to restore, a job to its
    poll, an alias to its deletion) name operations the schema has, with parameters those operations take,
    from fields the response has: a renamed handler would leave a link to nothing."""
    schema = app.openapi()
    operations = {op["operationId"]: op for item in schema["paths"].values() for op in item.values()}
    links = [(path, code, response, link) for path, item in schema["paths"].items() for op in item.values()
             for code, response in op["responses"].items() for link in response.get("links", {}).values()]
    assert len(links) >= 20
    for path, code, response, link in links:
        target = operations[link["operationId"]]
        taken = {p["name"] for p in target.get("parameters", [])}
        fields = schema["components"]["schemas"][
            response["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]]["properties"]
        for parameter, source in link["parameters"].items():
            assert parameter in taken, (path, code, link)
            assert source.startswith("$response.body#/") and source.split("/")[-1] in fields, (path, code, link)


def test_every_write_and_no_read_asks_for_the_token(app):
    from registry.service.deps import require_token

    guarded = {(method, route.path): any(d.call is require_token for d in route.dependant.dependencies)
               for route in _api_routes(app) for method in route.methods}
    writes = {key for key in guarded if key[0] in ("POST", "PUT", "PATCH", "DELETE")} - POST_READS
    assert writes and POST_READS <= set(guarded)
    assert [key for key in writes if not guarded[key]] == []
    assert [key for key, needs in guarded.items() if needs and key not in writes] == []


def test_options_lists_the_methods_of_every_router_on_a_path(app):
    from fastapi.testclient import TestClient

    client = TestClient(app)
    cases = {"/v1/models/some-model": "DELETE, GET, OPTIONS",  # the writes' router and the reads'
             "/v1/similar": "GET, OPTIONS, POST", "/v1/aliases/fast": "DELETE, OPTIONS, PUT",  # the web UI's
             "/metrics": "GET, OPTIONS"}
    for path, allow in cases.items():
        r = client.options(path)
        assert (r.status_code, r.headers.get("allow")) == (204, allow), path
    assert client.post("/v1/models", content=b"x" * 5000).status_code == 413  # the settings' body limit


def test_a_limit_the_schemas_fix_is_refused_not_ignored(tmp_path):
    from registry.service.app import create_app
    from registry.service.settings import Limits, ServiceSettings

    with pytest.raises(ValueError, match="limits.max_k"):
        create_app(ServiceSettings(home=tmp_path / "never-opened", limits=Limits(max_k=5)))
    assert not (tmp_path / "never-opened").exists()


def test_every_number_in_a_query_string_refuses_nan_and_infinity_as_such(app):
    """A float query parameter given nan or inf is refused as not finite: pydantic compared nan with the
    bounds and answered 'alpha: Input should be less than 1' to alpha=nan."""
    from fastapi.testclient import TestClient

    client = TestClient(app)
    floats = [(method, route.path, param.alias) for route in _api_routes(app) for method in route.methods
              for param in route.dependant.query_params if param.field_info.annotation in (float, float | None)]
    assert {("GET", "/v1/audit", "alpha"), ("GET", "/v1/portfolio", "budget_b"),
            ("POST", "/v1/drift/run", "max_noise")} <= set(floats)
    for method, path, name in floats:
        for value in ("nan", "inf", "-Infinity"):
            url = path.replace("{name}", "some-model") + f"?{name}={value}"
            r = client.request(method, url, headers={"Authorization": "Bearer " + "t" * 24})
            assert r.status_code == 422, (url, r.text)
            assert r.json()["error"]["message"] == f"{name}: Input should be a finite number", (url, r.text)
