"""What a trace says about which prompts share tokens, and the token ids it stands for.

A trace may carry one sharing column; without one, prompts share nothing and every backend
runs as it always has (no prefix cache):

- ``hash_ids``: per request, a list of block hash ids, as the Mooncake traces record prompts
  (FAST'25 release): each id stands for one block of :data:`HASH_BLOCK_TOKENS` (512) prompt
  tokens, the last one cut to the prompt's length, so a prompt of ``p`` tokens has
  ``ceil(p / 512)`` ids. The ids are chained, as a prefix cache's block hashes are: an id names
  its block *and everything before it*, so an id always follows the same id (or starts the
  prompt). Each id maps to a fixed pseudo-random token sequence (:func:`hash_block_tokens`):
  equal ids give equal tokens, and different ids different tokens (two 16-token blocks of
  different ids agree with probability 30,000^-16).
- ``token_ids``: the prompt's token ids themselves (whole numbers in ``[0, 2**31)``, one per
  prompt token).
- ``prefix_id`` with ``prefix_tokens``: the prompt opens with the first ``prefix_tokens``
  tokens of shared prefix ``prefix_id`` (a document, a system prompt: the same id gives the
  same tokens, position by position), then tokens of its own (keyed by ``request_id``). The
  compact form for workloads whose sharing is one prefix per request.

Generated tokens are :data:`OUTPUT_TOKEN` each (the token ``vllm-sim`` emits), so a prompt
that repeats an earlier answer (a conversation's next turn) can be written with it, and a
prefix cache can serve that answer's blocks. The workloads that write these columns are in
:mod:`schedlab.workload.shared_prefixes`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError

#: Tokens per trace block of a ``hash_ids`` column (the Mooncake traces' block size).
HASH_BLOCK_TOKENS = 512
#: The token every generated position holds (``vllm-sim`` emits it; a multi-turn prompt that
#: carries an earlier answer carries it).
OUTPUT_TOKEN = 100
#: Pseudo-random prompt tokens lie in ``[TOKEN_LO, TOKEN_LO + TOKEN_SPAN)``: inside every
#: decoder's vocabulary here (32,000 and more) and never equal to :data:`OUTPUT_TOKEN`.
TOKEN_LO, TOKEN_SPAN = 1000, 30000
#: Sharing columns a trace may carry (at most one; ``prefix_id`` comes with ``prefix_tokens``).
SHARING_COLUMNS = ("hash_ids", "token_ids", "prefix_id")
#: Seeds of the three token families (hash blocks, shared prefixes, a request's own tokens).
_SEED, _PREFIX_SEED, _OWN_SEED = np.uint64(0x5CED1AB), np.uint64(0x9F1E5D3), np.uint64(0x40A7C11)


def sharing_column(trace: pd.DataFrame) -> str | None:
    """The trace's sharing column, or ``None`` when its prompts share nothing."""
    present = [c for c in SHARING_COLUMNS if c in trace.columns]
    if len(present) > 1:
        raise SchedlabError(f"a trace carries one sharing column, not {' and '.join(present)}")
    return present[0] if present else None


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (uint64 in, uint64 out), a bijection that spreads every bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _tokens(key: np.ndarray, seed: np.uint64) -> np.ndarray:
    """Pseudo-random tokens, a pure function of each uint64 key and the family's seed."""
    with np.errstate(over="ignore"):
        return (_mix(key + seed) % np.uint64(TOKEN_SPAN)).astype(np.int64) + TOKEN_LO


def hash_block_tokens(hash_ids: np.ndarray, length: int = HASH_BLOCK_TOKENS) -> np.ndarray:
    """The first ``length`` tokens of each hash id's block: shape ``(len(hash_ids), length)``,
    int64; a pure function of the id and the position."""
    ids = np.asarray(hash_ids, np.uint64)
    return _tokens(ids[:, None] * np.uint64(HASH_BLOCK_TOKENS) + np.arange(length, dtype=np.uint64)[None, :], _SEED)


def _keyed(ids: np.ndarray, lengths: np.ndarray, seed: np.uint64) -> np.ndarray:
    """For each id, ``length`` tokens of its own sequence (position 0 on), back to back."""
    ids, lengths = np.asarray(ids, np.int64), np.asarray(lengths, np.int64)
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)
    key = (np.repeat(ids, lengths).astype(np.uint64) << np.uint64(32)) + pos.astype(np.uint64)
    return _tokens(key, seed)


