"""A stand-in for SGLang 0.5.23's forward-pass publisher, run as its own process.

It sends what `_FpmPublisherThread._run` sends (`srt/observability/forward_pass_metrics.py`
in the 0.5.23 wheel): on a ZMQ PUB socket bound at `<base>.0`, one three-part message
per pass: an empty topic, the sequence number as 8 bytes big-endian, and a msgpack map
with the `ForwardPassMetrics` field names (`version`, `worker_id`, `dp_rank`,
`counter_id`, `wall_time`, `scheduled_requests`, `queued_requests`; msgspec writes a
Struct as a map). The structs here are written for the test from those field names;
nothing is imported from SGLang.

    python -m tests.support.fpm_publisher ipc:///tmp/x/fpm SCRIPT_JSON

The script is a list of steps, played in order:

- `["decode", n, wall]`: n decode passes of `wall` seconds each (sleeping `wall`
  before each message, as the pass runs);
- `["prefill", n, wall]`, `["mixed", n, wall]`: likewise;
- `["drop", n]`: n sequence numbers skipped (messages lost);
- `["idle", seconds]`: heartbeats once a second for that long, as an idle scheduler;
- `["silent", seconds]`: nothing (a pass under way, before its message);
- `["mark", text]`: one line `MARK text <monotonic>` on stdout.

It prints `READY` once bound, plays the script when a line comes on stdin (a PUB
socket drops what it sends before a subscriber has joined), prints `DONE` at the end
and then waits to be killed (its socket stays bound).
"""

from __future__ import annotations

import json
import sys
import time

import msgspec
import zmq


class Scheduled(msgspec.Struct):
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    sum_prefill_kv_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0


class Queued(msgspec.Struct):
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0


class Message(msgspec.Struct):
    version: int = 1
    worker_id: str = ""
    dp_rank: int = 0
    counter_id: int = 0
    wall_time: float = 0.0
    scheduled_requests: Scheduled = msgspec.field(default_factory=Scheduled)
    queued_requests: Queued = msgspec.field(default_factory=Queued)


def pass_message(kind: str, wall: float) -> Message:
    prefill = kind in ("prefill", "mixed")
    decode = kind in ("decode", "mixed")
    return Message(wall_time=wall, scheduled_requests=Scheduled(
        num_prefill_requests=1 if prefill else 0,
        sum_prefill_tokens=4096 if prefill else 0,
        num_decode_requests=1 if decode else 0,
        sum_decode_kv_tokens=300 if decode else 0))


class Publisher:
    def __init__(self, endpoint: str) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.PUB)
        self.socket.bind(endpoint)
        self.encoder = msgspec.msgpack.Encoder()
        self.seq = 0

    def send(self, message: Message) -> None:
        message.counter_id = self.seq
        self.socket.send_multipart((b"", self.seq.to_bytes(8, "big"),
                                    self.encoder.encode(message)))
        self.seq += 1

    def play(self, steps: list[list]) -> None:
        for step in steps:
            what = step[0]
            if what in ("decode", "prefill", "mixed"):
                _, count, wall = step
                for _ in range(int(count)):
                    time.sleep(wall)
                    self.send(pass_message(what, wall))
            elif what == "drop":
                self.seq += int(step[1])
            elif what == "idle":
                end = time.monotonic() + step[1]
                while time.monotonic() < end:
                    time.sleep(1.0)
                    self.send(Message())
            elif what == "silent":
                time.sleep(step[1])
            elif what == "mark":
                print(f"MARK {step[1]} {time.monotonic():.6f}", flush=True)
            else:
                raise SystemExit(f"unknown step {step!r}")


def main() -> None:
    endpoint, script = sys.argv[1], json.loads(sys.argv[2])
    publisher = Publisher(endpoint + ".0")
    print("READY", flush=True)
    sys.stdin.readline()
    publisher.play(script)
    print("DONE", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
