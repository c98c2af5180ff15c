"""Values checked for meaning, not only type: a rate that gives finite arrivals, the seed range
the documentation states, a device this build has, a model whose weights fit, and a run that
measured nothing is an error, not a summary of nulls."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from test_hostile import N, assert_rejected, files, run_cli, simulate  # noqa: F401 (a fixture)


@pytest.mark.parametrize("rate, n", [("1e-308", "10"), ("1e-7", "10"), ("0.005", "1000000")])
def test_a_rate_whose_arrivals_outlast_any_run_isassert_rejected(capsys, files, rate, n):  # noqa: F811
    """(`workload --rate 1e-308` wrote arrivals of 1e308 and inf with exit 0.)"""
    pd.DataFrame({"duration_s": [3.0, 8.0], "output_tokens": [10, 30]}).to_parquet(files["pool"])
    assert_rejected(capsys, files, ["workload", "--kind", "librispeech", "--utterances", str(files["pool"]), "--rate", rate,
                             "--n-requests", n, "--out", str(files["out"] / "w.parquet")], "1e+08 s a run may last")


def test_the_documented_largest_seed_is_taken_and_one_more_is_refused_naming_the_limit(capsys, files):  # noqa: F811
    """(`--seed 9223372036854775807`, the documented maximum, was refused: read as a float.)"""
    top = 2**63 - 1
    rc, _, err = run_cli(capsys, simulate(files, "--seed", str(top)))
    assert rc == 0, err
    assert json.loads((files["out"] / "run.json").read_text())["seed"] == top
    for path in files["out"].iterdir():
        path.unlink()
    assert_rejected(capsys, files, simulate(files, "--seed", str(top + 1)), "--seed", f"{top:,}")


@pytest.mark.parametrize("device, named", [("cuda:0", "CUDA device"), ("tpu", "not a torch device"),
                                           ("cuda:x", "not a torch device")])
def test_a_device_this_torch_lacks_is_one_line(capsys, files, device, named):  # noqa: F811
    """(`profile --device cuda:0` on a build without CUDA: torch's AssertionError.)"""
    torch = pytest.importorskip("torch")
    if device.startswith("cuda") and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert_rejected(capsys, files, ["profile", "--source", "torch", "--model", "whisper-tiny", "--device", device,
                             "--out", str(files["out"] / "p.parquet")], f"--device {device!r}", named)


def test_a_models_random_weights_are_checked_against_memory(capsys, files, monkeypatch):  # noqa: F811
    """A torch profile builds the model's weights in memory: a 7B model in float32 on a CPU is
    refused before it is built (here with 2% of the available memory the limit)."""
    pytest.importorskip("torch")
    monkeypatch.setenv("SCHEDLAB_MEMORY_SHARE", "0.02")
    assert_rejected(capsys, files, ["slosa", "profile", "--source", "torch", "--model", "qwen2.5-7b",
                             "--out", str(files["out"] / "p.parquet")], "qwen2.5-7b's random weights", "GiB")


def test_a_run_that_measured_nothing_is_an_error():
    """A summary with no completed request, or a median latency that is not a number (a NaN
    predictor coefficient gave NaN latencies with exit 0), is refused, never written."""
    from schedlab.errors import SchedlabError
    from schedlab.validation import check_measured

    good = {"arrived": 4, "completed": 4, "p50_e2el_ms": 12.5}
    assert check_measured(good, "the run") == good
    with pytest.raises(SchedlabError, match="the run: no request completed \\(4 arrived\\)"):
        check_measured({**good, "completed": 0}, "the run")
    for median in (math.nan, math.inf, None, -1.0):
        with pytest.raises(SchedlabError, match="median end-to-end latency"):
            check_measured({**good, "p50_e2el_ms": median}, "the run")


def test_the_prefix_cache_figures_without_a_cache_are_what_the_documentation_says(capsys, files):  # noqa: F811
    """Without a cache (`--no-prefix-caching`) nothing is found cached, while the queries count
    the prompt tokens admitted (docs/architecture.md), where vLLM's counter stays 0."""
    rc, _, err = run_cli(capsys, simulate(files, "--no-prefix-caching"))
    assert rc == 0, err
    summary = json.loads((files["out"] / "run.json").read_text())
    trace = pd.read_parquet(files["trace"])
    assert summary["cached_tokens"] == 0 and summary["prefix_cache_hit_rate"] == 0.0
    assert summary["prefix_cache_queries"] == int(np.sum(trace["prompt_tokens"]))


def test_a_results_folder_that_is_a_file_is_a_config_error(tmp_path):
    """(`results:` pointing at a file gave a 40-line Snakemake traceback.)"""
    from pathlib import Path

    from schedlab.errors import SchedlabError
    from schedlab.validation.config import check_config, read_config

    config = read_config(Path(__file__).resolve().parents[1] / "config.yaml")
    (tmp_path / "afile").write_text("x")
    for results, named in ((tmp_path / "afile", "is a file"), (tmp_path / "afile" / "sub", "lies under")):
        with pytest.raises(SchedlabError) as e:
            check_config({**config, "results": str(results)})
        assert str(e.value).startswith("config key results: ") and named in str(e.value) and "\n" not in str(e.value)
    check_config({**config, "results": str(tmp_path / "new" / "results")})
