"""Fixtures of the real-engine tier (tests/support/real_engines.py): a vLLM and a
llama-server, each started once per module and stopped after it.

Flags vary by indirect parametrisation, one engine per parameter set:

    @pytest.mark.parametrize("llama_engine", [("-b", "512"), ()], indirect=True)
    def test_x(llama_engine: RealEngine) -> None: ...

    @pytest.mark.parametrize("vllm_engine", [("--max-num-batched-tokens", "512")],
                             indirect=True)

Without parameters each runs with its defaults (VLLM_FLAGS, LLAMA_FLAGS).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.real_engines import RealEngine, llama_server, vllm_server


@pytest.fixture(scope="module")
def vllm_engine(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealEngine]:
    flags = tuple(getattr(request, "param", ()))
    with vllm_server(flags, tmp_path_factory.mktemp("vllm")) as engine:
        yield engine


@pytest.fixture(scope="module")
def llama_engine(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealEngine]:
    flags = tuple(getattr(request, "param", ()))
    with llama_server(flags, tmp_path_factory.mktemp("llamacpp")) as engine:
        yield engine
