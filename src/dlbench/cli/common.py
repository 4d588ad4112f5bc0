"""What every command shares: its log, its parser's help format, and the option types of several commands."""

from __future__ import annotations

import argparse
import logging
import re

log = logging.getLogger("dlbench")

ENDPOINT_HELP = (
    "the S3 endpoint of an s3:// source (e.g. http://host:9000), or loopback[:PORT] for the workflow's own S3 server "
    "(through its shaping proxy on PORT)"
)


# a line `say` wrote through `main`'s handler: its time, then the message (group 1)
STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (.*)$")


def say(message: str) -> None:
    """One line of the command's log (stamped with the local time by `main`: a workflow's logs are read later)."""
    log.info(message)


def comma_list(kind):
    """A list option as every command spells one: comma-separated values (`--workers 1,2,auto`)."""

    def parse(text: str) -> list:
        return [kind(v) if kind is not str and v != "auto" else v for v in text.split(",") if v]

    return parse


DELTAS_HELP = (
    "LeRobot delta_timestamps (seconds per feature key; `cameras` means every camera): inline JSON, e.g. "
    "'{\"cameras\": [-1, 0]}', or a YAML/JSON file of it"
)


def read_deltas(value: str) -> dict:
    """--delta-timestamps as every command takes it: inline JSON (it starts with '{'), or a YAML/JSON file."""
    import json
    from pathlib import Path

    import yaml

    from ..config import check_deltas
    from ..errors import UserError

    if value.lstrip().startswith("{"):
        try:
            deltas = json.loads(value)
        except ValueError as e:
            raise UserError(f"--delta-timestamps: not JSON ({e}); e.g. '{{\"cameras\": [-0.1, 0]}}'") from None
    else:
        try:
            deltas = yaml.safe_load(Path(value).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise UserError(f"--delta-timestamps {value}: cannot read it ({e}); give a file or inline JSON") from None
    check_deltas(deltas, f"--delta-timestamps {value}")
    return deltas


def deltas_name(value: str) -> str:
    """The frame mode's name for a --delta-timestamps: the file's stem, or "window" for inline JSON."""
    from pathlib import Path

    return "window" if value.lstrip().startswith("{") else Path(value).stem


def out_option(p: argparse.ArgumentParser, dest: str, help: str, old: str, flag: str = "--out", **kw) -> None:
    """Where a command writes: `--out` for a file, `--out-dir` for a directory, as every command spells it; the
    command's earlier spelling (`old`) still read, not listed."""
    p.add_argument(flag, dest=dest, default=None, help=help, **kw)
    p.add_argument(old, dest=dest, default=None, help=argparse.SUPPRESS)


class Help(argparse.HelpFormatter):
    """Every option's default in its help, unless the help already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or "default:" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            return f"{text} (default: %(default)s)".strip()
        return text


# -q is taken before or after the subcommand; SUPPRESS keeps a subcommand from resetting what the top level set
QUIET = argparse.ArgumentParser(add_help=False)
QUIET.add_argument(
    "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars or per-unit lines"
)


def command(sub, name: str, **kw) -> argparse.ArgumentParser:
    return sub.add_parser(name, formatter_class=Help, parents=[QUIET], **kw)
