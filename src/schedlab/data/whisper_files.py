"""A loadable Whisper model folder made offline: tokenizer and processor files beside a config.

vLLM (like ``transformers``) loads Whisper's processor from the model folder: a tokenizer
and a feature extractor. Neither can be downloaded here, and neither needs to be: the
tokenizer is Whisper's own BPE (the ``multilingual.tiktoken`` asset that openai-whisper ships)
with its special tokens appended in Whisper's id order (``<|endoftext|>`` 50257,
``<|startoftranscript|>`` 50258, the languages, the task tokens, the timestamps), converted by
``transformers``' tiktoken converter into a fast tokenizer; the feature extractor is Whisper's
defaults with ``num_mel_bins`` from the model's ``config.json``. With dummy weights, this is
everything vLLM needs to serve the model.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from schedlab.data.whisper_tokens import SPECIAL_TOKENS, asset_path
from schedlab.errors import SchedlabError
from schedlab.io import check_folder, write_outputs
from schedlab.latency.catalogue import model_dir

#: Languages of whisper.tokenizer.LANGUAGES beyond the first 99 (large-v3 adds Cantonese).
EXTRA_LANGUAGES = ("yue",)
#: What :func:`write_model_folder` writes beside ``config.json``.
FILES = ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json")


def special_tokens(vocab_size: int, n_text: int) -> list[str]:
    """Whisper's special tokens in id order for a model of ``vocab_size`` (``n_text`` BPE ranks)."""
    base = list(SPECIAL_TOKENS)
    first_task = base.index("<|translate|>")
    extra = vocab_size - n_text - len(base)
    if not 0 <= extra <= len(EXTRA_LANGUAGES):
        raise SchedlabError(f"vocab_size {vocab_size} does not match Whisper's special tokens")
    return base[:first_task] + [f"<|{code}|>" for code in EXTRA_LANGUAGES[:extra]] + base[first_task:]


def build_tokenizer(vocab_size: int):
    """Whisper's fast tokenizer (``WhisperTokenizer``) with ``vocab_size`` ids."""
    from tokenizers import AddedToken
    from transformers import WhisperTokenizer
    from transformers.convert_slow_tokenizer import TikTokenConverter

    vocab, merges = TikTokenConverter(vocab_file=str(asset_path())).extract_vocab_merges_from_model(
        str(asset_path())
    )
    tokens = special_tokens(vocab_size, len(vocab))
    tok = WhisperTokenizer(vocab=vocab, merges=merges)
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in tokens], special_tokens=True)
    ids = tok.convert_tokens_to_ids(tokens)
    if ids != list(range(len(vocab), len(vocab) + len(tokens))):
        raise SchedlabError("Whisper's special tokens did not get consecutive ids after the BPE ranks")
    return tok


def whisper_config(model: str) -> dict:
    """``model``'s ``config.json``, which must be a Whisper model's."""
    config = json.loads((model_dir(model) / "config.json").read_text())
    if config.get("model_type") != "whisper":
        raise SchedlabError(f"{model} is not a Whisper model")
    return config


def write_model_folder(model: str, out: str | Path) -> Path:
    """``out`` as a loadable folder of ``model``: its ``config.json`` plus :data:`FILES`,
    made in a temporary folder and written by the one output writer (:mod:`schedlab.io`), all
    together or none."""
    from transformers import WhisperFeatureExtractor

    config = whisper_config(model)
    out = Path(out)
    check_folder(out)
    with tempfile.TemporaryDirectory() as made:
        build_tokenizer(config["vocab_size"]).save_pretrained(made)
        WhisperFeatureExtractor(feature_size=config["num_mel_bins"]).save_pretrained(made)
        files = {"config.json": (model_dir(model) / "config.json").read_bytes()}
        files.update((f.name, f.read_bytes()) for f in sorted(Path(made).iterdir()))
    write_outputs({out / name: data for name, data in files.items()})
    return out
