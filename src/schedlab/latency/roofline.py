"""Analytical step time: each phase takes max(compute time, memory time) on a catalogue device.

A step runs an encoder phase (``n_encoder`` clips, each padded to ``arch.encoder_frames``) and a
decoder phase (``n_prefill_tokens`` prompt tokens plus ``n_decode`` single-token decodes over a
summed context of ``ctx_tokens``). ``compute_eff`` and ``bw_eff`` are achieved fractions of peak
FLOP/s and bandwidth; the calibration stage fits them, 1.0 is the pure roofline.
Optionally (paper C) the dense layers run on tiles of ``tile`` tokens (a GEMM's work is the
batch padded to whole tiles), a chunked prefill's attention covers its context, and with
``overlap=False`` a phase takes compute time plus memory time (no overlap: the additive form
measured batch times of chunked prefills follow). :func:`padded_tokens` (a batch padded to whole
tiles) and :func:`beyond_knee` (its tokens past a knee) are the shapes a step-time model's
staircase and knee terms count too (:class:`schedlab.engine.steptime.StepTimeModel`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.contracts import PROFILE_COLUMNS, STEP_FEATURES
from schedlab.latency.catalogue import FP16_BYTES, Hardware, ModelArch


def padded_tokens(tokens, tile: int):
    """``tokens`` rounded up to whole tiles of ``tile``; vectorises."""
    return -(-tokens // tile) * tile


def beyond_knee(tokens, knee: int):
    """A batch's tokens beyond the first ``knee``; vectorises."""
    return np.maximum(tokens - knee, 0)


def work(
    arch: ModelArch,
    n_encoder,
    n_prefill_tokens,
    n_decode,
    ctx_tokens,
    *,
    n_prefill_seqs=0,
    prefill_pairs=None,
    tile: int = 0,
) -> dict[str, np.ndarray]:
    """FLOPs and bytes of one step's phases: ``enc_flops``, ``enc_bytes`` (zero without an
    encoder pass), ``dec_flops``, ``dec_bytes`` (zero without decoder tokens); every count may
    be a scalar or a numpy array (broadcast).

    Decoder terms: dense FLOPs ``2 * decoder_params`` per token (tied LM head included);
    self-attention ``4 * layers * d_model`` per attended (query, key) pair, where decodes attend
    ``ctx_tokens`` pairs and each prefill sequence of ``p`` tokens about ``p**2 / 2`` (prompt
    tokens split evenly over ``n_prefill_seqs``, at least one); cross-attention over all encoder
    frames for every token; and, per new prefill sequence, the cross-attention K/V projections
    of its encoder output. Bytes: decoder weights, the self-attention KV of ``ctx_tokens``, and
    the cross-attention KV of every decoding or prefilling sequence. ``prefill_pairs``, when
    given, replaces the prefill's ``p**2 / 2`` pairs (chunks over a context); with ``tile`` > 0
    the dense FLOPs count the tokens padded to whole tiles.
    """
    n_enc = np.asarray(n_encoder, dtype=float)
    n_pre = np.asarray(n_prefill_tokens, dtype=float)
    n_dec = np.asarray(n_decode, dtype=float)
    ctx = np.asarray(ctx_tokens, dtype=float)
    seqs = np.asarray(n_prefill_seqs, dtype=float)
    frames, d = arch.encoder_frames, arch.d_model

    enc_flops = n_enc * (
        2.0 * arch.encoder_params * frames + 4.0 * arch.encoder_layers * frames**2 * d
    )
    enc_bytes = np.where(n_enc > 0, arch.encoder_params * FP16_BYTES, 0.0)

    tokens = n_pre + n_dec
    pre_pairs = n_pre**2 / (2.0 * np.maximum(seqs, 1.0)) if prefill_pairs is None else np.asarray(prefill_pairs, dtype=float)
    attn_pairs = ctx + pre_pairs
    dense_tokens = padded_tokens(tokens, tile) if tile else tokens
    dec_flops = np.where(
        tokens > 0,
        2.0 * arch.decoder_params * dense_tokens
        + 4.0 * arch.decoder_layers * d * attn_pairs
        + 4.0 * arch.decoder_layers * d * frames * tokens
        + seqs * 4.0 * arch.decoder_layers * d * d * frames,
        0.0,
    )
    dec_bytes = np.where(
        tokens > 0,
        arch.decoder_params * FP16_BYTES + ctx * arch.kv_bytes_per_token + (n_dec + seqs) * arch.cross_kv_bytes_per_request,
        0.0,
    )
    return {"enc_flops": enc_flops, "enc_bytes": enc_bytes, "dec_flops": dec_flops, "dec_bytes": dec_bytes}


