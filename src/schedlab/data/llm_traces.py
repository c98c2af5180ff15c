"""Prompt and output lengths of public LLM serving traces (downloaded, or from the mirror).

- Azure LLM inference trace 2023 (``conv`` and ``code`` services): ``ContextTokens``,
  ``GeneratedTokens`` per request;
- Mooncake (FAST'25) conversation trace: ``input_length``, ``output_length`` per request.
"""

from __future__ import annotations

import os

import pandas as pd

from schedlab.data.sources import cache_dir, download, mirror_file
from schedlab.errors import SchedlabError

AZURE_URL = "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data/AzureLLMInferenceTrace_{}.csv"
MOONCAKE_URL = "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/traces/conversation_trace.jsonl"
MOONCAKE = "mooncake_conversation_trace.jsonl"


def _fetch(name: str, url: str):
    """The mirror's copy of ``name``, else a download into the cache."""
    return mirror_file(name) or download(url, cache_dir() / name)


def length_pool(df: pd.DataFrame, prompt: str, output: str, source: str, path) -> pd.DataFrame:
    """A table's (prompt, output) token columns as a length pool (rows with both positive);
    ``path`` names the table in errors."""
    missing = {prompt, output} - set(df.columns)
    if missing:
        raise SchedlabError(f"{path}: missing columns {', '.join(sorted(missing))}")
    out = pd.DataFrame({
        "prompt_tokens": df[prompt].astype("int64"),
        "output_tokens": df[output].astype("int64"),
        "source": source,
    })
    return out[(out["prompt_tokens"] > 0) & (out["output_tokens"] > 0)].reset_index(drop=True)


def azure_lengths(service: str, path: str | os.PathLike | None = None, source: str | None = None) -> pd.DataFrame:
    """(prompt, output) tokens of the Azure 2023 trace's ``conv`` or ``code`` service."""
    if service not in ("conv", "code"):
        raise SchedlabError(f"unknown Azure trace service {service!r}; choose conv or code")
    name = f"AzureLLMInferenceTrace_{service}.csv"
    path = path or _fetch(name, AZURE_URL.format(service))
    return length_pool(pd.read_csv(path), "ContextTokens", "GeneratedTokens", source or f"azure-{service}-trace", path)


def mooncake_lengths(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """(prompt, output) tokens of the Mooncake conversation trace."""
    path = path or _fetch(MOONCAKE, MOONCAKE_URL)
    return length_pool(pd.read_json(path, lines=True), "input_length", "output_length", "mooncake-conversation", path)
