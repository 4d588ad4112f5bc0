"""`dlbench <step> ...`: one subcommand per workflow step. Each module here adds its commands' parsers (`add`) beside
the handlers that parse nothing themselves and call the library."""

from __future__ import annotations

import argparse
import logging
import sys

from ..errors import WORKFLOW_EXTRA, UserError, needs_extra
from . import bench, compare, convert, encoding, lance, model, report, sources, synth, tune, validate
from .common import Help, log

# the modules whose commands the parser holds
COMMANDS = (synth, convert, encoding, lance, validate, bench, model, tune, sources, report, compare)
# what a user runs, listed first by `dlbench --help` in this order; the rest are the workflow's steps, listed apart
USER_COMMANDS = ("tune", "bench-run", "validate", "convert", "reencode", "predict", "compare", "advise", "synth")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="dlbench", description="Prepare LeRobot datasets and benchmark loading them.", formatter_class=Help
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars or per-unit lines")
    parser.add_argument("--version", action="version", version=f"dlbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="COMMAND --help for its flags")
    for module in COMMANDS:
        module.add(sub)
    _two_layers(sub)
    return parser


def _two_layers(sub) -> None:
    """List the user's commands first (USER_COMMANDS' order), then under a heading the workflow's steps."""
    entries = {a.dest: a for a in sub._choices_actions}  # argparse keeps the listed entries here, in order
    mine = [entries[name] for name in USER_COMMANDS if name in entries]
    steps = [a for name, a in entries.items() if name not in USER_COMMANDS]
    heading = type(sub)._ChoicesPseudoAction("", [], "-- the workflow's steps (Snakemake runs them) --")
    sub._choices_actions[:] = [*mine, heading, *steps]


class _Stdout(logging.StreamHandler):
    """A handler on whatever sys.stdout is when a line is written, not when `main` first ran: a caller that swaps
    stdout (a test's capture, a notebook) still gets the lines, and a closed old stream is never written."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)


def _log_to_stdout() -> None:
    """The `dlbench` logger's lines on this call's stdout, stamped with the local time."""
    handler = _Stdout(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.bars = not args.quiet and sys.stderr.isatty()  # progress bars only on a terminal: logs stay readable
    _log_to_stdout()
    try:
        status = args.func(args)  # a command may answer with an exit status (compare: 1 on a regression)
    except ModuleNotFoundError as e:
        if e.name not in WORKFLOW_EXTRA:
            raise
        sys.stderr.write(f"dlbench {args.command}: error: {needs_extra(e.name)}\n")
        return 2
    except UserError as e:
        sys.stderr.write(f"dlbench {args.command}: error: {e}\n")
        return 2
    return status if isinstance(status, int) else 0
