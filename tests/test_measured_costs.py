"""Step costs from the measured GPU tables (schedlab.fit.measured): the fit of a pass kind's
floor and fractions, the shipped tables reproduced at their own shapes, the transfer between the
shipped GPUs, the rules for tensor parallelism, mixed steps and models not measured, and the
commands that use the source."""

import json
import subprocess

import numpy as np
import pandas as pd
import pytest

from schedlab.contracts import PREFILL_PAIRS, STEP_FEATURES
from schedlab.fit import measured, shipped
from schedlab.latency import roofline
from schedlab.latency.catalogue import hardware, model_arch
from schedlab.fit.efficiency import achieved
from schedlab.validation import read_profile

HOPPER = ("H100-SXM", "H200-SXM")


def _decode_rows(model: str, times) -> pd.DataFrame:
    """Decode passes of ``model`` on both Hopper GPUs over a grid of shapes, timed by ``times``
    (a function of the achieved rows and their GPU)."""
    grid = [(b, n) for b in (1, 4, 16, 64) for n in (100, 1000, 8000)]
    out = []
    for gpu in HOPPER:
        prof = pd.DataFrame([(0, 0, b, b * n, 1.0, 0) for b, n in grid],
                            columns=[*STEP_FEATURES, "time_s", PREFILL_PAIRS]).assign(source="torch", hardware=gpu, model=model)
        rows = achieved(prof, hardware(gpu), model_arch(model))
        out.append(rows.assign(time_s=times(rows, hardware(gpu))))
    return pd.concat(out, ignore_index=True)


def test_a_floor_and_two_fractions_are_recovered_from_passes_on_two_gpus():
    """Passes timed exactly floor + FLOPs at 40 % of the peak + bytes at 80 % of the bandwidth,
    on GPUs of different bandwidths: the fit finds the three, and leaves no shape ratio."""
    rows = _decode_rows("mistral-7b", lambda r, hw: 0.003 + r["flops"] / (0.4 * hw.peak_flops) + r["bytes"] / (0.8 * hw.mem_bw))
    cost = measured.fit_pass_cost(rows)
    assert cost.floor_s == pytest.approx(0.003, rel=1e-6)
    assert cost.compute == pytest.approx(0.4, rel=1e-6) and cost.bandwidth == pytest.approx(0.8, rel=1e-6)
    assert np.allclose(cost.ratio(rows["batch"], rows["length"]), 1.0)
    assert cost.gpus == HOPPER and cost.passes == len(rows)


def test_work_hidden_under_the_rest_costs_nothing_and_no_fraction_beats_the_peak():
    """Times with no FLOP term leave the compute factor at 0 (hidden); times whose bytes run
    faster than the bandwidth allows are fitted with a factor held at the peak, never above it."""
    hidden = measured.fit_pass_cost(_decode_rows("qwen2.5-7b", lambda r, hw: 0.002 + r["bytes"] / (0.9 * hw.mem_bw)))
    assert hidden.compute_factor == 0 and hidden.compute == np.inf
    assert hidden.bandwidth == pytest.approx(0.9, rel=1e-6)
    fast = measured.fit_pass_cost(_decode_rows("qwen2.5-7b", lambda r, hw: 0.002 + r["bytes"] / (1.5 * hw.mem_bw)))
    assert fast.memory_factor == 0 or fast.memory_factor >= 1
    assert fast.compute_factor == 0 or fast.compute_factor >= 1


@pytest.mark.parametrize("gpu", HOPPER)
@pytest.mark.parametrize("model", ["whisper-large-v3", "mistral-7b"])
def test_a_shipped_table_is_priced_at_its_own_shapes_as_measured(gpu, model):
    """Costs fitted on one GPU's table give that table's times back at its measured shapes:
    the shape ratio holds exactly what the floor and fractions leave."""
    rows = measured.measured_passes((gpu,))
    rows = rows[rows["model"] == model]
    seqs = np.where(rows["phase"] == "prefill", rows["batch"], 0)
    priced = measured.step_time(hardware(gpu), model_arch(model), *(rows[f].to_numpy(float) for f in STEP_FEATURES),
                                n_prefill_seqs=seqs, prefill_pairs=rows[PREFILL_PAIRS].to_numpy(float), gpus=(gpu,))
    np.testing.assert_allclose(priced, rows["time_s"], rtol=1e-9)


