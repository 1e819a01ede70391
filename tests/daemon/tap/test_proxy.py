"""The tap against a stand-in engine with a scripted gap pattern, over real loopback HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from exporter.config import EngineConfig
from exporter.daemon.tap.source import TapSource
from exporter.process.launch import free_port
from tests.daemon.tap.standin import PATHS, Script, StandIn, stream_bytes, tap_before

GAPS = (0.05, 0.3, 0.1, 0.6, 0.02, 0.02)
SCRIPT = Script(first_token_seconds=0.2, gaps_seconds=GAPS)


@contextlib.asynccontextmanager
async def tap_before_handler(handler) -> AsyncIterator[tuple[TapSource, str]]:
    """A tap in front of an engine whose POST /generate is `handler`."""
    app = web.Application()
    app.router.add_post("/generate", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    address = f"127.0.0.1:{free_port()}"
    tap = TapSource(EngineConfig(name="main", url=f"http://127.0.0.1:{port}",
                                 tap_listen_address=address))
    await tap.start()
    try:
        yield tap, f"http://{address}"
    finally:
        await tap.close()
        await runner.cleanup()


async def stream_through(session: aiohttp.ClientSession, tap_url: str, shape: str,
                         body: dict | None = None) -> tuple[int, dict, bytes]:
    async with session.post(tap_url + PATHS[shape], json=body or {"stream": True}) as response:
        return response.status, dict(response.headers), await response.read()


@pytest.mark.parametrize("shape", ["native", "chat", "completions"])
def test_bytes_identical_and_gaps_measured(shape):
    script = Script(shape=shape, first_token_seconds=0.2, gaps_seconds=GAPS)

    standin = StandIn(script)

    async def scenario():
        async with tap_before(standin) as (tap, url), aiohttp.ClientSession() as session:
            status, headers, body = await stream_through(session, url, shape)
            return status, headers, body, await tap.read()

    status, headers, body, reading = asyncio.run(scenario())
    head, frames = stream_bytes(script)
    assert status == 200 and body == head + b"".join(frames)
    assert headers["X-Engine"] == "stand-in" and headers["Content-Type"] == "text/event-stream"
    assert reading.requests == {"ok": 1, "error": 0, "client_closed": 0, "untimed": 0}
    # Against what the engine did (its sleeps overshoot under load), within 50 ms.
    arrived, *written = standin.timelines[0]
    sent_gaps = [b - a for a, b in zip(written, written[1:], strict=False)]
    assert reading.ttft_buckets[-1] == ("+Inf", 1.0)
    assert reading.ttft_sum == pytest.approx(written[0] - arrived, abs=0.05)
    assert reading.gap_buckets[-1] == ("+Inf", float(len(GAPS)))
    assert reading.gap_sum == pytest.approx(sum(sent_gaps), abs=0.05)
    assert reading.max_gap_seconds == pytest.approx(max(sent_gaps), abs=0.05)
    assert max(sent_gaps) >= max(GAPS)
    assert reading.active == 0
    assert reading.generated_tokens == script.frames


def test_a_gap_is_visible_while_it_is_open():
    script = Script(first_token_seconds=0.05, gaps_seconds=(0.02,) * 5, hang_after_frames=3)

    async def scenario():
        async with tap_before(StandIn(script)) as (tap, url), aiohttp.ClientSession() as session:
            async with session.post(url + "/generate", json={"stream": True}) as response:
                got = b""
                while got.count(b"\n\n") < 3:
                    got += await response.content.readany()
                last_frame = time.monotonic()
                await asyncio.sleep(0.7)
                during = await tap.read()
                open_for = time.monotonic() - last_frame
            return during, open_for

    during, open_for = asyncio.run(scenario())
    assert during.active == 1
    # At least the 0.7 s the client has waited; the tap saw the last frame a little
    # before the client did, so a little more than that, never a whole extra gap.
    assert 0.7 <= during.max_gap_seconds <= open_for + 0.25


def test_client_disconnect_aborts_upstream_at_once():
    script = Script(first_token_seconds=0.02, gaps_seconds=(0.02, 0.02, 30.0, 0.02))

    async def scenario():
        standin = StandIn(script)
        async with tap_before(standin) as (tap, url):
            async with aiohttp.ClientSession() as session, \
                    session.post(url + "/generate", json={"stream": True}) as response:
                got = b""
                while got.count(b"\n\n") < 3:
                    got += await response.content.readany()
                await asyncio.sleep(0.1)  # now inside the 30 s gap
                closed_at = time.monotonic()
                response.close()  # the agent hangs up
            for _ in range(40):
                if standin.aborted_at:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.05)
            return standin, closed_at, await tap.read()

    standin, closed_at, reading = asyncio.run(scenario())
    assert len(standin.aborted_at) == 1 and standin.finished == 0
    assert standin.aborted_at[0] - closed_at < 1.0
    assert reading.requests == {"ok": 0, "error": 0, "client_closed": 1, "untimed": 0}
    assert reading.active == 0


def test_sixteen_concurrent_streams_stay_intact():
    scripts = {f"s{i}": Script(shape=("native", "chat", "completions")[i % 3], tag=f"s{i}-",
                               first_token_seconds=0.01 * i,
                               gaps_seconds=tuple(0.005 * ((i + k) % 5) for k in range(30)))
               for i in range(16)}

    async def scenario():
        async with tap_before(StandIn(scripts=scripts)) as (tap, url), \
                aiohttp.ClientSession() as session:
            results = await asyncio.gather(*(
                stream_through(session, url, s.shape, {"stream": True, "tag": tag})
                for tag, s in scripts.items()))
            return results, await tap.read()

    results, reading = asyncio.run(scenario())
    for (status, _, body), script in zip(results, scripts.values(), strict=True):
        head, frames = stream_bytes(script)
        assert status == 200 and body == head + b"".join(frames)
    assert reading.requests["ok"] == 16 and reading.active == 0
    assert reading.gap_buckets[-1] == ("+Inf", 16.0 * 30)
    assert reading.generated_tokens == 16 * 31


def test_non_streaming_and_other_paths_pass_through():
    big = os.urandom(1_000_000)

    async def scenario():
        async with tap_before(StandIn()) as (tap, url), aiohttp.ClientSession() as session:
            async with session.post(url + "/v1/chat/completions",
                                    json={"stream": False}) as response:
                completion = (response.status, response.headers["X-Engine"],
                              await response.json())
            async with session.get(url + "/v1/models") as response:
                models = await response.json()
            async with session.put(url + "/echo/a%2Fb/c?x=1&y=%20z",
                                   headers={"X-Agent": "a1", "Connection": "keep-alive, X-Drop",
                                            "X-Drop": "hop", "Content-Type": "app/x"},
                                   data=big) as response:
                echo = await response.json()
            async with session.get(url + "/echo/q?status=404") as response:
                missing = (response.status, await response.json())
            return completion, models, echo, missing, await tap.read()

    completion, models, echo, missing, reading = asyncio.run(scenario())
    assert completion == (200, "stand-in", {"id": "n", "object": "chat.completion",
                                            "choices": [{"message": {"content": "hello"}}]})
    assert models["data"][0]["id"] == "qwen"
    assert echo["method"] == "PUT" and echo["raw_path"] == "/echo/a%2Fb/c?x=1&y=%20z"
    headers = {k.lower(): v for k, v in echo["headers"]}
    assert headers["x-agent"] == "a1" and headers["content-type"] == "app/x"
    assert headers["host"] == echo["upstream"]  # the engine's, as a reverse proxy sets it
    assert "x-drop" not in headers  # named by Connection: hop-by-hop
    assert echo["body_sha256"] == hashlib.sha256(big).hexdigest()
    assert missing[0] == 404 and missing[1]["raw_path"] == "/echo/q?status=404"
    # Nothing streamed: nothing counted.
    assert reading.requests == {"ok": 0, "error": 0, "client_closed": 0, "untimed": 0}


def test_error_frame_counts_as_error():
    async def broken(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"error": {"message": "KV pool exhausted"}}\n\n'
                             b"data: [DONE]\n\n")
        return response

    async def scenario():
        async with tap_before_handler(broken) as (tap, url), aiohttp.ClientSession() as session:
            body = (await stream_through(session, url, "native"))[2]
            return body, await tap.read()

    body, reading = asyncio.run(scenario())
    assert b"KV pool exhausted" in body
    assert reading.requests == {"ok": 0, "error": 1, "client_closed": 0, "untimed": 0}


def test_upstream_down_gives_502_with_one_line_reason():
    async def scenario():
        async with tap_before(None) as (tap, url), aiohttp.ClientSession() as session, \
                session.post(f"{url}/generate", json={"stream": True}) as r:
            return r.status, await r.text(), await tap.read()

    status, text, reading = asyncio.run(scenario())
    assert status == 502
    assert text.count("\n") == 1 and text.startswith("tap: upstream http://127.0.0.1:")
    assert "Connect" in text
    assert reading.requests["error"] == 1


def test_upstream_breaking_mid_stream_ends_the_client_stream_with_an_error():
    async def dies(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"meta_info": {"completion_tokens": 1}}\n\n')
        request.transport.close()  # the engine process dies
        return response

    async def scenario():
        async with tap_before_handler(dies) as (tap, url):
            async with aiohttp.ClientSession() as session:
                with pytest.raises(aiohttp.ClientPayloadError):
                    await stream_through(session, url, "native")
            await asyncio.sleep(0.05)
            return await tap.read()

    reading = asyncio.run(scenario())
    assert reading.requests == {"ok": 0, "error": 1, "client_closed": 0, "untimed": 0}
    assert reading.active == 0


def test_listen_failure_marks_the_tap_down_not_the_exporter():
    async def scenario():
        async with tap_before(StandIn()) as (first, url):
            address = first.config.tap_listen_address
            second = TapSource(EngineConfig(name="other", url=url, tap_listen_address=address))
            await second.start()
            try:
                with pytest.raises(Exception, match="cannot listen on"):
                    await second.read()
            finally:
                await second.close()

    asyncio.run(scenario())


def test_json_of_the_reading_is_plain():
    from exporter.daemon.tap.state import TapState

    reading = TapState().reading("sglang", "main")
    plain = json.loads(json.dumps(dataclasses.asdict(reading)))
    assert plain["max_gap_seconds"] == 0.0
    assert [a["name"] for a in plain["agents"]] == ["other"]


def test_frames_cut_anywhere_pass_whole_and_are_timed_when_complete():
    """The engine's writes cut frames anywhere: half a frame, then its rest with a whole
    frame and the start of a third, then a frame four times the tap's read buffer. The
    bytes pass unchanged and each frame is timed when its last byte arrives."""
    from exporter.daemon.tap.proxy import READ_CHUNK_BYTES

    def native(tokens: int, text: str = "w") -> bytes:
        return (b"data: " + json.dumps({"text": text, "meta_info": {
            "completion_tokens": tokens, "cached_tokens": 0}}).encode() + b"\n\n")

    a, b, c = native(1), native(2), native(3)
    big = native(4, "w" * 4 * READ_CHUNK_BYTES)
    writes = [a[:10], a[10:] + b + c[:7], c[7:], big + b"data: [DONE]\n\n"]
    written: list[float] = []

    async def cuts(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        written.append(time.monotonic())
        for piece in writes:
            await response.write(piece)
            written.append(time.monotonic())
            await asyncio.sleep(0.3)
        return response

    async def scenario():
        async with tap_before_handler(cuts) as (tap, url), aiohttp.ClientSession() as session:
            body = (await stream_through(session, url, "native"))[2]
            return body, await tap.read()

    body, reading = asyncio.run(scenario())
    assert body == b"".join(writes)
    assert reading.generated_tokens == 4
    # a's first 10 bytes (written[1]) start no token: TTFT runs to a's end (written[2]).
    arrived = written[0]
    assert reading.ttft_sum == pytest.approx(written[2] - arrived, abs=0.15)
    # a and b came in one write (gap ~0), c ended with the third, big with the fourth.
    assert reading.gap_buckets[-1] == ("+Inf", 3.0)
    assert reading.gap_sum == pytest.approx(written[4] - written[2], abs=0.15)
    assert reading.requests == {"ok": 1, "error": 0, "client_closed": 0, "untimed": 0}


def test_a_client_that_stops_reading_stops_the_engine():
    """Backpressure: the tap reads the engine only as fast as the client takes the bytes,
    so an engine streaming to a stalled client soon blocks on its own writes, far short
    of its 256 MiB."""
    piece = b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n"
    total = 4096 * len(piece)
    written = [0]

    async def firehose(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(total // len(piece)):
            await response.write(piece)
            written[0] += len(piece)
        return response

    async def scenario():
        async with tap_before_handler(firehose) as (_, url), \
                aiohttp.ClientSession() as session, \
                session.post(f"{url}/generate", json={"stream": True}) as r:
            await r.content.readany()  # then the client reads no more
            stalled, previous = 0.0, -1
            for _ in range(200):  # until the engine's writes stand still for 0.5 s
                await asyncio.sleep(0.1)
                stalled = stalled + 0.1 if written[0] == previous else 0.0
                previous = written[0]
                if stalled >= 0.5:
                    break
            return stalled, written[0]

    stalled, engine_wrote = asyncio.run(scenario())
    assert stalled >= 0.5
    # What sits in the loopback sockets' buffers and aiohttp's: tens of MiB at most.
    assert engine_wrote < total // 4, engine_wrote


def test_curl_keeps_its_connection_and_gets_100_continue_for_a_large_body(tmp_path):
    """Two streams and a 2 MB upload sent with `Expect: 100-continue`, in one curl run:
    curl reuses its connection to the tap for each, the tap answers 100 Continue, and
    every byte arrives."""
    import subprocess

    big = os.urandom(2_000_000)
    upload = tmp_path / "body.bin"
    upload.write_bytes(big)
    script = Script(shape="chat", gaps_seconds=(0.01,) * 3)

    async def scenario():
        async with tap_before(StandIn(script)) as (tap, url):
            body = json.dumps({"model": "qwen", "stream": True, "messages": []})
            curl = await asyncio.create_subprocess_exec(
                "curl", "-sv", "-N",
                "-H", "Content-Type: application/json", "-d", body, url + PATHS["chat"],
                "--next", "-H", "Content-Type: application/json", "-d", body,
                url + PATHS["chat"],
                "--next", "-H", "Expect: 100-continue", "-X", "PUT",
                "--data-binary", f"@{upload}", url + "/echo/up",
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = await curl.communicate()
            return out, err.decode(), await tap.read()

    out, log, reading = asyncio.run(scenario())
    head, frames = stream_bytes(script, {"stream": True})
    stream = head + b"".join(frames)
    assert out.startswith(stream + stream)
    echo = json.loads(out[2 * len(stream):])
    assert echo["body_sha256"] == hashlib.sha256(big).hexdigest()
    assert log.count("Re-using existing connection") == 2, log
    assert "HTTP/1.1 100 Continue" in log
    assert reading.requests["ok"] == 2 and reading.active == 0
