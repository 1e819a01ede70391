"""`rigctl bench`: the owner's scheduler experiments, so a flag change is an A/B test.

    rigctl bench starvation --engine http://127.0.0.1:30000 --label default --out ab.jsonl
    # restart SGLang with --enable-mixed-chunk, then:
    rigctl bench starvation --engine http://127.0.0.1:30000 --label mixed-chunk --out ab.jsonl
    rigctl bench report ab.jsonl --compare default mixed-chunk

Any engine: SGLang, vLLM, llama.cpp's llama-server or another OpenAI-compatible
server; its kind and context length are read from what it serves, or given with
--kind and --context-length.

Interrupted (Ctrl-C), it first closes its streams, so the engine aborts their
generations.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from exporter.daemon.engines.generation import APIS
from exporter.process.ctrl_c import run_interruptible
from exporter.process.endings import Interrupted
from exporter.rigctl.commands.common import (
    EXIT_CRITICAL,
    EXIT_ENDINGS,
    EXIT_OK,
    EXIT_UNKNOWN,
    add_engine_arguments,
    help_formatter,
    http_url,
    positive,
)
from exporter.rigctl.experiments.engine import (
    EngineRefused,
    Overrides,
)
from exporter.rigctl.experiments.report import (
    ReportError,
    compare_labels,
    print_comparison,
    print_report,
    print_starvation,
    print_sweep,
)
from exporter.rigctl.experiments.starvation import StarvationSettings, run_starvation
from exporter.rigctl.experiments.stream import StreamFailed
from exporter.rigctl.experiments.sweep import SweepSettings, run_sweep

EPILOG = f"""exit status:
  0  done
  2  the experiment failed mid-way
  3  it could not start: the engine is unreachable, the context is larger than
     its context length or KV pool, or bad arguments
{EXIT_ENDINGS}"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    bench = commands.add_parser(
        "bench", help="run the starvation or concurrency experiment against an engine",
        description=__doc__, formatter_class=help_formatter, epilog=EPILOG)
    experiments = bench.add_subparsers(dest="experiment", required=True)

    starvation = experiments.add_parser(
        "starvation", epilog=EPILOG, formatter_class=help_formatter,
        help="A decodes; B sends a fresh long prompt; measure A's longest gap and B's TTFT",
        description="Agent A streams a long answer; --delay seconds after A's first token, "
                    "agent B sends a fresh prompt of --context-tokens random token ids. "
                    "Reports A's longest and p95 gap while B prefills, A's decode rate "
                    "before and during B, and B's time to first token.")
    _common(starvation)
    starvation.add_argument("--context-tokens", type=positive(int), default=65536, metavar="N",
                            help="B's prompt and A's context, in tokens (default 65536)")
    starvation.add_argument("--a-context-tokens", type=positive(int), metavar="N",
                            help="A's context if it differs (default: --context-tokens)")
    starvation.add_argument("--delay", type=float, default=5.0, metavar="SECONDS",
                            help="from A's first token to B's request (default 5)")
    starvation.add_argument("--a-max-tokens", type=positive(int), default=4096, metavar="N",
                            help="A's answer length; must outlast B's prefill (default 4096)")
    starvation.add_argument("--b-engine", metavar="URL", type=http_url,
                            help="send B to this engine instead of A's: two single-card "
                                 "engines against one TP2 engine")

    sweep = experiments.add_parser(
        "sweep", epilog=EPILOG, formatter_class=help_formatter,
        help="ITL p50/p99, TTFT and throughput against concurrency",
        description="For each concurrency, that many streams start together on fresh "
                    "prompts; reports ITL p50 and p99, the longest gap, TTFT, and the "
                    "aggregate prefill and decode rates.")
    _common(sweep)
    sweep.add_argument("--concurrency", default="1,2,4,8", type=_concurrency,
                       help="comma-separated stream counts (default 1,2,4,8)")
    sweep.add_argument("--context-tokens", type=positive(int), default=4096, metavar="N",
                       help="each stream's prompt, in tokens (default 4096)")
    sweep.add_argument("--max-new-tokens", type=positive(int), default=256, metavar="N",
                       help="each stream's answer, in tokens (default 256)")

    report = experiments.add_parser("report", help="print saved results side by side",
                                    description="Print the results a JSON-lines file "
                                                "holds, one row per label.",
                                    epilog=EPILOG, formatter_class=help_formatter)
    report.add_argument("file", type=Path, help="the file given to --out")
    report.add_argument("--compare", nargs=2, metavar="LABEL",
                        help="the last result of each of two labels, figure by figure")
    return bench


