"""One validation layer for what the project reads from outside: traces (pandera), step-time
models, kappa fits, engine limits, run lengths and workload/engine/extension specs (pydantic),
and the per-request hints clients send to a vLLM server.

Every failure is a :class:`~schedlab.errors.SchedlabError` whose message is one line naming
the source (file or option), the column or key, and the first bad row or value; the command
line turns it into ``schedlab: error: ...`` and exit status 2.
"""

from schedlab.validation.documents import (
    check_arena_spec,
    check_run_length,
    check_workload_spec,
    parse,
    read_kappa,
    read_steptime,
)
from schedlab.validation.tables import check_trace, read_pool, read_profile, read_trace

__all__ = [
    "check_arena_spec",
    "check_run_length",
    "check_trace",
    "check_workload_spec",
    "parse",
    "read_kappa",
    "read_pool",
    "read_profile",
    "read_steptime",
    "read_trace",
]
