"""Workload traces checked with a pandera schema before they reach any backend.

At least one request. Required: ``request_id`` (whole numbers, unique), ``arrival_s``
(finite, >= 0, sorted), ``prompt_tokens`` and ``output_tokens`` (whole numbers >= 1). Optional
columns, when present: ``audio_duration_s`` and ``speech_duration_s`` (finite, >= 0; missing
values allowed), ``priority`` (finite; missing allowed), ``language`` (strings). Every number
within the bounds of :mod:`schedlab.contracts` (tokens, seconds). With a model's context
length, every request must fit it: ``prompt_tokens + output_tokens <= context`` (the same rule
for every backend: vLLM rejects such a request, so a simulator must not serve it either).
Sharing data (``hash_ids``, ``token_ids``, or ``prefix_id`` with ``prefix_tokens``;
:mod:`schedlab.sharing`): whole numbers >= 0, covering exactly the prompt (a shared prefix no
longer than it), hash ids chained (:func:`schedlab.sharing.check_sharing`, list columns row by
row where pandera's column checks do not reach).

Length pools (``prompt_tokens``, ``output_tokens``) and utterance tables (``duration_s``,
token counts) are checked the same way where they are read (:func:`read_pool`).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.errors import SchemaError

from schedlab.contracts import (
    MAX_AUDIO_S,
    MAX_RUN_S,
    MAX_STEP_S,
    MAX_STEP_WORK,
    MAX_TOKENS,
    PREFILL_PAIRS,
    PROFILE_COLUMNS,
    STEP_FEATURES,
    TRACE_COLUMNS,
)
from schedlab.errors import SchedlabError
from schedlab.io import read_parquet
from schedlab.sharing import check_sharing

TOKEN_COLUMNS = ("prompt_tokens", "output_tokens")
#: Label of the context check in error messages.
CONTEXT = "prompt_tokens + output_tokens"


def _numbers() -> pa.Check:
    return pa.Check(
        lambda s: pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s),
        error="must hold numbers",
    )


def _finite() -> pa.Check:
    return pa.Check(lambda s: pd.Series(np.isfinite(s.to_numpy(float)), index=s.index), error="must be finite")


def _at_least(low: float) -> pa.Check:
    return pa.Check(lambda s: s >= low, error=f"must be >= {low:g}")


def _at_most(high: float) -> pa.Check:
    return pa.Check(lambda s: s <= high, error=f"must be <= {high:g}")


def _whole() -> pa.Check:
    return pa.Check(lambda s: s == np.floor(s), error="must be whole numbers")


def _sorted() -> pa.Check:
    return pa.Check(lambda s: s.diff().fillna(0) >= 0, error="must be sorted (earlier than the row before)")


def _strings() -> pa.Check:
    return pa.Check(lambda s: s.map(lambda v: isinstance(v, str)), error="must be strings")


def _column(*checks: pa.Check, required: bool = True, nullable: bool = False) -> pa.Column:
    return pa.Column(checks=list(checks), required=required, nullable=nullable)


def _count(low: int = 1, required: bool = True) -> pa.Column:
    """Tokens: whole numbers from ``low`` to :data:`~schedlab.contracts.MAX_TOKENS`."""
    return _column(_numbers(), _finite(), _whole(), _at_least(low), _at_most(MAX_TOKENS), required=required)


def _audio(required: bool = False, nullable: bool = True) -> pa.Column:
    """Seconds of audio: finite, from 0 to :data:`~schedlab.contracts.MAX_AUDIO_S`."""
    return _column(_numbers(), _finite(), _at_least(0), _at_most(MAX_AUDIO_S), required=required, nullable=nullable)


def _schema(context: int | None) -> pa.DataFrameSchema:
    count = _count
    duration = _audio
    checks = []
    if context is not None:
        checks.append(pa.Check(lambda d: d["prompt_tokens"] + d["output_tokens"] <= context,
                               error=f"must be <= the model's context of {context} tokens", name=CONTEXT))
    return pa.DataFrameSchema(
        {
            "request_id": _column(_numbers(), _finite(), _whole(), _at_least(-(2**53)), _at_most(2**53),
                                  pa.Check(lambda s: ~s.duplicated(), error="must be unique (repeats an earlier id)")),
            "arrival_s": _column(_numbers(), _finite(), _at_least(0), _at_most(MAX_RUN_S), _sorted()),
            "prompt_tokens": count(),
            "output_tokens": count(),
            "audio_duration_s": duration(),
            "speech_duration_s": duration(),
            "priority": _column(_numbers(), _finite(), required=False, nullable=True),
            "language": _column(_strings(), required=False),
        },
        checks=checks,
    )


def _message(source: str, e: SchemaError) -> str:
    """One line: the source, the column, the rule, and the first bad row with its value."""
    if isinstance(e.schema, pa.Column):
        column = e.schema.name
    else:
        column = getattr(e.check, "name", None) or "table"
    if e.reason_code.name == "SERIES_CONTAINS_NULLS":
        rule = "must not be missing (NaN/null)"
    elif e.check is not None and getattr(e.check, "error", None):
        rule = e.check.error
    else:
        rule = str(e).splitlines()[0]
    cases = e.failure_cases
    where = ""
    if isinstance(cases, pd.DataFrame) and len(cases) and "index" in cases:
        row = int(cases["index"].min())
        values = cases.loc[cases["index"] == row]
        if column == CONTEXT:
            tokens = [int(v) for v in values.loc[values["column"].isin(TOKEN_COLUMNS), "failure_case"]]
            value = f"{' + '.join(map(str, tokens))} = {sum(tokens)}"
        else:
            value = _short(values["failure_case"].iloc[0])
        where = f", first bad row {row} ({value})"
    return f"{source}: column {column!r} {rule}{where}"


def _short(value) -> str:
    text = repr(value.item() if hasattr(value, "item") else value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_trace(trace: pd.DataFrame, source: str = "trace", *, context: int | None = None) -> pd.DataFrame:
    """``trace`` checked against the contract (see the module docstring), with its id and
    token columns as int64; raises a one-line :class:`SchedlabError` naming ``source``."""
    missing = [c for c in TRACE_COLUMNS if c not in trace.columns]
    if missing:
        raise SchedlabError(f"{source}: missing columns {', '.join(missing)}")
    if not len(trace):
        raise SchedlabError(f"{source}: holds no requests (0 rows)")
    try:
        _schema(context).validate(trace.reset_index(drop=True))
    except SchemaError as e:
        raise SchedlabError(_message(source, e)) from None
    check_sharing(trace.reset_index(drop=True), source)
    return trace.astype({c: np.int64 for c in ("request_id", *TOKEN_COLUMNS)})


def _profile_schema() -> pa.DataFrameSchema:
    work = lambda required=True: _column(_numbers(), _finite(), _at_least(0), _at_most(MAX_STEP_WORK), required=required)
    return pa.DataFrameSchema({**{f: work() for f in STEP_FEATURES},
                               "time_s": _column(_numbers(), _finite(), _at_least(0), _at_most(MAX_STEP_S)),
                               PREFILL_PAIRS: work(required=False)})


def read_profile(path: str | os.PathLike) -> pd.DataFrame:
    """A latency profile table (:data:`~schedlab.contracts.PROFILE_COLUMNS`) from ``path``,
    checked by :func:`check_profile`."""
    return check_profile(read_parquet(path, PROFILE_COLUMNS), str(path))


def check_profile(profile, source: str = "profile") -> pd.DataFrame:
    """``profile`` checked as a latency profile table: its columns
    (:data:`~schedlab.contracts.PROFILE_COLUMNS`), counts and step times finite and non-negative,
    within what one step holds and lasts (:data:`~schedlab.contracts.MAX_STEP_WORK`,
    :data:`~schedlab.contracts.MAX_STEP_S`); raises a one-line :class:`SchedlabError` naming
    ``source``."""
    if not isinstance(profile, pd.DataFrame):
        raise SchedlabError(f"{source} returned a {type(profile).__name__}, not a profile table")
    missing = [c for c in PROFILE_COLUMNS if c not in profile.columns]
    if missing:
        raise SchedlabError(f"{source}: missing columns {', '.join(missing)}")
    if not len(profile):
        raise SchedlabError(f"{source}: holds no steps (0 rows)")
    try:
        _profile_schema().validate(profile.reset_index(drop=True))
    except SchemaError as e:
        raise SchedlabError(_message(source, e)) from None
    return profile


def read_trace(path: str | os.PathLike, *, context: int | None = None) -> pd.DataFrame:
    """A trace file, read and checked (:func:`check_trace`)."""
    return check_trace(read_parquet(path, TRACE_COLUMNS), str(path), context=context)


#: What a length pool or an utterance table must hold, by column: a pool's prompt and output
#: lengths, an utterance's duration (a clip lasts) and its token counts (``text_tokens`` may be
#: 0: silence), a timed pool's arrivals in its trace (``timestamp_s``; in time order in a pool
#: of one trace).
_TABLE_COLUMNS = {
    "prompt_tokens": lambda: _count(required=False),
    "output_tokens": lambda: _count(required=False),
    "text_tokens": lambda: _count(0, required=False),
    "duration_s": lambda: _column(_numbers(), _finite(), pa.Check(lambda s: s > 0, error="must be > 0"),
                                  _at_most(MAX_AUDIO_S)),
    "timestamp_s": lambda: _column(_numbers(), _finite(), _at_least(0), _at_most(MAX_RUN_S)),
}


def read_pool(path: str | os.PathLike, required: tuple[str, ...] = (), *, one_trace: bool = False) -> pd.DataFrame:
    """A table of request lengths or utterances (a length pool, `schedlab data`'s output), read
    and checked: at least one row, ``required`` columns present, and every known column
    (:data:`_TABLE_COLUMNS`) whole and within the bounds of tokens, or of seconds of audio;
    with ``one_trace`` (a pool of `schedlab tournament pool`), its timestamps in time order."""
    table = read_parquet(path, required, rows=True)
    columns = {c: make() for c, make in _TABLE_COLUMNS.items() if c in table.columns}
    if one_trace and "timestamp_s" in columns:
        columns["timestamp_s"] = _column(*columns["timestamp_s"].checks, _sorted())
    schema = pa.DataFrameSchema(columns)
    try:
        schema.validate(table.reset_index(drop=True))
    except SchemaError as e:
        raise SchedlabError(_message(str(path), e)) from None
    return table
