"""`adk-gateway loadtest`: the command line of the load generator."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rich.console import Console

from adk_gateway.loadtest.config import SCENARIOS, SSE_PATH, WS_PATH, LoadConfig
from adk_gateway.loadtest.report import BarProgress, progress_wanted, render_table, summarize
from adk_gateway.loadtest.runner import NullProgress, Progress, run_load
from adk_gateway.loadtest.scenarios import load_wav

__all__ = ["build_parser", "config_from_args", "main"]

DESCRIPTION = """\
Load test for AI SDK chat endpoints: the gateway's SSE UI message stream (POST /api/chat), its
WebSocket (the ai 7 frame protocol and the live audio extension), or ADK's own api_server
(/run_sse), to compare. Shows a progress bar on a terminal and a summary table at the end
(--json: the JSON summary instead).
"""

EPILOG = """\
modes:
  fixed concurrency (default)  -c N clients; each sends its next request when its last one ended
                               (a closed model: a slow server gets fewer requests).
  fixed arrival rate           --rate R requests per second, sent on schedule whatever the answers
                               do (an open model: a slow server faces more requests in flight);
                               at most --max-in-flight at once, arrivals past it are dropped and
                               counted, arrivals sent late are counted with their lag.
  Either stops after --requests requests or --duration seconds, whichever comes first.

scenarios:
  echo          a chat turn, '/echo hello from the load generator' (or --prompt)
  stream        a token stream: '/stream --tokens' paced by the scripted model's /latency command
                (--tokens-per-s, --ttft-ms, --latency-dist)
  approval      the payment tool: the answer asks for approval, the client approves, the
                continuation runs the tool and completes; the round trip is the request
  browser-tool  get_location: the client approves it, runs it (--tool-output) and posts the output
  idle          holds -c N connections for --duration (WebSockets, or SSE streams whose model stays
                silent) and counts the ones still open at the end
  live          a spoken turn over the WebSocket's live extension: --wav FILE (PCM16) sent in real
                time, time to the first audio out measured (--transport ws)

Only loopback targets are allowed without --allow-remote. A gateway with --auth jwt or api-keys
needs --token (sent as 'Authorization: Bearer' on HTTP and '?access_token=' on the WebSocket URL,
never printed). The gateway's abuse caps answer load no person sends: raise them for a load test
(--max-runs, --max-runs-per-user, --max-sends-per-minute, --max-live-sessions).

Exit status: 0; 1 when a request failed (dropped arrivals are not failures); 2 for a wrong flag.

examples:
  adk-gateway loadtest -c 10 -n 500
  adk-gateway loadtest --rate 50 --duration 30 --transport ws --scenario stream --tokens 100 --tokens-per-s 50
  adk-gateway loadtest --scenario approval -c 4 -n 100 --json --out approval.json
  adk-gateway loadtest --scenario idle --transport ws -c 1000 --duration 60
  adk-gateway loadtest --scenario live --transport ws --wav hello.wav -c 4 -n 20
