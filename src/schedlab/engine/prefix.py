"""vLLM v1's automatic prefix cache, as the engine's KV block pool when a trace shares tokens.

The rules are vLLM's (``vllm/v1/core``: ``block_pool.py``, ``kv_cache_utils.py``,
``single_type_kv_cache_manager.py``, ``kv_cache_manager.py``), for one full-attention group:

- **Block hashes.** A full block of ``block_size`` tokens is named by a hash chained over its
  tokens and everything before it (``hash_block_tokens``): two blocks share a name exactly when
  their whole prefixes are equal. Each request's sequence is its prompt (from the trace's
  sharing data, :mod:`schedlab.sharing`) then its output, every output token
  :data:`~schedlab.sharing.OUTPUT_TOKEN`. Names here are dense ids of 128-bit chained hashes.
- **Caching.** A request's blocks are cached when they are allocated for scheduled tokens:
  after each allocation, every block that the request's computed-plus-scheduled tokens fill
  (``min(computed + scheduled, known tokens) // block_size``) enters the hash map, prompt
  and output blocks alike, before the step runs. Blocks are not de-duplicated: two requests
  that compute the same prefix each cache their own block under the same name, and a lookup
  finds the earliest cached one still there.
- **Hits.** A waiting request (no computed tokens: a new one, or one preempted) looks up the
  longest run of named blocks from its start, at most ``(known tokens - 1) // block_size``
  blocks (at least one token is always computed, for its logits). Hit blocks are *touched*:
  their reference count rises, and a free one leaves the free queue.
- **Admission.** The whole sequence must fit: ``blocks(seq) - hit blocks + free hit blocks``
  (those a touch takes out of the free queue) at most the free blocks, which count the
  evictable cached ones.
- **Free queue and eviction.** Free blocks form one queue: blocks without a name first (a
  released one is put at the head, so reused first), then never-used blocks, then named
  blocks in least-recently-released order. A request's blocks are released in reverse (its
  tail first), so of one request's named blocks the tail is evicted first. Allocation takes
  from the head; a named block taken from the queue loses its name (evicted). Blocks a
  running request still references are never evicted. Preemption releases a request's blocks
  the same way; its recompute looks its own blocks up again.

The pool's state is a handful of int64 arrays worked on by compiled kernels, so a step costs a
few calls whatever the number of blocks it touches. Block identities are the pool's own labels
(a vLLM block id is another label for the same block): what is cached and evicted is the same.
"""

from __future__ import annotations

import numba
import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.sharing import OUTPUT_TOKEN, check_sharing, flat_prompt_tokens, sharing_column

#: Columns of the per-block state: reference count, name (-1: none), free-queue links
#: (named free blocks only), and links among blocks of one name (in caching order).
REF, NAME, PREV, NEXT, DPREV, DNEXT = range(6)
#: Scalars: head and tail of the named free blocks, their count, the unnamed released blocks
#: on the stack, ids issued so far, the engine's capacity in blocks, and the evictions so far.
HEAD, TAIL, NLRU, TOP, ISSUED, CAPACITY, EVICTED = range(7)
#: Requests hashed per batch (bounds the memory of the prompt tokens held at once).
_BATCH_TOKENS = 1 << 25


def uses_prefix_cache(trace: pd.DataFrame, prefix_caching: bool, encoder_frames: int = 0) -> bool:
    """Whether a run keeps a prefix cache: caching on and the trace carrying sharing data (a
    trace without it shares nothing, and runs without a cache, as it always has); the sharing
    data is checked then."""
    if not prefix_caching or sharing_column(trace) is None:
        return False
    if encoder_frames:
        raise SchedlabError("prefix caching runs on decoder-only models (vLLM caches no cross-attention)")
    check_sharing(trace.reset_index(drop=True))
    return True