def _common(parser: argparse.ArgumentParser) -> None:
    add_engine_arguments(parser)
    parser.add_argument("--api", choices=APIS,
                        help="sglang: /generate with input_ids; openai: /v1/completions "
                             "(default: sglang on SGLang, openai on any other engine)")
    parser.add_argument("--context-length", type=positive(int), metavar="N",
                        help="the most tokens one request may hold, where the engine "
                             "does not say (wins over what it says)")
    parser.add_argument("--vocab-size", type=positive(int), metavar="N",
                        help="the model's vocabulary, which random prompts stay below, "
                             "where neither the engine nor its /tokenize says it")
    parser.add_argument("--compare", metavar="URL", type=http_url,
                        help="run the same experiment against this engine too, and print "
                             "the two side by side")
    parser.add_argument("--label", default="", help="names this run in the report, "
                        "e.g. the scheduler flags under test")
    parser.add_argument("--out", type=Path, metavar="FILE",
                        help="append the result as one JSON line")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--timeout", type=positive(float), default=900.0, metavar="SECONDS",
                        help="give up after this long (default 900)")


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,2,4,8, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("each concurrency must be 1 or more")
    return values


def run(args: argparse.Namespace, out: TextIO) -> int:
    if args.experiment == "report":
        try:
            if args.compare:
                compare_labels(args.file, tuple(args.compare), out)
            else:
                print_report(args.file, out)
        except ReportError as exc:
            print(f"rigctl bench report: {exc}", file=sys.stderr)
            return EXIT_UNKNOWN
        return EXIT_OK
    engines = [args.engine] + ([args.compare] if args.compare else [])
    records = []
    for engine in engines:
        code = _run_once(args, engine, records)
        if code != EXIT_OK:
            return code
    for record in records:
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps(record) + "\n")
    if args.json:
        for record in records:
            print(json.dumps(record, indent=2), file=out)
    elif len(records) == 2:
        print_comparison(*records, out)
    elif args.experiment == "starvation":
        print_starvation(records, out)
    else:
        print_sweep(records, out)
    return EXIT_OK


def _run_once(args: argparse.Namespace, engine: str, records: list[dict[str, Any]]) -> int:
    """One experiment against `engine`; its record appended; the exit status."""
    overrides = Overrides(kind=args.kind, context_length_tokens=args.context_length,
                          vocab_size=args.vocab_size)
    # The compared run keeps the label apart: "LABEL" against "LABEL (URL)".
    label = args.label if engine == args.engine else f"{args.label or 'compare'} ({engine})"
    try:
        if args.experiment == "starvation":
            result = run_interruptible(run_starvation(StarvationSettings(
                engine=engine, api=args.api, overrides=overrides,
                b_engine=args.b_engine if engine == args.engine else None,
                context_tokens=args.context_tokens,
                a_context_tokens=args.a_context_tokens, delay_seconds=args.delay,
                a_max_tokens=args.a_max_tokens, label=label,
                timeout_seconds=args.timeout), progress))
        else:
            result = run_interruptible(run_sweep(SweepSettings(
                engine=engine, api=args.api, overrides=overrides,
                concurrency=args.concurrency, context_tokens=args.context_tokens,
                max_new_tokens=args.max_new_tokens, label=label,
                timeout_seconds=args.timeout), progress))
    except KeyboardInterrupt:
        # run_interruptible has cancelled the experiment, whose cleanup closed every stream.
        raise Interrupted(f"rigctl bench {args.experiment}: interrupted; its streams are "
                          "closed") from None
    except EngineRefused as exc:
        print(f"rigctl bench {args.experiment}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except (StreamFailed, aiohttp.ClientError, TimeoutError) as exc:
        print(f"rigctl bench {args.experiment}: failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return EXIT_CRITICAL
    records.append({"experiment": args.experiment, **result.as_json()})
    if result.tokens_from != "continuous_usage":
        progress(f"{engine}: the stream does not count every frame's tokens "
                 f"(tokens from {result.tokens_from}): gaps and TTFT from frames, "
                 "rates in frames/s")
    return EXIT_OK


def progress(message: str) -> None:
    """Progress goes to stderr, so --json output stays clean: a 64K prefill takes ~50 s."""
    print(f"rigctl bench: {message}", file=sys.stderr, flush=True)
