"""A registered workload kind made into a trace: the one way from a kind's name, a rate, a size,
a seed and the kind's parameters to a checked trace (``schedlab workload`` and the tournament).

A kind (:func:`schedlab.registry.register_workload`) is a function of a :class:`Draw` and of
keyword parameters with defaults (their annotations say what each may be; they are checked
before anything is drawn, :func:`schedlab.validation.documents.kind_parameters`)::

    @register_workload("openchat", pools=("openchat",), paper="C")
    def openchat(draw: Draw, share: Share = 0.5) -> pd.DataFrame:
        return openchat_requests(draw.pools["openchat"], draw.arrivals(), share, draw.seed)

A :class:`Draw` holds the rate (``inf``: a backlog, every request at t = 0), the size (a number
of requests, or for a kind timed by the caller's arrival process a duration), the seed, the
pools the kind draws from, and the model's context (a kind may stop short of it, as a
conversation does). Its random numbers come from named streams (``arrivals``, ``lengths``,
``pool``), each a generator seeded by (seed, the stream's number): ``schedlab workload`` draws
paper A's traces from streams 0, 1 and 2 (:data:`COMMAND_STREAMS`); the tournament from streams of
its own, so a workload's trace there is not the command's at the same seed.

What the kind returns is held to the trace contract, then to the model's context:
:func:`fit_context` refuses a trace with a request the context cannot hold (one line saying how
many, and what to pass), clips its prompts (sharing data cut with them) or drops it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from schedlab import registry
from schedlab.contracts import TOO_LONG
from schedlab.errors import SchedlabError
from schedlab.sharing import cut_prompts, sharing_column
from schedlab.workload.arrivals import arrival_times

#: The random streams of ``schedlab workload``: paper A's pipeline's traces (arrivals, then the
#: draws from a pool, then the pool a kind builds).
COMMAND_STREAMS = {"arrivals": 0, "lengths": 1, "pool": 2}
#: What to do with a request the model's context cannot hold (:data:`~schedlab.contracts.TOO_LONG`).
REFUSE, CLIP, DROP = TOO_LONG


@dataclass
class Draw:
    """What a workload kind draws its trace from (see the module docstring)."""

    #: The pools the kind named, by name.
    pools: Mapping[str, pd.DataFrame]
    #: Requests per second; ``inf``: a backlog.
    rate: float
    n_requests: int | None = None
    #: Seconds of arrivals (a kind timed by the caller's arrival process only).
    duration_s: float | None = None
    seed: int = 0
    #: The arrival process's gamma shape (1: Poisson; lower is burstier).
    burstiness: float = 1.0
    #: The model's context, tokens (None: unbounded).
    max_tokens: int | None = None
    #: Stream name -> its number, or a tuple of numbers (:data:`COMMAND_STREAMS`); streams of one
    #: number share one generator.
    streams: Mapping[str, int | tuple[int, ...]] = field(default_factory=lambda: dict(COMMAND_STREAMS))
    _generators: dict = field(default_factory=dict, repr=False)

    @property
    def backlog(self) -> bool:
        return math.isinf(self.rate)

    def rng(self, stream: str) -> np.random.Generator:
        """The generator of ``stream`` (made once per draw)."""
        key = self.streams[stream]
        if key not in self._generators:
            self._generators[key] = np.random.default_rng([self.seed, *np.atleast_1d(key).tolist()])
        return self._generators[key]

    def arrivals(self) -> np.ndarray:
        """Arrival times from t = 0: gamma gaps at the rate for the draw's size (all 0 for a backlog)."""
        return arrival_times(self.rate, rng=self.rng("arrivals"), duration_s=self.duration_s,
                             n_requests=self.n_requests, burstiness=self.burstiness)


def check_draw(entry: registry.WorkloadEntry, draw: Draw) -> None:
    """What a kind timed by its own clock cannot take: a duration, or another arrival process."""
    if entry.arrivals == registry.OWN:
        if draw.n_requests is None:
            raise SchedlabError(f"{entry.describe()} times its own requests: give it a number of requests, "
                                "not a duration")
        if draw.burstiness != 1.0:
            raise SchedlabError(f"{entry.describe()} times its own requests: a burstiness does not apply")


