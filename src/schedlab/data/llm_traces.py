"""Prompt and output lengths of public LLM serving traces (downloaded, or from the mirror).

- Azure LLM inference trace 2023 (``conv`` and ``code`` services): ``ContextTokens``,
  ``GeneratedTokens`` per request;
- Mooncake (FAST'25) conversation trace: ``input_length``, ``output_length`` per request.

Each pool also keeps the request's arrival in the original trace (``timestamp_s``, seconds
from the trace's first request) for replays (:mod:`schedlab.workload.replay`). Mooncake's
requests also come with the prompt's block hashes (``hash_ids``, 512-token blocks), which say
which prompts share which blocks (:mod:`schedlab.sharing`).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from schedlab.data.sources import Remote, cache_dir, download, mirror_file
from schedlab.errors import SchedlabError
from schedlab.io import read_csv, read_jsonl
from schedlab.registry import register_pool

#: The Azure traces at a pinned commit of Azure/AzurePublicDataset, by service; the offline
#: mirror's copies are these same files.
AZURE = {
    service: Remote(
        "https://raw.githubusercontent.com/Azure/AzurePublicDataset/790921015d50dd6aae7f7e47f39ba0e235ad6b08/"
        f"data/AzureLLMInferenceTrace_{service}.csv",
        sha256,
    )
    for service, sha256 in (
        ("code", "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6"),
        ("conv", "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8"),
    )
}
MOONCAKE_REMOTE = Remote(
    "https://raw.githubusercontent.com/kvcache-ai/Mooncake/3cca71daccf2a7afb8fe3f0295358f70e3a69fdb/"
    "FAST25-release/traces/conversation_trace.jsonl",
    "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
)
MOONCAKE = "mooncake_conversation_trace.jsonl"
#: The Mooncake trace's token columns (prompt, output).
MOONCAKE_COLUMNS = ("input_length", "output_length")


def _fetch(name: str, remote: Remote):
    """The mirror's copy of ``name``, else a download into the cache."""
    return mirror_file(name) or download(remote, cache_dir() / name)


def length_pool(df: pd.DataFrame, prompt: str, output: str, source: str, path,
                timestamps: pd.Series | None = None) -> pd.DataFrame:
    """A table's (prompt, output) token columns as a length pool (rows with both positive);
    ``path`` names the table in errors. ``timestamps`` (seconds) become ``timestamp_s``,
    measured from the earliest. Token counts must be whole numbers and timestamps finite."""
    missing = {prompt, output} - set(df.columns)
    if missing:
        raise SchedlabError(f"{path}: missing columns {', '.join(sorted(missing))}")
    for column in (prompt, output):
        values = pd.to_numeric(df[column], errors="coerce").to_numpy(float)
        bad = ~(values == np.floor(values))  # NaN and fractions
        if bad.any():
            row = int(np.argmax(bad))
            raise SchedlabError(f"{path}: column {column!r} must hold whole numbers of tokens, first bad row {row} "
                                f"({df[column].iloc[row]!r})")
    if timestamps is not None:
        bad = ~np.isfinite(timestamps.to_numpy(float))
        if bad.any():
            raise SchedlabError(f"{path}: timestamps must be finite, first bad row {int(np.argmax(bad))}")
    out = pd.DataFrame({
        "prompt_tokens": df[prompt].astype("int64"),
        "output_tokens": df[output].astype("int64"),
        "source": source,
    })
    if timestamps is not None:
        out["timestamp_s"] = (timestamps - timestamps.min()).to_numpy(float)
    return out[(out["prompt_tokens"] > 0) & (out["output_tokens"] > 0)].reset_index(drop=True)


def azure_lengths(service: str, path: str | os.PathLike | None = None, source: str | None = None) -> pd.DataFrame:
    """(prompt, output) tokens of the Azure 2023 trace's ``conv`` or ``code`` service."""
    if service not in AZURE:
        raise SchedlabError(f"unknown Azure trace service {service!r}; choose conv or code")
    name = f"AzureLLMInferenceTrace_{service}.csv"
    path = path or _fetch(name, AZURE[service])
    df = read_csv(path, required=("ContextTokens", "GeneratedTokens"), numeric=("ContextTokens", "GeneratedTokens"))
    stamps = pd.to_datetime(df["TIMESTAMP"], errors="coerce") if "TIMESTAMP" in df else None
    if stamps is not None and stamps.isna().any():
        raise SchedlabError(f"{path}: unreadable TIMESTAMP values")
    seconds = None if stamps is None else (stamps - stamps.min()).dt.total_seconds()
    return length_pool(df, "ContextTokens", "GeneratedTokens", source or f"azure-{service}-trace", path, seconds)


def mooncake_lengths(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """(prompt, output) tokens of the Mooncake conversation trace."""
    path = path or _fetch(MOONCAKE, MOONCAKE_REMOTE)
    df = read_jsonl(path, required=MOONCAKE_COLUMNS, numeric=(*MOONCAKE_COLUMNS, "timestamp"))
    seconds = df["timestamp"] / 1e3 if "timestamp" in df else None  # milliseconds in the release
    return length_pool(df, "input_length", "output_length", "mooncake-conversation", path, seconds)


def mooncake_requests(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """The Mooncake conversation trace's requests: lengths, ``timestamp_s`` and each prompt's
    ``hash_ids`` (its 512-token blocks, chained as a prefix cache names them)."""
    path = path or _fetch(MOONCAKE, MOONCAKE_REMOTE)
    df = read_jsonl(path, required=(*MOONCAKE_COLUMNS, "hash_ids"), numeric=(*MOONCAKE_COLUMNS, "timestamp"))
    seconds = df["timestamp"] / 1e3 if "timestamp" in df else None
    df = df.assign(source="mooncake-conversation")
    keep = (df["input_length"] > 0) & (df["output_length"] > 0)
    pool = length_pool(df, "input_length", "output_length", "mooncake-conversation", path, seconds)
    ids = df.loc[keep, "hash_ids"]
    bad = next((row for row, v in ids.items() if not isinstance(v, list)
                or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in v)), None)
    if bad is not None:
        raise SchedlabError(f"{path}: column 'hash_ids' must hold lists of whole numbers >= 0, first bad row {bad}")
    pool["hash_ids"] = [list(map(int, v)) for v in ids]
    return pool


#: What a replayed trace's pool holds: each request's lengths and its time in the trace.
TIMED_COLUMNS = ("prompt_tokens", "output_tokens", "timestamp_s")


@register_pool("azure-code", columns=TIMED_COLUMNS)
def azure_code() -> pd.DataFrame:
    """The Azure LLM inference trace 2023's code service: lengths and timestamps."""
    return azure_lengths("code")


@register_pool("azure-conv", columns=TIMED_COLUMNS)
def azure_conv() -> pd.DataFrame:
    """The Azure LLM inference trace 2023's conversation service: lengths and timestamps."""
    return azure_lengths("conv")


register_pool("mooncake", columns=(*TIMED_COLUMNS, "hash_ids"))(mooncake_requests)
