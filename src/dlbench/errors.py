"""The one exception type for user mistakes.

A `UserError` means the input (a config key, a dataset, a URL, a file) is wrong, and its message says which one and
what to do. The CLI prints it on one line without a traceback; anything else is a bug and keeps its traceback.
"""

import contextlib
import sys
from collections.abc import Iterator
from typing import TextIO


class UserError(Exception):
    """Bad input: the message names the file or key and what to do about it."""


def no_range_requests(url: str, e: Exception) -> UserError | None:
    """The `UserError` for `e` if it is fsspec's HTTP file finding that the server ignores Range headers (as
    `python -m http.server` does) on its first seek; None for any other error."""
    if not isinstance(e, ValueError) or "range requests" not in str(e):
        return None
    return ignores_ranges(url)


def ignores_ranges(url: str) -> UserError:
    """The `UserError` for a server that answered a ranged read of `url` with more than the range."""
    return UserError(
        f"{url}: the server does not answer HTTP range requests, which reading parquet and MP4 files needs; serve "
        f"the dataset from one that does (S3, the Hub, nginx, SeaweedFS)"
    )


# packages of the `workflow` extra (pyproject.toml): `pip install dlbench` alone has the loaders and the converter
WORKFLOW_EXTRA = {"datasets", "pandas", "matplotlib", "snakemake"}


def needs_extra(package: str) -> UserError:
    return UserError(f"needs the {package} package, part of the workflow extra: pip install 'dlbench[workflow]'")


@contextlib.contextmanager
def script_log(path: str) -> Iterator[TextIO]:
    """For workflow scripts: yield their log file; a `UserError` ends the script with its one line in the log."""
    with open(path, "w") as log:
        try:
            yield log
        except UserError as e:
            print(f"error: {e}", file=log)
            sys.exit(2)
