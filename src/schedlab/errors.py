"""The one exception type the CLI turns into a one-line error and a non-zero exit."""


class SchedlabError(Exception):
    """A user-facing error: bad input, missing file, unknown name."""
