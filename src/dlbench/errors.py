"""The one exception type for user mistakes.

A `UserError` means the input (a config key, a dataset, a URL, a file) is wrong, and its message says which one and
what to do. The CLI prints it on one line without a traceback; anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Bad input: the message names the file or key and what to do about it."""
