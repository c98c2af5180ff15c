"""Catalogue, roofline and torch latency sources."""

import numpy as np
import pytest

from schedlab.contracts import PROFILE_COLUMNS, STEP_FEATURES
from schedlab.errors import SchedlabError
from schedlab.latency import catalogue, roofline

A100 = catalogue.hardware("A100-40GB")
LARGE = catalogue.model_arch("whisper-large-v3")


@pytest.mark.parametrize("name", ["whisper-large-v3", "whisper-medium", "whisper-tiny"])
def test_configs_load_with_transformers(name):
    transformers = pytest.importorskip("transformers")
    config = transformers.WhisperConfig.from_pretrained(catalogue.model_dir(name))
    arch = catalogue.model_arch(name)
    assert config.model_type == "whisper"
    assert (config.d_model, config.decoder_layers) == (arch.d_model, arch.decoder_layers)
    assert config.num_mel_bins == (128 if name == "whisper-large-v3" else 80)


@pytest.mark.parametrize("name, total", [("whisper-large-v3", 1.55e9), ("whisper-medium", 769e6)])
def test_parameter_counts(name, total):
    arch = catalogue.model_arch(name)
    assert arch.encoder_params + arch.decoder_params == pytest.approx(total, rel=0.03)
    assert arch.weight_bytes == 2 * (arch.encoder_params + arch.decoder_params)


def test_kv_capacity_positive_and_shrinks_with_utilisation():
    high = catalogue.kv_capacity_blocks(A100, LARGE, gpu_memory_utilization=0.95)
    low = catalogue.kv_capacity_blocks(A100, LARGE, gpu_memory_utilization=0.8)
    assert 0 < low < high
    with pytest.raises(SchedlabError):
        catalogue.kv_capacity_blocks(A100, LARGE, gpu_memory_utilization=0.1)


@pytest.mark.parametrize("lookup", [catalogue.hardware, catalogue.model_arch])
def test_unknown_names_raise(lookup):
    with pytest.raises(SchedlabError, match="known"):
        lookup("TPU-9000")


def test_hardware_catalogue_complete():
    assert {"A100-40GB", "A100-80GB", "A800-80GB", "H100-SXM", "RTX-6000-Ada", "V100-32GB"} <= set(
        catalogue.hardware_names()
    )


@pytest.mark.parametrize("feature", range(4))
def test_roofline_monotone_in_each_feature(feature):
    base = np.array([2, 8, 16, 16 * 64])
    values = np.array([0, 1, 2, 4, 8, 16, 64, 256, 1024, 16384])
    counts = [np.full(len(values), v) for v in base]
    counts[feature] = values
    times = roofline.step_time(A100, LARGE, *counts)
    assert np.all(np.diff(times) >= 0)


def test_small_decode_is_memory_bound():
    t = roofline.step_time(A100, LARGE, 0, 0, 1, 32)
    assert t == pytest.approx(2 * LARGE.decoder_params / A100.mem_bw, rel=0.2)


@pytest.mark.parametrize("step", [(0, 0, 1, 32), (8, 0, 0, 0), (4, 16, 64, 64 * 200)])
def test_efficiency_factors_scale_time(step):
    pure = roofline.step_time(A100, LARGE, *step)
    assert roofline.step_time(A100, LARGE, *step, compute_eff=0.5, bw_eff=0.5) == pytest.approx(
        2 * pure
    )
    assert roofline.step_time(A100, LARGE, *step, compute_eff=0.5) >= pure


def test_roofline_profile_table():
    df = roofline.profile(A100, LARGE)
    assert tuple(df.columns) == PROFILE_COLUMNS
    assert 200 <= len(df) <= 600
    assert (df["source"] == "roofline").all() and (df["time_s"] > 0).all()
    encoder_only = (df["n_encoder"] > 0) & (df["n_decode"] == 0) & (df["n_prefill_tokens"] == 0)
    decode_only = (df["n_encoder"] == 0) & (df["n_decode"] > 0) & (df["n_prefill_tokens"] == 0)
    mixed = (df["n_encoder"] > 0) & (df["n_decode"] > 0)
    assert encoder_only.any() and decode_only.any() and mixed.any()
    assert df[list(STEP_FEATURES)].max().tolist() == [16, 64, 256, 256 * 448]


def test_torch_profile_tiny_grid():
    pytest.importorskip("transformers")
    from schedlab.latency import torch_profile

    df = torch_profile.profile(
        "whisper-tiny", batch_sizes=(1, 2), contexts=(8,), encoder_batches=(1, 4), repeats=1
    )
    assert tuple(df.columns) == PROFILE_COLUMNS
    assert (df["source"] == "torch").all() and (df["time_s"] > 0).all()
    enc = df[df["n_encoder"] > 0].set_index("n_encoder")["time_s"]
    assert enc[4] > enc[1]
    assert sorted(df.loc[df["n_decode"] > 0, "ctx_tokens"]) == [8, 16]


def test_a_reused_cache_times_the_same_step_as_a_fresh_one():
    """Each timed decode step starts from the prefill's cache: the token a step appended is
    cropped off, so every repeat sees the same context and computes the same logits."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    from schedlab.latency.catalogue import model_dir
    from schedlab.latency.torch_profile import reused_cache

    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir("tiny-llama"))).eval()
    prompt, step_ids = torch.randint(0, 100, (2, 12)), torch.randint(0, 100, (2, 1))
    with torch.inference_mode():
        prefill = lambda: net(prompt, use_cache=True).past_key_values
        setup = reused_cache(prefill)
        steps = []
        for _ in range(3):
            (cache,) = setup()
            assert cache.get_seq_length() == 12
            steps.append(net(step_ids, past_key_values=cache, use_cache=True).logits)
        fresh = net(step_ids, past_key_values=prefill(), use_cache=True).logits
    for logits in steps:
        torch.testing.assert_close(logits, fresh)
