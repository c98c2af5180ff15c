"""Whisper model folders made offline: tokenizer ids in Whisper's order, processor config."""

from __future__ import annotations

import json

import pytest

from schedlab.data import whisper_tokens
from schedlab.data.whisper_files import FILES, special_tokens, write_model_folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_model_folder("whisper-tiny", tmp_path_factory.mktemp("models") / "whisper-tiny")


@pytest.mark.slow
def test_special_tokens_get_whispers_ids(tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny))
    assert len(tok) == 51865 == json.loads((tiny / "config.json").read_text())["vocab_size"]
    ids = tok.convert_tokens_to_ids(
        ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|zh|>", "<|su|>", "<|translate|>",
         "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>",
         "<|0.00|>", "<|30.00|>"]
    )
    assert ids == [50257, 50258, 50259, 50260, 50357, 50358, 50359, 50360, 50361, 50362, 50363, 50364, 51864]
    assert tok.eos_token_id == 50257
    # Text is Whisper's own BPE, as openai-whisper's tiktoken encoding splits it.
    text = " The quick brown fox, naïve café 1234!"
    assert tok.encode(text, add_special_tokens=False) == whisper_tokens.encoding().encode_ordinary(text)
    prompt = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    assert tok.encode(prompt, add_special_tokens=False) == [50258, 50259, 50359, 50363]


def test_processor_loads_with_the_models_mel_bins(tiny):
    from transformers import AutoProcessor

    assert {p.name for p in tiny.iterdir()} == {"config.json", *FILES}
    proc = AutoProcessor.from_pretrained(str(tiny))
    assert proc.feature_extractor.feature_size == 80 and proc.feature_extractor.sampling_rate == 16000


def test_large_v3_adds_cantonese_before_the_task_tokens():
    tokens = special_tokens(51866, 50257)
    assert tokens[101] == "<|yue|>" and tokens[102] == "<|translate|>"
    assert len(tokens) == 51866 - 50257
    with pytest.raises(Exception, match="vocab_size"):
        special_tokens(52000, 50257)
