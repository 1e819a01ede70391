"""The simulated rig's control endpoint: rig-level commands over loopback HTTP.

Every command is a POST with a JSON object; the answer is the rig's state
(`GET /state`), or `{"error": ...}` with status 400 for a bad command.

    GET  /state                    the whole rig: phase, engine, flows, cards, host
    GET  /scenarios                the scenarios' names and summaries
    POST /scenario                 {"name": "thermal-downclock", "time_scale": 20}
                                   play one now (the one playing stops)
    POST /healthy                  everything back to healthy (the engine restarted if down)
    POST /cards/<card>             {"junction_celsius": 107, "sclk_mhz": 1650, ...}
    POST /cards/<card>/remove      the card falls off the bus
    POST /cards/<card>/restore     it comes back
    POST /host                     {"memory_available_bytes": ..., "swap_out_bytes_per_second": ...,
                                    "pressure_full_ratio": 0.2, "cpu_celsius": 93}
    POST /engine                   {"running": 1, "queued": 3, "token_usage": 0.9,
                                    "pause_decode_seconds": 47.23, "retract": 1,
                                    "wedged": true, "down": true, "fault": "http_500"}
    POST /flows                    tokens per scenario second: {"prompt_tokens": ...,
                                    "hit_tokens": {"L2": 767}, "evicted_tokens": ...}
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from exporter.sim.engine.state import Fault
from exporter.sim.rig.baseline import power
from exporter.sim.rig.simrig import SimRig
from exporter.sim.scenarios import SCENARIOS
from exporter.sim.scenarios.player import play

# Card settings in the rig's units -> (CardSpec field, factor to sysfs units).
CARD_UNITS = {
    "edge_celsius": ("edge_mc", 1000),
    "junction_celsius": ("junction_mc", 1000),
    "memory_celsius": ("memory_mc", 1000),
    "sclk_mhz": ("sclk_hz", 1_000_000),
    "power_cap_watts": ("power_cap_uw", 1_000_000),
}


class BadCommand(ValueError):
    pass


class RigControl:
    """The aiohttp app around a SimRig; `start()` binds 127.0.0.1 on a free port."""

    def __init__(self, rig: SimRig) -> None:
        self.rig = rig
        self.playing: asyncio.Task[None] | None = None
        self.scenario = ""
        self.app = web.Application()
        self.app.router.add_get("/state", self.state)
        self.app.router.add_get("/scenarios", self.scenarios)
        for path, command in (
            ("/scenario", self.play), ("/healthy", self.healthy),
            ("/cards/{card}", self.card), ("/cards/{card}/remove", self.remove_card),
            ("/cards/{card}/restore", self.restore_card), ("/host", self.host),
            ("/engine", self.engine), ("/flows", self.flows),
        ):
            self.app.router.add_post(path, self._command(command))
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, port: int = 0) -> str:
        self._runner = web.AppRunner(self.app, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        host, bound = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{bound}"
        return self.url

    async def stop(self) -> None:
        await self.stop_playing()
        if self._runner is not None:
            await self._runner.cleanup()

    def start_playing(self, name: str, time_scale: float | None = None) -> None:
        scenario = SCENARIOS[name]
        if self.playing is not None:
            self.playing.cancel()
        self.scenario = name
        self.playing = asyncio.create_task(play(self.rig, scenario, time_scale),
                                           name=f"scenario {name}")

    async def stop_playing(self) -> None:
        if self.playing is not None:
            self.playing.cancel()
            await asyncio.gather(self.playing, return_exceptions=True)

    # --- handlers -----------------------------------------------------------

    def _command(self, command: Callable[[web.Request, dict[str, Any]], Awaitable[None]]):
        async def handle(request: web.Request) -> web.Response:
            try:
                body = await request.json() if request.can_read_body else {}
                if not isinstance(body, dict):
                    raise BadCommand("expected a JSON object")
                await command(request, body)
            except (BadCommand, KeyError, TypeError, ValueError, AttributeError) as exc:
                return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=400)
            return web.json_response(self.snapshot())
        return handle

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    async def scenarios(self, request: web.Request) -> web.Response:
        return web.json_response({name: s.summary for name, s in SCENARIOS.items()})

    async def play(self, request: web.Request, body: dict[str, Any]) -> None:
        name = body.get("name")
        if name not in SCENARIOS:
            raise BadCommand(f"no scenario {name!r}; known: {', '.join(SCENARIOS)}")
        scale = body.get("time_scale")
        if scale is not None and not (isinstance(scale, int | float) and scale > 0):
            raise BadCommand(f"time_scale must be a number greater than 0, got {scale!r}")
        self.start_playing(name, scale)

    async def healthy(self, request: web.Request, body: dict[str, Any]) -> None:
        await self.stop_playing()
        await self.rig.engine_up()
        self.rig.heal()

    async def card(self, request: web.Request, body: dict[str, Any]) -> None:
        card = self._card_name(request)
        changes: dict[str, Any] = {}
        for key, value in body.items():
            if key == "power_watts":
                changes.update(power(self.rig.cards[card], _number(key, value)))
            elif key in CARD_UNITS:
                field, factor = CARD_UNITS[key]
                changes[field] = round(_number(key, value) * factor)
            elif key in {f.name for f in dataclasses.fields(self.rig.cards[card])} - {"card"}:
                changes[key] = value
            else:
                raise BadCommand(f"unknown card setting {key!r}")
        self.rig.set_card(card, **changes)

    async def remove_card(self, request: web.Request, body: dict[str, Any]) -> None:
        self.rig.remove_card(self._card_name(request))

    async def restore_card(self, request: web.Request, body: dict[str, Any]) -> None:
        self.rig.restore_card(self._card_name(request))

    async def host(self, request: web.Request, body: dict[str, Any]) -> None:
        known = {f.name for f in dataclasses.fields(self.rig.host)}
        for key, value in body.items():
            if key not in known:
                raise BadCommand(f"unknown host setting {key!r}")
            if not (key == "cpu_celsius" and value is None):
                _number(key, value)
        self.rig.set_host(**body)

    async def engine(self, request: web.Request, body: dict[str, Any]) -> None:
        body = dict(body)
        if "down" in body:
            await (self.rig.engine_down() if body.pop("down") else self.rig.engine_up())
        if "wedged" in body:
            self.rig.wedge_scheduler(bool(body.pop("wedged")))
        if "pause_decode_seconds" in body:
            self.rig.pause_decode(_number("pause_decode_seconds", body.pop("pause_decode_seconds")))
        if "retract" in body:
            self.rig.retract(int(_number("retract", body.pop("retract"))))
        if "fault" in body:
            body["fault"] = Fault(body["fault"])
        for key in ("running", "queued"):
            if key in body:
                body[key] = int(_number(key, body[key]))
        allowed = {"running", "queued", "token_usage", "decode_batches_per_second", "fault",
                   "hicache_host_used_tokens", "hicache_host_total_tokens",
                   "max_total_num_tokens"}
        unknown = set(body) - allowed
        if unknown:
            raise BadCommand(f"unknown engine setting {sorted(unknown)[0]!r}")
        self.rig.set_engine(**body)

    async def flows(self, request: web.Request, body: dict[str, Any]) -> None:
        known = {f.name for f in dataclasses.fields(self.rig.flows)}
        for key, value in body.items():
            if key not in known:
                raise BadCommand(f"unknown flow {key!r}")
            if key == "hit_tokens":
                if not isinstance(value, dict) or set(value) - {"L1", "L2", "L3"}:
                    raise BadCommand("hit_tokens must map L1, L2 or L3 to tokens per second")
                for tier, rate in value.items():
                    _number(f"hit_tokens.{tier}", rate)
            else:
                _number(key, value)
        self.rig.set_flows(dataclasses.replace(self.rig.flows, **body))

    def _card_name(self, request: web.Request) -> str:
        card = request.match_info["card"]
        if card not in self.rig.cards:
            raise BadCommand(f"no card {card!r}; cards: {', '.join(self.rig.cards)}")
        return card

    def snapshot(self) -> dict[str, Any]:
        rig, engine = self.rig, self.rig.engine
        return {
            "scenario": self.scenario, "phase": rig.phase,
            "scenario_seconds": round(rig.clock.now(), 3), "time_scale": rig.clock.time_scale,
            "engine": {"url": rig.engine_url, "up": rig.server is not None,
                       "running": engine.running, "queued": engine.queued,
                       "token_usage": engine.token_usage, "fault": str(engine.fault),
                       "wedged": engine.wedged,
                       "decode_batches": engine.decode_batches()},
            "flows": dataclasses.asdict(rig.flows),
            "cards": {name: {"present": name not in rig.removed_cards,
                             **dataclasses.asdict(spec)} for name, spec in rig.cards.items()},
            "host": dataclasses.asdict(rig.host),
        }


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadCommand(f"{key} must be a number, got {value!r}")
    return float(value)

