"""FLEURS test split (es, hi, ar): utterance durations and transcripts."""

from __future__ import annotations

import csv
import os

import pandas as pd

from schedlab.data.sources import COLUMNS, Remote, cache_dir, download, mirror_file
from schedlab.errors import SchedlabError
from schedlab.io import read_csv

LANGUAGES = {"es": "es_419", "hi": "hi_in", "ar": "ar_eg"}
#: FLEURS at a pinned commit of google/fleurs; no checksums of its TSVs are known here, so the
#: first download's SHA-256 is recorded and checked on reuse.
TSV_URL = "https://huggingface.co/datasets/google/fleurs/resolve/70bb2e84b976b7e960aa89f1c648e09c59f894dd/data/{lang}/test.tsv"
SAMPLE_RATE = 16000
TSV_FIELDS = (
    "id", "file_name", "raw_transcription", "transcription", "words", "num_samples", "gender",
)


def parse_tsv(path: str | os.PathLike) -> pd.DataFrame:
    """Parse a FLEURS split TSV (no header); one row per recording, keyed by its audio file name.

    FLEURS ``id`` names a sentence that several speakers read, so the file name is the key.
    """
    raw = read_csv(path, sep="\t", header=None, names=list(TSV_FIELDS), dtype=str, quoting=csv.QUOTE_NONE,
                   keep_default_na=False)
    if not raw["num_samples"].str.fullmatch(r"[0-9]+").all():
        raise SchedlabError(f"{path}: not a FLEURS TSV with {len(TSV_FIELDS)} columns (num_samples a count)")
    df = pd.DataFrame({
        "utterance_id": raw["file_name"].str.removesuffix(".wav"),
        "duration_s": raw["num_samples"].astype(int) / SAMPLE_RATE,
        "transcript": raw["raw_transcription"],
    }, columns=list(COLUMNS))
    return df.sort_values("utterance_id", ignore_index=True)


def load_test(lang: str) -> pd.DataFrame:
    """The test split of ``lang`` (a FLEURS code such as ``es_419``, or a key of LANGUAGES)."""
    lang = LANGUAGES.get(lang, lang)
    if lang not in LANGUAGES.values():
        known = ", ".join(LANGUAGES.values())
        raise SchedlabError(f"unknown FLEURS language {lang!r}; expected one of {known}")
    path = mirror_file(f"fleurs_{lang}_test.tsv")
    if path is None:
        path = download(Remote(TSV_URL.format(lang=lang)), cache_dir() / f"fleurs_{lang}_test.tsv")
    return parse_tsv(path)
