"""Compiled passes over the running requests, the engine's per-step arithmetic.

Each takes the running requests' trace positions (``run``) and the engine's per-request
arrays (``seq``: prompt + tokens generated, ``computed``: tokens whose KV is written,
``blocks``: KV blocks held, ``total``: sequence length at completion) and loops once, in
place of a dozen small numpy operations whose fixed costs dominate at a few dozen requests.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _blocks(tokens, enc, bs):
    """KV blocks holding ``tokens`` tokens, plus ``enc`` cross-attention blocks."""
    return enc + (tokens + bs - 1) // bs


@numba.njit(cache=True, nogil=True)
def running_totals(run, seq, computed, blocks, prompt, enc, bs, wants):
    """Decode rows (one token of a generated sequence), their summed context, the tokens the
    running requests want this step (each written to ``wants``), and the KV blocks serving all
    of them would add."""
    n_dec = ctx = want = grow = 0
    for k in range(run.size):
        r = run[k]
        w = seq[r] - computed[r]
        wants[k] = w
        want += w
        if w == 1 and seq[r] > prompt[r]:
            n_dec += 1
            ctx += seq[r]
        grow += _blocks(seq[r], enc, bs) - blocks[r]
    return n_dec, ctx, want, grow


@numba.njit(cache=True, nogil=True)
def serve_in_order(run, seq, computed, blocks, enc, bs, free, budget):
    """vLLM's running pass while nothing needs preempting: each running request in order is
    given what it needs within the token budget left, until the budget is spent or a request's
    new KV blocks exceed the free ones. Returns how many were served, the tokens of each, and
    the blocks and tokens they take in all."""
    tokens = np.empty(run.size, dtype=np.int64)
    used_blocks = used_tokens = 0
    k = 0
    while k < run.size and budget > 0:
        r = run[k]
        n = min(seq[r] - computed[r], budget)
        need = max(0, _blocks(computed[r] + n, enc, bs) - blocks[r])
        if need > free:
            break
        tokens[k] = n
        free -= need
        budget -= n
        used_blocks += need
        used_tokens += n
        k += 1
    return k, tokens[:k], used_blocks, used_tokens


@numba.njit(cache=True, nogil=True)
def stretch_steps(run, seq, computed, blocks, total, free, enc, bs, now, t_join, dt0, slope):
    """How many decode-only steps of durations ``dt0 + slope * j`` can run back to back: up
    to the first completion, while their new KV blocks fit in ``free``, and up to the first
    step that ends at or after ``t_join`` (when a waiting request can join; ``inf`` if none)."""
    k = 1 << 62
    for r in run:
        k = min(k, total[r] - seq[r])
    if np.isfinite(t_join):
        elapsed = 0.0
        for j in range(k):
            elapsed += dt0 + slope * j
            if now + elapsed >= t_join:
                k = j + 1
                break
    if new_blocks(run, computed, blocks, enc, bs, k) > free:
        lo, hi = 0, k  # the largest k whose blocks fit (the count is monotone in k)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if new_blocks(run, computed, blocks, enc, bs, mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        k = lo
    return k


@numba.njit(cache=True, nogil=True)
def lockstep_times(now, dt0, slope, k):
    """The durations ``dt0 + slope * j`` of ``k`` decode steps run back to back from ``now``,
    and their end times, summed in order (as ``now + np.cumsum(durations)``)."""
    dts = np.empty(k)
    ends = np.empty(k)
    elapsed = 0.0
    for j in range(k):
        d = dt0 + slope * np.float64(j)
        dts[j] = d
        elapsed += d
        ends[j] = now + elapsed
    return dts, ends


@numba.njit(cache=True, nogil=True)
def new_blocks(run, computed, blocks, enc, bs, k):
    """The KV blocks that ``k`` decode steps of every request of ``run`` add to those held."""
    extra = 0
    for r in run:
        extra += _blocks(computed[r] + k, enc, bs) - blocks[r]
    return extra


@numba.njit(cache=True, nogil=True)
def advance(run, seq, computed, blocks, total, enc, bs, k):
    """Apply ``k`` decode steps to every running request; return the KV blocks added and
    how many requests completed."""
    added = finished = 0
    for r in run:
        seq[r] += k
        computed[r] += k
        b = _blocks(computed[r], enc, bs)
        added += b - blocks[r]
        blocks[r] = b
        if seq[r] >= total[r]:
            finished += 1
    return added, finished


@numba.njit(cache=True, nogil=True)
def emit(idx, seq, total):
    """Each request of ``idx`` generated one token; return how many are now complete."""
    finished = 0
    for r in idx:
        seq[r] += 1
        if seq[r] >= total[r]:
            finished += 1
    return finished


@numba.njit(cache=True, nogil=True)
def complete(idx, seq, total, done=True):
    """The requests of ``idx`` that generated all their tokens (with ``done`` false, those
    that did not), in ``idx``'s order."""
    out = np.empty(idx.size, dtype=np.int64)
    n = 0
    for r in idx:
        if (seq[r] >= total[r]) == done:
            out[n] = r
            n += 1
    return out[:n]


