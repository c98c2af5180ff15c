"""vLLM v1's automatic prefix cache, as the engine's KV block pool when a trace shares tokens.

The rules are vLLM's (``vllm/v1/core``: ``block_pool.py``, ``kv_cache_utils.py``,
``single_type_kv_cache_manager.py``, ``kv_cache_manager.py``), for one full-attention group:

- **Block hashes.** A full block of ``block_size`` tokens is named by a hash chained over its
  tokens and everything before it (``hash_block_tokens``): two blocks share a name exactly when
  their whole prefixes are equal. Each request's sequence is its prompt (from the trace's
  sharing data, :mod:`schedlab.sharing`) then its output, every output token
  :data:`~schedlab.sharing.OUTPUT_TOKEN`. Names here are ids: read off the sharing data where it
  names a block's source (a shared prefix's id, Mooncake's chained hash ids: no hashing), else
  128-bit hashes chained over the tokens (:func:`block_names`; the two agree, tested).
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

The pool's state is a handful of int64 arrays worked on by compiled kernels, in two records
(:class:`Pool`, the blocks; :class:`Tables`, each request's blocks and names); a step's
allocations and releases are gathered and carried out in one call (:class:`PrefixCache`),
whatever the number of blocks they touch. Block identities are the pool's own labels (a vLLM
block id is another label for the same block): what is cached and evicted is the same.
"""

from __future__ import annotations

import numba
import numpy as np
import pandas as pd
from numba.core import types
from numba.experimental import structref

