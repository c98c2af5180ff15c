"""Data loaders: LibriSpeech archive parsing, mirror and download, FLEURS, Whisper tokens."""

import hashlib
import io
import re
import tarfile

import numpy as np
import pandas as pd
import pytest
import soundfile

from schedlab.data import fleurs, librispeech, sources, whisper_tokens
from schedlab.errors import SchedlabError

UNREACHABLE = "http://127.0.0.1:9/x"
UTTERANCES = {  # id: (samples at 16 kHz, transcript)
    "1089-134686-0000": (16000, "HE HOPED THERE WOULD BE STEW"),
    "1089-134686-0001": (24000, "STUFF IT INTO YOU"),
    "121-121726-0000": (8000, "ALSO A POPULAR CONTRIVANCE"),
}


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _flac(samples: int) -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, np.zeros(samples, dtype=np.int16), 16000, format="FLAC")
    return buf.getvalue()


def _archive(path, utterances=UTTERANCES, audio_only=(), text_only=()):
    """A LibriSpeech-shaped tar.gz; ``text_only`` ids lack a FLAC, ``audio_only`` a transcript."""
    chapters: dict[tuple[str, str], list[str]] = {}
    for utt in utterances:
        speaker, chapter, _ = utt.split("-")
        chapters.setdefault((speaker, chapter), []).append(utt)
    with tarfile.open(path, "w:gz") as tar:
        for (speaker, chapter), utts in chapters.items():
            folder = f"LibriSpeech/test-clean/{speaker}/{chapter}"
            for utt in utts:
                if utt not in text_only:
                    _add(tar, f"{folder}/{utt}.flac", _flac(utterances[utt][0]))
            lines = "".join(f"{u} {utterances[u][1]}\n" for u in utts if u not in audio_only)
            _add(tar, f"{folder}/{speaker}-{chapter}.trans.txt", lines.encode())
    return path


def test_parse_archive_reads_durations_and_transcripts(tmp_path):
    df = librispeech.parse_archive(_archive(tmp_path / "test-clean.tar.gz"))
    assert list(df.columns) == ["utterance_id", "duration_s", "transcript"]
    assert list(df["utterance_id"]) == sorted(UTTERANCES)
    assert list(df["duration_s"]) == [1.0, 1.5, 0.5]
    assert list(df["transcript"]) == [UTTERANCES[u][1] for u in sorted(UTTERANCES)]


@pytest.mark.parametrize("kind", ["text_only", "audio_only"])
def test_parse_archive_rejects_unpaired_utterances(tmp_path, kind):
    path = _archive(tmp_path / "a.tar.gz", **{kind: ("1089-134686-0001",)})
    with pytest.raises(SchedlabError, match="1089-134686-0001"):
        librispeech.parse_archive(path)


def test_load_test_clean_parses_and_caches_the_archive(data_cache, monkeypatch):
    data_cache.mkdir()
    fake = _archive(data_cache / "test-clean.tar.gz")  # as if downloaded earlier
    monkeypatch.setattr(librispeech, "TEST_CLEAN", sources.Remote(librispeech.TEST_CLEAN.url, sources.sha256_of(fake)))
    first = librispeech.load_test_clean()
    assert (data_cache / librispeech.TABLE_NAME).is_file()
    (data_cache / "test-clean.tar.gz").unlink()
    pd.testing.assert_frame_equal(librispeech.load_test_clean(), first)


def test_load_test_clean_reads_the_mirror(mirror):
    df = librispeech.load_test_clean()
    assert len(df) == 2620
    assert df["utterance_id"].is_unique
    assert df["duration_s"].min() == pytest.approx(1.285)
    assert df["duration_s"].max() == pytest.approx(34.955)
    assert df["duration_s"].mean() == pytest.approx(7.4246, abs=1e-3)


def test_mirror_must_be_a_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(tmp_path / "absent"))
    with pytest.raises(SchedlabError, match="SCHEDLAB_DATA_MIRROR"):
        sources.mirror_file("x.tsv")


def test_download_failure_is_clear_and_leaves_nothing(data_cache):
    dest = data_cache / "x"
    with pytest.raises(sources.DataUnavailable, match="SCHEDLAB_DATA_MIRROR") as err:
        sources.download(sources.Remote(UNREACHABLE), dest)
    assert UNREACHABLE in str(err.value) and "\n" not in str(err.value)
    assert not data_cache.exists() or not any(data_cache.iterdir())


def _served(tmp_path, content: bytes) -> str:
    """A file:// URL serving ``content`` (urllib reads it as it would an HTTP download)."""
    path = tmp_path / "served.bin"
    path.write_bytes(content)
    return path.as_uri()


def test_download_checks_the_pinned_sha256(tmp_path, data_cache):
    url = _served(tmp_path, b"the real bytes")
    good = hashlib.sha256(b"the real bytes").hexdigest()
    dest = data_cache / "x"
    with pytest.raises(SchedlabError, match=f"download of {url}: SHA-256 .* does not match the expected 0+$") as err:
        sources.download(sources.Remote(url, "0" * 64), dest)
    assert "\n" not in str(err.value)
    assert not dest.exists()  # nothing half-trusted is left in the cache
    assert sources.download(sources.Remote(url, good), dest).read_bytes() == b"the real bytes"


