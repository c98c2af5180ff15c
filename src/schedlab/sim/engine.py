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
closed form (numpy), up to the next completion, arrival or KV-block shortage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.policies.base import Policy
from schedlab.results import RequestLog
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
        n = len(self.arrival)
        arrival, visible, prompt, output = self.arrival, self.visible, self.prompt, self.output
        computed = np.zeros(n, dtype=np.int64)
        gen = np.zeros(n, dtype=np.int64)
        blocks = np.zeros(n, dtype=np.int64)
        log = RequestLog(self.trace)
        last_tok, max_gap, sum_gap, gaps = log.last_tok, log.max_gap, log.sum_gap, log.gaps
        rid = self.trace["request_id"].to_numpy(dtype=np.int64)
        jobs = [SimJob(int(rid[i]), float(arrival[i]), float(self.sizes[i]), i, int(prompt[i])) for i in range(n)]

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
            gen_r, comp_r = gen[run_arr], computed[run_arr]
            want = prompt[run_arr] + gen_r - comp_r
            if self._steady(run_arr.size, gen_r, want, len(policy)):
                k, dts, ends, new_blocks = self._stretch(run_arr, comp_r, gen_r, blocks[run_arr], output, free, now, nxt)
                if k >= 2:
                    first_gap = ends[0] - last_tok[run_arr]
                    gaps.add(first_gap)
                    gaps.add_repeated(dts[1:], run_arr.size)
                    max_gap[run_arr] = np.maximum(max_gap[run_arr], np.maximum(first_gap, dts[1:].max()))
                    sum_gap[run_arr] += first_gap + dts[1:].sum()
                    free -= int(new_blocks.sum() - blocks[run_arr].sum())
                    blocks[run_arr] = new_blocks
                    peak = max(peak, cfg.kv_capacity_blocks - free)
                    computed[run_arr] = comp_r + k
                    gen[run_arr] = gen_r + k
                    now = float(ends[-1])
                    busy += float(dts.sum())
                    last_tok[run_arr] = now
                    steps += k
                    if k == int((output[run_arr] - gen_r).min()):
                        running, done, free = self._retire(running, gen, output, log.finish, now, blocks, free, done)
                    continue

            # -- one scheduler step ---------------------------------------------------------
            budget = cfg.max_num_batched_tokens
            sched: dict[int, int] = {}
            preempted = False
            i = 0
            # Fast path: every running request gets all it needs within the token and KV
            # budgets, so the per-request pass below (which may preempt) has nothing to decide.
            if run_arr.size:
                grow = self._blocks_for(comp_r + want) - blocks[run_arr]
                total_want, total_grow = int(want.sum()), int(grow.sum())
                if total_want <= budget and total_grow <= free:
                    free -= total_grow
                    blocks[run_arr] += grow
                    budget -= total_want
                    sched = dict(zip(running, want.tolist()))
                    i = len(running)
            while i < len(running) and budget > 0:
                r = running[i]
                new = min(int(prompt[r] + gen[r] - computed[r]), budget)
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

            n_enc = 0
            if not preempted:
                enc_left = cfg.encoder_per_step if cfg.encoder_frames else 1 << 30
                while len(policy) and budget > 0 and len(running) < cfg.max_num_seqs:
                    t0 = clock()
                    job = policy.peek(now)
                    overhead += clock() - t0
                    r = job.index
                    if cfg.encoder_frames and enc_left == 0:
                        break
                    full = int(prompt[r] + gen[r])
                    if self._blocks_for(full) > free:  # admission needs the whole sequence to fit
                        break
                    new = min(full, budget)
                    need = self._blocks_for(new)
                    t0 = clock()
                    policy.pop(now)
                    overhead += clock() - t0
                    free -= need
                    blocks[r] = need
                    sched[r] = new
                    budget -= new
                    running.append(r)
                    if cfg.encoder_frames:
                        enc_left -= 1
                        n_enc += 1
                    log.scheduled(r, now)

            if not sched:
                if not running and len(policy):
                    raise SchedlabError("engine stalled: a waiting request can never be admitted")
                continue

            peak = max(peak, cfg.kv_capacity_blocks - free)
            idx = np.fromiter(sched.keys(), dtype=np.int64, count=len(sched))
            num = np.fromiter(sched.values(), dtype=np.int64, count=len(sched))
            gen_i, comp_i, seq_i = gen[idx], computed[idx], prompt[idx] + gen[idx]
            is_decode = (num == 1) & (gen_i >= 1) & (seq_i - comp_i == 1)
            n_dec = int(np.count_nonzero(is_decode))
            ctx = int(comp_i[is_decode].sum()) + n_dec
            dt = float(step_time(n_enc, int(num.sum()) - n_dec, n_dec, ctx))
            now += dt
            busy += dt
            steps += 1
            comp_i += num
            computed[idx] = comp_i
            emits = idx[comp_i == seq_i]
            log.tokens(emits, now)
            gen[emits] += 1
            if (gen[emits] >= output[emits]).any():
                running, done, free = self._retire(running, gen, output, log.finish, now, blocks, free, done)

        return SimResult(
            requests=log.frame(),
            gaps=gaps,
            steps=steps,
            busy_s=busy,
            peak_kv_blocks=peak,
            sched_overhead_s=overhead,
            wall_s=time.perf_counter() - wall0,
        )

    # -- helpers --------------------------------------------------------------------------
    def _steady(self, n_running, gen_r, want, n_waiting) -> bool:
        """True when every running request decodes and no waiting request can join."""
        if n_running == 0 or n_running > self.cfg.max_num_batched_tokens:
            return False
        if n_waiting and n_running < self.cfg.max_num_seqs:
            return False
        return bool(((gen_r >= 1) & (want == 1)).all())

    def _stretch(self, run_arr, base, gen_r, blocks_r, output, free, now, nxt):
        """Steps that can run back to back: their count, durations, end times, and the
        running requests' KV blocks after them."""
        k = int((output[run_arr] - gen_r).min())
        bs = self.cfg.block_size
        dec_blocks = blocks_r - self.enc_blocks

        def extra(steps: int) -> int:
            return int((-(-(base + steps) // bs) - dec_blocks).sum())

        if extra(k) > free:  # largest k whose new blocks fit (extra is monotone in k)
            lo, hi = 0, k
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if extra(mid) <= free else (lo, mid - 1)
            k = lo
        if k < 2:
            return k, None, None, None
        n_dec = run_arr.size
        ctx0 = int(base.sum()) + n_dec
        dts = np.asarray(self.step_time(0, 0, n_dec, ctx0 + n_dec * np.arange(k)), dtype=float)
        ends = now + np.cumsum(dts)
        if nxt < len(self.arrival) and n_dec < self.cfg.max_num_seqs:
            stop = int(np.searchsorted(ends, self.visible[nxt])) + 1
            if stop < k:
                k, dts, ends = stop, dts[:stop], ends[:stop]
        return k, dts, ends, self._blocks_for(base + k)

    def _retire(self, running, gen, output, finish, now, blocks, free, done):
        """Remove finished requests, freeing their KV blocks."""
        keep = []
        for r in running:
            if gen[r] >= output[r]:
                finish[r] = now
                free += int(blocks[r])
                blocks[r] = 0
                done += 1
            else:
                keep.append(r)
        return keep, done, free
