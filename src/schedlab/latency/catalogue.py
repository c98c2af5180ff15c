"""Hardware catalogue and model architectures (from the bundled Hugging Face ``config.json``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from schedlab.errors import SchedlabError

ASSETS = Path(__file__).resolve().parent.parent / "assets"
FP16_BYTES = 2


@dataclass(frozen=True)
class Hardware:
    """One accelerator: dense fp16 peak (FLOP/s), memory bandwidth (bytes/s), memory (bytes)."""

    name: str
    peak_flops: float
    mem_bw: float
    mem_bytes: float


@dataclass(frozen=True)
class ModelArch:
    """Sizes the latency models need, derived from a model's ``config.json`` (fp16 weights).

    KV sizes cover all decoder layers (K and V); ``encoder_frames`` is the encoder length every
    audio clip is padded to (Whisper: 1500 frames = 30 s), which the cross-attention reads.
    """

    name: str
    encoder_params: int
    decoder_params: int
    weight_bytes: int
    kv_bytes_per_token: int
    cross_kv_bytes_per_request: int
    encoder_frames: int
    max_target_positions: int
    d_model: int
    decoder_layers: int
    encoder_layers: int


@lru_cache(maxsize=1)
def _hardware_table() -> dict:
    return yaml.safe_load((ASSETS / "hardware.yaml").read_text())


def hardware_names() -> list[str]:
    return sorted(_hardware_table())


def hardware(name: str) -> Hardware:
    """Look up ``name`` in ``assets/hardware.yaml``; ``"<n>x<name>"`` (e.g. ``2xV100-32GB``)
    is ``n`` devices in tensor parallel, modelled as ``n`` times the compute, bandwidth and
    memory (communication costs are left to the calibrated efficiencies)."""
    table = _hardware_table()
    match = re.fullmatch(r"([1-9][0-9]*)x(.+)", name)
    n, base = (int(match.group(1)), match.group(2)) if match else (1, name)
    if base not in table:
        raise SchedlabError(f"unknown hardware {name!r}; known: {', '.join(hardware_names())} (or <n>x<name>)")
    row = table[base]
    return Hardware(
        name=name,
        peak_flops=n * float(row["peak_tflops"]) * 1e12,
        mem_bw=n * float(row["mem_bw_gbs"]) * 1e9,
        mem_bytes=n * float(row["mem_gb"]) * 2**30,
    )


def hardware_for_device(device_name: str) -> str | None:
    """The catalogue name of a GPU that torch calls ``device_name`` (each entry's
    ``device_names``), or ``None`` when the catalogue has no such entry."""
    for name, row in _hardware_table().items():
        if device_name in row.get("device_names", ()):
            return name
    return None


def model_names() -> list[str]:
    return sorted(p.parent.name for p in (ASSETS / "models").glob("*/config.json"))


#: Profile tables measured on real GPUs and shipped with the package (``<hardware>/<model>.parquet``,
#: each folder with the ``provenance.json`` of the run that measured it; :mod:`schedlab.fit.shipped`).
PROFILES = ASSETS / "profiles"


def shipped_hardware() -> list[str]:
    """Catalogue names of the GPUs with shipped profiles."""
    return sorted(p.parent.name for p in PROFILES.glob("*/provenance.json"))


def shipped_models(hardware: str) -> list[str]:
    """Models with a shipped profile on ``hardware``."""
    return sorted(p.stem for p in (PROFILES / hardware).glob("*.parquet"))


def model_dir(name: str) -> Path:
    """Folder holding ``name``'s ``config.json`` (loadable with ``from_pretrained``)."""
    if name not in model_names():
        raise SchedlabError(f"unknown model {name!r}; known: {', '.join(model_names())}")
    return ASSETS / "models" / name