def test_the_transfer_between_the_shipped_gpus_is_the_sources_own_error_and_bounded():
    """transfer_errors prices each shipped GPU's passes from the other's alone: its rows are
    what step_time gives with costs fitted on the source GPU, its summary their median, 90th
    percentile and largest absolute error; no pass is priced 1.5x off, and on decode steps the
    floor with fractions transfers better than each pass's fraction of the roofline."""
    errors = measured.transfer_errors()
    ours = errors[errors["rule"] == measured.RULES[0]]
    assert set(zip(ours["source"], ours["target"])) == {("H100-SXM", "H200-SXM"), ("H200-SXM", "H100-SXM")}
    target = measured.measured_passes(("H200-SXM",))
    for model, g in target.groupby("model"):
        seqs = np.where(g["phase"] == "prefill", g["batch"], 0)
        priced = measured.step_time(hardware("H200-SXM"), model_arch(model), *(g[f].to_numpy(float) for f in STEP_FEATURES),
                                    n_prefill_seqs=seqs, prefill_pairs=g[PREFILL_PAIRS].to_numpy(float), gpus=("H100-SXM",))
        reported = ours[(ours["source"] == "H100-SXM") & (ours["model"] == model)]
        np.testing.assert_allclose(reported["predicted_s"], priced, rtol=1e-12)
        np.testing.assert_allclose(reported["error"], priced / g["time_s"].to_numpy() - 1, rtol=1e-12)
    summary = measured.transfer_summary(errors).set_index(["rule", "phase"])
    for (rule, phase), g in errors.groupby(["rule", "phase"]):
        row = summary.loc[(rule, phase)]
        assert row["passes"] == len(g)
        assert row["median |error|"] == pytest.approx(np.median(np.abs(g["error"])))
        assert row["p90 |error|"] == pytest.approx(np.quantile(np.abs(g["error"]), 0.9))
        assert row["max |error|"] == pytest.approx(np.abs(g["error"]).max())
    assert (ours["error"].abs() < 0.5).all()
    decode = summary.xs("decode", level="phase")["median |error|"]
    assert decode[measured.RULES[0]] < decode[measured.RULES[1]]


def test_tensor_parallel_prices_each_devices_share_at_one_devices_peak_and_one_floor():
    arch = model_arch("qwen2.5-7b")
    costs = measured.measured_costs(arch.name)
    one, two = hardware("V100-32GB"), hardware("2xV100-32GB")
    decode, _ = costs.kind("decode")
    b, n = 8, 1000
    work = roofline.work(arch, 0, 0, b, b * n)
    expected = (decode.floor_s + decode.compute_factor * work["dec_flops"] / 2 / one.peak_flops
                + decode.memory_factor * work["dec_bytes"] / 2 / one.mem_bw) * decode.ratio(b, n)
    assert measured.step_time(two, arch, 0, 0, b, b * n) == pytest.approx(float(expected), rel=1e-12)
    assert measured.step_time(two, arch, 0, 0, b, b * n) > measured.step_time(one, arch, 0, 0, b, b * n) / 2