from schedlab.errors import SchedlabError
from schedlab.sharing import HASH_BLOCK_TOKENS, OUTPUT_TOKEN, check_sharing, flat_prompt_tokens, sharing_column

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
    equal), back to back, their offsets, and the number of distinct names (:func:`_structural`
    without hashing where the sharing data says it, :func:`_hashed` from the tokens otherwise)."""
    total = (trace["prompt_tokens"].to_numpy(np.int64) + trace["output_tokens"].to_numpy(np.int64))
    counts = np.maximum(total - 1, 0) // block_size
    loff = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    column = sharing_column(trace)
    if column == "prefix_id" or (column == "hash_ids" and HASH_BLOCK_TOKENS % block_size == 0):
        names, n_names = _structural(trace, column, block_size, counts, loff)
    else:
        names, n_names = _hashed(trace, block_size, total, loff)
    return names, loff, n_names


def _intern(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of the rows of ``keys`` (equal rows, equal ids) and how many there are."""
    if keys.shape[0] == 0:
        return np.zeros(0, np.int64), 0
    order = np.lexsort(keys.T[::-1])
    s = keys[order]
    new = np.ones(order.size, bool)
    new[1:] = (s[1:] != s[:-1]).any(axis=1)
    ids = np.empty(order.size, np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids, int(new.sum())


def _structural(trace: pd.DataFrame, column: str, bs: int, counts: np.ndarray, loff: np.ndarray):
    """Names read off the sharing data, without hashing tokens. A block of prompt tokens only
    is named by the tokens' source and the position (a shared prefix's id, or Mooncake's hash
    id, which names its whole chain); a block holding a request's own tokens names nothing
    another holds; a block past a prompt that has no tokens of its own is named by that
    prompt and the position (output tokens are all the same token). Exact as long as tokens
    of different sources differ, as :mod:`schedlab.sharing` makes them. Names of a source's
    blocks are offsets from a base per source (no sort over the blocks)."""
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    r = np.repeat(np.arange(len(trace)), counts)
    j = np.arange(int(loff[-1]), dtype=np.int64) - loff[r]
    end = (j + 1) * bs  # tokens up to the block's end
    if column == "prefix_id":
        shared_to = trace["prefix_tokens"].to_numpy(np.int64)
        sources, source_of = np.unique(trace["prefix_id"].to_numpy(np.int64), return_inverse=True)
        in_shared = end <= shared_to[r]
        whole = (shared_to == prompt)[r] & ~in_shared  # past a prompt that is all shared prefix
        # a prefix's blocks: as many as its longest use holds
        span = np.zeros(sources.size, np.int64)
        np.maximum.at(span, source_of, shared_to // bs)
        slot = source_of[r]
        offset = j
    else:
        lists = trace["hash_ids"].to_numpy()
        ids = np.concatenate([np.asarray(v, np.int64) for v in lists])
        hoff = np.concatenate(([0], np.cumsum([len(v) for v in lists]))).astype(np.int64)
        in_shared = end <= prompt[r]
        whole = ~in_shared  # every prompt token comes from its hash ids
        per = HASH_BLOCK_TOKENS // bs
        sources, source_of = np.unique(ids, return_inverse=True)
        span = np.full(sources.size, per, np.int64)
        trace_block = np.where(in_shared, j * bs // HASH_BLOCK_TOKENS, (prompt[r] - 1) // HASH_BLOCK_TOKENS)
        slot = source_of[hoff[r] + trace_block]
        offset = j % per
    base = np.concatenate(([0], np.cumsum(span)))
    n_shared = int(base[-1])
    names = np.empty(r.size, np.int64)
    names[in_shared] = base[slot[in_shared]] + offset[in_shared]
    # past a prompt with no tokens of its own: one name per (source, prompt, position)
    keys = np.stack([slot[whole], prompt[r[whole]], j[whole]], axis=1)
    names[whole], n_whole = _intern(keys)
    names[whole] += n_shared
    private = ~(in_shared | whole)
    names[private] = n_shared + n_whole + np.arange(int(private.sum()))
    # names no block uses (a prefix's positions past its longest use) are simply never looked up
    return names, n_shared + n_whole + int(private.sum())


def _hashed(trace: pd.DataFrame, bs: int, total: np.ndarray, loff: np.ndarray):
    """Names of 128-bit hashes chained over the tokens (two 64-bit lanes)."""
    n = len(trace)
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
        _chain(tokens, toff, total[start:stop], bs, OUTPUT_TOKEN, lanes[loff[start]:loff[stop]],
               loff[start:stop + 1] - loff[start])
        start = stop
    return _intern(lanes.view(np.int64))


# -- the pool ---------------------------------------------------------------------------------
@structref.register
class PoolType(types.StructRef):
    """numba's type of :class:`Pool`."""


class Pool(structref.StructRefProxy):
    """The block pool's state, as the compiled kernels take it (:func:`_pool`; its arrays change
    in place): per block, the columns REF .. DNEXT (``blocks``); the scalars HEAD .. EVICTED
    (``counts``); the released unnamed blocks, the first ``counts[TOP]`` of ``free_stack``; per
    name, the first and the last block cached under it, -1 for none (``name_ends``); and the
    block size. A structref: a kernel call takes it as it takes one array, where a named tuple
    of arrays is typed field by field on every call."""


@structref.register
class TablesType(types.StructRef):
    """numba's type of :class:`Tables`."""


class Tables(structref.StructRefProxy):
    """Each request's blocks and block names, by trace position, as the compiled kernels take
    them (:func:`_tables`; arrays changed in place): the blocks request ``r`` holds, from
    ``table[table_start[r]]``; per request, the blocks it holds and how many of them are named
    (``held``); the names of its full blocks, from ``names[name_start[r]]``; and the engine's
    computed tokens per request (``computed``)."""


structref.define_boxing(PoolType, Pool)
structref.define_boxing(TablesType, Tables)
_ARRAY, _MATRIX = types.int64[::1], types.int64[:, ::1]
_POOL = PoolType([("blocks", _MATRIX), ("counts", _ARRAY), ("free_stack", _ARRAY), ("name_ends", _MATRIX),
                  ("block_size", types.int64)])
_TABLES = TablesType([("table", _ARRAY), ("table_start", _ARRAY), ("held", _MATRIX), ("names", _ARRAY),
                      ("name_start", _ARRAY), ("computed", _ARRAY)])


@numba.njit(cache=True)
def _pool(blocks, counts, free_stack, name_ends, block_size):
    pool = structref.new(_POOL)
    pool.blocks = blocks
    pool.counts = counts
    pool.free_stack = free_stack
    pool.name_ends = name_ends
    pool.block_size = block_size
    return pool


@numba.njit(cache=True)
def _tables(table, table_start, held, names, name_start, computed):
    tables = structref.new(_TABLES)
    tables.table = table
    tables.table_start = table_start
    tables.held = held
    tables.names = names
    tables.name_start = name_start
    tables.computed = computed
    return tables


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
def _apply(advance_run, advance_steps, take_reqs, take_tokens, admits, release, done, pool, tables):
    """The running requests ``take_reqs`` compute ``take_tokens`` more tokens each (or, once the
    step is ``done``, have computed them), in this order: their blocks are allocated, and the
    blocks their computed tokens fill are cached (vLLM's running pass); then the rows of
    ``admits`` (request, tokens, cached blocks) start, in this order: each touches its cached
    blocks, then allocates and caches for them plus its tokens (vLLM's admissions); then the
    requests of ``release`` release their blocks (vLLM frees a finished request's blocks after
    the step). A stretch of ``advance_steps`` all-decode steps of ``advance_run`` (running
    order) comes first, step by step. Returns the free blocks left."""
    # the records' arrays, read once and handed to the helpers one by one (their loops read
    # locals, not fields)
    blk, cnt, stack, heads, bs = pool.blocks, pool.counts, pool.free_stack, pool.name_ends, pool.block_size
    table, toff, held, names, noff = tables.table, tables.table_start, tables.held, tables.names, tables.name_start
    computed = tables.computed
    shift = advance_steps if done else 0  # once done, computed holds the stretch's tokens
    for step in range(1, advance_steps + 1):
        for r in advance_run:
            c = computed[r] - shift + step  # computed after this step's token (the last known one)
            if c > held[r, 0] * bs:
                _grow(blk, cnt, stack, heads, table, toff, held, r, c, bs)
            if c % bs == 0:
                _cache(blk, heads, table, toff, held, names, noff, r, c, bs)
    for k in range(take_reqs.size):
        r = take_reqs[k]
        c = computed[r] if done else computed[r] + take_tokens[k]
        _grow(blk, cnt, stack, heads, table, toff, held, r, c, bs)
        _cache(blk, heads, table, toff, held, names, noff, r, c, bs)
    for k in range(admits.shape[0]):
        r, n_hit = admits[k, 0], admits[k, 2]
        for j in range(n_hit):
            b = heads[names[noff[r] + j], 0]
            if blk[b, REF] == 0:
                _lru_remove(blk, cnt, b)
            blk[b, REF] += 1
            table[toff[r] + j] = b
        held[r, 0] = n_hit
        held[r, 1] = n_hit
        c = n_hit * bs + admits[k, 1]
        _grow(blk, cnt, stack, heads, table, toff, held, r, c, bs)
        _cache(blk, heads, table, toff, held, names, noff, r, c, bs)
    _release(blk, cnt, stack, table, toff, held, release)
    return _free_count(cnt)


@numba.njit(cache=True, nogil=True)
def _lookup(pool, tables, r, known):
    """Blocks of request ``r``'s longest cached prefix (at most ``(known - 1) // block_size``),
    and how many of them are free (a touch takes them out of the free queue)."""
    blk, heads, bs = pool.blocks, pool.name_ends, pool.block_size
    names, noff = tables.names, tables.name_start
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
def _exclusive(pool, tables, r):
    """Blocks of request ``r`` no other request references."""
    blk = pool.blocks
    table, toff, held = tables.table, tables.table_start, tables.held
    n = 0
    for j in range(held[r, 0]):
        if blk[table[toff[r] + j], REF] == 1:
            n += 1
    return n


class PrefixCache:
    """The block pool of one run (see the module docstring), by trace position.

    A step's changes are gathered (:meth:`take`, :meth:`admit`: running requests' first, then
    admissions, as vLLM's scheduling pass makes them; then :meth:`release`) and carried out
    together, in one compiled call, before the pool is next read (``free``, :meth:`lookup`,
    :meth:`exclusive`); ``computed`` is the engine's array, read then (:meth:`done` says
    the step's tokens are in it)."""

    def __init__(self, trace: pd.DataFrame, block_size: int, capacity: int, computed: np.ndarray) -> None:
        self.bs = block_size
        names, name_start, n_names = block_names(trace, block_size)
        total = trace["prompt_tokens"].to_numpy(np.int64) + trace["output_tokens"].to_numpy(np.int64)
        most = -(-total // block_size)  # blocks a request can hold
        table_start = np.concatenate(([0], np.cumsum(most))).astype(np.int64)
        # the arrays read here too (the records are the kernels' view of them)
        self.held = np.zeros((len(trace), 2), np.int64)  # blocks held, blocks named
        self.tables = _tables(np.zeros(int(table_start[-1]), np.int64), table_start, self.held, names, name_start,
                              computed)
        # never more blocks in use at once than the engine holds, or than all requests need
        size = int(min(capacity, table_start[-1])) + 1
        self.blocks = np.full((size, 6), -1, np.int64)
        self.blocks[:, REF] = 0
        self.counts = np.zeros(7, np.int64)
        self.counts[HEAD] = self.counts[TAIL] = -1
        self.counts[CAPACITY] = capacity
        self.pool = _pool(self.blocks, self.counts, np.zeros(size, np.int64),
                          np.full((max(n_names, 1), 2), -1, np.int64), block_size)
        self._free = capacity
        self._takes: list[tuple[np.ndarray, np.ndarray]] = []
        self._admits = np.zeros((64, 3), np.int64)  # (request, tokens, cached blocks), the first _n
        self._n = 0
        self._releases: list[np.ndarray] = []
        self._adv: tuple[np.ndarray, int] = (_NONE, 0)
        self._done = False
        # a request none of whose blocks another request names finds nothing on its first
        # admission: its lookup is skipped (a preempted one looks its own blocks up again)
        shared = (np.bincount(names, minlength=n_names) > 1)[names]
        cum = np.concatenate(([0], np.cumsum(shared)))
        self.private = cum[name_start[1:]] == cum[name_start[:-1]]
        self.held_once = np.zeros(len(trace), bool)

    # -- changes ---------------------------------------------------------------------------
    def take(self, reqs: np.ndarray, ntok: np.ndarray) -> None:
        """Running ``reqs`` (in this order) compute ``ntok`` more tokens each: their blocks
        are allocated, and those the computed and scheduled tokens fill are cached."""
        if self._n or self._releases:  # after an admission or a release: in the order asked
            self.flush()
        self._takes.append((reqs, ntok))

    def admit(self, i: int, n_hit: int, n: int) -> None:
        """Start waiting request ``i`` (as just looked up): touch its ``n_hit`` cached blocks,
        then allocate and cache for its ``n`` scheduled tokens."""
        self.held_once[i] = True
        if self._releases:
            self.flush()
        if self._n == self._admits.shape[0]:
            self._admits = np.concatenate([self._admits, np.zeros_like(self._admits)])
        row = self._admits[self._n]
        row[0], row[1], row[2] = i, n, n_hit
        self._n += 1

    def flush(self) -> None:
        """Carry the gathered allocations out."""
        takes, releases = self._takes, self._releases
        if not (takes or self._n or releases or self._adv[1]):
            self._done = False
            return
        if len(takes) == 1:
            tr, tn = takes[0]
        elif takes:
            tr, tn = np.concatenate([t[0] for t in takes]), np.concatenate([t[1] for t in takes])
        else:
            tr = tn = _NONE
        rel = releases[0] if len(releases) == 1 else np.concatenate(releases) if releases else _NONE
        free = _apply(self._adv[0], self._adv[1], tr, tn, self._admits[:self._n], rel, self._done, self.pool,
                      self.tables)
        self._free = int(free)
        self._takes, self._releases = [], []
        self._adv = (_NONE, 0)
        self._n = 0
        self._done = False

    def done(self) -> None:
        """The step's scheduled tokens are now in ``computed`` (its allocations wait for the
        next flush, with the releases that follow them)."""
        self._done = bool(self._takes) or self._adv[1] > 0

    def release(self, reqs: np.ndarray) -> None:
        """Release each request's blocks (vLLM frees a request's blocks in reverse), after the
        gathered allocations."""
        self._releases.append(np.asarray(reqs, np.int64))

    def advance(self, run: np.ndarray, k: int) -> None:
        """``k`` all-decode steps of ``run``, step by step and in running order (carried out
        with the releases that follow them)."""
        if self._takes or self._n or self._releases:
            self.flush()
        self._adv = (run, k)

    # -- reads -----------------------------------------------------------------------------
    @property
    def free(self) -> int:
        """Free blocks, the evictable cached ones included (vLLM's ``get_num_free_blocks``)."""
        if self._takes or self._n or self._releases or self._adv[1]:
            self.flush()
        return self._free

    def lookup(self, i: int, known: int) -> tuple[int, int]:
        """Cached blocks of request ``i``'s longest hit, and how many of them are free; none
        without a lookup for a request on its first admission whose blocks no other request
        names."""
        if self.private[i] and not self.held_once[i]:
            return 0, 0
        self.flush()
        n_hit, n_free = _lookup(self.pool, self.tables, i, known)
        return int(n_hit), int(n_free)

    def exclusive(self, i: int) -> int:
        """Blocks of request ``i`` no other request references."""
        self.flush()
        return int(_exclusive(self.pool, self.tables, i))

    @property
    def evictions(self) -> int:
        """Cached blocks evicted so far (taken from the free queue for other tokens)."""
        return int(self.counts[EVICTED])

    def held_blocks(self, i: int) -> int:
        self.flush()
        return int(self.held[i, 0])

    def in_use(self) -> int:
        """Blocks some request references (each counted once, however many share it)."""
        self.flush()
        return int((self.blocks[: self.counts[ISSUED], REF] > 0).sum())


_NONE = np.zeros(0, np.int64)
