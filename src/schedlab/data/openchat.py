"""openchat_sharegpt4 request lengths (paper C's workload): one request per conversation round,
its prompt the conversation so far (the round's human turn included), its output the reply.

Sources, in order: the offline mirror's ``openchat_sharegpt4_lengths_llama2.csv`` (the lengths
table the Sarathi-Serve artifact publishes, Llama-2 tokenizer, rounds up to 8k tokens); a
download of that table; else the original dataset (``sharegpt_gpt4.json``), split into rounds
and counted with a GPT-2-family BPE (the served model's tokenizer is not available offline),
which the ``source`` column labels.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Iterator

import ijson
import pandas as pd

from schedlab.data.conversations import LENGTH_COLUMNS
from schedlab.data.llm_traces import length_pool
from schedlab.data.sources import DataUnavailable, Remote, cache_dir, download, mirror_file
from schedlab.io import read_csv
from schedlab.registry import register_pool

LENGTHS_CSV = "openchat_sharegpt4_lengths_llama2.csv"
#: The Sarathi-Serve artifact's length table (on its niyama_asplos2026 branch, at a pinned
#: commit); the offline mirror's copy is this same file.
LENGTHS = Remote(
    "https://raw.githubusercontent.com/microsoft/sarathi-serve/72339db5b120614033b317880ad3a05a5e4c9415/"
    "data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
    "6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f",
)
#: No commit id or checksum of this Hugging Face file is known here: the first download's
#: SHA-256 is recorded and checked on reuse.
DATASET = Remote("https://huggingface.co/datasets/openchat/openchat_sharegpt4_dataset/resolve/main/sharegpt_gpt4.json")
MAX_TOTAL = 8192


def read_lengths_csv(path: str | os.PathLike, source: str) -> pd.DataFrame:
    """The artifact's table (``num_prefill_tokens, num_decode_tokens, ...``) as length pairs."""
    columns = ("num_prefill_tokens", "num_decode_tokens")
    return capped(length_pool(read_csv(path, required=columns, numeric=columns), *columns, source, path))


def capped(pairs: pd.DataFrame, max_total: int = MAX_TOTAL) -> pd.DataFrame:
    """Rows with at least one prompt and one output token and a total of at most ``max_total``."""
    keep = (pairs["prompt_tokens"] >= 1) & (pairs["output_tokens"] >= 1)
    keep &= pairs["prompt_tokens"] + pairs["output_tokens"] <= max_total
    return pairs[keep].reset_index(drop=True)


def rounds(fp: IO[bytes]) -> Iterator[tuple[str, str]]:
    """(prompt so far, reply) of every human -> gpt round of every conversation; conversations
    are ``{"items"|"conversations": [{"from": "human"|"gpt", "value": ...}, ...]}``."""
    for conv in ijson.items(fp, "item"):
        turns = conv.get("items") or conv.get("conversations") or []
        history = ""
        for ask, reply in zip(turns, turns[1:]):
            if ask.get("from") == "human" and reply.get("from") == "gpt":
                history += str(ask.get("value", ""))
                yield history, str(reply.get("value", ""))
                history += str(reply.get("value", ""))


def count_rounds(fp: IO[bytes], source: str) -> pd.DataFrame:
    from schedlab.data.whisper_tokens import encoding

    enc = encoding()
    rows = [(len(enc.encode_ordinary(p)), len(enc.encode_ordinary(r)), source) for p, r in rounds(fp)]
    return capped(pd.DataFrame(rows, columns=list(LENGTH_COLUMNS)))


@register_pool("openchat", columns=("prompt_tokens", "output_tokens"),
               summary="paper C's openchat_sharegpt4 rounds: prompt and reply lengths, at most 8,192 tokens in all")
def openchat_lengths() -> pd.DataFrame:
    """Length pairs (``prompt_tokens, output_tokens, source``), capped at 8192 tokens in all."""
    local = mirror_file(LENGTHS_CSV)
    if local is not None:
        return read_lengths_csv(local, "openchat_sharegpt4 (Sarathi-Serve artifact, Llama-2 tokenizer)")
    try:
        path = download(LENGTHS, cache_dir() / LENGTHS_CSV)
        return read_lengths_csv(path, "openchat_sharegpt4 (Sarathi-Serve artifact, Llama-2 tokenizer)")
    except DataUnavailable:
        path = download(DATASET, cache_dir() / Path(DATASET.url).name)
    with open(path, "rb") as fp:
        return count_rounds(fp, "openchat_sharegpt4 (original rounds, GPT-2-family BPE stand-in tokenizer)")
