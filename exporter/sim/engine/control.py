"""The simulated engine's control endpoint: drive it from outside, over loopback only.

Every call answers JSON; a bad call gets HTTP 400 and a one-line reason, and changes
nothing. Calls from an address other than 127.0.0.1 or ::1 get 403.

    GET  /sim/state                   what the engine is doing now (policy, requests,
                                      counters, simulated time)
    POST /sim/set          {...}      set synthetic load and faults, any of:
                                      running, queued, token_usage,
                                      decode_batches_per_second, fault (none, refuse,
                                      http_500, hang, slow_body, truncated,
                                      cut_mid_line, garbage, non_utf8, huge,
                                      malformed), wedged (true: the scheduler stops,
                                      HTTP still answers), prefill_batches,
                                      hicache_host_used_tokens,
                                      hicache_host_total_tokens, evicted_tokens,
                                      loaded_back_tokens, backed_up_tokens,
                                      storage_prefetched_tokens,
                                      storage_written_tokens, retracted_requests
                                      (null: the family is absent),
                                      spec_accept_length, spec_accept_rate (0:
                                      speculative decoding off),
                                      scheduler_cpu_share (CPU-seconds per busy
                                      scheduler second), dropped_tokens and
                                      prefetch_unfulfilled_tokens ({reason: tokens})
    POST /sim/pause-decode {"seconds": 47}
                                      no decode batch for that many simulated seconds
    POST /sim/requests     {"prompt_tokens": 65536, "max_new_tokens": 256,
                            "cached": {"device": 0, "host": 0, "storage": 0},
                            "count": 1, "stream": true}
                                      submit requests that no client waits for
                                      (answers their ids)
    POST /sim/abort        {"rid": "sim-3"} or {"all": true}
    POST /sim/restart                 the engine restarts: requests dropped,
                                      counters gone
    POST /sim/policy       {"policy": "n=4"} and/or any of chunked_prefill_size,
                           max_consecutive_prefill_batches, enable_mixed_chunk,
                           prefill_decode_interval, max_running_requests
                                      the scheduler flags, from the next batch

Example: `curl -s -XPOST localhost:30000/sim/pause-decode -d '{"seconds": 47}'`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from exporter.sim.engine.scheduler import Policy, validate_request
from exporter.sim.engine.state import Fault, SimEngine

#: Fields /sim/set may change, and whether null (absent family) is allowed.
SETTABLE: dict[str, bool] = {
    "running": False, "queued": False, "token_usage": False,
    "decode_batches_per_second": False, "prefill_batches": False,
    "hicache_host_used_tokens": True, "hicache_host_total_tokens": True,
    "evicted_tokens": True, "loaded_back_tokens": True, "backed_up_tokens": True,
    "storage_prefetched_tokens": True, "storage_written_tokens": True,
    "retracted_requests": True, "spec_accept_length": False, "spec_accept_rate": False,
    "scheduler_cpu_share": False,
}
#: Fields /sim/set takes as {reason: tokens}.
BY_REASON = {"dropped_tokens", "prefetch_unfulfilled_tokens"}
INTEGERS = {"running", "queued", "prefill_batches"}
POLICY_FIELDS = {f.name: f.type for f in dataclasses.fields(Policy)}


class ControlError(ValueError):
    """A control call that cannot be applied."""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def loopback_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith("/sim/"):
        remote = request.remote or ""
        try:
            loopback = ipaddress.ip_address(remote).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return web.json_response({"error": "the control endpoint answers loopback only"},
                                     status=403)
    return await handler(request)


class Control:
    def __init__(self, state: SimEngine) -> None:
        self.state = state

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/sim/state", self._wrap(self.describe)),
            web.post("/sim/set", self._wrap(self.set)),
            web.post("/sim/pause-decode", self._wrap(self.pause_decode)),
            web.post("/sim/requests", self._wrap(self.submit)),
            web.post("/sim/abort", self._wrap(self.abort)),
            web.post("/sim/restart", self._wrap(self.restart)),
            web.post("/sim/policy", self._wrap(self.policy)),
        ]

    def _wrap(self, action: Callable[[dict], dict]) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            body: object = {}
            if request.can_read_body:
                try:
                    body = json.loads(await request.text() or "{}")
                except json.JSONDecodeError as exc:
                    return _error(f"the body is not JSON: {exc}")
            if not isinstance(body, dict):
                return _error("the body must be a JSON object")
            try:
                return web.json_response(action(body))
            except ControlError as exc:
                return _error(str(exc))
        return handle

    def describe(self, _: dict) -> dict:
        state = self.state
        state.advance()
        sched = state.scheduler
        c = sched.counters
        return {
            "simulated_seconds": sched.now,
            "time_scale": state.time_scale,
            "policy": {"name": state.policy.name, **dataclasses.asdict(state.policy)},
            "synthetic": {"running": state.running, "queued": state.queued,
                          "decode_batches_per_second": state.decode_batches_per_second,
                          "token_usage": state.token_usage},
            "fault": str(state.fault),
            "wedged": state.wedged,
            "batch_in_flight": None if sched.batch is None else {
                "kind": str(sched.batch.kind), "start": sched.batch.start,
                "end": sched.batch.end},
            "requests": [{"rid": r.rid, "phase": str(r.phase), "prompt_tokens": r.prompt_tokens,
                          "prefilled": r.prefilled, "generated": r.generated,
                          "max_new_tokens": r.max_new_tokens, "ttft": r.ttft,
                          "longest_gap": r.longest_gap()} for r in sched.active],
            "counters": {"decode_batches": c.decode_batches,
                         "prefill_batches": c.prefill_batches,
                         "mixed_batches": c.mixed_batches,
                         "prefill_compute_tokens": c.prefill_compute_tokens,
                         "prefill_cache_tokens": c.prefill_cache_tokens,
                         "decode_tokens": c.decode_tokens,
                         "retracted_requests": c.retracted_requests,
                         "evicted_tokens": c.evicted_tokens},
        }

    def set(self, body: dict) -> dict:
        changes: dict[str, object] = {}
        for key, value in body.items():
            if key == "fault":
                try:
                    changes[key] = Fault(value)
                except ValueError:
                    raise ControlError(f"fault is one of {', '.join(f.value for f in Fault)}"
                                       ) from None
            elif key == "wedged":
                if not isinstance(value, bool):
                    raise ControlError("wedged is true or false")
                changes[key] = value
            elif key in SETTABLE:
                changes[key] = _number(key, value, nullable=SETTABLE[key])
            elif key in BY_REASON:
                if not isinstance(value, dict):
                    raise ControlError(f"{key} is an object of reason: tokens")
                changes[key] = {str(reason): _number(f"{key}.{reason}", tokens,
                                                     nullable=False)
                                for reason in value for tokens in (value[reason],)}
            else:
                raise ControlError(f"cannot set {key!r}; settable: fault, wedged, "
                                   + ", ".join([*SETTABLE, *sorted(BY_REASON)]))
        for key, value in changes.items():  # all checked first: a bad call changes nothing
            setattr(self.state, key, value)
        return self.describe({})

    def pause_decode(self, body: dict) -> dict:
        seconds = _number("seconds", body.get("seconds"), nullable=False)
        self.state.pause_decode(float(seconds))  # type: ignore[arg-type]
        return {"paused_until": self.state.scheduler.decode_paused_until}

    def submit(self, body: dict) -> dict:
        unknown = set(body) - {"prompt_tokens", "max_new_tokens", "cached", "count", "stream"}
        if unknown:
            raise ControlError(f"unknown fields: {', '.join(sorted(unknown))}")
        prompt = _count("prompt_tokens", body.get("prompt_tokens"))
        wanted = _count("max_new_tokens", body.get("max_new_tokens", 128))
        count = _count("count", body.get("count", 1))
        cached = body.get("cached") or {}
        if not isinstance(cached, dict):
            raise ControlError("cached is an object of tier -> tokens")
        stream = body.get("stream", True)
        if not isinstance(stream, bool):
            raise ControlError("stream is true or false")
        try:
            validate_request(prompt, wanted, cached)
        except ValueError as exc:
            raise ControlError(str(exc)) from None
        rids = [self.state.submit(prompt, wanted, cached=cached, stream=stream).rid
                for _ in range(count)]
        return {"rids": rids}

    def abort(self, body: dict) -> dict:
        if body.get("all") is True:
            active = [r.rid for r in self.state.scheduler.active]
            for rid in active:
                self.state.abort(rid)
            return {"aborted": active}
        rid = body.get("rid")
        if not isinstance(rid, str):
            raise ControlError('give {"rid": "..."} or {"all": true}')
        if not self.state.abort(rid):
            raise ControlError(f"no active request {rid!r}")
        return {"aborted": [rid]}

    def restart(self, _: dict) -> dict:
        self.state.restart()
        return self.describe({})

    def policy(self, body: dict) -> dict:
        changes = {k: v for k, v in body.items() if k != "policy"}
        for key, value in changes.items():
            kind = POLICY_FIELDS.get(key)
            if kind is None:
                raise ControlError(f"unknown policy field {key!r}; fields: "
                                   + ", ".join(POLICY_FIELDS))
            if kind == "bool" and not isinstance(value, bool):
                raise ControlError(f"{key} is true or false")
            if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
                raise ControlError(f"{key} is a whole number >= 0")
        try:
            base = (Policy.named(str(body["policy"])) if "policy" in body
                    else self.state.policy)
            policy = dataclasses.replace(base, **changes)
        except ValueError as exc:
            raise ControlError(str(exc)) from None
        if policy.chunked_prefill_size < 1 or policy.max_running_requests < 1:
            raise ControlError("chunked_prefill_size and max_running_requests must be >= 1")
        self.state.set_policy(policy)
        return {"policy": {"name": policy.name, **dataclasses.asdict(policy)}}


def _number(key: str, value: object, nullable: bool) -> float | int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ControlError(f"{key} must be a number >= 0" + (" or null" if nullable else ""))
    if key in INTEGERS and not float(value).is_integer():
        raise ControlError(f"{key} must be a whole number")
    return int(value) if key in INTEGERS else value


def _count(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ControlError(f"{key} must be a whole number >= 1")
    return value


def _error(reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=400)