def read_pools(entry: registry.WorkloadEntry, files: Mapping[str, str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """The pools ``entry`` draws from: each from its file in ``files`` (checked, with the pool's
    columns), else from its loader (the data mirror, the download cache or a download). A file
    of a pool the kind does not draw from is refused."""
    from schedlab.validation import read_pool

    extra = sorted(set(files) - set(entry.pools))
    if extra:
        raise SchedlabError(f"{entry.describe()} draws from {', '.join(entry.pools) or 'no pool'}, "
                            f"not from {', '.join(extra)}")
    pools = {}
    for name in entry.pools:
        pool = registry.pool_entry(name)
        pools[name] = read_pool(files[name], pool.columns) if name in files else pool.load()
    return pools


def make_trace(kind: str, draw: Draw, parameters: dict | None = None, *, too_long: str = REFUSE,
               model: str = "the model", scale: tuple[float, float] = (1.0, 1.0)) -> pd.DataFrame:
    """The trace of workload kind ``kind`` for ``draw`` and its ``parameters`` (checked, defaults
    filled), held to the trace contract, its prompt and output lengths times ``scale``
    (:func:`scale_lengths`) and then held to ``draw.max_tokens``, ``model``'s context, as
    ``too_long`` says."""
    from schedlab.validation import check_trace
    from schedlab.validation.documents import kind_parameters

    entry = registry.workload_entry(kind)
    checked = kind_parameters(entry, parameters or {}, entry.describe())
    check_draw(entry, draw)
    out = entry.make(draw, checked)
    if not isinstance(out, pd.DataFrame):
        raise SchedlabError(f"{entry.describe()} returned a {type(out).__name__}, not a trace (a table)")
    check_trace(out, entry.describe())
    if tuple(scale) != (1.0, 1.0):
        out = scale_lengths(out, *scale, what=f"workload kind {kind!r}")
    if draw.max_tokens is not None:
        out = fit_context(out, draw.max_tokens, too_long, f"workload kind {kind!r}", model)
    return out


def scale_lengths(trace: pd.DataFrame, prompt: float = 1.0, output: float = 1.0, what: str = "the trace") -> pd.DataFrame:
    """``trace``'s prompt lengths times ``prompt`` and output lengths times ``output`` (at least
    1 token each): a workload's shape on a smaller engine (a shorter context, a smaller KV cache,
    a smaller prefill budget, scaled by the same factor). A trace with sharing data (its token ids
    or blocks name the prompt's tokens) or of speech (its length is the audio's) has no scaled
    form."""
    for name, factor in (("prompt", prompt), ("output", output)):
        if not (0.0 < factor <= 1.0):
            raise SchedlabError(f"a {name} length scale is within (0, 1], got {factor}")
    if sharing_column(trace) is not None:
        raise SchedlabError(f"{what}: its prompts carry sharing data, whose tokens cannot be scaled")
    if "audio_duration_s" in trace:
        raise SchedlabError(f"{what}: a speech trace's lengths are its audio's, not to be scaled")
    scaled = {c: np.maximum(1, np.rint(trace[c].to_numpy(float) * f)).astype(np.int64)
              for c, f in (("prompt_tokens", prompt), ("output_tokens", output)) if f != 1.0}
    return trace.assign(**scaled)


def fit_context(trace: pd.DataFrame, context: int, how: str, what: str = "the trace",
                model: str = "the model") -> pd.DataFrame:
    """``trace`` held to ``model``'s context of ``context`` tokens (prompt and output together),
    as ``how`` says: ``refuse`` a request that passes it (one line naming ``what``), ``clip`` it
    (its output to at most ``context - 1`` tokens, its prompt to what is left, sharing data cut
    with the prompt), or ``drop`` it (the rest renumbered from 0)."""
    if how not in TOO_LONG:
        raise SchedlabError(f"too-long requests are refused, clipped or dropped, not {how!r}")
    prompt, output = trace["prompt_tokens"].to_numpy(np.int64), trace["output_tokens"].to_numpy(np.int64)
    over = prompt + output > context
    if how == DROP:
        out = trace[~over].reset_index(drop=True)
        out["request_id"] = np.arange(len(out))
        return out
    if not over.any():
        return trace
    if how == REFUSE:
        raise SchedlabError(f"{what}: {int(over.sum())} of {len(trace)} requests hold more tokens than {model}'s "
                            f"context of {context:,} (the longest {int((prompt + output).max()):,}): --too-long clip "
                            "cuts their prompts to fit, --too-long drop leaves them out")
    output = np.minimum(output, context - 1)
    return cut_prompts(trace.assign(output_tokens=output), np.minimum(prompt, context - output))
