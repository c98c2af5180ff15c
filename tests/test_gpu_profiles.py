"""GPU profiles shipped with the package, the suite that measures them (run here on the CPU with
tiny models, the same code path), and measured times held against the roofline."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from schedlab.contracts import PREFILL_PAIRS, PROFILE_COLUMNS
from schedlab.errors import SchedlabError
from schedlab.fit.latency_predictor import fit_predictor
from schedlab.fit.steptime import fit_steptime, predict
from schedlab.fit import shipped
from schedlab.latency import roofline
from schedlab.latency.catalogue import hardware, hardware_for_device, model_arch
from schedlab.fit.efficiency import achieved, additive_factors, summary
from schedlab.latency.predictor_profile import from_step_profile
from schedlab.latency.suite import GRIDS, MODELS
from schedlab.validation import read_profile

SHIPPED = [(h, m) for h in shipped.shipped_hardware() for m in shipped.shipped_models(h)]


def test_every_suite_model_is_shipped_for_two_hopper_gpus():
    assert {"H100-SXM", "H200-SXM"} <= set(shipped.shipped_hardware())
    for h in ("H100-SXM", "H200-SXM"):
        assert set(shipped.shipped_models(h)) == set(MODELS)
        prov = shipped.provenance(h)
        assert hardware_for_device(prov["device_name"]) == h == prov["hardware"]
        assert prov["gpu"]["driver_version"] and prov["versions"]["torch"] and prov["versions"]["cuda"]
        assert all("clocks.sm" in m["clocks_after"] for m in prov["models"].values())
        assert prov["other_gpu_processes_at_start"] == [] == prov["other_gpu_processes_at_end"]


@pytest.mark.parametrize("hw, model", SHIPPED)
def test_a_shipped_table_passes_the_schema_and_fits_a_positive_step_model(hw, model):
    table = shipped.read_shipped(hw, model)
    assert (table["source"] == "torch").all() and (table["hardware"] == hw).all() and (table["model"] == model).all()
    assert list(table.columns[: len(PROFILE_COLUMNS)]) == list(PROFILE_COLUMNS)
    fit = fit_steptime(table)
    terms = {**fit.coefficients}
    assert all(np.isfinite(v) and v >= 0 for v in terms.values())
    assert fit.intercept > 0 and fit.meta["r2"] > 0.9
    assert (predict(fit, table) > 0).all()


@pytest.mark.parametrize("hw", ["H100-SXM", "H200-SXM"])
@pytest.mark.parametrize("model", ["llama-2-13b", "mistral-7b", "qwen2.5-7b"])
def test_a_decoder_table_gives_paper_d_predictor_grid_and_fit(hw, model):
    table = shipped.read_shipped(hw, model)
    grid = from_step_profile(table)
    assert set(grid["phase"]) == {"prefill", "decode"}
    pre = grid[grid["phase"] == "prefill"]
    assert (pre["batch"] * pre["length"]).tolist() == table.loc[table["n_prefill_tokens"] > 0, "n_prefill_tokens"].tolist()
    assert set(pre["length"]) <= set(GRIDS["paper"].prefill_lengths)
    predictor = fit_predictor(grid)
    # A longer prompt takes longer to prefill; a larger batch longer to decode.
    assert predictor.prefill(1, 2000) > predictor.prefill(1, 500) > 0
    assert predictor.decode(32, 1000) > predictor.decode(1, 1000) > 0


def test_measured_gpu_passes_stay_below_the_roofline():
    """No pass beats the roofline of its GPU: every share of peak FLOP/s or bandwidth <= 1."""
    for hw, model in SHIPPED:
        t = achieved(shipped.read_shipped(hw, model), hardware(hw), model_arch(model))
        assert len(t) and (t["compute_eff"] <= 1).all() and (t["bw_eff"] <= 1).all()
        assert (t.loc[t["phase"] == "decode", "bound"] == "memory").all()
        assert (t.loc[t["phase"].isin(["encoder"]), "bound"] == "compute").all()


def test_efficiency_is_work_over_time_at_peak():
    """A pass timed at exactly twice its roofline time runs at half of the rate that bounds it."""
    hw, arch = hardware("H200-SXM"), model_arch("mistral-7b")
    rows = [(0, 4 * 1000, 0, 0, 4 * 1000 * 1001 // 2), (0, 0, 8, 8 * 500, 0)]
    t = roofline.step_time(hw, arch, 0, 4000, 0, 0, n_prefill_seqs=4, prefill_pairs=4 * 1000 * 1001 / 2)
    d = roofline.step_time(hw, arch, 0, 0, 8, 8 * 500)
    profile = pd.DataFrame([(*r[:4], 2 * s, r[4]) for r, s in zip(rows, (t, d))],
                           columns=["n_encoder", "n_prefill_tokens", "n_decode", "ctx_tokens", "time_s", PREFILL_PAIRS])
    profile = profile.assign(source="torch", hardware="H200-SXM", model="mistral-7b")
    out = achieved(profile, hw, arch).set_index("phase")
    assert out.loc["prefill", "bound"] == "compute" and out.loc["prefill", "compute_eff"] == pytest.approx(0.5)
    assert out.loc["decode", "bound"] == "memory" and out.loc["decode", "bw_eff"] == pytest.approx(0.5)
    assert (out.loc["prefill", "batch"], out.loc["prefill", "length"]) == (4, 1000)
    assert (out.loc["decode", "batch"], out.loc["decode", "length"]) == (8, 500)
    s = summary(out.reset_index()).set_index("phase")
    assert s.loc["prefill", "median"] == pytest.approx(0.5) and s.loc["decode", "judged by"] == "bandwidth"


def test_additive_factors_recover_exact_ones():
    hw, arch = hardware("H100-SXM"), model_arch("mistral-7b")
    n = np.array([100, 500, 2000, 8000])
    profile = pd.DataFrame({"n_encoder": 0, "n_prefill_tokens": n, "n_decode": 0, "ctx_tokens": 0,
                            PREFILL_PAIRS: n * (n + 1) // 2, "time_s": 1.0})
    rows = achieved(profile.assign(source="torch", hardware="H100-SXM", model="mistral-7b"), hw, arch)
    rows["time_s"] = 1.7 * rows["flops"] / hw.peak_flops + 2.5 * rows["bytes"] / hw.mem_bw
    assert additive_factors(rows, hw) == pytest.approx((1.7, 2.5))


@pytest.mark.slow
def test_the_suite_runs_on_the_cpu_with_tiny_models(tmp_path):
    """The prepared GPU run's own command, on the CPU with the small grid."""
    pytest.importorskip("transformers")
    out = tmp_path / "profiles"
    done = subprocess.run([sys.executable, "-m", "schedlab.latency.suite", "--device", "cpu", "--grid", "small",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    prov = json.loads((out / "provenance.json").read_text())
    assert set(prov["models"]) == {"whisper-tiny", "tiny-llama"} and prov["dtype"] == "float32"
    assert prov["attention"] == "schedlab_serving_sdpa"
    small = GRIDS["small"]
    for model, entry in prov["models"].items():
        table = read_profile(out / f"{model}.parquet")
        assert entry["rows"] == len(table) and entry["left_out"] == [] and entry["graph_rows"] == 0
        assert (table["time_s"] > 0).all()
    whisper = read_profile(out / "whisper-tiny.parquet")
    assert len(whisper) == len(small.encoder_batches) + len(small.whisper_decode_batches) * len(small.whisper_contexts)


@pytest.mark.slow
def test_the_suite_stops_at_its_time_budget(tmp_path):
    pytest.importorskip("transformers")
    done = subprocess.run([sys.executable, "-m", "schedlab.latency.suite", "--device", "cpu", "--grid", "small",
                           "--budget-s", "0", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert all("skipped" in m for m in prov["models"].values())
    assert not list(tmp_path.glob("*.parquet"))


@pytest.mark.slow
def test_the_suite_refuses_an_unknown_model_or_a_missing_gpu(tmp_path):
    for args, message in [(["--models", "gpt-9"], "unknown model 'gpt-9'"),
                          (["--device", "cuda:0", "--grid", "small"], "torch sees no CUDA device")]:
        done = subprocess.run([sys.executable, "-m", "schedlab.latency.suite", "--out", str(tmp_path), *args],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_profile_command_copies_a_shipped_table(tmp_path):
    out = tmp_path / "p.parquet"
    done = subprocess.run(["schedlab", "profile", "--source", "shipped", "--hardware", "H200-SXM", "--model",
                           "qwen2.5-7b", "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(out), shipped.read_shipped("H200-SXM", "qwen2.5-7b"))
    bad = subprocess.run(["schedlab", "profile", "--source", "shipped", "--hardware", "A100-40GB", "--model",
                          "qwen2.5-7b", "--out", str(tmp_path / "q.parquet")], capture_output=True, text=True)
    assert bad.returncode != 0 and "no shipped profiles for hardware 'A100-40GB'" in bad.stderr
    assert not (tmp_path / "q.parquet").exists()


def test_shipped_lookups_fail_with_one_line():
    with pytest.raises(SchedlabError, match="no shipped profile of 'tiny-llama' on H200-SXM"):
        shipped.shipped_path("H200-SXM", "tiny-llama")


def test_serving_attention_computes_what_the_causal_mask_does_on_grouped_query_heads():
    """The timed models' attention (no mask, KV heads shared in place) gives the outputs of
    transformers' eager attention with its causal mask and copied KV heads, for a prefill and a
    decode step of a grouped-query model; a multi-token pass over a filled cache, which would
    need the mask, is refused."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.cache_utils import DynamicCache

    from schedlab.latency.catalogue import model_dir
    from schedlab.latency.torch_profile import SERVING_ATTENTION

    config = AutoConfig.from_pretrained(model_dir("tiny-llama"), num_key_value_heads=2)
    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    prompt = torch.randint(0, config.vocab_size, (2, 9))
    step = torch.randint(0, config.vocab_size, (2, 1))
    logits = {}
    for name in ("eager", SERVING_ATTENTION):
        net.set_attn_implementation(name)
        cache = DynamicCache(config=config)
        with torch.inference_mode():
            logits[name] = (net(prompt, past_key_values=cache).logits, net(step, past_key_values=cache).logits)
    for ours, eager in zip(logits[SERVING_ATTENTION], logits["eager"]):
        torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-4)
    with pytest.raises(SchedlabError, match="needs a mask"), torch.inference_mode():
        net(prompt[:, :3], past_key_values=cache)
