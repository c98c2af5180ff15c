"""schedlab's discrete-event serving engine (the ``sim`` backend).

It follows vLLM v1's scheduler step by step: every step first serves the running requests in
admission order (one decode token each, or the next prefill chunk) under a token budget,
allocating paged KV blocks and preempting by recompute when memory runs out (the victim is the
policy's choice); if nothing was preempted it then admits waiting requests in the policy's
order while the batch, token, encoder and KV budgets allow (a request is admitted only if its
whole current sequence fits in the free blocks, although only its first chunk is allocated). Each request needs
``prompt + generated - computed`` tokens per step, so prefill chunks, decodes and recompute
after preemption are one rule. The clock advances by the step-time model.

Stretches where every running request decodes and nothing can join are fast-forwarded in
closed form, up to the next completion, arrival or KV-block shortage. Per-request state lives
in numpy arrays; the passes over the running requests are compiled (:mod:`.kernels`), while
the policy, admissions and preemptions stay in Python.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.policies.base import Policy
from schedlab.results import RequestLog
from schedlab.sim import kernels
from schedlab.sim.gaps import GapHistogram
from schedlab.sim.steptime import StepTimeModel


@dataclass(frozen=True)
class EngineConfig:
    """Engine limits. ``encoder_frames`` > 0 marks an encoder–decoder model (Whisper: 1500):
    each admission runs the encoder and holds that many cross-attention KV slots."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    kv_capacity_blocks: int = 1 << 40
    encoder_frames: int = 0
    max_encoder_per_step: int | None = None

    @property
    def encoder_per_step(self) -> int:
        if self.max_encoder_per_step is not None:
            return self.max_encoder_per_step
        if self.encoder_frames == 0:
            return 1 << 30
        return max(1, self.max_num_batched_tokens // self.encoder_frames)


def check_fits(trace: pd.DataFrame, config: EngineConfig) -> None:
    """Fail clearly if some request could never fit in the KV cache on its own."""
    bs = config.block_size
    tokens = trace["prompt_tokens"].to_numpy(np.int64) + trace["output_tokens"].to_numpy(np.int64)
    worst = -(-config.encoder_frames // bs) + -(-tokens // bs)
    if worst.size and worst.max() > config.kv_capacity_blocks:
        raise SchedlabError(
            f"a request needs {int(worst.max())} KV blocks but the engine holds {config.kv_capacity_blocks}"
        )


@dataclass(slots=True)
class SimJob:
    """The policy's view of a request (see :mod:`schedlab.policies.base`)."""

    request_id: int
    arrival_s: float
    size: float
    index: int
    prompt_tokens: int


@dataclass
class SimResult:
    requests: pd.DataFrame
    gaps: GapHistogram
    steps: int
    busy_s: float
    peak_kv_blocks: int
    sched_overhead_s: float
    wall_s: float


class Simulator:
    """One run of one policy over one trace."""

    def __init__(
        self,
        trace: pd.DataFrame,
        policy: Policy,
        step_time: StepTimeModel,
        config: EngineConfig,
        sizes: np.ndarray,
    ) -> None:
        self.trace = trace
        self.policy = policy
        self.step_time = step_time
        self.cfg = config
        self.arrival = trace["arrival_s"].to_numpy(dtype=float)
        if np.any(np.diff(self.arrival) < 0):
            raise SchedlabError("trace is not sorted by arrival_s")
        self.visible = self.arrival + step_time.frontend_s
        self.prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
        self.output = trace["output_tokens"].to_numpy(dtype=np.int64)
        if np.any(self.output < 1) or np.any(self.prompt < 1):
            raise SchedlabError("every request needs prompt_tokens >= 1 and output_tokens >= 1")
        self.sizes = np.asarray(sizes, dtype=float)
        self.enc_blocks = -(-config.encoder_frames // config.block_size)
        check_fits(trace, config)

    # -- per-request KV -------------------------------------------------------------------
    def _blocks_for(self, tokens):
        """KV blocks (cross-attention included) that hold ``tokens`` decoder tokens; vectorises."""
        return self.enc_blocks + -(-tokens // self.cfg.block_size)

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        cfg, policy, step_time = self.cfg, self.policy, self.step_time
        bs, enc = cfg.block_size, self.enc_blocks
        n = len(self.arrival)
        visible, prompt = self.visible, self.prompt
        total = prompt + self.output  # sequence length when a request completes
        seq = prompt.copy()  # prompt + tokens generated so far
        computed = np.zeros(n, dtype=np.int64)
        blocks = np.zeros(n, dtype=np.int64)
        log = RequestLog(self.trace)
        rid = self.trace["request_id"].to_numpy(dtype=np.int64)
        jobs = [SimJob(int(rid[i]), float(self.arrival[i]), float(self.sizes[i]), i, int(prompt[i])) for i in range(n)]

        free = cfg.kv_capacity_blocks
        peak = 0
        running: list[int] = []
        nxt = done = steps = 0
        now = busy = 0.0
        overhead = 0.0
        clock = time.perf_counter

        while done < n:
            t0 = clock()
            while nxt < n and visible[nxt] <= now:
                policy.push(jobs[nxt])
                nxt += 1
            overhead += clock() - t0
            if not running and not len(policy):
                now = float(visible[nxt])
                continue

            run_arr = np.fromiter(running, dtype=np.int64, count=len(running))
            n_dec, ctx, total_want, total_grow = kernels.running_totals(run_arr, seq, computed, blocks, prompt, enc, bs)
            if self._steady(run_arr.size, n_dec, len(policy)):
                k, dts = self._stretch(run_arr, seq, computed, blocks, total, free, now, nxt, ctx)
                if k >= 2:
                    ends = now + np.cumsum(dts)
                    log.lockstep(run_arr, ends, dts)
                    added, finished = kernels.advance(run_arr, seq, computed, blocks, total, enc, bs, k)
                    free -= added
                    peak = max(peak, cfg.kv_capacity_blocks - free)
                    now = float(ends[-1])
                    busy += float(dts.sum())
                    steps += k
                    if finished:
                        running, done, free = self._retire(running, run_arr, seq, total, log, now, blocks, free, done)
                    continue

            # -- one scheduler step ---------------------------------------------------------
            budget = cfg.max_num_batched_tokens
            # Fast path: every running request gets all it needs within the token and KV
            # budgets, so the per-request pass (which may preempt) has nothing to decide.
            whole = total_want <= budget and total_grow <= free
            if whole:
                kernels.serve_all(run_arr, seq, computed, blocks, enc, bs)
                free -= total_grow
                budget -= total_want
                sched, preempted = None, False
            else:
                sched, budget, free, preempted, spent = self._serve_running(
                    running, seq, computed, blocks, budget, free, log, jobs, now
                )
                overhead += spent

            admitted: list[tuple[int, int]] = []
            if not preempted:
                enc_left = cfg.encoder_per_step if cfg.encoder_frames else 1 << 30
                while len(policy) and budget > 0 and len(running) < cfg.max_num_seqs and enc_left:
                    t0 = clock()
                    r = policy.peek(now).index
                    overhead += clock() - t0
                    full = int(seq[r])
                    if enc + -(-full // bs) > free:  # admission needs the whole sequence to fit
                        break
                    new = min(full, budget)
                    need = enc + -(-new // bs)
                    t0 = clock()
                    policy.pop(now)
                    overhead += clock() - t0
                    free -= need
                    blocks[r] = need
                    budget -= new
                    running.append(r)
                    admitted.append((r, new))
                    log.scheduled(r, now)
                    if cfg.encoder_frames:
                        enc_left -= 1
            n_enc = len(admitted) if cfg.encoder_frames else 0

            if whole:
                if not run_arr.size and not admitted:
                    raise SchedlabError("engine stalled: a waiting request can never be admitted")
                n_pre = total_want - n_dec + sum(new for _, new in admitted)
                emits = run_arr
            else:
                for r, new in admitted:
                    sched[r] = new
                if not sched:
                    if not running and len(policy):
                        raise SchedlabError("engine stalled: a waiting request can never be admitted")
                    continue
                idx = np.fromiter(sched.keys(), dtype=np.int64, count=len(sched))
                num = np.fromiter(sched.values(), dtype=np.int64, count=len(sched))
                comp_i, seq_i = computed[idx] + num, seq[idx]
                is_decode = (num == 1) & (seq_i > prompt[idx]) & (seq_i - comp_i == 0)
                n_dec = int(np.count_nonzero(is_decode))
                ctx = int(seq_i[is_decode].sum())
                n_pre = int(num.sum()) - n_dec
                computed[idx] = comp_i
                emits = idx[comp_i == seq_i]
                admitted = []
            for r, new in admitted:
                computed[r] = new
            done_prefill = [r for r, new in admitted if new == seq[r]]
            if done_prefill:
                emits = np.concatenate((emits, done_prefill))

            peak = max(peak, cfg.kv_capacity_blocks - free)
            dt = float(step_time(n_enc, n_pre, n_dec, ctx))
            now += dt
            busy += dt
            steps += 1
            log.tokens(emits, now)
            if kernels.emit(emits, seq, total):
                running, done, free = self._retire(running, emits, seq, total, log, now, blocks, free, done)

        return SimResult(
            requests=log.frame(),
            gaps=log.gaps,
            steps=steps,
            busy_s=busy,
            peak_kv_blocks=peak,
            sched_overhead_s=overhead,
            wall_s=time.perf_counter() - wall0,
        )

    def _serve_running(self, running, seq, computed, blocks, budget, free, log, jobs, now):
        """The running requests one by one in admission order, each given what it needs
        within the token budget, preempting the policy's victims while KV blocks run short.
        Returns the step's ``{request: tokens}``, the budget and free blocks left, whether
        anything was preempted, and the time spent in the policy."""
        policy, clock = self.policy, time.perf_counter
        sched: dict[int, int] = {}
        overhead = 0.0
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            new = min(int(seq[r] - computed[r]), budget)
            need = self._blocks_for(int(computed[r]) + new) - blocks[r]
            scheduled = True
            while need > free:
                v = policy.victim([jobs[x] for x in running], now).index
                pos = running.index(v)
                running.pop(pos)
                if v in sched:
                    budget += sched.pop(v)
                if pos < i:
                    i -= 1
                free += int(blocks[v])
                blocks[v] = 0
                computed[v] = 0
                log.preemptions[v] += 1
                t0 = clock()
                policy.push(jobs[v])
                overhead += clock() - t0
                preempted = True
                if v == r:
                    scheduled = False
                    break
            if not scheduled:
                break
            free -= need
            blocks[r] += need
            sched[r] = new
            budget -= new
            i += 1
        return sched, budget, free, preempted, overhead

    # -- helpers --------------------------------------------------------------------------
    def _steady(self, n_running, n_decoding, n_waiting) -> bool:
        """True when every running request decodes and no waiting request can join."""
        if n_running == 0 or n_running > self.cfg.max_num_batched_tokens:
            return False
        if n_waiting and n_running < self.cfg.max_num_seqs:
            return False
        return n_decoding == n_running

    def _stretch(self, run_arr, seq, computed, blocks, total, free, now, nxt, ctx):
        """Decode-only steps that can run back to back from ``now`` (``ctx``: the running
        requests' summed context): their count and durations."""
        n_dec, step_time = run_arr.size, self.step_time
        joins = nxt < len(self.arrival) and n_dec < self.cfg.max_num_seqs
        t_join = float(self.visible[nxt]) if joins else np.inf
        dt0 = float(step_time(0, 0, n_dec, ctx))
        slope = step_time.ctx_tokens * n_dec  # each step's context grows by one token per request
        k = kernels.stretch_steps(
            run_arr, seq, computed, blocks, total, free, self.enc_blocks, self.cfg.block_size, now, t_join, dt0, slope
        )
        if k < 2:
            return k, None
        return k, dt0 + slope * np.arange(k, dtype=float)

    def _retire(self, running, candidates, seq, total, log, now, blocks, free, done):
        """Remove the complete requests among ``candidates`` from the running list, freeing
        their KV blocks."""
        finished = candidates[seq[candidates] >= total[candidates]]
        log.finish[finished] = now
        free += int(blocks[finished].sum())
        blocks[finished] = 0
        gone = set(finished.tolist())
        return [r for r in running if r not in gone], done + len(gone), free
