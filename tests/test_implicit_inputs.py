"""Outputs checked against everything a command reads, implicit inputs included: no command
writes into the data mirror (SCHEDLAB_DATA_MIRROR) or the download cache (SCHEDLAB_DATA_CACHE),
nor onto one of their files through a symbolic or a hard link; it exits 2 in one line before any
work, and every file of both folders keeps its bytes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from test_hostile import run_cli

#: The mirror's files, as the shared mirror names them (small stand-ins: the commands refuse
#: before they read a byte).
MIRROR_FILES = ("librispeech_test_clean.tsv", "AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv",
                "openchat_sharegpt4_lengths_llama2.csv", "mooncake_conversation_trace.jsonl")


@pytest.fixture
def folders(tmp_path, monkeypatch) -> dict[str, Path]:
    """A mirror and a cache of the user's (each file's bytes its own name), and a work folder."""
    mirror, cache, work = tmp_path / "mirror", tmp_path / "cache", tmp_path / "work"
    for folder in (mirror, cache, work):
        folder.mkdir()
    for name in MIRROR_FILES:
        (mirror / name).write_text(f"the user's copy of {name}\n")
    (cache / "chat_lengths.parquet").write_bytes(b"the cached table")
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(mirror))
    monkeypatch.setenv("SCHEDLAB_DATA_CACHE", str(cache))
    monkeypatch.chdir(work)
    return {"mirror": mirror, "cache": cache, "work": work}


def _checksums(*folders: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for f in folders for p in sorted(f.rglob("*"))
            if p.is_file()}


#: The destructive cases: each command's output aimed at a file of the mirror it reads.
CASES = {
    "data": ["data", "--out", "{mirror}/librispeech_test_clean.tsv"],
    "tournament pool azure-conv": ["tournament", "pool", "--kind", "azure-conv",
                                   "--out", "{mirror}/AzureLLMInferenceTrace_conv.csv"],
    "slai lengths": ["slai", "lengths", "--out", "{mirror}/openchat_sharegpt4_lengths_llama2.csv"],
    "tournament pool mooncake": ["tournament", "pool", "--kind", "mooncake",
                                 "--out", "{mirror}/mooncake_conversation_trace.jsonl"],
    "ewsjf pools": ["ewsjf", "pools", "--short", "short.parquet", "--long", "{mirror}/AzureLLMInferenceTrace_code.csv"],
    "slosa pools": ["slosa", "pools", "--chat", "{mirror}/AzureLLMInferenceTrace_code.csv", "--code", "code.parquet"],
    "a new file in the mirror": ["ewsjf", "pools", "--short", "{mirror}/short.parquet", "--long", "long.parquet"],
    "into the cache": ["slosa", "pools", "--chat", "{cache}/chat_lengths.parquet", "--code", "code.parquet"],
    "a new file in the cache": ["data", "--out", "{cache}/u.parquet"],
}


@pytest.mark.parametrize("argv", CASES.values(), ids=CASES.keys())
def test_no_output_lands_in_the_mirror_or_the_cache(capsys, folders, argv):
    before = _checksums(folders["mirror"], folders["cache"])
    argv = [a.format(**folders) for a in argv]
    rc, out, err = run_cli(capsys, argv)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "SCHEDLAB_DATA_MIRROR" in err or "SCHEDLAB_DATA_CACHE" in err, err
    assert _checksums(folders["mirror"], folders["cache"]) == before
    assert not any(folders["work"].iterdir())  # refused before any work


@pytest.mark.parametrize("how", ["symbolic link", "chain of symbolic links", "hard link", "dot-dot"])
def test_no_output_reaches_a_mirror_file_through_a_link(capsys, folders, how):
    """The output named in the work folder, but reaching a file of the mirror."""
    target = folders["mirror"] / "openchat_sharegpt4_lengths_llama2.csv"
    out = folders["work"] / "lengths.parquet"
    if how == "symbolic link":
        out.symlink_to(target)
    elif how == "chain of symbolic links":
        (folders["work"] / "hop").symlink_to(target)
        out.symlink_to(folders["work"] / "hop")
    elif how == "hard link":
        os.link(target, out)
    else:
        out = folders["work"] / ".." / "mirror" / target.name
    before = _checksums(folders["mirror"], folders["cache"])
    listing = sorted(folders["work"].iterdir())
    rc, _, err = run_cli(capsys, ["slai", "lengths", "--out", str(out)])
    assert rc == 2 and err.count("\n") == 1 and str(target) in err, err
    assert _checksums(folders["mirror"], folders["cache"]) == before
    assert sorted(folders["work"].iterdir()) == listing


def test_an_output_folder_inside_the_cache_is_refused(capsys, folders, tmp_path):
    rc, _, err = run_cli(capsys, ["whisper-files", "--model", "whisper-tiny", "--out", str(folders["cache"] / "whisper")])
    assert rc == 2 and err.count("\n") == 1 and "SCHEDLAB_DATA_CACHE" in err, err
    assert not (folders["cache"] / "whisper").exists()


def test_the_cache_gets_new_entries_and_never_replaces_one(tmp_path, monkeypatch):
    """The data layer adds a file to the cache once (schedlab.io.cache_entry); a second
    entry of the same name keeps the first, and no ordinary writer may write there."""
    from schedlab.errors import SchedlabError
    from schedlab.io import cache_entry, end_guard, guard_inputs, write_json

    cache = tmp_path / "cache"
    guard_inputs((), {cache: "the data cache (SCHEDLAB_DATA_CACHE)"})
    try:
        with cache_entry(cache / "table.parquet") as tmp:
            tmp.write_text("first")
        with pytest.raises(SchedlabError, match="SCHEDLAB_DATA_CACHE"):
            with cache_entry(cache / "table.parquet") as tmp:
                tmp.write_text("second")
        with pytest.raises(SchedlabError, match="SCHEDLAB_DATA_CACHE"):
            write_json({"x": 1}, cache / "other.json")
    finally:
        end_guard()
    assert (cache / "table.parquet").read_text() == "first"
    assert sorted(p.name for p in cache.iterdir()) == ["table.parquet"]


def test_a_file_read_while_running_is_guarded_from_then_on(tmp_path):
    """Every reader records what it reads (schedlab.io.record_input): a write onto a file read
    during the run, not named on the command line, is refused."""
    from schedlab.errors import SchedlabError
    from schedlab.io import end_guard, guard_inputs, read_json, write_json

    spec = tmp_path / "spec.json"
    spec.write_text('{"a": 1}')
    guard_inputs(())
    try:
        read_json(spec)
        with pytest.raises(SchedlabError, match="is an input of this command"):
            write_json({"a": 2}, spec)
    finally:
        end_guard()
    assert spec.read_text() == '{"a": 1}'
    read_json(spec)  # outside a command (a library's use), what is read may be written again
    write_json({"a": 2}, spec)
    assert read_json(spec) == {"a": 2}
