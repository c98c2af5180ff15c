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


@pytest.mark.slow
def test_torch_profile_tiny_grid():
    pytest.importorskip("transformers")
    from schedlab.latency import torch_profile

    df = torch_profile.profile(
        "whisper-tiny", batch_sizes=(1, 2), contexts=(8,), encoder_batches=(1, 4), repeats=1
    )
    assert tuple(df.columns) == (*PROFILE_COLUMNS, "prefill_pairs", "cuda_graph")
    assert (df["source"] == "torch").all() and (df["time_s"] > 0).all()
    assert not df["cuda_graph"].any() and (df["prefill_pairs"] == 0).all()
    enc = df[df["n_encoder"] > 0].set_index("n_encoder")["time_s"]
    assert enc[4] > enc[1]
    assert sorted(df.loc[df["n_decode"] > 0, "ctx_tokens"]) == [8, 16]


def test_a_decoder_profile_counts_prefill_pairs_and_contexts():
    pytest.importorskip("transformers")
    from schedlab.latency import torch_profile

    df = torch_profile.profile("tiny-llama", batch_sizes=(1, 3), contexts=(5, 16), repeats=1)
    pre, dec = df[df["n_prefill_tokens"] > 0], df[df["n_decode"] > 0]
    assert len(pre) == len(dec) == 4 and (df["n_encoder"] == 0).all()
    assert sorted(zip(pre["n_prefill_tokens"], pre["prefill_pairs"])) == [
        (5, 15), (15, 45), (16, 136), (48, 408)]
    assert sorted(zip(dec["n_decode"], dec["ctx_tokens"])) == [(1, 5), (1, 16), (3, 15), (3, 48)]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny-llama", "whisper-tiny"])
def test_a_slot_cache_step_is_the_step_on_a_growing_cache(model):
    """A decode step on the slot cache (random keys and values of ``n`` tokens, the step's
    token written into the free slot) computes the logits of the same step on transformers'
    own growing cache holding those ``n`` tokens, and every repeat computes the same."""
    torch = pytest.importorskip("torch")
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    from schedlab.latency.torch_profile import load, slot_cache

    loaded = load(model)
    c = loaded.config
    with torch.inference_mode():
        if loaded.whisper:
            heads, layers = c.decoder_attention_heads, c.decoder_layers
            cache = slot_cache(layers, 2, heads, 12, c.d_model // heads, torch.float32, "cpu")
            cross = slot_cache(layers, 2, heads, c.max_source_positions - 1, c.d_model // heads, torch.float32, "cpu")
            enc = torch.zeros(2, c.max_source_positions, c.d_model)
            step = lambda kv: loaded.net(encoder_outputs=(enc,), decoder_input_ids=ids, past_key_values=kv).logits
            wrap = lambda self_kv: EncoderDecoderCache(self_kv, DynamicCache([(l.keys, l.values) for l in cross.layers]))
        else:
            heads, layers = c.num_key_value_heads, c.num_hidden_layers
            cache = slot_cache(layers, 2, heads, 12, c.hidden_size // c.num_attention_heads, torch.float32, "cpu")
            step = lambda kv: loaded.net(ids, past_key_values=kv).logits
            wrap = lambda self_kv: self_kv
        ids = torch.randint(0, 100, (2, 1))
        slotted = [step(wrap(cache)) for _ in range(3)]
        growing = DynamicCache([(l.keys[..., :12, :].clone(), l.values[..., :12, :].clone()) for l in cache.layers])
        fresh = step(wrap(growing))
    assert growing.get_seq_length() == 13 and cache.get_seq_length() == 12
    for logits in slotted:
        torch.testing.assert_close(logits, fresh)
