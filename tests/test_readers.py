"""One reader per format (schedlab.io: CSV/TSV, JSON, JSON Lines, parquet): an empty file, bytes
that are not text, a table without its columns, a column of the wrong type or a non-finite value
end every command that reads it, the data mirror's files included, with exit 2 and one line
naming the file and the problem; nothing is written."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from test_hostile import N, STEPTIME, files, run_cli, trace_frame  # noqa: F401 (a fixture)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"

#: Every command that reads the mirror, and the mirror files it reads.
MIRROR_READERS = {
    "data": (["data", "--out", "out.parquet"], "librispeech_test_clean.tsv"),
    "tournament pool azure-conv": (["tournament", "pool", "--kind", "azure-conv", "--out", "out.parquet"],
                                   "AzureLLMInferenceTrace_conv.csv"),
    "tournament pool azure-code": (["tournament", "pool", "--kind", "azure-code", "--out", "out.parquet"],
                                   "AzureLLMInferenceTrace_code.csv"),
    "tournament pool mooncake": (["tournament", "pool", "--kind", "mooncake", "--out", "out.parquet"],
                                 "mooncake_conversation_trace.jsonl"),
    "slai lengths": (["slai", "lengths", "--out", "out.parquet"], "openchat_sharegpt4_lengths_llama2.csv"),
    "ewsjf pools": (["ewsjf", "pools", "--short", "out.parquet", "--long", "out2.parquet"],
                    "AzureLLMInferenceTrace_conv.csv"),
    "slosa pools": (["slosa", "pools", "--chat", "out.parquet", "--code", "out2.parquet"], "AzureLLMInferenceTrace_code.csv"),
}


def _good_lines(name: str, n: int = 6) -> list[str]:
    """The first lines of the shared mirror's file, or a stand-in of the same layout."""
    if (SHARED / name).is_file():
        with open(SHARED / name) as f:
            return [next(f).rstrip("\n") for _ in range(n)]
    header = {"librispeech_test_clean.tsv": "utterance_id\tduration_s\ttranscript",
              "openchat_sharegpt4_lengths_llama2.csv": "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio"}
    if name.endswith(".jsonl"):
        return [json.dumps({"timestamp": 10 * k, "input_length": 100 + k, "output_length": 5, "hash_ids": [k]})
                for k in range(n)]
    if name.startswith("Azure"):
        return ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [f"2023-11-16 18:15:{k:02d}.0,{100 + k},{5 + k}"
                                                               for k in range(n - 1)]
    rows = [f"1272-128104-000{k}\t{3.5 + k}\tWORDS OF SPEECH" if name.endswith(".tsv") else f"{100 + k},{20 + k},{120 + 2 * k},5.0"
            for k in range(n - 1)]
    return [header[name], *rows]


def _with_cell(name: str, value: str) -> str:
    """The file with its third line's token (or duration) field replaced by ``value``."""
    lines = _good_lines(name)
    if name.endswith(".jsonl"):
        row = json.loads(lines[2])
        lines[2] = json.dumps({**row, "input_length": "@"}).replace('"@"', value)
    else:
        sep = "\t" if name.endswith(".tsv") else ","
        cells = lines[2].split(sep)
        cells[1] = value
        lines[2] = sep.join(cells)
    return "\n".join(lines) + "\n"


#: What a mirror file turns into, and a word the error must hold.
BAD_FILES = {
    "empty": (lambda name: b"", "is empty"),
    "binary": (lambda name: bytes(range(256)) * 4, "not UTF-8"),
    "header only": (lambda name: (_good_lines(name)[0] + "\n").encode(), "no rows"),
    "ragged": (lambda name: ("\n".join(_good_lines(name)[:3] + ["a,b,c,d,e\tf\tg{"]) + "\n").encode(), "line"),
    "a NaN count": (lambda name: _with_cell(name, "NaN" if name.endswith("jsonl") else "nan").encode(), "row 1"),
    "a word for a number": (lambda name: _with_cell(name, '"many"' if name.endswith("jsonl") else "many").encode(), "many"),
}


