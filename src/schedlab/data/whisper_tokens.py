"""Whisper's multilingual tokenizer, built offline from the asset that openai-whisper ships.

``import whisper`` needs numba and torch, so the asset is located without importing the package
and the encoding is rebuilt exactly as ``whisper.tokenizer.get_encoding("multilingual")`` does.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import numpy as np
import tiktoken
from tiktoken.load import load_tiktoken_bpe

from schedlab.errors import SchedlabError

# The first 99 keys of whisper.tokenizer.LANGUAGES, in order (its default num_languages).
LANGUAGE_CODES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no"
    " th ur hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw"
    " gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl"
    " mg as tt haw ln ha ba jw su"
).split()
SPECIAL_TOKENS = (
    "<|endoftext|>", "<|startoftranscript|>", *(f"<|{code}|>" for code in LANGUAGE_CODES),
    "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
    "<|notimestamps|>", *(f"<|{i * 0.02:.2f}|>" for i in range(1501)),
)
PAT_STR = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Decoder prompt for English transcription without timestamps:
# <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
PROMPT_TOKENS = 4


def asset_path() -> Path:
    """``whisper/assets/multilingual.tiktoken`` of the installed openai-whisper."""
    spec = importlib.util.find_spec("whisper")
    locations = spec.submodule_search_locations if spec is not None else None
    path = Path(locations[0]) / "assets" / "multilingual.tiktoken" if locations else None
    if path is None or not path.is_file():
        raise SchedlabError(
            "Whisper tokenizer asset not found; install openai-whisper==20250625 --no-deps"
        )
    return path


@lru_cache(maxsize=None)
def encoding() -> tiktoken.Encoding:
    """The multilingual Whisper encoding (51,865 tokens)."""
    path = asset_path()
    ranks = load_tiktoken_bpe(str(path))
    specials = {token: len(ranks) + i for i, token in enumerate(SPECIAL_TOKENS)}
    return tiktoken.Encoding(
        name=path.name,
        explicit_n_vocab=len(ranks) + len(specials),
        pat_str=PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=specials,
    )


def count_text_tokens(texts: Iterable[str]) -> np.ndarray:
    """Text tokens per transcript, lower-cased and space-prefixed as Whisper's decoder emits it."""
    enc = encoding()
    counts = [len(enc.encode_ordinary(" " + text.lower())) for text in texts]
    return np.array(counts, dtype=np.int64)


def output_tokens(texts: Iterable[str]) -> np.ndarray:
    """Generated tokens per transcript: its text tokens plus the closing <|endoftext|>."""
    return count_text_tokens(texts) + 1