@numba.njit(cache=True, nogil=True)
def finish(idx, blocks, finish_s, now):
    """The requests of ``idx`` finish at ``now``: their KV blocks are let go; returns how many."""
    freed = 0
    for r in idx:
        finish_s[r] = now
        freed += blocks[r]
        blocks[r] = 0
    return freed


@numba.njit(cache=True, nogil=True)
def apply(idx, num, seq, computed, blocks, prompt, enc, bs, emits, n_emit):
    """Carry out part of a step plan: request ``idx[k]`` computes ``num[k]`` tokens, growing
    its KV blocks. Returns the blocks added, the decode rows and their summed context, the
    prefill tokens and their attention (query, key) pairs, and the fill of ``emits``, where the
    requests that complete their known tokens are written from ``emits[n_emit]`` on."""
    added = n_dec = ctx = n_pre = pairs = 0
    for k in range(idx.size):
        r, n = idx[k], num[k]
        c = computed[r]
        if n == 1 and seq[r] > prompt[r] and c + 1 == seq[r]:
            n_dec += 1
            ctx += seq[r]
        else:
            n_pre += n
            pairs += n * c + n * (n + 1) // 2
        c += n
        computed[r] = c
        b = _blocks(c, enc, bs)
        if b > blocks[r]:
            added += b - blocks[r]
            blocks[r] = b
        if c == seq[r]:
            emits[n_emit] = r
            n_emit += 1
    return added, n_dec, ctx, n_pre, pairs, n_emit


@numba.njit(cache=True, nogil=True)
def decoding(run, seq, computed, prompt, decodes=True):
    """The running requests of ``run`` that decode next (one token of a generated sequence),
    or with ``decodes`` false the others (a prefill chunk or recompute), in ``run``'s order."""
    out = np.empty(run.size, dtype=np.int64)
    n = 0
    for r in run:
        if (seq[r] - computed[r] == 1 and seq[r] > prompt[r]) == decodes:
            out[n] = r
            n += 1
    return out[:n]


@numba.njit(cache=True, nogil=True)
def growth(idx, num, computed, blocks, enc, bs):
    """The KV blocks running requests ``idx`` add when each computes ``num[k]`` tokens more."""
    extra = 0
    for k in range(idx.size):
        r = idx[k]
        extra += _blocks(computed[r] + num[k], enc, bs) - blocks[r]
    return extra


@numba.njit(cache=True, nogil=True)
def station_departures(arrival, service):
    """Departures from one first-come-first-served server of fixed ``service`` seconds:
    ``d[i] = max(arrival[i], d[i-1]) + service`` (Lindley's recursion)."""
    out = np.empty(arrival.size)
    free = -np.inf
    for i in range(arrival.size):
        start = arrival[i] if arrival[i] > free else free
        free = start + service
        out[i] = free
    return out