def prefixed_tokens(prefix_id, prefix_tokens, request_id, prompt_tokens) -> tuple[np.ndarray, np.ndarray]:
    """The prompts of the shared-prefix form back to back, and their offsets: each prompt
    the first ``prefix_tokens`` tokens of its prefix, then its own tokens."""
    prefix_tokens, prompt_tokens = np.asarray(prefix_tokens, np.int64), np.asarray(prompt_tokens, np.int64)
    shared = _keyed(prefix_id, prefix_tokens, _PREFIX_SEED)
    own = _keyed(request_id, prompt_tokens - prefix_tokens, _OWN_SEED)
    offsets = np.concatenate(([0], np.cumsum(prompt_tokens)))
    flat = np.empty(int(offsets[-1]), np.int64)
    is_shared = np.arange(flat.size) - np.repeat(offsets[:-1], prompt_tokens) < np.repeat(prefix_tokens, prompt_tokens)
    flat[is_shared] = shared
    flat[~is_shared] = own
    return flat, offsets


def _lists(column: pd.Series, name: str) -> list[np.ndarray]:
    """A list column as int64 arrays, each checked to hold whole numbers >= 0."""
    out = []
    for row, value in enumerate(column.to_numpy()):
        try:
            arr = np.asarray(value if value is not None else [], dtype=float)
        except (TypeError, ValueError):
            raise SchedlabError(f"{name}: row {row} holds {value!r:.40}: ids must be whole numbers in [0, 2**31)") from None
        if arr.ndim != 1:
            raise SchedlabError(f"{name}: row {row} holds {value!r:.40}: a list of ids is needed")
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)) or np.any(arr < 0) \
                or np.any(arr >= 2**31):
            bad = arr[~(np.isfinite(arr) & (arr == np.floor(arr)) & (arr >= 0) & (arr < 2**31))]
            raise SchedlabError(f"{name}: row {row} holds {bad[0]:g}: ids must be whole numbers in [0, 2**31)")
        out.append(arr.astype(np.int64))
    return out