#: Each mirror reader with each bad file its format can have (a JSON Lines file has no header:
#: its first line is a request, so it cannot be "header only").
BAD_CASES = [(command, bad) for command, (_, name) in MIRROR_READERS.items() for bad in BAD_FILES
             if not (bad == "header only" and name.endswith(".jsonl"))]


@pytest.mark.slow
@pytest.mark.parametrize("command, bad", BAD_CASES, ids=[f"{c}-{b}" for c, b in BAD_CASES])
def test_a_bad_mirror_file_is_one_line_naming_it(capsys, tmp_path, monkeypatch, command, bad):
    argv, name = MIRROR_READERS[command]
    make, word = BAD_FILES[bad]
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for other in {n for _, n in MIRROR_READERS.values()}:
        (mirror / other).write_text("\n".join(_good_lines(other)) + "\n")
    (mirror / name).write_bytes(make(name))
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in mirror.iterdir()}
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(mirror))
    monkeypatch.setenv("SCHEDLAB_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, argv)
    if bad == "ragged" and name.endswith(".tsv"):
        word = "duration_s"  # a tab-separated table reads the comma-separated line as one field
    if bad == "a NaN count" and name.endswith(".jsonl"):
        word = "row 2"  # no header line: the third line is the third row
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(mirror / name) in err and word in err, err
    assert not list(tmp_path.glob("out*.parquet"))
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in mirror.iterdir()} == before


