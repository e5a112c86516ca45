"""Unit tests for serving/http/openapi.py: a valid OpenAPI 3 document that describes every route."""

from __future__ import annotations

import types
from typing import cast

import pytest
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.routing import Route

from serving.app import build_app
from serving.config import AppConfig
from serving.http import openapi
from serving.metrics import Metrics
from serving.options import OPTIONS
from serving.service.runtime import Runtime


@pytest.fixture(scope="module")
def app() -> Starlette:
    # The routes do not touch the runtime until a request comes, and no lifespan runs here; the
    # middleware reads only its configuration and metrics.
    runtime = types.SimpleNamespace(
        config=AppConfig(), metrics=Metrics(), endpoint_services=lambda: None
    )
    return build_app(cast(Runtime, runtime), environ={})


def test_spec_is_valid_openapi_3(app: Starlette) -> None:
    spec = openapi.build_spec(app.routes)
    validate(spec)  # raises OpenAPIValidationError on any problem
    assert spec["openapi"].startswith("3.")


def test_every_served_endpoint_is_described(app: Starlette) -> None:
    served = openapi.served_operations(app.routes)
    undocumented = served - set(openapi.OPERATIONS)
    assert not undocumented, f"routes missing from serving/http/openapi.py: {sorted(undocumented)}"
    paths = openapi.build_spec(app.routes)["paths"]
    for required in ("/ocr", "/v1/ocr", "/health", "/livez", "/readyz", "/metrics"):
        assert required in paths
    for path, method in served:
        assert method in paths[path]


def test_only_served_endpoints_are_listed() -> None:
    async def handler(request: object) -> None:
        raise NotImplementedError

    routes = [Route("/v1/ocr", handler, methods=["POST"]), Route("/livez", handler)]
    spec = openapi.build_spec(routes)
    assert set(spec["paths"]) == {"/v1/ocr", "/livez"}
    assert set(spec["paths"]["/livez"]) == {"get"}  # HEAD, added by Starlette, is left out
    validate(spec)


def test_jobs_endpoints_are_described_when_served(app: Starlette) -> None:
    served = openapi.served_operations(app.routes)
    if ("/v1/jobs", "post") not in served:
        pytest.skip("this build serves no jobs API")
    paths = openapi.build_spec(app.routes)["paths"]
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/results"} <= set(paths)


def test_every_ref_resolves(app: Starlette) -> None:
    spec = openapi.build_spec(app.routes)
    refs: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    names = set(spec["components"]["schemas"])
    assert refs
    assert {ref.rsplit("/", 1)[1] for ref in refs} <= names


def test_every_numeric_option_has_its_enforced_range(app: Starlette) -> None:
    """`?det_thresh=2` was accepted and read nothing, and /openapi.json gave no range: every
    number either API takes has the range the server enforces (`serving.options.OPTIONS`)."""
    spec = openapi.build_spec(app.routes)
    query = {p["name"]: p["schema"] for p in spec["paths"]["/v1/ocr"]["post"]["parameters"]}
    paddlex = spec["components"]["schemas"]["PaddlexRequest"]["properties"]
    for name, option in OPTIONS.items():
        if option.kind in (int, float):
            assert option.bounds is not None, name
            low, high = option.bounds
            assert (query[name]["minimum"], query[name]["maximum"]) == (low, high), name
    assert (query["det_thresh"]["minimum"], query["det_thresh"]["maximum"]) == (0.0, 1.0)
    for field in ("textDetThresh", "textDetBoxThresh", "textDetUnclipRatio", "textRecScoreThresh"):
        assert {"minimum", "maximum"} <= set(paddlex[field]), field
    assert query["words"]["type"] == "boolean"
