"""The routes on which an engine generates tokens (docs/facts/sglang.md#generation-routes).

SGLang 0.5.10 to 0.5.23 serve the same nine (`entrypoints/http_server.py`): its native
API, the OpenAI chat, completions and Responses APIs, Anthropic's Messages API, the
Ollama chat and generate APIs, SageMaker's `/invocations` (OpenAI chat) and Vertex AI's
`/vertex_generate` (native). vLLM's streaming routes are among them. Each is also the
`endpoint` label `http_requests_active` gives it (the route's path). Two can be renamed
when SGLang starts (`SGLANG_OLLAMA_*_ROUTE`, `AIP_PREDICT_ROUTE`): renamed, they are
not seen as generation routes.

llama.cpp's llama-server (tools/server/server.cpp of the tree llama-cpp-python 0.3.36
vendors; docs/facts/llamacpp.md#generation-routes) generates on its native
`/completion` and `/completions` and on `/infill`, and on the OpenAI and Anthropic
routes, each also without its `/v1`: `/chat/completions`, `/responses`. Its native
routes stream only with `"stream": true`.
"""

from __future__ import annotations

import re

SGLANG_ROUTES = frozenset({
    "/generate", "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses",
    "/api/chat", "/api/generate", "/invocations", "/vertex_generate",
})
LLAMACPP_ROUTES = frozenset({
    "/completion", "/completions", "/v1/completions", "/chat/completions",
    "/v1/chat/completions", "/responses", "/v1/responses", "/v1/messages", "/infill",
})
GENERATION_ROUTES = SGLANG_ROUTES | LLAMACPP_ROUTES
#: The Ollama requests stream unless they say `"stream": false` (ollama/protocol.py).
STREAMING_BY_DEFAULT = frozenset({"/api/chat", "/api/generate"})
#: The methods they answer: POST, and PUT on /generate.
GENERATION_METHODS = frozenset({"POST", "PUT"})

#: For label values: `http_requests_active{endpoint=...}`.
GENERATION_ENDPOINTS = re.compile("|".join(re.escape(r) for r in sorted(GENERATION_ROUTES)))


def is_generation(method: str, path: str) -> bool:
    return method in GENERATION_METHODS and path in GENERATION_ROUTES