"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description and epilog as written; every option's default shown."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adk-gateway loadtest", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=_HelpFormatter)
    target = parser.add_argument_group("target")
    target.add_argument("--url", default="http://127.0.0.1:8080",
                        help="Base URL of the server (the gateway's --host and --port).")
    target.add_argument("--transport", choices=("sse", "ws", "adk"), default="sse",
                        help="The gateway's SSE endpoint, its WebSocket, or ADK's api_server.")
    target.add_argument("--allow-remote", action="store_true", help="Allow a target that is not loopback.")
    target.add_argument("--token", default=None,
                        help="Access token (a JWT or an API key) for a gateway with --auth jwt or api-keys: "
                        "'Authorization: Bearer TOKEN' on HTTP requests, '?access_token=TOKEN' on the WebSocket "
                        "URL. Not for --transport adk. Never printed.")
    target.add_argument("--user", default=None,
                        help="Send x-user-id with this value (names the user only on a gateway with --auth none).")
    target.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                        help="Extra request header (SSE) or frame header (ws); repeatable.")
    target.add_argument("--adk-app", default="", help="App name for --transport adk.")
    target.add_argument("--sse-path", default=SSE_PATH, help="Path of the SSE chat endpoint.")
    target.add_argument("--ws-path", default=WS_PATH, help="Path of the WebSocket endpoint.")

    load = parser.add_argument_group("load")
    load.add_argument("--scenario", choices=SCENARIOS, default="echo", help="What each request does (see below).")
    load.add_argument("--concurrency", "-c", type=int, default=1,
                      help="Fixed concurrency: simultaneous clients (idle: connections held); default %(default)s.")
    load.add_argument("--rate", type=float, default=None, metavar="R",
                      help="Fixed arrival rate: R requests per second, whatever the answers do.")
    load.add_argument("--max-in-flight", type=int, default=1000,
                      help="--rate: most requests running at once; arrivals past it are dropped (default %(default)s).")
    load.add_argument("--requests", "-n", type=int, default=None,
                      help="Stop after this many requests (default: 100; with --rate, rate x duration; "
                      "idle: -c).")
    load.add_argument("--duration", type=float, default=60.0,
                      help="Stop after this many seconds even if requests remain (in-flight ones are cut); default "
                      "%(default)g.")
    load.add_argument("--timeout", type=float, default=30.0, help="Per-request limit in seconds (default %(default)g).")

    chat = parser.add_argument_group("requests")
    chat.add_argument("--prompt", default=None, help="User message text (default: the scenario's).")
    chat.add_argument("--chat", choices=("fresh", "reused"), default="fresh",
                      help="fresh: a new chat per request; reused: each client keeps one chat and posts its "
                      "growing history, as useChat does.")
    chat.add_argument("--ws-connection", choices=("worker", "request"), default="worker",
                      help="ws: one socket per client (like a browser tab), or a new socket per request.")
    chat.add_argument("--abort-after", type=int, default=None, metavar="K",
                      help="Disconnect after K chunks (tests stop/cleanup paths); such requests count as aborted.")
    chat.add_argument("--tokens", type=int, default=20, help="stream: tokens per answer (default %(default)s).")
    chat.add_argument("--tokens-per-s", type=float, default=0.0,
                      help="stream: the model's tokens per second (0: as fast as it can).")
    chat.add_argument("--ttft-ms", type=float, default=0.0, help="stream: the model's time to first token.")
    chat.add_argument("--latency-dist", choices=("fixed", "uniform", "normal", "exp"), default="fixed",
                      help="stream: fixed values, or drawn from this distribution around them.")
    chat.add_argument("--tool-output", default=None, metavar="JSON",
                      help="browser-tool: the output the client posts for a browser tool.")
    chat.add_argument("--wav", type=Path, default=None, help="live: a PCM16 WAV file (mono or stereo, any rate).")
    chat.add_argument("--audio-frame-ms", type=int, default=20,
                      help="live: milliseconds of audio per binary frame (default %(default)s).")

    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="Print the JSON summary instead of the table.")
    output.add_argument("--out", type=Path, default=None, help="Also write the JSON summary to this file.")
    output.add_argument("--samples", action="store_true", help="Include every request in the JSON.")
    output.add_argument("--no-progress", action="store_true",
                        help="No progress bar (there is none when the output is not a terminal).")
    return parser


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    """The load test the flags describe.

    Raises:
        ValueError: a flag's value is wrong.
    """
    headers: dict[str, str] = {}
    for raw in args.header:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header needs NAME:VALUE, got {raw!r}")
        headers[name.strip()] = value.strip()
    extra: dict[str, Any] = {}
    if args.tool_output is not None:
        try:
            extra["tool_output"] = json.loads(args.tool_output)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--tool-output is not JSON ({exc.msg})") from None
    requests = args.requests
    if requests is None:
        if args.rate is not None:
            requests = max(1, math.ceil(args.rate * args.duration))
        elif args.scenario == "idle":
            requests = args.concurrency
        else:
            requests = 100
    return LoadConfig(
        url=args.url, transport=args.transport, scenario=args.scenario, concurrency=args.concurrency,
        rate=args.rate, max_in_flight=args.max_in_flight, requests=requests, duration_s=args.duration,
        timeout_s=args.timeout, prompt=args.prompt, chat=args.chat, ws_connection=args.ws_connection,
        abort_after=args.abort_after, headers=headers, user=args.user, token=args.token, adk_app=args.adk_app,
        allow_remote=args.allow_remote, sse_path=args.sse_path, ws_path=args.ws_path, tokens=args.tokens,
        tokens_per_s=args.tokens_per_s, ttft_ms=args.ttft_ms, latency_dist=args.latency_dist,
        wav=None if args.wav is None else str(args.wav), audio_frame_ms=args.audio_frame_ms, **extra,
    )


def main(argv: Sequence[str] | None = None, *, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    """Runs a load test; exit status 0, 1 when a request failed, 2 for wrong flags."""
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        cfg.validate()
        if cfg.scenario == "live":
            load_wav(cfg.wav or "")  # a bad file stops here, before any request
    except (ValueError, OSError) as exc:
        print(f"adk-gateway loadtest: {exc}", file=stderr)
        return 2
    show = progress_wanted(stdout, disabled=args.no_progress)
    console = Console(file=stdout, force_terminal=True, force_interactive=True) if show else Console(
        file=stdout, width=120)
    progress: Progress = BarProgress(console) if show else NullProgress()
    samples, elapsed, stopped_by = asyncio.run(run_load(cfg, progress=progress))
    summary = summarize(samples, elapsed, cfg, stopped_by, include_samples=args.samples)
    text = json.dumps(summary, indent=2)
    if args.json:
        stdout.write(text + "\n")
        stdout.flush()
    else:
        render_table(summary, console)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 1 if summary["requests"]["failed"] else 0
