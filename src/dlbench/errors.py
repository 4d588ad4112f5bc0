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


@contextlib.contextmanager
def script_log(path: str) -> Iterator[TextIO]:
    """For workflow scripts: yield their log file; a `UserError` ends the script with its one line in the log."""
    with open(path, "w") as log:
        try:
            yield log
        except UserError as e:
            print(f"error: {e}", file=log)
            sys.exit(2)
