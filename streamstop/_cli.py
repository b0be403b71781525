"""The ``streamstop`` command: ``filter`` stdin to stdout, ``demo``, and the server commands."""

from __future__ import annotations

import argparse
import codecs
import os
import sys
import time
from collections.abc import Iterator, Sequence

from ._buffer import StopBuffer
from ._pieces import token_pieces
from ._stream import SyncStopStream
from ._version import __version__

__all__ = ["main"]

# Read at most this much at a time: a pipe returns what is there, so pieces flow as they come.
_READ_SIZE = 4096

DEMO_STOPS = ("\n\nUser:", "<|im_end|>", "</s>")
DEMO_COMPLETION = (
    "Sure! Stop strings are split across tokens all the time: a model that emits "
    "'<|im_', 'end', '|>' never sends the whole marker in one piece. This filter holds back "
    "only the text that could still become a stop, so everything else reaches you at once."
    "\n\nUser: and this line was never meant to be shown"
)


def _unescape(value: str) -> str:
    r"""Interpret backslash escapes (``\n``, ``\t``, ``\\``, ``\x1b``, ``\u2028``) in a stop.

    A shell cannot easily pass a newline, and stops like "\n\nUser:" are the common case.
    """
    if "\\" not in value:
        return value
    try:
        return value.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as error:
        raise argparse.ArgumentTypeError(f"bad escape in stop {value!r}: {error.reason}") from None


def _stop_argument(value: str) -> str:
    stop = _unescape(value)
    if not stop:
        raise argparse.ArgumentTypeError(f"empty stop {value!r}: a stop needs at least one char")
    return stop


def _errors_argument(value: str) -> str:
    try:
        codecs.lookup_error(value)
    except LookupError:
        raise argparse.ArgumentTypeError(
            f"unknown errors policy {value!r}: use strict, replace, ignore or backslashreplace"
        ) from None
    return value


def _read_pieces(fd: int) -> Iterator[bytes]:
    while piece := os.read(fd, _READ_SIZE):
        yield piece


def _run_filter(args: argparse.Namespace) -> int:
    buffer = StopBuffer(args.stop, include_stop=args.include_stop, errors=args.errors)
    out = sys.stdout.buffer
    for piece in _read_pieces(sys.stdin.fileno()):
        text = buffer.feed(piece)
        if text:
            out.write(text.encode())
            out.flush()
        if buffer.stopped:
            break
    else:
        out.write(buffer.flush().encode())
        out.flush()
    if args.verbose:
        where = f"stopped at {buffer.stop_string!r}" if buffer.stopped else "no stop"
        print(f"streamstop: {where}", file=sys.stderr)
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    stops = args.stop or list(DEMO_STOPS)
    tokens = token_pieces(DEMO_COMPLETION)
    out = sys.stdout
    print(f"stops: {stops!r}", file=out)
    print(f"model emits {len(tokens)} tokens; the filter shows:\n", file=out)
    stream = SyncStopStream(iter(tokens), stops, include_stop=args.include_stop)
    for text in stream:
        out.write(text)
        out.flush()
        if args.delay:
            time.sleep(args.delay)
    print("\n", file=out)
    if stream.stopped:
        print(f"stopped at {stream.stop_string!r}: the model was told to stop", file=out)
    else:
        print("no stop matched; the whole completion was shown", file=out)
    return 0


# Listed by `streamstop --help` without importing the server package (which the core commands
# do not need); `main` builds the full parser for these two only.
SERVER_COMMANDS = {
    "serve": "serve the built-in 'echo' model in every API family, stops applied",
    "proxy": "put the stop middleware in front of an OpenAI, Anthropic, Ollama, llama.cpp or TGI "
    "server",
}


def build_parser(*, server: bool = True) -> argparse.ArgumentParser:
    """The ``streamstop`` parser; with ``server=False``, ``serve`` and ``proxy`` are listed but
    not registered, and the server package is not imported."""
    parser = argparse.ArgumentParser(
        prog="streamstop", description="Incremental stop-string filtering for LLM token streams."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    filter_parser = commands.add_parser(
        "filter",
        help="filter stdin to stdout, cutting at the first stop",
        description="Copy stdin to stdout as it arrives, holding back only text that could "
        "still become a stop, and end at the first completed stop. Backslash escapes in "
        "stops are interpreted: --stop '\\n\\nUser:'.",
    )
    filter_parser.add_argument(
        "--stop", action="append", required=True, type=_stop_argument, help="a stop string"
    )
    filter_parser.add_argument(
        "--include-stop", action="store_true", help="also output the matched stop"
    )
    filter_parser.add_argument(
        "--errors",
        default="strict",
        type=_errors_argument,
        help="policy for invalid UTF-8 on stdin: strict (default) or replace",
    )
    filter_parser.add_argument(
        "-v", "--verbose", action="store_true", help="say on stderr which stop matched"
    )
    filter_parser.set_defaults(handler=_run_filter, parser=filter_parser)

    demo_parser = commands.add_parser(
        "demo", help="stream a built-in sample completion through the filter"
    )
    demo_parser.add_argument(
        "--stop", action="append", type=_stop_argument, help="stops (default: chat markers)"
    )
    demo_parser.add_argument("--include-stop", action="store_true")
    demo_parser.add_argument(
        "--delay", type=float, default=0.03, help="seconds between tokens (default 0.03)"
    )
    demo_parser.set_defaults(handler=_run_demo, parser=demo_parser)

    if server:
        # Registers `serve` and `proxy`; their dependencies (the `server` extra) load only when
        # run.
        from .server._commands import add_server_commands

        add_server_commands(commands)
    else:
        for name, summary in SERVER_COMMANDS.items():
            commands.add_parser(name, help=summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The command is the first argument: the top-level parser has no option that takes a value.
    server = bool(argv) and argv[0] in SERVER_COMMANDS
    parser = build_parser(server=server)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # argparse reports a command's unknown flag with the top-level usage, which does not
        # list the command's flags; the command's own usage does. (A flag before the command
        # is the top level's.)
        owner = args.parser if argv[0] == args.command else parser
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.handler(args))
    except UnicodeDecodeError as error:
        # stdin that is not UTF-8, under --errors strict.
        print(f"streamstop: error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        if not server:
            raise  # a bug of ours: filter and demo check what they are given in the parser
        # A setting serve or proxy refused: a limit, the key file, the upstream URL.
        print(f"streamstop: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`| head`): not an error of ours.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