def test_a_cached_table_that_is_not_text_is_one_line(capsys, tmp_path, monkeypatch):
    """A cached test-clean table overwritten with bytes (no checksum guards a parsed table)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "librispeech_test_clean.tsv").write_bytes(b"PAR1\x00\x15\x04\xff\xfe")
    monkeypatch.setenv("SCHEDLAB_DATA_CACHE", str(cache))
    monkeypatch.delenv("SCHEDLAB_DATA_MIRROR", raising=False)
    rc, _, err = run_cli(capsys, ["data", "--out", str(tmp_path / "u.parquet")])
    assert rc == 2 and err.count("\n") == 1 and "librispeech_test_clean.tsv: not UTF-8" in err, err
    assert not (tmp_path / "u.parquet").exists()


# -- summaries, match tables, pools, predictors, parameters -------------------------------------
def test_collect_refuses_summaries_whose_keys_change_type(capsys, files):  # noqa: F811
    """(pyarrow's ArrowInvalid once ended collect in a traceback.)"""
    a, b = files["dir"] / "a.json", files["dir"] / "b.json"
    a.write_text(json.dumps({"policy": "sjf", "rate": 5.0, "completed": 10}))
    out = files["out"] / "all.parquet"
    for other, named in (({"policy": "sjf", "rate": "fast", "completed": 10}, "key 'rate' is a string"),
                         ({"policy": 7, "rate": 5.0}, "key 'policy' is a number"),
                         ({"policy": "sjf", "rate": [5.0]}, "key 'rate' holds a list"),
                         ({"policy": "sjf", "rate": 2**80}, "'rate'")):
        b.write_text(json.dumps(other))
        rc, _, err = run_cli(capsys, ["collect", str(a), str(b), "--out", str(out)])
        assert rc == 2 and err.count("\n") == 1 and named in err, err
        assert not any(files["out"].iterdir())
    b.write_text(json.dumps({"policy": "fcfs", "rate": None, "completed": 3}))  # a missing value is null
    rc, _, err = run_cli(capsys, ["collect", str(a), str(b), "--out", str(out)])
    assert rc == 0, err
    assert pd.read_parquet(out)["completed"].tolist() == [10, 3]


def test_tournament_table_takes_match_tables_only(capsys, files):  # noqa: F811
    """A table without the front's columns (a trace beside the matches: KeyError 'workload')."""
    matches = files["dir"] / "m.parquet"
    pd.DataFrame({"workload": ["w", "w"], "load": [0.5, 0.5], "policy": ["fcfs", "sjf"],
                  "p50_e2el_ms": [10.0, 12.0], "p99_e2el_ms": [90.0, 40.0]}).to_parquet(matches)
    out = files["out"] / "table.parquet"
    rc, _, err = run_cli(capsys, ["tournament", "table", "--runs", str(matches), str(files["trace"]), "--out", str(out)])
    assert rc == 2 and err.count("\n") == 1 and str(files["trace"]) in err and "workload" in err, err
    assert not out.exists()
    rc, _, err = run_cli(capsys, ["tournament", "table", "--runs", str(matches), "--out", str(out)])
    assert rc == 0, err
    assert pd.read_parquet(out)["pareto"].tolist() == [True, True]


def _play(files, pool: Path) -> list[str]:
    arena = {"steptime": str(files["steptime"]), "hardware": "A100-40GB", "model": "mistral-7b"}
    return ["tournament", "play", "--workload", "w", "--spec", json.dumps({"kind": "azure-code", "n_requests": 10}),
            "--arena", json.dumps(arena), "--loads", "0.5", "--entrants", "fcfs",
            "--pool", f"azure-code={pool}", "--out", str(files["out"] / "m.parquet")]


POOL_CASES = {
    "NaN tokens": ({"prompt_tokens": [100.0, math.nan, 300.0]}, "prompt_tokens"),
    "NaN timestamp": ({"timestamp_s": [0.0, math.nan, 2.0]}, "timestamp_s"),
    "negative timestamp": ({"timestamp_s": [0.0, -1.0, 2.0]}, "timestamp_s"),
    "timestamps out of order": ({"timestamp_s": [0.0, 5.0, 2.0]}, "sorted"),
}


@pytest.mark.parametrize("columns, named", POOL_CASES.values(), ids=POOL_CASES.keys())
def test_a_tournament_pool_is_checked(capsys, files, columns, named):  # noqa: F811
    pool = files["dir"] / "azure.parquet"
    base = {"prompt_tokens": [100, 200, 300], "output_tokens": [10, 20, 30], "source": ["a"] * 3,
            "timestamp_s": [0.0, 1.0, 2.0]}
    pd.DataFrame({**base, **columns}).to_parquet(pool)
    rc, _, err = run_cli(capsys, _play(files, pool))
    assert rc == 2 and err.count("\n") == 1 and str(pool) in err and named in err, err
    assert not any(files["out"].iterdir())


PREDICTORS = {
    "zero coefficients": ({"a": 0.0, "beta": 0.0, "g": 0.0, "d": 0.0}, None, "positive"),
    "a negative intercept": (None, {"d": -1.0}, "positive"),
    "a string coefficient": (None, {"g": "1e-5"}, "decode.g"),
    "a NaN coefficient": (None, {"beta": math.nan}, "decode.beta"),
    "an infinite coefficient": (None, {"a": math.inf}, "decode.a"),
}


@pytest.mark.parametrize("whole, changed, named", PREDICTORS.values(), ids=PREDICTORS.keys())
def test_a_latency_predictor_without_meaning_is_refused(capsys, files, whole, changed, named):  # noqa: F811
    """Paper D's predictor: ZeroDivisionError (zero), numpy's UFuncNoLoopError (a string), NaN
    latencies with g = 0 (NaN), negative latencies (a negative intercept) before."""
    reference = {"a": 2e-7, "beta": 2.75e-4, "g": 8.8e-7, "d": 0.01585}
    predictor = {"prefill": whole or {"a": 1e-4, "beta": 5.7e-3, "g": 1e-5, "d": 0.04367},
                 "decode": whole or {**reference, **changed}, "meta": {"source": "x"}}
    path = files["dir"] / "predictor.json"
    path.write_text(json.dumps(predictor))
    rc, _, err = run_cli(capsys, ["slosa", "study", "compare", "--predictor", str(path), "--chat", str(files["pool"]),
                                  "--code", str(files["pool"]), "--ns", "4", "--max-batches", "1", "--seeds", "0",
                                  "--out", str(files["out"] / "s.parquet")])
    assert rc == 2 and err.count("\n") == 1 and str(path) in err and named in err, err
    assert not any(files["out"].iterdir())


EWSJF_PARAMS = {"max_queues as text": ("max_queues", "22"), "a trillion queues": ("max_queues", 10**12),
                "alpha of 1e308": ("alpha", 1e308), "a fractional queue count": ("max_queues", 8.5),
                "a NaN weight": ("a_urg", math.nan)}


@pytest.mark.parametrize("key, value", EWSJF_PARAMS.values(), ids=EWSJF_PARAMS.keys())
def test_ewsjf_parameters_are_checked_against_the_tuned_range(capsys, files, key, value):  # noqa: F811
    params = {"a_urg": 0.06, "b_urg": 1.5, "a_fair": 0.86, "b_fair": 0.36, "alpha": 6.8, "max_queues": 13, key: value}
    path = files["dir"] / "params.json"
    path.write_text(json.dumps(params))
    rc, _, err = run_cli(capsys, ["ewsjf", "study", "queues", "--steptime", str(files["steptime"]), "--short",
                                  str(files["pool"]), "--long", str(files["pool"]), "--params", str(path),
                                  "--n-requests", "10", "--out", str(files["out"] / "q.parquet")])
    assert rc == 2 and err.count("\n") == 1 and f"key {key!r}" in err, err
    assert not any(files["out"].iterdir())


# -- the readers themselves -------------------------------------------------------------------
def test_each_reader_names_the_file_and_the_problem(tmp_path):
    from schedlab.errors import SchedlabError
    from schedlab.io import read_csv, read_json, read_jsonl, read_parquet

    def fails(reader, content: bytes, word: str, **kw):
        path = tmp_path / "f"
        path.write_bytes(content)
        with pytest.raises(SchedlabError) as e:
            reader(path, **kw)
        assert str(e.value).startswith(f"{path}: ") and word in str(e.value) and "\n" not in str(e.value), e.value

    fails(read_json, b"", "is empty")
    fails(read_json, b"\xff\xfe{}", "not UTF-8")
    fails(read_json, b'{"a": ', "not valid JSON")
    fails(read_csv, b"", "is empty")
    fails(read_csv, b"a,b\n", "no rows")
    fails(read_csv, b"a,b\n1,2\n", "missing columns c", required=("c",))
    fails(read_csv, b"a,b\n1,x\n", "column 'b' must hold numbers, first bad row 0 ('x')", numeric=("b",))
    fails(read_csv, b"a,b\n1,2\n3,inf\n", "column 'b' must hold finite numbers, first bad row 1", numeric=("b",))
    fails(read_jsonl, b'{"a": 1}\n[2]\n', "line 2: not a JSON object")
    fails(read_jsonl, b'{"a": 1}\n{"a": \n', "line 2")
    fails(read_parquet, b"", "is empty")
    fails(read_parquet, b"PAR1 not really", "not a readable parquet table")
    pd.DataFrame({"a": [1.0, np.nan]}).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(SchedlabError, match="column 'a' must hold finite numbers, first bad row 1"):
        read_parquet(tmp_path / "t.parquet", numeric=("a",))
    assert len(read_parquet(tmp_path / "t.parquet")) == 2


def test_a_pool_that_joins_traces_is_taken_where_nothing_replays_it(capsys, files):  # noqa: F811
    """Paper B's long prompts join two traces (their timestamps restart): the mixed workload
    draws from them without replaying their times, so their order is not a pool's flaw there."""
    pool = files["dir"] / "long.parquet"
    pd.DataFrame({"prompt_tokens": [100, 200, 300, 400], "output_tokens": [10, 20, 30, 40], "source": ["a", "a", "b", "b"],
                  "timestamp_s": [0.0, 5.0, 0.0, 2.0]}).to_parquet(pool)
    arena = {"steptime": str(files["steptime"]), "hardware": "A100-40GB", "model": "mistral-7b"}
    rc, _, err = run_cli(capsys, ["tournament", "play", "--workload", "w", "--spec",
                                  json.dumps({"kind": "mixed", "n_requests": 10}), "--arena", json.dumps(arena),
                                  "--loads", "0.5", "--entrants", "fcfs", "--pool", f"short={files['pool']}",
                                  "--pool", f"long={pool}", "--out", str(files["out"] / "m.parquet")])
    assert rc == 0, err
    assert len(pd.read_parquet(files["out"] / "m.parquet")) == 1
