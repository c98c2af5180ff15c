"""Workloads whose prompts share tokens, for the prefix cache (:mod:`schedlab.sharing`).

- :func:`mooncake_trace`: the Mooncake conversation trace (FAST'25) with its real sharing: each
  request's ``hash_ids`` as recorded (512-token blocks), a window of consecutive requests at
  their own timestamps, time-scaled to a rate (:mod:`schedlab.workload.replay`).
- :func:`multi_turn_trace`: chat conversations. A conversation opens with one of a few system
  prompts; each turn's prompt holds the system prompt, every earlier user message and every
  earlier answer (:data:`~schedlab.sharing.OUTPUT_TOKEN` tokens, as the engine generates them)
  and the new user message. Conversations start as a Poisson process; a user sends the next
  turn a think time (exponential) after the previous one (open loop: the answer may still be
  running). The trace's rate counts turns.
- :func:`doc_qa_trace`: several questions per long document, as long-context benchmarks pose
  them: each request is a document followed by a short question of its own; each document is
  asked ``questions_per_doc`` times, at random places in the trace (Poisson arrivals).

Each is deterministic for its seed. A rate of ``inf`` is a backlog: every request at t = 0,
in the order the finite-rate process would send them.
"""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
import pandas as pd
from pydantic import Field

from schedlab.errors import SchedlabError
from schedlab.registry import OWN, register_workload
from schedlab.sharing import OUTPUT_TOKEN, prefixed_tokens
from schedlab.validation.documents import NonNegative, NonNegativeInt
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.replay import replay_at

#: Question lengths of the document-QA workload (tokens, uniform).
QUESTION_TOKENS = (16, 128)