def step_time(
    hw: Hardware,
    arch: ModelArch,
    n_encoder,
    n_prefill_tokens,
    n_decode,
    ctx_tokens,
    *,
    n_prefill_seqs=0,
    compute_eff: float = 1.0,
    bw_eff: float = 1.0,
    prefill_pairs=None,
    tile: int = 0,
    overlap: bool = True,
):
    """Seconds for one step (the :func:`work` of its phases on ``hw``); every count may be a
    scalar or a numpy array (broadcast). Each phase takes the larger of its compute and memory
    times, or with ``overlap=False`` their sum (no overlap)."""
    w = work(arch, n_encoder, n_prefill_tokens, n_decode, ctx_tokens, n_prefill_seqs=n_prefill_seqs,
             prefill_pairs=prefill_pairs, tile=tile)
    flops_s = hw.peak_flops * compute_eff
    bytes_s = hw.mem_bw * bw_eff
    combine = np.maximum if overlap else np.add
    total = combine(w["enc_flops"] / flops_s, w["enc_bytes"] / bytes_s) + combine(
        w["dec_flops"] / flops_s, w["dec_bytes"] / bytes_s
    )
    return float(total) if total.ndim == 0 else total


#: Whisper's decoder prompt: <|startoftranscript|><|lang|><|transcribe|><|notimestamps|>.
PROMPT_TOKENS = 4


def default_grid() -> pd.DataFrame:
    """Realistic step compositions: encoder-only, new requests (encoder + prompt prefill),
    decode-only over a range of batch sizes and per-sequence contexts, and mixed steps where
    new requests join a running decode batch. Columns: STEP_FEATURES plus ``n_prefill_seqs``."""
    encoders = (1, 2, 3, 4, 6, 8, 12, 16)
    decodes = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    contexts = (8, 16, 32, 64, 128, 256, 448)
    rows = []
    for k in encoders:
        rows.append((k, 0, 0, 0, 0))
        rows.append((k, PROMPT_TOKENS * k, 0, 0, k))
        rows.append((0, PROMPT_TOKENS * k, 0, 0, k))
    for b in decodes:
        for c in contexts:
            rows.append((0, 0, b, b * c, 0))
    for b in (1, 4, 16, 64, 256):
        for c in (16, 128, 448):
            for k in (1, 2, 4, 8, 16):
                rows.append((k, PROMPT_TOKENS * k, b, b * c, k))
    return pd.DataFrame(rows, columns=[*STEP_FEATURES, "n_prefill_seqs"])


def profile(hw: Hardware, arch: ModelArch, grid: pd.DataFrame | None = None, **eff) -> pd.DataFrame:
    """Roofline profile table over ``grid`` (default :func:`default_grid`); ``eff`` passes
    ``compute_eff`` / ``bw_eff`` (and ``tile``) to :func:`step_time`. A grid with a
    ``prefill_pairs`` column keeps it in the table."""
    grid = default_grid() if grid is None else grid
    seqs = grid["n_prefill_seqs"] if "n_prefill_seqs" in grid else 0
    extra = ["prefill_pairs"] if "prefill_pairs" in grid else []
    if extra:
        eff = {**eff, "prefill_pairs": grid["prefill_pairs"].to_numpy()}
    times = step_time(
        hw, arch, *(grid[f].to_numpy() for f in STEP_FEATURES), n_prefill_seqs=seqs, **eff
    )
    out = grid[[*STEP_FEATURES, *extra]].astype("int64").reset_index(drop=True)
    out.insert(0, "source", "roofline")
    out.insert(1, "hardware", hw.name)
    out.insert(2, "model", arch.name)
    out["time_s"] = np.broadcast_to(times, len(out)).astype(float)
    return out[[*PROFILE_COLUMNS, *extra]]
