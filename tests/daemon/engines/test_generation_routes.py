"""Every generation route of the release counts as a request in flight for the stall
tracker: `http_requests_active` as SGLang 0.5.23's middleware labels it
(observability/http_request_metrics.py: `endpoint` is the route's path)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from exporter.daemon.engines.routes import (
    GENERATION_ROUTES,
    LLAMACPP_ROUTES,
    SGLANG_ROUTES,
    is_generation,
)
from exporter.daemon.engines.stall.readers import MetricsBody, MetricsReader

# The routes of sglang 0.5.23 http_server.py l.2066-2215 and the three before them;
# the method each is served with.
RELEASE_ROUTES = {"/generate": "POST", "/v1/chat/completions": "POST",
                  "/v1/completions": "POST", "/v1/messages": "POST", "/v1/responses": "POST",
                  "/api/chat": "POST", "/api/generate": "POST", "/invocations": "POST",
                  "/vertex_generate": "POST"}
# Routes next to them that generate nothing.
OTHER_ROUTES = {"/v1/messages/count_tokens": "POST", "/v1/responses/{response_id}": "GET",
                "/v1/responses/{response_id}/cancel": "POST", "/api/tags": "GET",
                "/health": "GET", "/metrics": "GET", "/v1/models": "GET"}


def exposition(active: dict[str, str]) -> str:
    registry = CollectorRegistry()
    gauge = Gauge("sglang:http_requests_active", "Number of currently active HTTP requests",
                  ["endpoint", "method"], registry=registry)
    for endpoint, method in active.items():
        gauge.labels(endpoint=endpoint, method=method).set(1)
    # The reader needs the scheduler's gauge to read anything (a blind tracker otherwise).
    Gauge("sglang:num_running_reqs", "The number of running requests",
          registry=registry).set(1)
    return generate_latest(registry).decode()


def in_flight(text: str) -> float | None:
    async def body() -> str:
        return text

    return asyncio.run(MetricsReader(MetricsBody(body), 0.25).read()).counters.http_active


def test_a_stream_on_each_generation_route_is_in_flight():
    assert set(RELEASE_ROUTES) == SGLANG_ROUTES <= GENERATION_ROUTES
    for route, method in RELEASE_ROUTES.items():
        assert in_flight(exposition({route: method, **OTHER_ROUTES})) == 1.0, route
    assert in_flight(exposition({**RELEASE_ROUTES, **OTHER_ROUTES})) == len(RELEASE_ROUTES)
    assert in_flight(exposition(OTHER_ROUTES)) is None


def test_the_tap_knows_the_same_routes():
    assert all(is_generation(method, route) for route, method in RELEASE_ROUTES.items())
    assert is_generation("PUT", "/generate")
    assert not any(is_generation(method, route) for route, method in OTHER_ROUTES.items())
    assert not is_generation("GET", "/generate")


# llama.cpp's tools/server/server.cpp (llama-cpp-python 0.3.36's vendored tree): the
# POST routes that generate, and some beside them that do not.
LLAMACPP_SERVER_ROUTES = ("/completion", "/completions", "/v1/completions",
                          "/chat/completions", "/v1/chat/completions", "/v1/responses",
                          "/responses", "/v1/messages", "/infill")
LLAMACPP_OTHER_ROUTES = ("/embedding", "/v1/embeddings", "/tokenize", "/apply-template",
                         "/v1/messages/count_tokens", "/v1/chat/completions/input_tokens",
                         "/props", "/slots/:id_slot", "/v1/rerank")


def test_the_tap_knows_llamacpp_routes():
    assert set(LLAMACPP_SERVER_ROUTES) == LLAMACPP_ROUTES <= GENERATION_ROUTES
    assert all(is_generation("POST", route) for route in LLAMACPP_SERVER_ROUTES)
    assert not any(is_generation("POST", route) for route in LLAMACPP_OTHER_ROUTES)