def _layer_params(d: int, ffn: int, cross: bool) -> int:
    """One pre-LN transformer layer: attention blocks (k_proj has no bias), FFN, layer norms."""
    attn = 4 * d * d + 3 * d
    ffn_params = 2 * d * ffn + ffn + d
    n_attn = 2 if cross else 1
    return n_attn * (attn + 2 * d) + ffn_params + 2 * d


#: Decoder-only architectures with Llama's layout (RMSNorm, gated MLP, grouped-query attention).
LLAMA_LIKE = ("llama", "mistral", "qwen2")


def _llama_arch(name: str, cfg: dict) -> ModelArch:
    """Parameter counts and KV sizes of a Llama-layout decoder-only model."""
    d, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or d // heads
    attn = d * heads * hd + 2 * d * kv_heads * hd + heads * hd * d
    if cfg["model_type"] == "qwen2":
        attn += heads * hd + 2 * kv_heads * hd  # q/k/v biases
    layer = attn + 3 * d * cfg["intermediate_size"] + 2 * d
    embed = cfg["vocab_size"] * d
    decoder = embed + layers * layer + d + (0 if cfg.get("tie_word_embeddings") else embed)
    return ModelArch(
        name=name,
        encoder_params=0,
        decoder_params=decoder,
        weight_bytes=decoder * FP16_BYTES,
        kv_bytes_per_token=2 * layers * kv_heads * hd * FP16_BYTES,
        cross_kv_bytes_per_request=0,
        encoder_frames=0,
        max_target_positions=cfg["max_position_embeddings"],
        d_model=heads * hd,
        decoder_layers=layers,
        encoder_layers=0,
    )


def model_arch(name: str) -> ModelArch:
    """Parameter counts and KV sizes of ``name`` (Whisper: the LM head is tied to the embedding)."""
    cfg = json.loads((model_dir(name) / "config.json").read_text())
    if cfg.get("model_type") in LLAMA_LIKE:
        return _llama_arch(name, cfg)
    if cfg.get("model_type") != "whisper":
        raise SchedlabError(f"{name}: model_type {cfg.get('model_type')!r} is not supported")
    d = cfg["d_model"]
    enc_layers, dec_layers = cfg["encoder_layers"], cfg["decoder_layers"]
    frames = cfg["max_source_positions"]
    convs = cfg["num_mel_bins"] * d * 3 + d + d * d * 3 + d
    encoder = (
        convs
        + frames * d
        + enc_layers * _layer_params(d, cfg["encoder_ffn_dim"], cross=False)
        + 2 * d
    )
    decoder = (
        cfg["vocab_size"] * d
        + cfg["max_target_positions"] * d
        + dec_layers * _layer_params(d, cfg["decoder_ffn_dim"], cross=True)
        + 2 * d
    )
    kv_per_token = 2 * dec_layers * d * FP16_BYTES
    return ModelArch(
        name=name,
        encoder_params=encoder,
        decoder_params=decoder,
        weight_bytes=(encoder + decoder) * FP16_BYTES,
        kv_bytes_per_token=kv_per_token,
        cross_kv_bytes_per_request=frames * kv_per_token,
        encoder_frames=frames,
        max_target_positions=cfg["max_target_positions"],
        d_model=d,
        decoder_layers=dec_layers,
        encoder_layers=enc_layers,
    )


def kv_capacity_blocks(
    hw: Hardware,
    arch: ModelArch,
    gpu_memory_utilization: float = 0.95,
    block_size: int = 16,
    activation_reserve_frac: float = 0.05,
) -> int:
    """Decoder KV-cache blocks left after weights and an activation reserve (vLLM-style)."""
    free = hw.mem_bytes * (gpu_memory_utilization - activation_reserve_frac) - arch.weight_bytes
    blocks = int(free // (block_size * arch.kv_bytes_per_token))
    if blocks <= 0:
        raise SchedlabError(
            f"{arch.name} does not fit on {hw.name} at gpu_memory_utilization="
            f"{gpu_memory_utilization}: no room for KV-cache blocks"
        )
    return blocks
