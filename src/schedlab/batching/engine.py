"""An iteration-level serving engine whose batches are composed by a pluggable batch builder.

Each iteration the builder (see :mod:`schedlab.batching.base`) names a batch: decodes (one
token each for requests whose prompt is done) and prefill chunks (``c`` tokens of a request's
prompt from its next uncomputed position). The engine keeps the per-request state in numpy
arrays, holds paged KV (a request is admitted with the blocks of its whole prompt; each decode
may take one more block), preempts by recompute (last admitted first) when a decode finds no
free block, advances the clock by the step-time model and records every token: the final
prefill chunk emits a request's first token, each decode the next one.

Stretches where the builder declares its batches fixed (every decode-phase request decodes,
nothing else) run in closed form up to the next completion, arrival (when the builder says
arrivals matter), timeline sample or KV shortage. Token gaps go to one bounded-memory
histogram per request class (requests arriving before ``warmup_s`` are simulated but not
measured).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.results import RequestLog
from schedlab.sim import kernels
from schedlab.sim.gaps import GapHistogram
from schedlab.sim.steptime import StepTimeModel

#: steady() answers: not steady; fixed until an arrival or a completion; until a completion.
NOT_STEADY, UNTIL_ARRIVAL, UNTIL_COMPLETION = 0, 1, 2


@dataclass(frozen=True)
class KVConfig:
    block_size: int = 16
    capacity_blocks: int = 1 << 40


@dataclass
class BatchRun:
    """One run: the per-request table, token-gap histograms per class (and ``"all"``), and
    engine figures; ``timeline`` samples KV use and queue lengths every ``sample_s``."""

    requests: pd.DataFrame
    gaps: dict[str, GapHistogram]
    batches: int
    busy_s: float
    peak_kv_frac: float
    timeline: pd.DataFrame
    wall_s: float
    batch_log: pd.DataFrame | None = None
    token_times: list | None = field(default=None, repr=False)


class BatchEngine:
    """One run of one builder over one trace (sorted by arrival)."""

    def __init__(self, trace: pd.DataFrame, builder, step_time: StepTimeModel, kv: KVConfig, *,
                 warmup_s: float = 0.0, sample_s: float = 1.0, record: bool = False) -> None:
        self.trace = trace
        self.arrival = trace["arrival_s"].to_numpy(float)
        if np.any(np.diff(self.arrival) < 0):
            raise SchedlabError("trace is not sorted by arrival_s")
        self.prompt = trace["prompt_tokens"].to_numpy(np.int64)
        self.output = trace["output_tokens"].to_numpy(np.int64)
        if np.any(self.prompt < 1) or np.any(self.output < 1):
            raise SchedlabError("every request needs prompt_tokens >= 1 and output_tokens >= 1")
        n = len(trace)
        classes = trace["slo_class"].astype(str).to_numpy() if "slo_class" in trace else np.full(n, "all")
        self.class_names = sorted(set(classes.tolist()))
        measured = self.arrival >= warmup_s
        # class index per request; unmeasured (warm-up) requests use the last, discarded slot
        self.cls = np.where(measured, np.searchsorted(self.class_names, classes), len(self.class_names))
        self.target = trace["tbt_target_s"].to_numpy(float) if "tbt_target_s" in trace else np.full(n, np.inf)
        self.kv, self.step_time, self.builder = kv, step_time, builder
        self.sample_s, self.record = sample_s, record
        worst = self.blocks_for(self.prompt + self.output)
        if worst.size and worst.max() > kv.capacity_blocks:
            raise SchedlabError(f"a request needs {int(worst.max())} KV blocks but the engine holds {kv.capacity_blocks}")
        self.computed = np.zeros(n, np.int64)
        self.gen = np.zeros(n, np.int64)
        self.blocks = np.zeros(n, np.int64)
        self.admit_seq = np.full(n, -1, np.int64)
        self.is_dec = np.zeros(n, bool)
        self.prefilling: list[int] = []
        self.n_active = 0
        self._seq = 0
        self.free = kv.capacity_blocks
        self.peak = 0
        self.now = 0.0
        self.busy = 0.0
        self.batches = 0
        self.log = RequestLog(trace)
        self.hists = [GapHistogram() for _ in range(len(self.class_names) + 1)]
        self.all_gaps = GapHistogram()
        builder.bind(self)

    # -- what builders read and call ------------------------------------------------------
    def blocks_for(self, tokens):
        return -(-tokens // self.kv.block_size)

    @property
    def last_tok(self) -> np.ndarray:
        return self.log.last_tok

    @property
    def kv_frac(self) -> float:
        return 1.0 - self.free / self.kv.capacity_blocks

    @property
    def mean_batch_s(self) -> float:
        """Running mean batch time (0 before the first batch)."""
        return self.busy / self.batches if self.batches else 0.0

    def need(self, i: int) -> int:
        """Tokens request ``i`` still has to compute before its next token."""
        return int(self.prompt[i] + self.gen[i] - self.computed[i])

    def decoding(self) -> np.ndarray:
        """Requests whose next step is a decode, by trace position."""
        return np.flatnonzero(self.is_dec)

    def fits(self, i: int) -> bool:
        return int(self.blocks_for(self.prompt[i] + self.gen[i])) <= self.free

    def admit(self, i: int) -> None:
        """Start request ``i``'s prefill: it holds the KV blocks of its whole sequence so far."""
        need = int(self.blocks_for(self.prompt[i] + self.gen[i]))
        if need > self.free:
            raise SchedlabError(f"builder admitted request {i} without room for its {need} KV blocks")
        self.free -= need
        self.blocks[i] = need
        self.admit_seq[i] = self._seq
        self._seq += 1
        self.n_active += 1
        self.prefilling.append(i)
        self.log.scheduled(i, self.now)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> BatchRun:
        wall0 = time.perf_counter()
        n = len(self.arrival)
        builder, arrival = self.builder, self.arrival
        nxt = self.done = 0
        next_sample = 0.0
        samples: list[tuple] = []
        batch_log: list[tuple] | None = [] if self.record else None
        self.token_times = [[] for _ in range(n)] if self.record else None
        while self.done < n:
            while nxt < n and arrival[nxt] <= self.now:
                builder.arrive(nxt)
                nxt += 1
            while self.now >= next_sample:
                samples.append((next_sample, self.kv_frac, builder.n_waiting(), self.n_active))
                next_sample += self.sample_s
            if self.n_active == 0 and not builder.n_waiting():
                self.now = float(arrival[nxt])
                continue
            mode = builder.steady()
            if mode and self._stretch(mode, arrival[nxt] if nxt < n else np.inf, next_sample):
                continue
            dec, chunks = builder.build(self.now)
            if len(dec) == 0 and not chunks:
                if nxt >= n:
                    raise SchedlabError(f"{builder.name}: empty batch with nothing left to arrive (engine stalled)")
                self.now = float(arrival[nxt])
                continue
            self._run_batch(np.asarray(dec, np.int64), chunks, batch_log)
        while self.now >= next_sample:
            samples.append((next_sample, self.kv_frac, builder.n_waiting(), self.n_active))
            next_sample += self.sample_s
        return self._result(samples, batch_log, wall0)

    def _run_batch(self, dec: np.ndarray, chunks: list[tuple[int, int]], batch_log) -> None:
        dec, chunks = self._make_room(dec, chunks)
        if len(dec) == 0 and not chunks:
            return
        comp = self.computed[dec]
        grow = self.blocks_for(comp + 1) - self.blocks[dec]
        self.blocks[dec] += grow
        self.free -= int(grow.sum())
        self.peak = max(self.peak, self.kv.capacity_blocks - self.free)
        n_dec = len(dec)
        ctx = int(comp.sum()) + n_dec
        pre_tokens = pairs = 0
        for i, c in chunks:
            j = int(self.computed[i])
            pre_tokens += c
            pairs += c * j + c * (c + 1) // 2
        dt = float(self.step_time(0, pre_tokens, n_dec, ctx, pairs))
        if batch_log is not None:
            batch_log.append((self.now, dt, pre_tokens, n_dec, len(chunks), self.n_active,
                              self.kv.capacity_blocks - self.free))
        self.now += dt
        self.busy += dt
        self.batches += 1
        self.computed[dec] = comp + 1
        emits = [dec]
        for i, c in chunks:
            self.computed[i] += c
            if self.computed[i] == self.prompt[i] + self.gen[i]:
                self.prefilling.remove(i)
                emits.append(np.array([i], np.int64))
        emitted = np.concatenate(emits) if len(emits) > 1 else dec
        self._emit(emitted, self.now)
        self.gen[emitted] += 1
        self.is_dec[emitted] = True
        self._retire(emitted)

    def _make_room(self, dec, chunks):
        """Preempt (last admitted first) until the decodes' new KV blocks fit."""
        need = int((self.blocks_for(self.computed[dec] + 1) > self.blocks[dec]).sum()) if len(dec) else 0
        while need > self.free:
            active = np.flatnonzero(self.admit_seq >= 0)
            v = int(active[np.argmax(self.admit_seq[active])])
            if v in dec:
                dec = dec[dec != v]
            chunks = [(i, c) for i, c in chunks if i != v]
            self.free += int(self.blocks[v])
            self.blocks[v] = 0
            self.computed[v] = 0
            self.admit_seq[v] = -1
            self.is_dec[v] = False
            if v in self.prefilling:
                self.prefilling.remove(v)
            self.n_active -= 1
            self.log.preemptions[v] += 1
            self.builder.requeue(v)
            need = int((self.blocks_for(self.computed[dec] + 1) > self.blocks[dec]).sum()) if len(dec) else 0
        return dec, chunks

    def _emit(self, idx: np.ndarray, t: float) -> None:
        """Record one token of each request in ``idx`` at ``t``: gaps per class."""
        g = t - self.log.last_tok[idx]
        later = ~np.isnan(g)
        if later.any():
            gi, ci = g[later], self.cls[idx[later]]
            for k in np.unique(ci):
                self.hists[k].add(gi[ci == k])
            self.all_gaps.add(gi[ci < len(self.class_names)])
        self.log.tokens(idx, t)
        if self.token_times is not None:
            for i in idx.tolist():
                self.token_times[i].append(t)

    def _retire(self, idx: np.ndarray) -> None:
        fin = idx[self.gen[idx] >= self.output[idx]]
        if fin.size:
            self.log.finish[fin] = self.now
            self.free += int(self.blocks[fin].sum())
            self.blocks[fin] = 0
            self.admit_seq[fin] = -1
            self.is_dec[fin] = False
            self.n_active -= fin.size
            self.done += fin.size

    def _stretch(self, mode: int, next_arrival: float, next_sample: float) -> bool:
        """Run ``k >= 2`` all-decode batches in closed form; False when fewer would run."""
        if self.prefilling:
            return False
        dec = self.decoding()
        if dec.size == 0:
            return False
        n_dec = dec.size
        dt0 = float(self.step_time(0, 0, n_dec, int(self.computed[dec].sum()) + n_dec))
        slope = self.step_time.ctx_tokens * n_dec  # each batch's context grows by one token per request
        stop = min(next_sample, next_arrival if mode == UNTIL_ARRIVAL else np.inf)
        bs = self.kv.block_size
        # generated and output counts stand for the kernels' sequence and final lengths: their
        # difference is the tokens left; KV here has no encoder blocks
        k = kernels.stretch_steps(dec, self.gen, self.computed, self.blocks, self.output, self.free, 0, bs,
                                  self.now, stop, dt0, slope)
        if k < 2:
            return False
        dts = dt0 + slope * np.arange(k, dtype=float)
        ends = self.now + np.cumsum(dts)
        # gaps: each request's first one from its own last token, then k - 1 shared ones
        first = ends[0] - self.log.last_tok[dec]
        ci = self.cls[dec]
        for c in np.unique(ci):
            self.hists[c].add(first[ci == c])
            self.hists[c].add_repeated(dts[1:], int((ci == c).sum()))
        measured = ci < len(self.class_names)
        self.all_gaps.add(first[measured])
        self.all_gaps.add_repeated(dts[1:], int(measured.sum()))
        self.log.lockstep(dec, ends, dts)
        if self.token_times is not None:
            for i in dec.tolist():
                self.token_times[i].extend(ends.tolist())
        added, _ = kernels.advance(dec, self.gen, self.computed, self.blocks, self.output, 0, bs, k)
        self.free -= added
        self.peak = max(self.peak, self.kv.capacity_blocks - self.free)
        self.now = float(ends[-1])
        self.busy += float(dts.sum())
        self.batches += k
        self._retire(dec)
        return True

    def _result(self, samples, batch_log, wall0) -> BatchRun:
        names = self.class_names
        gaps = {name: self.hists[k] for k, name in enumerate(names)}
        gaps["all"] = self.all_gaps
        log_frame = None
        if batch_log is not None:
            log_frame = pd.DataFrame(batch_log, columns=["start_s", "dt_s", "prefill_tokens", "n_decode",
                                                         "n_chunks", "n_active", "kv_blocks"])
        timeline = pd.DataFrame(samples, columns=["t_s", "kv_frac", "waiting", "active"])
        return BatchRun(
            requests=self.log.frame().assign(measured=self.cls < len(names)),
            gaps=gaps,
            batches=self.batches,
            busy_s=self.busy,
            peak_kv_frac=self.peak / self.kv.capacity_blocks,
            timeline=timeline,
            wall_s=time.perf_counter() - wall0,
            batch_log=log_frame,
            token_times=self.token_times,
        )