def test_a_cached_copy_is_checked_again_on_reuse(tmp_path, data_cache):
    url = _served(tmp_path, b"the real bytes")
    remote = sources.Remote(url, hashlib.sha256(b"the real bytes").hexdigest())
    dest = sources.download(remote, data_cache / "x")
    dest.write_bytes(b"tampered")
    with pytest.raises(SchedlabError, match="cached .*x .*delete it to download again.*does not match"):
        sources.download(remote, dest)


def test_without_a_published_sha256_the_first_download_is_recorded(tmp_path, data_cache):
    url = _served(tmp_path, b"first")
    dest = sources.download(sources.Remote(url), data_cache / "x")
    assert (data_cache / "x.sha256").read_text().strip() == hashlib.sha256(b"first").hexdigest()
    assert sources.download(sources.Remote(url), dest) == dest
    dest.write_bytes(b"changed")
    with pytest.raises(SchedlabError, match="does not match"):
        sources.download(sources.Remote(url), dest)


@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv",
                                  "mooncake_conversation_trace.jsonl", "openchat_sharegpt4_lengths_llama2.csv"])
def test_pinned_checksums_match_the_mirrored_copies(shared_data, name):
    """These mirror files are the downloads themselves, so their SHA-256 is the pinned one."""
    from schedlab.data import llm_traces, openchat

    remote = {"AzureLLMInferenceTrace_code.csv": llm_traces.AZURE["code"],
              "AzureLLMInferenceTrace_conv.csv": llm_traces.AZURE["conv"],
              "mooncake_conversation_trace.jsonl": llm_traces.MOONCAKE_REMOTE,
              "openchat_sharegpt4_lengths_llama2.csv": openchat.LENGTHS}[name]
    assert sources.sha256_of(shared_data / name) == remote.sha256


def test_downloads_are_pinned_to_commits_not_branches():
    from schedlab.data import llm_traces, openchat

    pinned = [*llm_traces.AZURE.values(), llm_traces.MOONCAKE_REMOTE, openchat.LENGTHS, librispeech.TEST_CLEAN]
    for remote in pinned:
        assert re.fullmatch(r"[0-9a-f]{64}", remote.sha256)
        assert not re.search(r"/(main|master)/", remote.url), remote.url
    assert re.search(r"/resolve/[0-9a-f]{40}/", fleurs.TSV_URL)


FLEURS_ROWS = [
    ("1906", "10.wav", 'He said "hola".', "he said hola", "he|said|hola", "40000", "MALE"),
    ("1906", "11.wav", 'He said "hola".', "he said hola", "he|said|hola", "56000", "FEMALE"),
    ("1675", "09.wav", "¿Qué tal?", "qué tal", "qué|tal", "16000", "FEMALE"),
]


@pytest.fixture
def fleurs_tsv(tmp_path):
    path = tmp_path / "fleurs_es_419_test.tsv"
    path.write_text("".join("\t".join(row) + "\n" for row in FLEURS_ROWS), encoding="utf-8")
    return path


def test_fleurs_parse_tsv(fleurs_tsv):
    df = fleurs.parse_tsv(fleurs_tsv)
    assert list(df["utterance_id"]) == ["09", "10", "11"]
    assert list(df["duration_s"]) == [1.0, 2.5, 3.5]
    assert list(df["transcript"]) == ["¿Qué tal?", 'He said "hola".', 'He said "hola".']


def test_fleurs_load_test_reads_the_mirror(fleurs_tsv, data_cache, monkeypatch):
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(fleurs_tsv.parent))
    assert len(fleurs.load_test("es")) == 3


def test_fleurs_load_test_offline_raises(data_cache, monkeypatch):
    monkeypatch.setattr(fleurs, "TSV_URL", "http://127.0.0.1:9/{lang}/test.tsv")
    with pytest.raises(sources.DataUnavailable, match="127.0.0.1:9/hi_in"):
        fleurs.load_test("hi")
    with pytest.raises(SchedlabError, match="unknown FLEURS language"):
        fleurs.load_test("fr")


def test_whisper_encoding_matches_whisper():
    enc = whisper_tokens.encoding()
    assert enc.n_vocab == 51865
    assert enc.eot_token == 50257
    prompt = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    assert enc.encode(prompt, allowed_special="all") == [50258, 50259, 50359, 50363]
    assert whisper_tokens.PROMPT_TOKENS == 4


def test_whisper_token_counts():
    texts = ["hello world", "HE HOPED THERE WOULD BE STEW FOR DINNER", "El gato negro."]
    assert whisper_tokens.count_text_tokens(texts).tolist() == [2, 8, 5]
    assert whisper_tokens.output_tokens(texts).tolist() == [3, 9, 6]


def test_whisper_tokens_per_second_on_librispeech(mirror):
    df = librispeech.load_test_clean()
    enc = whisper_tokens.encoding()
    upper = df["transcript"].iloc[0]
    assert upper.isupper()
    assert whisper_tokens.count_text_tokens([upper])[0] < len(enc.encode_ordinary(" " + upper))
    kappa = whisper_tokens.count_text_tokens(df["transcript"]).sum() / df["duration_s"].sum()
    assert 2.6 < kappa < 3.4
