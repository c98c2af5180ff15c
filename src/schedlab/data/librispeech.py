"""LibriSpeech test-clean: utterance durations and transcripts."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import PurePosixPath

import pandas as pd
import soundfile

from schedlab.data.sources import (
    COLUMNS, Remote, cache_dir, download, mirror_file, read_utterances, write_utterances,
)
from schedlab.errors import SchedlabError
from schedlab.registry import register_pool

#: OpenSLR's archive (a fixed release: its URL has no revision). The checksum applies to the
#: archive only; the offline mirror holds the table parsed from it (``TABLE_NAME``; the shared
#: mirror's copy has SHA-256 f2eda54821b0834b672dab638777402532e634b8c7c4368474ed910f2ac883c0),
#: read as it is, like the table this module caches after parsing a download.
TEST_CLEAN = Remote(
    "https://www.openslr.org/resources/12/test-clean.tar.gz",
    "39fde525e59672dc6d1551919b1478f724438a95aa55f874b576be21967e6c23",
)
TABLE_NAME = "librispeech_test_clean.tsv"


def parse_archive(path: str | os.PathLike) -> pd.DataFrame:
    """Read every transcript and FLAC duration from a LibriSpeech tar archive, streaming."""
    transcripts: dict[str, str] = {}
    durations: dict[str, float] = {}
    with tarfile.open(path, "r|*") as tar:
        for member in tar:
            if not member.isfile():
                continue
            name = PurePosixPath(member.name).name
            if name.endswith(".trans.txt"):
                for line in tar.extractfile(member).read().decode("utf-8").splitlines():
                    if line.strip():
                        utt, _, text = line.strip().partition(" ")
                        transcripts[utt] = text
            elif name.endswith(".flac"):
                info = soundfile.info(io.BytesIO(tar.extractfile(member).read()))
                durations[name[: -len(".flac")]] = info.frames / info.samplerate
    _check_paired(path, set(transcripts), set(durations))
    ids = sorted(transcripts)
    return pd.DataFrame(
        {"utterance_id": ids, "duration_s": [durations[i] for i in ids],
         "transcript": [transcripts[i] for i in ids]},
        columns=list(COLUMNS),
    )


def _check_paired(path, with_text: set[str], with_audio: set[str]) -> None:
    pairs = (("audio", with_text - with_audio), ("transcript", with_audio - with_text))
    for lacking, ids in pairs:
        if ids:
            raise SchedlabError(f"{path}: {len(ids)} utterance(s) without {lacking}, e.g. {min(ids)}")


def load_test_clean() -> pd.DataFrame:
    """test-clean from the mirror's table, else the cached table, else downloaded and parsed."""
    mirrored = mirror_file(TABLE_NAME)
    if mirrored is not None:
        return read_utterances(mirrored)
    table = cache_dir() / TABLE_NAME
    if not table.is_file():
        archive = download(TEST_CLEAN, cache_dir() / PurePosixPath(TEST_CLEAN.url).name)
        write_utterances(parse_archive(archive), table)
    return read_utterances(table)


@register_pool("utterances", columns=("duration_s", "output_tokens"))
def utterances() -> pd.DataFrame:
    """LibriSpeech test-clean's utterances with their Whisper token counts (``text_tokens``, and
    ``output_tokens`` with the generated end of text): ``schedlab data``'s table."""
    from schedlab.data.whisper_tokens import count_text_tokens

    utts = load_test_clean()
    utts["text_tokens"] = count_text_tokens(utts["transcript"])
    utts["output_tokens"] = utts["text_tokens"] + 1  # the generated <|endoftext|>
    return utts
