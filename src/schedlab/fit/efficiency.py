"""Measured step times held against the roofline: the fraction of the device's peak FLOP/s
that compute-bound passes achieve (Whisper's encoder, prefills) and the fraction of its
memory bandwidth that decode steps achieve."""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.contracts import PREFILL_PAIRS
from schedlab.fit.chunk_times import relative_factors
from schedlab.latency import roofline
from schedlab.latency.catalogue import Hardware, ModelArch


def phase(profile: pd.DataFrame) -> pd.Series:
    """Each row's kind: ``encoder`` (encoder pass only), ``prefill`` (prefill only),
    ``decode`` (decode only) or ``mixed``."""
    enc, pre, dec = (profile[c] > 0 for c in ("n_encoder", "n_prefill_tokens", "n_decode"))
    kinds = np.select([enc & ~pre & ~dec, pre & ~enc & ~dec, dec & ~enc & ~pre], ["encoder", "prefill", "decode"], "mixed")
    return pd.Series(kinds, index=profile.index)


def achieved(profile: pd.DataFrame, hw: Hardware, arch: ModelArch) -> pd.DataFrame:
    """``profile``'s encoder, prefill and decode rows with the roofline's work and time on
    ``hw`` (``flops``, ``bytes``, ``roofline_s`` at full efficiency, ``bound``: which of compute
    and memory sets it) and what the measured ``time_s`` achieves: ``compute_eff`` = FLOPs /
    (time x peak FLOP/s), ``bw_eff`` = bytes / (time x bandwidth). A prefill row's sequence
    count comes from its attention pairs (``b`` prompts of ``n`` tokens: ``b*n*(n+1)/2``)."""
    rows = profile.assign(phase=phase(profile)).query("phase != 'mixed'").copy()
    tokens = rows["n_prefill_tokens"].to_numpy(float)
    pairs = rows[PREFILL_PAIRS].to_numpy(float) if PREFILL_PAIRS in rows else tokens * (tokens + 1) / 2
    length = np.where(tokens > 0, 2 * pairs / np.maximum(tokens, 1) - 1, 0)
    seqs = np.where(tokens > 0, tokens / np.maximum(length, 1), 0)
    w = roofline.work(arch, rows["n_encoder"], rows["n_prefill_tokens"], rows["n_decode"], rows["ctx_tokens"],
                      n_prefill_seqs=seqs, prefill_pairs=pairs)
    rows["flops"] = w["enc_flops"] + w["dec_flops"]
    rows["bytes"] = w["enc_bytes"] + w["dec_bytes"]
    compute_s, memory_s = rows["flops"] / hw.peak_flops, rows["bytes"] / hw.mem_bw
    rows["roofline_s"] = np.maximum(compute_s, memory_s)
    rows["bound"] = np.where(compute_s >= memory_s, "compute", "memory")
    rows["compute_eff"] = compute_s / rows["time_s"]
    rows["bw_eff"] = memory_s / rows["time_s"]
    rows["batch"] = np.select([rows["phase"] == "encoder", rows["phase"] == "prefill"],
                              [rows["n_encoder"], seqs], rows["n_decode"]).astype(int)
    rows["length"] = np.select([rows["phase"] == "prefill", rows["phase"] == "decode"],
                               [length, rows["ctx_tokens"] / rows["n_decode"].clip(lower=1)], 0).round().astype(int)
    return rows.reset_index(drop=True)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (hardware, model, phase): the efficiency that phase is judged by (compute for
    encoder passes and prefills, bandwidth for decode steps) at its smallest and largest pass
    and its median, and the measured time over the roofline's at the median."""
    table = table.assign(efficiency=np.where(table["phase"] == "decode", table["bw_eff"], table["compute_eff"]),
                         work=np.where(table["phase"] == "decode", table["bytes"], table["flops"]))

    def one(key: tuple, g: pd.DataFrame) -> dict:
        g = g.sort_values("work")
        return {
            "hardware": key[0], "model": key[1], "phase": key[2],
            "judged by": "bandwidth" if key[2] == "decode" else "FLOP/s",
            "rows": len(g),
            "smallest pass": g["efficiency"].iloc[0],
            "median": g["efficiency"].median(),
            "largest pass": g["efficiency"].iloc[-1],
            "best": g["efficiency"].max(),
            "measured / roofline (median)": (g["time_s"] / g["roofline_s"]).median(),
        }

    return pd.DataFrame([one(k, g) for k, g in table.groupby(["hardware", "model", "phase"])])


def additive_factors(rows: pd.DataFrame, hw: Hardware) -> tuple[float, float]:
    """Factors ``(compute, memory)`` on the additive roofline (compute time plus memory time,
    as paper C's calibration on measured chunk times) that best match ``rows``' measured times
    (rows of :func:`achieved`), by least squares on relative errors, each at least 1 (the peak)."""
    return relative_factors(rows["flops"] / hw.peak_flops, rows["bytes"] / hw.mem_bw, rows["time_s"])
