"""The ``ddpsim`` command. Thin: each subcommand parses arguments and calls the library.

Exit codes (the README's "Exit codes" lists them): 0 ok; 1 the answer is "no" (predictions past
tolerance, sweep points that failed); 2 bad input, one line naming the file and the field; 130
interrupted (Ctrl-C or SIGTERM), one line, temporary files removed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from ddpsim.errors import ScenarioError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
STALE_STAGING_S = 600  # staging folders live seconds; one this old was left by a killed run


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (exit 2) like every other bad input."""

    def error(self, message: str) -> NoReturn:
        print(f"ddpsim: error: {self.prog.removeprefix('ddpsim ')}: {message} (see {self.prog} --help)",
              file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ddpsim", description="Predict PyTorch DDP step time on a cluster.")
    from ddpsim.schemas import ddpsim_version

    parser.add_argument("--version", action="version", version=f"ddpsim {ddpsim_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    from ddpsim.cli import plan, run, validate

    for module in (run, plan, validate):
        module.register(sub)
    # main() hands `measure` over before this parser is built (it needs torch, not the simulator); its
    # options are here for --help, and for callers of build_parser()
    from ddpsim.measure.args import PARSER_KW, add_arguments

    measure = sub.add_parser("measure", help="measure a GPU host (all-reduce sweeps, your models' DDP steps) "
                             "for calibrate and validate", **PARSER_KW)  # type: ignore[arg-type]
    add_arguments(measure).set_defaults(handler=_measure)
    # handled by main() before this parser (ddpsim/cli/measure_json.py); here for --help
    measure.add_argument("--json", action="store_true",
                         help="print one JSON object (what the folder holds at the end) on stdout; progress to stderr")
    return parser


def _measure(args: argparse.Namespace) -> int:
    from ddpsim.measure.cli import run as measure_run

    return measure_run(args)


def remove_stale_staging(folder: str) -> None:
    """Delete ``.ddpsim-*`` staging files and folders in ``folder`` that a killed run left behind.

    Only old ones: a fresh one may belong to another ddpsim writing next to us right now.
    """
    import shutil

    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(".ddpsim-"):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < STALE_STAGING_S:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.remove(entry.path)
        except OSError:
            continue  # gone already, or not ours to remove


def _clean_around(out: str | None) -> None:
    if not out:
        return
    parent = os.path.dirname(os.path.abspath(out)) or "."
    for folder in (parent, out, os.path.join(out, "points")):
        remove_stale_staging(folder)


def _check_out_paths(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--out ''`` or ``--trace ''`` (an unset shell variable) is refused before any work: ignored, it
    would write nothing, or write into the current folder. So is an empty value of any other option or
    argument: ``--recentre ''`` read as "not given" would fit a new calibration instead."""
    from ddpsim.outdir import check_out_path

    for name in ("out", "trace", "html"):
        value = getattr(args, name, None)
        if isinstance(value, str):
            check_out_path(value, f"--{name}")
    for action in _command_actions(parser, getattr(args, "command", None)):
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            option = action.option_strings[-1] if action.option_strings else action.dest
            raise ScenarioError(f"expected a value, got {''!r} (an unset shell variable?)", field=option)


def _command_actions(parser: argparse.ArgumentParser, command: str | None) -> list[argparse.Action]:
    """The arguments of subcommand ``command`` as its parser declares them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return list(action.choices[command]._actions)
    return []


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """``kill`` (SIGTERM) unwinds like Ctrl-C, so ``finally`` blocks remove temporary files."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread (main() called from a worker thread): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["measure"]:
        from ddpsim.cli.measure_json import JSON_FLAG

        if JSON_FLAG in args_in[1:]:
            from ddpsim.cli.measure_json import run as measure_json

            return measure_json([a for a in args_in[1:] if a != JSON_FLAG])
        from ddpsim.measure.cli import main as measure

        return measure(args_in[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(args_in)
    except SystemExit as exc:  # --help, --version (0) and usage errors (2, already printed)
        return int(exc.code or 0)
    try:
        _check_out_paths(args, parser)
        with _sigterm_as_interrupt():
            _clean_around(getattr(args, "out", None) if isinstance(getattr(args, "out", None), str) else None)
            return int(args.handler(args) or 0)
    except ScenarioError as exc:
        print(f"ddpsim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        # one line, whatever was printing: a progress bar on a terminal has no newline yet
        lead = "\n" if sys.stderr.isatty() else ""
        detail = f": {exc}" if str(exc) else ""
        print(f"{lead}ddpsim: interrupted{detail}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `ddpsim ... | head`: the reader left; nothing to report (and stdout must not be flushed again)
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a real file (captured in tests)
            pass
        return EXIT_OK
    except OSError as exc:
        # an output path that cannot be written (a file where a folder should be, no permission)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"ddpsim: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
