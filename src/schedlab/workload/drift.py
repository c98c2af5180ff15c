"""A workload that drifts: phases of (duration, rate, pool) played back to back.

Each phase draws Poisson arrivals at its rate for its duration (seeded per phase) from a
registered ASR workload kind (its ``pool``): paper A's ``librispeech`` (test-clean as is) or
``uniform`` (the long-clip split), or a plug-in's; each is shifted to start where the previous
phase ended. The ``phase`` column names the phase each request arrived in. Phases come as plain
dicts so a config file can list them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab import registry
from schedlab.errors import SchedlabError
from schedlab.workload.kinds import Draw

#: Light LibriSpeech load, a surge past saturation (~18 req/s), the long-clip split near its
#: own saturation, then light load again.
DEFAULT_PHASES: tuple[dict, ...] = (
    {"name": "light", "duration_s": 60.0, "rate": 6.0, "pool": "librispeech"},
    {"name": "surge", "duration_s": 60.0, "rate": 22.0, "pool": "librispeech"},
    {"name": "long", "duration_s": 60.0, "rate": 10.0, "pool": "uniform"},
    {"name": "recovery", "duration_s": 60.0, "rate": 6.0, "pool": "librispeech"},
)


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    rate: float
    pool: str

    def __post_init__(self) -> None:
        if not self.duration_s > 0:
            raise SchedlabError(f"phase {self.name!r}: duration_s must be positive, got {self.duration_s}")
        if not self.rate > 0 or not np.isfinite(self.rate):
            raise SchedlabError(f"phase {self.name!r}: rate must be positive and finite, got {self.rate}")
        try:
            entry = registry.workload_entry(self.pool)
        except SchedlabError as e:
            raise SchedlabError(f"phase {self.name!r}: pool {self.pool!r}: {e}") from None
        if entry.modality != registry.ASR:
            raise SchedlabError(f"phase {self.name!r}: pool {self.pool!r} makes {entry.modality} requests, not asr")


def parse_phases(specs) -> list[Phase]:
    """Phases from dicts with ``duration_s``, ``rate``, ``pool`` and an optional ``name``
    (default ``"<index>-<pool>"``); names must be distinct."""
    phases = []
    for i, spec in enumerate(specs):
        unknown = set(spec) - {"name", "duration_s", "rate", "pool"}
        if unknown:
            raise SchedlabError(f"phase {i}: unknown keys {sorted(unknown)}")
        missing = {"duration_s", "rate", "pool"} - set(spec)
        if missing:
            raise SchedlabError(f"phase {i}: missing keys {sorted(missing)}")
        name = str(spec.get("name", f"{i}-{spec['pool']}"))
        phases.append(Phase(name, float(spec["duration_s"]), float(spec["rate"]), str(spec["pool"])))
    if not phases:
        raise SchedlabError("a drifting workload needs at least one phase")
    names = [p.name for p in phases]
    if len(set(names)) != len(names):
        raise SchedlabError(f"phase names must be distinct, got {names}")
    return phases


def drift_trace(
    utterances: pd.DataFrame,
    phases=DEFAULT_PHASES,
    *,
    seed: int = 0,
    clips_per_duration: int = 100,
) -> pd.DataFrame:
    """The trace of ``phases`` (dicts, see :func:`parse_phases`) with a ``phase`` column and
    ``phase_start_s`` (when its phase began); request ids run in arrival order. Phase ``i``
    draws its arrivals and its requests from streams of its own (seed, 0, i) and (seed, 1, i);
    a pool its kind builds (``uniform``'s, of ``clips_per_duration`` clips) is the same in every
    phase, from (seed, 2)."""
    parsed = parse_phases(phases)
    parts = []
    start = 0.0
    for i, ph in enumerate(parsed):
        entry = registry.workload_entry(ph.pool)
        takes = {"clips_per_duration": clips_per_duration} if "clips_per_duration" in entry.parameters() else {}
        draw = Draw({"utterances": utterances}, ph.rate, duration_s=ph.duration_s, seed=seed,
                    streams={"arrivals": (0, i), "lengths": (1, i), "pool": (2,)})
        part = entry.make(draw, takes)
        part["arrival_s"] = start + part["arrival_s"].to_numpy()
        part["phase"] = ph.name
        part["phase_start_s"] = start
        parts.append(part)
        start += ph.duration_s
    trace = pd.concat(parts, ignore_index=True)
    trace["request_id"] = np.arange(len(trace), dtype=np.int64)
    return trace
