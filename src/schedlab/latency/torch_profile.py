"""The ``torch`` source: timed forward passes of a random-initialised Whisper on a local device."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import pandas as pd
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from schedlab.contracts import PROFILE_COLUMNS
from schedlab.errors import SchedlabError
from schedlab.latency.catalogue import model_dir

#: Log-mel frames of one 30 s Whisper input window.
MEL_FRAMES = 3000


@contextmanager
def _threads(n: int | None) -> Iterator[int]:
    """Run with ``n`` intra-op threads (default: torch's current setting); restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(n or before)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def device_setup(device: str) -> tuple[torch.dtype, Callable[[], None], str]:
    """Float32 on the CPU, float16 on a CUDA ``device``; the synchronisation a timing needs;
    the device's label (GPU name, or ``cpu-<threads>c`` at the current thread count)."""
    if device.startswith("cuda"):
        return torch.float16, torch.cuda.synchronize, torch.cuda.get_device_name(device).replace(" ", "-")
    return torch.float32, (lambda: None), f"cpu-{torch.get_num_threads()}c"


def median_time(
    run: Callable, repeats: int, setup: Callable[[], tuple] = tuple, sync: Callable = lambda: None
) -> float:
    """Median wall time of ``run(*setup())`` over ``repeats`` after one untimed warm-up."""
    times = []
    for i in range(repeats + 1):
        args = setup()
        sync()
        start = time.perf_counter()
        run(*args)
        sync()
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def reused_cache(prefill: Callable[[], object]) -> Callable[[], tuple]:
    """A `median_time` setup for timing one decode step on a KV cache: the cache of one
    ``prefill()``, with the token each timed step appended cropped off again before the next."""
    cache = None

    def setup() -> tuple:
        nonlocal cache
        if cache is None:
            cache = prefill()
        else:
            cache.crop(-1)
        return (cache,)

    return setup


def profile(
    model: str = "whisper-tiny",
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16),
    contexts: tuple[int, ...] = (8, 32, 128),
    encoder_batches: tuple[int, ...] = (1, 2, 4),
    repeats: int = 3,
    seed: int = 0,
    threads: int | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """Profile table (``source="torch"``) of encoder passes and single-token decoder steps.

    Encoder rows time ``b`` random 30 s mel inputs. Decode rows time one step of ``b``
    sequences, each holding a self-attention cache of ``ctx`` tokens and cross-attending to
    one precomputed encoder output; the LM head is included. Float32 on the CPU, float16 on a
    CUDA ``device``; ``torch.inference_mode``.
    """
    if repeats < 1:
        raise SchedlabError(f"repeats must be >= 1, got {repeats}")
    config = WhisperConfig.from_pretrained(model_dir(model))
    too_long = [c for c in contexts if not 0 < c < config.max_target_positions]
    if too_long:
        raise SchedlabError(
            f"contexts must lie in 1..{config.max_target_positions - 1}, got {too_long}"
        )
    torch.manual_seed(seed)
    rows = []
    with _threads(threads), torch.inference_mode():
        dtype, sync, hardware = device_setup(device)
        net = WhisperForConditionalGeneration(config).eval().to(device=device, dtype=dtype)
        for b in encoder_batches:
            mel = torch.randn(b, config.num_mel_bins, MEL_FRAMES, device=device, dtype=dtype)
            t = median_time(lambda: net.model.encoder(mel), repeats, sync=sync)
            rows.append((b, 0, 0, 0, t))
        mel = torch.randn(1, config.num_mel_bins, MEL_FRAMES, device=device, dtype=dtype)
        encoded = net.model.encoder(mel)[0]
        for b in batch_sizes:
            enc = encoded.expand(b, -1, -1).contiguous()
            for ctx in contexts:
                prompt = torch.randint(0, config.vocab_size, (b, ctx), device=device)
                step_ids = torch.randint(0, config.vocab_size, (b, 1), device=device)

                def prefill():
                    return net(encoder_outputs=(enc,), decoder_input_ids=prompt, use_cache=True).past_key_values

                def step(cache):
                    net(
                        encoder_outputs=(enc,),
                        decoder_input_ids=step_ids,
                        past_key_values=cache,
                        use_cache=True,
                    )

                rows.append((0, 0, b, b * ctx, median_time(step, repeats, reused_cache(prefill), sync)))
    out = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS[3:]))
    out.insert(0, "source", "torch")
    out.insert(1, "hardware", hardware)
    out.insert(2, "model", model)
    return out
