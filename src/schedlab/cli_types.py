"""argparse types the subcommands share: comma-separated positive numbers, a JSON object."""

from __future__ import annotations

import argparse
import json


def positive_numbers(cast):
    """A comma-separated list of positive ``cast`` values (e.g. ``float`` or ``int``)."""

    def parse(text: str) -> list:
        try:
            values = [cast(v) for v in text.split(",") if v]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
        if not values or not all(v > 0 for v in values):  # NaN is not positive either
            raise argparse.ArgumentTypeError(f"need positive numbers, got {text!r}")
        return values

    return parse


def positive_number(cast):
    """One positive ``cast`` value."""

    def parse(text: str):
        (value,) = positive_numbers(cast)(text)
        return value

    return parse


def json_object(text: str) -> dict:
    """A JSON object given on the command line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value