def check_sharing(trace: pd.DataFrame, source: str = "trace") -> None:
    """The trace's sharing data checked (one-line :class:`SchedlabError` naming ``source``):
    whole numbers >= 0; ``token_ids`` one per prompt token; ``hash_ids`` exactly the blocks
    of the prompt and chained (an id that follows two different ids, or sits at two
    positions, names no one prefix)."""
    column = sharing_column(trace)
    if column is None:
        return
    if column == "prefix_id":
        _check_prefixes(trace, source)
        return
    lists = _lists(trace[column], f"{source}: column {column!r}")
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    sizes = np.fromiter((a.size for a in lists), np.int64, len(lists))
    if column == "token_ids":
        expect, unit = prompt, "token"
    else:
        expect, unit = -(-prompt // HASH_BLOCK_TOKENS), f"{HASH_BLOCK_TOKENS}-token block"
    longer = np.flatnonzero(sizes > expect)
    if longer.size:
        r = int(longer[0])
        raise SchedlabError(f"{source}: column {column!r} row {r}: the shared prefix ({sizes[r]} x {unit}) is longer "
                            f"than the prompt ({prompt[r]} tokens)")
    shorter = np.flatnonzero(sizes < expect)
    if shorter.size:
        r = int(shorter[0])
        raise SchedlabError(f"{source}: column {column!r} row {r}: {sizes[r]} x {unit} do not cover the prompt "
                            f"({prompt[r]} tokens, {expect[r]} needed)")
    if column == "hash_ids" and lists:
        ids = np.concatenate(lists)
        parent = np.concatenate([np.concatenate(([-1], a[:-1])) for a in lists])
        pos = np.concatenate([np.arange(a.size) for a in lists])
        frame = pd.DataFrame({"id": ids, "parent": parent, "pos": pos}).drop_duplicates()
        clash = frame["id"].duplicated(keep=False)
        if clash.any():
            h = int(frame.loc[clash, "id"].iloc[0])
            row = next(r for r, a in enumerate(lists) if h in a)
            raise SchedlabError(f"{source}: column 'hash_ids' row {row}: unknown hash {h}: it follows different "
                                "blocks in different rows, so it names no one prefix (hash ids are chained)")


def _check_prefixes(trace: pd.DataFrame, source: str) -> None:
    if "prefix_tokens" not in trace:
        raise SchedlabError(f"{source}: column 'prefix_id' comes with 'prefix_tokens', which is missing")
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    for name, top in (("prefix_id", 2**31), ("prefix_tokens", None)):
        values = pd.to_numeric(trace[name], errors="coerce").to_numpy(float)
        limit = prompt if top is None else np.full(prompt.size, top - 1)
        bad = ~(np.isfinite(values) & (values == np.floor(values)) & (values >= 0))
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise SchedlabError(f"{source}: column {name!r} row {r} holds {trace[name].iat[r]!r}: "
                                "must be a whole number >= 0")
        over = values > limit
        if over.any():
            r = int(np.flatnonzero(over)[0])
            what = (f"the shared prefix ({int(values[r])} tokens) is longer than the prompt ({prompt[r]} tokens)"
                    if top is None else "ids must be below 2**31")
            raise SchedlabError(f"{source}: column {name!r} row {r}: {what}")


def cut_prompts(trace: pd.DataFrame, prompt_tokens) -> pd.DataFrame:
    """``trace`` with each prompt cut to its first ``prompt_tokens`` tokens (at most its own
    length), its sharing data cut with it: the blocks of ``hash_ids`` that still hold a token,
    the first ``token_ids``, a shared prefix of at most the prompt."""
    old = trace["prompt_tokens"].to_numpy(np.int64)
    new = np.minimum(np.asarray(prompt_tokens, np.int64), old)
    out = trace.assign(prompt_tokens=new)
    column = sharing_column(trace)
    cut = np.flatnonzero(new < old)
    if column == "prefix_id":
        out["prefix_tokens"] = np.minimum(trace["prefix_tokens"].to_numpy(np.int64), new)
    elif column is not None and cut.size:
        keep = new if column == "token_ids" else -(-new // HASH_BLOCK_TOKENS)
        values = list(trace[column])
        for r in cut.tolist():
            values[r] = values[r][: keep[r]]
        out[column] = values
    return out


def prompt_token_ids(trace: pd.DataFrame, rows: range | None = None) -> list[np.ndarray]:
    """The prompt token ids (int64 arrays) of ``rows`` (default: all) of a trace that carries
    sharing data (see the module docstring)."""
    column = sharing_column(trace)
    if column is None:
        raise SchedlabError("the trace carries no sharing data (hash_ids or token_ids)")
    rows = range(len(trace)) if rows is None else rows
    if column == "prefix_id":
        flat, offsets = flat_prompt_tokens(trace.iloc[list(rows)], 0, len(rows))
        return [flat[offsets[k]:offsets[k + 1]] for k in range(len(rows))]
    values = trace[column].to_numpy()
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    out = []
    for r in rows:
        ids = np.asarray(values[r], np.int64)
        if column == "token_ids":
            out.append(ids)
        else:
            out.append(hash_block_tokens(ids).ravel()[: prompt[r]])
    return out


def flat_prompt_tokens(trace: pd.DataFrame, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompt tokens of rows ``start..stop-1`` back to back (int64) and their offsets
    (``stop - start + 1`` entries), built in bulk."""
    column = sharing_column(trace)
    prompt = trace["prompt_tokens"].to_numpy(np.int64)[start:stop]
    if column == "prefix_id":
        return prefixed_tokens(trace["prefix_id"].to_numpy(np.int64)[start:stop],
                               trace["prefix_tokens"].to_numpy(np.int64)[start:stop],
                               trace["request_id"].to_numpy(np.int64)[start:stop], prompt)
    offsets = np.concatenate(([0], np.cumsum(prompt)))
    values = trace[column].to_numpy()[start:stop]
    if column == "token_ids":
        flat = np.concatenate([np.asarray(v, np.int64) for v in values]) if len(values) else np.zeros(0, np.int64)
        return flat, offsets
    counts = np.fromiter((len(v) for v in values), np.int64, len(values))
    ids = np.concatenate([np.asarray(v, np.int64) for v in values]) if len(values) else np.zeros(0, np.int64)
    # unique ids once, then each request's blocks back to back, each cut to the prompt
    uniq, inv = np.unique(ids, return_inverse=True)
    blocks = hash_block_tokens(uniq)[inv]  # (n_ids, 512)
    keep = np.ones(blocks.shape, bool)
    last = np.cumsum(counts) - 1
    tail = prompt - (counts - 1) * HASH_BLOCK_TOKENS  # tokens of each request's last block
    has = counts > 0
    keep[last[has]] = np.arange(HASH_BLOCK_TOKENS)[None, :] < tail[has, None]
    return blocks[keep], offsets