# -- block names ------------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _mix(x):
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def _chain(tokens, toff, total, bs, out_token, lanes, loff):
    """Two independent 64-bit hash chains over each request's full blocks (prompt tokens
    from ``tokens[toff[r]:toff[r+1]]``, then ``out_token`` up to ``total[r]`` tokens), for
    the first ``(total[r] - 1) // bs`` blocks, written to ``lanes[loff[r]:loff[r+1]]``."""
    for r in range(total.size):
        a = np.uint64(0x243F6A8885A308D3)
        b = np.uint64(0x13198A2E03707344)
        p0, plen = toff[r], toff[r + 1] - toff[r]
        k = loff[r]
        for j in range((total[r] - 1) // bs):
            for t in range(j * bs, (j + 1) * bs):
                tok = np.uint64(tokens[p0 + t]) if t < plen else np.uint64(out_token)
                a = _mix(a ^ (tok + np.uint64(0x9E3779B97F4A7C15)))
                b = _mix((b + tok) * np.uint64(0xD6E8FEB86659FD93) + np.uint64(0xA0761D6478BD642F))
            # end of block: the chain value names the block and its whole prefix
            a = _mix(a + np.uint64(0x632BE59BD9B4E019))
            b = _mix(b ^ np.uint64(0x8EBC6AF09C88C6E3))
            lanes[k, 0] = a
            lanes[k, 1] = b
            k += 1


def block_names(trace: pd.DataFrame, block_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Each request's full-block names (dense ids, equal exactly when the blocks' prefixes are
    equal), back to back, their offsets, and the number of distinct names."""
    n = len(trace)
    total = (trace["prompt_tokens"].to_numpy(np.int64) + trace["output_tokens"].to_numpy(np.int64))
    counts = np.maximum(total - 1, 0) // block_size
    loff = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    lanes = np.empty((int(loff[-1]), 2), np.uint64)
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    start = 0
    while start < n:
        stop = start + 1
        budget = int(prompt[start])
        while stop < n and budget + prompt[stop] <= _BATCH_TOKENS:
            budget += int(prompt[stop])
            stop += 1
        tokens, toff = flat_prompt_tokens(trace, start, stop)
        _chain(tokens, toff, total[start:stop], block_size, OUTPUT_TOKEN, lanes[loff[start]:loff[stop]],
               loff[start:stop + 1] - loff[start])
        start = stop
    if lanes.shape[0] == 0:
        return np.zeros(0, np.int64), loff, 0
    order = np.lexsort((lanes[:, 1], lanes[:, 0]))
    s = lanes[order]
    new = np.ones(order.size, bool)
    new[1:] = (s[1:, 0] != s[:-1, 0]) | (s[1:, 1] != s[:-1, 1])
    names = np.empty(order.size, np.int64)
    names[order] = np.cumsum(new) - 1
    return names, loff, int(new.sum())


# -- the pool ---------------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _free_count(cnt):
    return cnt[TOP] + (cnt[CAPACITY] - cnt[ISSUED]) + cnt[NLRU]


@numba.njit(cache=True, nogil=True)
def _lru_remove(blk, cnt, b):
    p, q = blk[b, PREV], blk[b, NEXT]
    if p >= 0:
        blk[p, NEXT] = q
    else:
        cnt[HEAD] = q
    if q >= 0:
        blk[q, PREV] = p
    else:
        cnt[TAIL] = p
    blk[b, PREV] = -1
    blk[b, NEXT] = -1
    cnt[NLRU] -= 1


@numba.njit(cache=True, nogil=True)
def _lru_append(blk, cnt, b):
    t = cnt[TAIL]
    blk[b, PREV] = t
    blk[b, NEXT] = -1
    if t >= 0:
        blk[t, NEXT] = b
    else:
        cnt[HEAD] = b
    cnt[TAIL] = b
    cnt[NLRU] += 1


@numba.njit(cache=True, nogil=True)
def _unname(blk, heads, b):
    """Drop block ``b`` from its name's list (evicted)."""
    h = blk[b, NAME]
    p, q = blk[b, DPREV], blk[b, DNEXT]
    if p >= 0:
        blk[p, DNEXT] = q
    else:
        heads[h, 0] = q
    if q >= 0:
        blk[q, DPREV] = p
    else:
        heads[h, 1] = p
    blk[b, NAME] = -1
    blk[b, DPREV] = -1
    blk[b, DNEXT] = -1


@numba.njit(cache=True, nogil=True)
def _name(blk, heads, b, h):
    """Cache block ``b`` under name ``h`` (after any earlier block of that name)."""
    t = heads[h, 1]
    blk[b, NAME] = h
    blk[b, DPREV] = t
    blk[b, DNEXT] = -1
    if t >= 0:
        blk[t, DNEXT] = b
    else:
        heads[h, 0] = b
    heads[h, 1] = b


@numba.njit(cache=True, nogil=True)
def _pop(blk, cnt, stack, heads):
    """The free queue's head: a released unnamed block, else a never-used one, else the
    least recently released named block (evicted)."""
    if cnt[TOP] > 0:
        cnt[TOP] -= 1
        return stack[cnt[TOP]]
    if cnt[ISSUED] < cnt[CAPACITY]:
        b = cnt[ISSUED]
        if b >= blk.shape[0]:
            raise RuntimeError("prefix cache: more blocks in use than the pool was sized for")
        cnt[ISSUED] += 1
        return b
    b = cnt[HEAD]
    if b < 0:
        raise RuntimeError("prefix cache: no free block left")
    _lru_remove(blk, cnt, b)
    _unname(blk, heads, b)
    cnt[EVICTED] += 1
    return b


@numba.njit(cache=True, nogil=True)
def _grow(blk, cnt, stack, heads, table, toff, held, r, tokens, bs):
    """Give request ``r`` the blocks of ``tokens`` tokens."""
    target = (tokens + bs - 1) // bs
    while held[r, 0] < target:
        b = _pop(blk, cnt, stack, heads)
        blk[b, REF] = 1
        table[toff[r] + held[r, 0]] = b
        held[r, 0] += 1


@numba.njit(cache=True, nogil=True)
def _cache(blk, heads, table, toff, held, names, noff, r, tokens, bs):
    """Name request ``r``'s blocks that ``tokens`` tokens fill (vLLM's ``cache_blocks``)."""
    full = tokens // bs
    for j in range(held[r, 1], full):
        _name(blk, heads, table[toff[r] + j], names[noff[r] + j])
    if full > held[r, 1]:
        held[r, 1] = full


@numba.njit(cache=True, nogil=True)
def _lookup(blk, heads, names, noff, r, known, bs):
    """Blocks of request ``r``'s longest cached prefix (at most ``(known - 1) // bs``), and how
    many of them are free (a touch takes them out of the free queue)."""
    n_free = 0
    j = 0
    stop = (known - 1) // bs
    while j < stop:
        b = heads[names[noff[r] + j], 0]
        if b < 0:
            break
        if blk[b, REF] == 0:
            n_free += 1
        j += 1
    return j, n_free


@numba.njit(cache=True, nogil=True)
def _admit(blk, cnt, stack, heads, table, toff, held, names, noff, r, n_hit, tokens, known, bs):
    """Start waiting request ``r``: touch its ``n_hit`` cached blocks, then allocate and cache
    for ``tokens`` computed-plus-scheduled tokens (of ``known``)."""
    for j in range(n_hit):
        b = heads[names[noff[r] + j], 0]
        if blk[b, REF] == 0:
            _lru_remove(blk, cnt, b)
        blk[b, REF] += 1
        table[toff[r] + j] = b
    held[r, 0] = n_hit
    held[r, 1] = n_hit
    _grow(blk, cnt, stack, heads, table, toff, held, r, tokens, bs)
    _cache(blk, heads, table, toff, held, names, noff, r, min(tokens, known), bs)


@numba.njit(cache=True, nogil=True)
def _take(blk, cnt, stack, heads, table, toff, held, names, noff, reqs, ntok, computed, seq, bs):
    """Running requests ``reqs`` (in this order) compute ``ntok`` more tokens each."""
    for k in range(reqs.size):
        r = reqs[k]
        c = computed[r] + ntok[k]
        _grow(blk, cnt, stack, heads, table, toff, held, r, c, bs)
        _cache(blk, heads, table, toff, held, names, noff, r, min(c, seq[r]), bs)


@numba.njit(cache=True, nogil=True)
def _advance(blk, cnt, stack, heads, table, toff, held, names, noff, run, computed, k, bs):
    """``k`` all-decode steps of ``run``, step by step and in running order."""
    for step in range(1, k + 1):
        for r in run:
            c = computed[r] + step  # computed after this step's token (the last known one)
            if c > held[r, 0] * bs:
                _grow(blk, cnt, stack, heads, table, toff, held, r, c, bs)
            if c % bs == 0:
                _cache(blk, heads, table, toff, held, names, noff, r, c, bs)


@numba.njit(cache=True, nogil=True)
def _release(blk, cnt, stack, table, toff, held, reqs):
    """Release each request's blocks, tail first: a block no request references any more goes
    to the free queue's head if unnamed (reused first), to its tail if named."""
    for r in reqs:
        for j in range(held[r, 0] - 1, -1, -1):
            b = table[toff[r] + j]
            blk[b, REF] -= 1
            if blk[b, REF] == 0:
                if blk[b, NAME] >= 0:
                    _lru_append(blk, cnt, b)
                else:
                    stack[cnt[TOP]] = b
                    cnt[TOP] += 1
        held[r, 0] = 0
        held[r, 1] = 0


@numba.njit(cache=True, nogil=True)
def _exclusive(blk, table, toff, held, r):
    """Blocks of request ``r`` no other request references."""
    n = 0
    for j in range(held[r, 0]):
        if blk[table[toff[r] + j], REF] == 1:
            n += 1
    return n


class PrefixCache:
    """The block pool of one run (see the module docstring), by trace position."""

    def __init__(self, trace: pd.DataFrame, block_size: int, capacity: int) -> None:
        self.bs = block_size
        self.names, self.noff, n_names = block_names(trace, block_size)
        total = trace["prompt_tokens"].to_numpy(np.int64) + trace["output_tokens"].to_numpy(np.int64)
        most = -(-total // block_size)  # blocks a request can hold
        self.toff = np.concatenate(([0], np.cumsum(most))).astype(np.int64)
        self.table = np.zeros(int(self.toff[-1]), np.int64)
        self.held = np.zeros((len(trace), 2), np.int64)  # blocks held, blocks named
        # never more blocks in use at once than the engine holds, or than all requests need
        size = int(min(capacity, self.toff[-1])) + 1
        self.blk = np.full((size, 6), -1, np.int64)
        self.blk[:, REF] = 0
        self.stack = np.zeros(size, np.int64)
        self.heads = np.full((max(n_names, 1), 2), -1, np.int64)
        self.cnt = np.zeros(7, np.int64)
        self.cnt[HEAD] = self.cnt[TAIL] = -1
        self.cnt[CAPACITY] = capacity

    @property
    def free(self) -> int:
        """Free blocks, the evictable cached ones included (vLLM's ``get_num_free_blocks``)."""
        return int(_free_count(self.cnt))

    @property
    def cached_free(self) -> int:
        """Free blocks that hold a cached prefix (evictable)."""
        return int(self.cnt[NLRU])

    def lookup(self, i: int, known: int) -> tuple[int, int]:
        """Cached blocks of request ``i``'s longest hit, and how many of them are free."""
        n_hit, n_free = _lookup(self.blk, self.heads, self.names, self.noff, i, known, self.bs)
        return int(n_hit), int(n_free)

    def admit(self, i: int, n_hit: int, tokens: int, known: int) -> None:
        _admit(self.blk, self.cnt, self.stack, self.heads, self.table, self.toff, self.held, self.names, self.noff,
               i, n_hit, tokens, known, self.bs)

    def take(self, reqs: np.ndarray, ntok: np.ndarray, computed: np.ndarray, seq: np.ndarray) -> None:
        _take(self.blk, self.cnt, self.stack, self.heads, self.table, self.toff, self.held, self.names, self.noff,
              reqs, ntok, computed, seq, self.bs)

    def advance(self, run: np.ndarray, computed: np.ndarray, k: int) -> None:
        _advance(self.blk, self.cnt, self.stack, self.heads, self.table, self.toff, self.held, self.names, self.noff,
                 run, computed, k, self.bs)

    def release(self, reqs: np.ndarray) -> None:
        _release(self.blk, self.cnt, self.stack, self.table, self.toff, self.held, reqs)

    def exclusive(self, i: int) -> int:
        return int(_exclusive(self.blk, self.table, self.toff, self.held, i))

    @property
    def evictions(self) -> int:
        """Cached blocks evicted so far (taken from the free queue for other tokens)."""
        return int(self.cnt[EVICTED])

    def held_blocks(self, i: int) -> int:
        return int(self.held[i, 0])

    def in_use(self) -> int:
        """Blocks some request references (each counted once, however many share it)."""
        return int((self.blk[: self.cnt[ISSUED], REF] > 0).sum())
