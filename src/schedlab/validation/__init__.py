"""One validation layer for what the project reads from outside: traces (pandera), step-time
models, kappa fits, engine limits, run lengths and workload/engine/extension specs (pydantic),
and the per-request hints clients send to a vLLM server. The files an engine is built from
(step-time models, kappa fits, engine specs) are read here into the objects the engine takes.

Every failure is a :class:`~schedlab.errors.SchedlabError` whose message is one line naming
the source (file or option), the column or key, and the first bad row or value; the command
line turns it into ``schedlab: error: ...`` and exit status 2.
"""

import importlib

#: Where each name lives; a name's module is imported when the name is first read, so that a
#: command that checks only documents does not load pandera (start-up time).
_HOME = {
    **dict.fromkeys(("check_measured", "check_run_length", "check_summaries", "check_workload_spec", "parse",
                     "read_kappa", "read_predictor"), "schedlab.validation.documents"),
    **dict.fromkeys(("check_arena_spec", "read_arena", "read_steptime", "write_steptime"),
                    "schedlab.validation.engine_files"),
    **dict.fromkeys(("check_profile", "check_trace", "read_pool", "read_profile", "read_trace"),
                    "schedlab.validation.tables"),
}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)


__all__ = [
    "check_arena_spec",
    "check_measured",
    "check_profile",
    "check_run_length",
    "check_summaries",
    "check_trace",
    "check_workload_spec",
    "parse",
    "read_kappa",
    "read_arena",
    "read_pool",
    "read_predictor",
    "read_profile",
    "read_steptime",
    "read_trace",
    "write_steptime",
]
