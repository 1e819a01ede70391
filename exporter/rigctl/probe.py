"""`rigctl probe`: one stream probe now, with the exporter's own probe code.

It prints the time to the first token, every gap between token frames and the
longest. Exit status: 0 ok, 2 critical (the probe failed), 3 unknown (bad
arguments).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TextIO

import aiohttp

from exporter.config import ConfigError, load_config
from exporter.engines.probe import ProbeResult, StreamProbe
from exporter.rigctl.common import EXIT_CRITICAL, EXIT_OK, EXIT_UNKNOWN


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    probe = commands.add_parser("probe", help="send one stream probe now and print each gap")
    probe.add_argument("--engine", required=True, metavar="URL",
                       help="the SGLang server, e.g. http://127.0.0.1:30000")
    probe.add_argument("--max-new-tokens", type=int, default=32)
    probe.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                       help="hard deadline for the whole stream (default 60)")
    probe.add_argument("--prompt", default="",
                       help="prompt text (default: a fixed prompt behind a unique prefix)")
    return probe


async def probe_once(url: str, max_new_tokens: int, timeout: float, prompt: str) -> ProbeResult:
    engine = load_config({"engine": [{
        "name": "rigctl", "url": url, "probe_max_new_tokens": max_new_tokens,
        "probe_timeout_seconds": timeout, "probe_prompt": prompt,
    }]}).engines[0]
    async with aiohttp.ClientSession() as session:
        return await StreamProbe(lambda: session, engine).probe_once()


def print_probe(url: str, result: ProbeResult, out: TextIO) -> None:
    verdict = "ok" if result.success else f"FAILED: {result.reason}"
    print(f"probe {url}: {verdict}", file=out)
    if result.ttft_seconds is not None:
        print(f"  time to first token  {result.ttft_seconds:8.3f} s", file=out)
    print(f"  tokens               {result.tokens:8d}", file=out)
    if result.gaps_seconds:
        gaps = " ".join(f"{gap:.3f}" for gap in result.gaps_seconds)
        print(f"  gaps (s)             {gaps}", file=out)
    if result.max_gap_seconds is not None:
        print(f"  longest gap          {result.max_gap_seconds:8.3f} s", file=out)
    if result.decode_tokens_per_second is not None:
        print(f"  decode               {result.decode_tokens_per_second:8.1f} tokens/s", file=out)


def run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        result = asyncio.run(probe_once(args.engine.rstrip("/"), args.max_new_tokens,
                                        args.timeout, args.prompt))
    except ConfigError as exc:
        print(f"rigctl: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    print_probe(args.engine, result, out)
    return EXIT_OK if result.success else EXIT_CRITICAL