def _arrivals(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    return arrival_times(1.0 if math.isinf(rate) else rate, rng=rng, n_requests=n)


def mooncake_trace(pool: pd.DataFrame, rate: float, n_requests: int, *, start: int = 0) -> pd.DataFrame:
    """``n_requests`` consecutive Mooncake requests from ``start`` (a pool of
    :func:`schedlab.data.llm_traces.mooncake_requests`, with ``hash_ids``) at their own
    timestamps scaled to ``rate`` req/s (``inf``: all at t = 0)."""
    if "hash_ids" not in pool:
        raise SchedlabError("a Mooncake pool with sharing data has a hash_ids column (mooncake_requests)")
    return replay_at(pool, rate, n_requests, start=start)


@register_workload("mooncake", pools=("mooncake",), arrivals=OWN)
def mooncake(draw, start: NonNegativeInt = 0) -> pd.DataFrame:
    """The Mooncake conversation trace's requests from ``start`` on, at their own timestamps
    scaled to the rate, each prompt's 512-token blocks named by its hash ids."""
    return mooncake_trace(draw.pools["mooncake"], draw.rate, draw.n_requests, start=start)


def multi_turn_trace(answers: pd.DataFrame, n_requests: int, rate: float, seed: int, *, mean_turns: float = 4.0,
                     max_turns: int = 12, think_s: float = 20.0, n_system: int = 4, system_tokens: int = 256,
                     user_median: float = 80.0, max_tokens: int | None = None) -> pd.DataFrame:
    """``n_requests`` turns of chat conversations at ``rate`` turns/s (see the module
    docstring): turns per conversation geometric with mean ``mean_turns`` (at most
    ``max_turns``), user messages lognormal around ``user_median`` tokens (4..2,048), answers
    drawn from ``answers``' ``output_tokens``; a conversation stops before a turn whose prompt
    and answer would pass ``max_tokens``. Columns: the trace's, ``token_ids``, and
    ``conversation``/``turn``."""
    if n_requests < 1 or not rate > 0:
        raise SchedlabError(f"a multi-turn trace needs n_requests >= 1 and a positive rate, got {n_requests}, {rate}")
    if not mean_turns >= 1 or max_turns < 1 or think_s < 0:
        raise SchedlabError("mean_turns >= 1, max_turns >= 1 and think_s >= 0 are needed")
    if answers.empty:
        raise SchedlabError("the answer-length pool is empty")
    rng = np.random.default_rng([seed, 31])
    pool_out = answers["output_tokens"].to_numpy(np.int64)
    n_conv = n_requests  # enough conversations for n turns whatever their lengths
    starts = _arrivals(rate / mean_turns, n_conv, np.random.default_rng([seed, 32]))
    turns = np.minimum(rng.geometric(1.0 / mean_turns, n_conv), max_turns)
    system = rng.integers(n_system, size=n_conv)
    system_ids = prefixed_tokens(np.arange(n_system), np.full(n_system, system_tokens), np.zeros(n_system, np.int64),
                                 np.full(n_system, system_tokens))[0].reshape(n_system, system_tokens)
    rows = []
    for c in range(n_conv):
        if c % 64 == 0 and len(rows) >= n_requests:
            # conversations start in order: one starting after the n-th turn adds none before it
            if np.partition([r[0] for r in rows], n_requests - 1)[n_requests - 1] < starts[c]:
                break
        t = starts[c]
        history = [system_ids[system[c]]]
        for k in range(int(turns[c])):
            if k:
                t += rng.exponential(think_s)
            n_user = int(np.clip(round(rng.lognormal(math.log(user_median), 1.0)), 4, 2048))
            n_answer = int(pool_out[rng.integers(pool_out.size)])
            # the user's message: tokens of its own (keyed by conversation and turn)
            user = prefixed_tokens([0], [0], [(c << 8) + k], [n_user])[0]
            prompt = np.concatenate([*history, user]).astype(np.int32)
            if max_tokens is not None and prompt.size + n_answer > max_tokens:
                break
            rows.append((t, c, k, prompt, n_answer))
            history += [user, np.full(n_answer, OUTPUT_TOKEN, np.int64)]
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    rows = rows[:n_requests]
    if len(rows) < n_requests:
        raise SchedlabError(f"the conversations hold {len(rows)} turns within the context, not {n_requests}")
    arrival = np.array([r[0] for r in rows])
    return pd.DataFrame({
        "request_id": np.arange(n_requests, dtype=np.int64),
        "arrival_s": np.zeros(n_requests) if math.isinf(rate) else arrival - arrival[0],
        "prompt_tokens": np.array([r[3].size for r in rows], np.int64),
        "output_tokens": np.array([r[4] for r in rows], np.int64),
        "token_ids": [r[3] for r in rows],
        "conversation": np.array([r[1] for r in rows], np.int64),
        "turn": np.array([r[2] for r in rows], np.int64),
    })


@register_workload("multi-turn", pools=("openchat",), arrivals=OWN)
def multi_turn(draw, mean_turns: Annotated[float, Field(ge=1, le=1000, allow_inf_nan=False)] = 4.0,
               think_s: NonNegative = 20.0) -> pd.DataFrame:
    """Chat conversations, each turn's prompt holding the earlier turns and answers (token ids),
    answers as long as paper C's openchat replies, ``mean_turns`` turns a conversation on
    average, ``think_s`` seconds between an answer and the next turn; no conversation passes
    the model's context."""
    return multi_turn_trace(draw.pools["openchat"], draw.n_requests, draw.rate, draw.seed, mean_turns=mean_turns,
                            think_s=think_s, max_tokens=draw.max_tokens)


def doc_qa_trace(documents: np.ndarray, outputs: np.ndarray, n_requests: int, rate: float, seed: int, *,
                 questions_per_doc: int = 8, question_tokens: tuple[int, int] = QUESTION_TOKENS) -> pd.DataFrame:
    """``n_requests`` questions at ``rate`` req/s, each a document (lengths drawn from
    ``documents``) then a question of ``question_tokens`` tokens; each document asked
    ``questions_per_doc`` times at random places; outputs drawn from ``outputs``. The
    shared-prefix form (``prefix_id`` = document, ``prefix_tokens`` = its length)."""
    if n_requests < 1 or questions_per_doc < 1 or not rate > 0:
        raise SchedlabError("a document-QA trace needs n_requests >= 1, questions_per_doc >= 1 and a positive rate")
    documents, outputs = np.asarray(documents, np.int64), np.asarray(outputs, np.int64)
    if documents.size == 0 or outputs.size == 0 or documents.min() < 1:
        raise SchedlabError("document lengths (>= 1) and outputs must not be empty")
    rng = np.random.default_rng([seed, 41])
    n_docs = -(-n_requests // questions_per_doc)
    doc_len = documents[rng.integers(documents.size, size=n_docs)]
    doc = rng.permutation(np.repeat(np.arange(n_docs), questions_per_doc))[:n_requests]
    question = rng.integers(question_tokens[0], question_tokens[1] + 1, size=n_requests)
    return pd.DataFrame({
        "request_id": np.arange(n_requests, dtype=np.int64),
        "arrival_s": (np.zeros(n_requests) if math.isinf(rate)
                      else _arrivals(rate, n_requests, np.random.default_rng([seed, 42]))),
        "prompt_tokens": doc_len[doc] + question,
        "output_tokens": outputs[rng.integers(outputs.size, size=n_requests)],
        "prefix_id": doc,
        "prefix_tokens": doc_len[doc],
    })