def test_a_mixed_step_costs_about_its_kind_when_the_other_is_a_few_tokens():
    """A mixed step is priced from both measured kinds, weighted by their shares of its tokens:
    one decode beside a 2,000-token prefill costs about the prefill, one prompt token beside 64
    decodes about the decode step, and a mixed step more than either part alone."""
    hw, arch = hardware("RTX-6000-Ada"), model_arch("mistral-7b")
    t = lambda p, d: measured.step_time(hw, arch, 0, p, d, d * 1000, n_prefill_seqs=1 if p else 0)
    assert t(2000, 1) == pytest.approx(t(2000, 0), rel=0.01)
    assert t(1, 64) == pytest.approx(t(0, 64), rel=0.05)
    assert t(512, 32) > max(t(512, 0), t(0, 32))


def test_a_model_not_measured_takes_its_familys_nearest_with_floors_scaled_by_layers():
    tiny, medium = model_arch("whisper-tiny"), model_arch("whisper-medium")
    costs = measured.measured_costs("whisper-tiny")
    assert costs.measured == "whisper-medium" == measured.measured_model("whisper-tiny")
    assert costs.floor_scale["decode"] == pytest.approx(tiny.decoder_layers / medium.decoder_layers)
    assert costs.floor_scale["encoder"] == pytest.approx(tiny.encoder_layers / medium.encoder_layers)
    decoder_only = measured.measured_model("tiny-llama")
    assert decoder_only in shipped.shipped_models("H100-SXM") and not model_arch(decoder_only).encoder_params
    assert measured.measured_model("mistral-7b") == "mistral-7b"


def test_whisper_prefills_borrow_the_decode_floor_and_the_encoders_compute_fraction():
    costs = measured.measured_costs("whisper-large-v3")
    assert "prefill" not in costs.costs
    prefill, _ = costs.kind("prefill")
    assert prefill.floor_s == costs.costs["decode"].floor_s
    assert prefill.memory_factor == costs.costs["decode"].memory_factor
    assert prefill.compute_factor == costs.costs["encoder"].compute_factor
    assert prefill.ratio(4, 4) == 1.0


@pytest.mark.slow
def test_the_profile_command_prices_a_catalogue_gpu_from_the_measured_passes(tmp_path):
    out = tmp_path / "p.parquet"
    done = subprocess.run(["schedlab", "profile", "--source", "measured", "--hardware", "A100-40GB", "--model",
                           "whisper-large-v3", "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = read_profile(out)
    assert (table["source"] == "measured").all() and (table["hardware"] == "A100-40GB").all()
    grid = roofline.default_grid()
    expected = measured.step_time(hardware("A100-40GB"), model_arch("whisper-large-v3"),
                                  *(grid[f].to_numpy(float) for f in STEP_FEATURES), n_prefill_seqs=grid["n_prefill_seqs"])
    np.testing.assert_allclose(table["time_s"], expected)


@pytest.mark.slow
def test_paper_d_measured_profile_has_no_calibration_and_paper_c_can_keep_its_base(tmp_path):
    bad = subprocess.run(["schedlab", "slosa", "profile", "--source", "measured", "--calibrate", "--out",
                          str(tmp_path / "d.parquet")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--calibrate fits the roofline's efficiencies" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "d.parquet").exists()
    prof, base = tmp_path / "c.parquet", tmp_path / "c.json"
    for cmd in (["slai", "profile", "--source", "measured", "--out", str(prof)],
                ["fit", "steptime", "--profile", str(prof), "--tile", "128", "--out", str(base)],
                ["slai", "calibrate", "--base", str(base), "--no-chunk-factors", "--out", str(tmp_path / "kept.json")],
                ["slai", "calibrate", "--base", str(base), "--out", str(tmp_path / "scaled.json")]):
        done = subprocess.run(["schedlab", *cmd], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert pd.read_parquet(prof)["source"].eq("measured").all()
    kept, scaled, fitted = (json.loads((tmp_path / f).read_text()) for f in ("kept.json", "scaled.json", "c.json"))
    assert {k: v for k, v in kept.items() if k != "meta"} == {k: v for k, v in fitted.items() if k != "meta"}
    assert scaled["meta"]["calibration"]["compute"] != 1.0 and scaled["n_decode"] != fitted["n_decode"]
