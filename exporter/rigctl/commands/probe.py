"""`rigctl probe`: one stream probe now, with the exporter's own probe code.

It sends one short streaming generation (SGLang's /generate, or /v1/completions
on vLLM, llama.cpp and any OpenAI-compatible server) and prints the time to the
first token, every gap between token-bearing frames, the longest gap, the decode
rate and what the token count came from. The longest gap is judged against the decode starvation
threshold (decode_stall_critical_seconds, 10 s unless --config's [thresholds]
says otherwise), the one RigDecodeStarvation and `rigctl health` use.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

import aiohttp

from exporter.config import EngineConfig
from exporter.daemon.engines.generation import api_for
from exporter.daemon.engines.probe import ProbeResult, StreamProbe
from exporter.process.ctrl_c import run_interruptible
from exporter.rigctl.commands.common import (
    EXIT_CRITICAL,
    EXIT_ENDINGS,
    EXIT_OK,
    EXIT_UNKNOWN,
    add_engine_arguments,
    help_formatter,
    positive,
)
from exporter.rigctl.experiments.engine import EngineRefused, engine_facts
from exporter.thresholds import Thresholds, thresholds_from_config

DEFAULTS = EngineConfig(name="probe", url="http://127.0.0.1:30000")

EXAMPLES = f"""examples:
  rigctl probe --engine http://127.0.0.1:30000
  rigctl probe --engine http://127.0.0.1:30000 --max-new-tokens 256 --config rig.toml
  rigctl probe --engine http://127.0.0.1:8000 --kind vllm

The probe's prompt sits behind a unique prefix, so it neither rides nor fills
the radix cache, and it asks for --max-new-tokens tokens with ignore_eos. Without
--kind, the engine's kind is read from what it serves (as rigctl bench does).

exit status:
  0  ok: the stream finished and its longest gap stayed below the threshold
  2  critical: the probe failed (the reason is printed), or its longest gap
     reached the starvation threshold
  3  unknown: bad arguments or a bad --config file
{EXIT_ENDINGS}"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    probe = commands.add_parser(
        "probe", help="send one streaming request to an engine now and time every token gap",
        description=__doc__.split("\n\n")[1], epilog=EXAMPLES, formatter_class=help_formatter)
    add_engine_arguments(probe)
    probe.add_argument("--max-new-tokens", type=positive(int), metavar="N",
                       default=DEFAULTS.probe_max_new_tokens,
                       help="tokens to generate (default %(default)s; more tokens, more gaps "
                            "seen, a longer probe)")
    probe.add_argument("--timeout", type=positive(float), metavar="SECONDS",
                       default=DEFAULTS.probe_timeout_seconds,
                       help="hard deadline for the whole stream (default %(default)g)")
    probe.add_argument("--prompt", default="",
                       help="prompt text (default: a fixed prompt behind a unique prefix)")
    probe.add_argument("--config", metavar="PATH",
                       help="exporter config whose [thresholds] set the starvation threshold")
    return probe


async def probe_once(url: str, max_new_tokens: int, timeout: float, prompt: str,
                     kind: str | None = None) -> ProbeResult:
    engine = EngineConfig(name=url, url=url, probe_max_new_tokens=max_new_tokens,
                          probe_timeout_seconds=timeout, probe_prompt=prompt)
    async with aiohttp.ClientSession() as session:
        if kind is None:
            try:
                kind = (await engine_facts(session, url, token_range=False)).kind
            except EngineRefused as exc:
                return ProbeResult(False, str(exc), None, (), None, None, None)
        return await StreamProbe(lambda: session, engine, api=api_for(kind)).probe_once()


def print_probe(url: str, result: ProbeResult, out: TextIO,
                starvation_seconds: float | None = None) -> None:
    verdict = "ok" if result.success else f"FAILED: {result.reason}"
    if result.success and starved(result, starvation_seconds):
        verdict = (f"STARVED: the longest gap reached the {starvation_seconds:g} s decode "
                   "starvation threshold")
    print(f"probe {url}: {verdict}", file=out)
    if result.ttft_seconds is not None:
        print(f"  time to first token  {result.ttft_seconds:8.3f} s", file=out)
    tokens = "-" if result.tokens is None else str(result.tokens)
    print(f"  tokens               {tokens:>8}", file=out)
    if result.gaps_seconds:
        gaps = " ".join(f"{gap:.3f}" for gap in result.gaps_seconds)
        print(f"  gaps (s)             {gaps}", file=out)
    if result.max_gap_seconds is not None:
        print(f"  longest gap          {result.max_gap_seconds:8.3f} s", file=out)
    if result.decode_tokens_per_second is not None:
        print(f"  decode               {result.decode_tokens_per_second:8.1f} tokens/s", file=out)
    if result.frames:
        print(f"  token frames         {result.frames:8d}", file=out)
        # Where the count came from (docs/rigctl.md#where-the-token-counts-come-from).
        print(f"  tokens from          {result.tokens_from}", file=out)


def starved(result: ProbeResult, starvation_seconds: float | None) -> bool:
    return (starvation_seconds is not None and result.max_gap_seconds is not None
            and result.max_gap_seconds >= starvation_seconds)


def run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        thresholds = thresholds_from_config(args.config) if args.config else Thresholds()
    except ValueError as exc:
        print(f"rigctl probe: --config: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    limit = thresholds.decode_stall_critical_seconds
    result = run_interruptible(probe_once(args.engine, args.max_new_tokens, args.timeout,
                                          args.prompt, args.kind))
    print_probe(args.engine, result, out, limit)
    return EXIT_OK if result.success and not starved(result, limit) else EXIT_CRITICAL
