"""The ``torch`` source: timed forward passes of random-initialised models on a local device.

Whisper: encoder passes over 30 s windows and single-token decoder steps that cross-attend to a
window's encoder output. Llama-layout decoders (Llama, Mistral, Qwen2): prefill passes and
single-token decode steps. Every pass is one row of a profile table
(:data:`~schedlab.contracts.PROFILE_COLUMNS`, plus ``prefill_pairs`` for prefill rows and
``cuda_graph``).

Weights are allocated on the device directly, in its dtype (float32 on the CPU, bfloat16 on a
CUDA device), and initialised there. A decode step runs on a KV cache of random keys and
values with one free slot (:class:`SlotLayer`): the step writes its token into the slot in
place, as vLLM writes into a paged cache block, so every repeat does the same work and no
prefill is needed to build the cache. On a CUDA device every pass of at most
:data:`GRAPH_TOKENS` tokens is captured in a CUDA graph and its replays are timed, as vLLM
replays graphs for its decode batches: the time is the GPU's, without Python's launch
overhead. Larger passes run eagerly (their kernels outlast their launches), and so does a pass
whose capture fails; the ``cuda_graph`` column says which.

Attention is transformers' SDPA without a mask (:func:`serving_attention`), as FlashAttention
runs in vLLM: the sequences of a pass have equal lengths and a prefill starts from an empty
cache, so the mask would only be the causal one (prefill) or let every position through
(decode). Left to itself, transformers decides per call whether to build the mask, and SDPA
shares grouped-query KV heads in place only when there is none. Some versions (5.17) build it
whenever a CUDA graph is captured, and the times are then of copies of the KV heads rather than
of the GPU's attention (docs/calibration.md, "GPU profiles").
"""

from __future__ import annotations

import itertools
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import pandas as pd
import torch
from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM, WhisperForConditionalGeneration
from transformers.cache_utils import Cache, DynamicLayer, EncoderDecoderCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from schedlab import progress
from schedlab.contracts import PREFILL_PAIRS, PROFILE_COLUMNS
from schedlab.errors import SchedlabError
from schedlab.latency.catalogue import LLAMA_LIKE, model_arch, model_dir
from schedlab.limits import check_allocation

#: Log-mel frames of one 30 s Whisper input window.
MEL_FRAMES = 3000
#: Passes of at most this many tokens are timed as CUDA-graph replays on a CUDA device.
GRAPH_TOKENS = 2048
#: Whether a row's time is of CUDA-graph replays (optional profile column).
CUDA_GRAPH = "cuda_graph"
#: The attention implementation every timed model runs (:func:`serving_attention`).
SERVING_ATTENTION = "schedlab_serving_sdpa"


def serving_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention with no mask: causal for a pass of several tokens per
    sequence (a prefill, which starts from an empty cache), unmasked for a decode step, and with
    grouped-query KV heads shared in place. ``attention_mask`` is ignored: a name that is not one
    of transformers' mask functions makes it build none, and the passes timed here need none."""
    if 1 < query.shape[2] != key.shape[2]:
        raise SchedlabError(f"a pass of {query.shape[2]} tokens over {key.shape[2]} keys needs a mask")
    return sdpa_attention_forward(module, query, key, value, None, **kwargs)


AttentionInterface.register(SERVING_ATTENTION, serving_attention)


@contextmanager
def _threads(n: int | None) -> Iterator[int]:
    """Run with ``n`` intra-op threads (default: torch's current setting); restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(n or before)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def device_setup(device: str) -> tuple[torch.dtype, str]:
    """Float32 on the CPU, bfloat16 on a CUDA ``device``; the device's label (GPU name, or
    ``cpu-<threads>c`` at the current thread count). A device this torch cannot use is one
    line naming it (torch's own assertion otherwise)."""
    try:
        kind = torch.device(device)
    except (RuntimeError, ValueError):
        raise SchedlabError(f"--device {device!r} is not a torch device (cpu, or cuda:N)") from None
    if kind.type not in ("cpu", "cuda"):
        raise SchedlabError(f"--device {device!r}: only cpu and cuda devices are profiled")
    if kind.type == "cuda" and (not torch.cuda.is_available() or (kind.index or 0) >= torch.cuda.device_count()):
        raise SchedlabError(f"--device {device!r}: this torch sees {torch.cuda.device_count()} CUDA device(s)"
                            f"{'' if torch.cuda.is_available() else ' (it was built without CUDA, or no GPU is present)'}")
    if device.startswith("cuda"):
        return torch.bfloat16, torch.cuda.get_device_name(device).replace(" ", "-")
    return torch.float32, f"cpu-{torch.get_num_threads()}c"


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


def _cuda_median(run: Callable[[], object], repeats: int) -> float:
    """Median seconds between CUDA events around ``run()`` over ``repeats``, after a warm-up."""
    run()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _capture(run: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """``run`` captured in a CUDA graph, after two warm-up runs on a side stream (as torch's
    documentation prescribes, so that lazily initialised libraries are ready)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph


@dataclass
class PassTimer:
    """Times passes on ``device``: the median of ``repeats`` after a warm-up. On CUDA, a pass
    of at most :data:`GRAPH_TOKENS` tokens is timed as replays of its CUDA graph while capture
    works; after the first failed capture (a model whose forward synchronises with the host)
    every pass runs eagerly and ``capture_error`` says why."""

    device: str
    repeats: int
    capture_error: str | None = field(default=None)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def __call__(self, run: Callable[[], object], tokens: int) -> tuple[float, bool]:
        """Seconds of one ``run()`` and whether they are of graph replays."""
        if not self.cuda:
            return median_time(run, self.repeats), False
        if tokens <= GRAPH_TOKENS and self.capture_error is None:
            try:
                graph = _capture(run)
            except RuntimeError as e:
                self.capture_error = str(e).splitlines()[0][:200]
                torch.cuda.synchronize()
            else:
                try:
                    return _cuda_median(graph.replay, self.repeats), True
                finally:
                    del graph
        return _cuda_median(run, self.repeats), False


class SlotLayer(DynamicLayer):
    """One attention layer's KV cache: ``keys``/``values`` of shape (batch, heads, length + 1,
    head_dim) whose last position is a free slot. A decode step writes its token's keys and
    values into the slot in place and attends to all ``length + 1`` positions; the cache
    reports ``length`` tokens, so the next step does exactly the same."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values
        self.length = keys.shape[-2] - 1

    def update(self, key_states, value_states, *args, **kwargs):
        self.keys[..., self.length :, :].copy_(key_states)
        self.values[..., self.length :, :].copy_(value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length


def slot_cache(layers: int, batch: int, heads: int, length: int, head_dim: int, dtype, device) -> Cache:
    """A cache of random keys and values: ``length`` tokens per sequence and a free slot."""
    shape = (batch, heads, length + 1, head_dim)
    return Cache(
        layers=[
            SlotLayer(torch.randn(shape, dtype=dtype, device=device), torch.randn(shape, dtype=dtype, device=device))
            for _ in range(layers)
        ]
    )


def _build(factory: Callable[..., torch.nn.Module], config, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """``factory(config)`` with its weights allocated and initialised on ``device`` in ``dtype``
    (no float32 copy on the host first)."""
    with torch.device(device):
        return factory(config, dtype=dtype, attn_implementation=SERVING_ATTENTION).eval()


def _whisper_rows(net, config, timer: PassTimer, dtype, encoder_batches, decode_points, skip) -> Iterator[tuple]:
    device = timer.device
    heads = config.decoder_attention_heads
    head_dim = config.d_model // heads
    frames = config.max_source_positions
    for b in encoder_batches:
        if skip("encoder", b, 0):
            continue
        mel = torch.randn(b, config.num_mel_bins, MEL_FRAMES, device=device, dtype=dtype)
        t, graph = timer(lambda: net.model.encoder(mel), tokens=b * frames)
        yield (b, 0, 0, 0, t, 0, graph)
        mel = None  # freed before the next, larger batch
    encoded = torch.randn(1, frames, config.d_model, device=device, dtype=dtype)
    for b, ctx in decode_points:
        if skip("decode", b, ctx):
            continue
        cache = EncoderDecoderCache(
            slot_cache(config.decoder_layers, b, heads, ctx, head_dim, dtype, device),
            # Cross-attention keys and values of each sequence's window, already computed.
            Cache(layers=[_full_layer((b, heads, frames, head_dim), dtype, device) for _ in range(config.decoder_layers)]),
        )
        ids = torch.randint(0, config.vocab_size, (b, 1), device=device)
        enc = encoded.expand(b, -1, -1)
        step = lambda: net(encoder_outputs=(enc,), decoder_input_ids=ids, past_key_values=cache, use_cache=True)
        t, graph = timer(step, tokens=b)
        yield (0, 0, b, b * ctx, t, 0, graph)
        cache = step = None  # freed before the next point's cache


def _full_layer(shape, dtype, device) -> DynamicLayer:
    """A layer cache holding random keys and values of ``shape`` (never updated)."""
    layer = DynamicLayer()
    keys, values = torch.randn(shape, dtype=dtype, device=device), torch.randn(shape, dtype=dtype, device=device)
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


def _decoder_rows(net, config, timer: PassTimer, dtype, prefill_points, decode_points, skip) -> Iterator[tuple]:
    device = timer.device
    heads = config.num_key_value_heads or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    for b, n in prefill_points:
        if skip("prefill", b, n):
            continue
        prompt = torch.randint(0, config.vocab_size, (b, n), device=device)
        # The LM head runs on each sequence's last token only, as in a serving engine.
        run = lambda: net(prompt, use_cache=True, logits_to_keep=1)
        t, graph = timer(run, tokens=b * n)
        yield (0, b * n, 0, 0, t, b * n * (n + 1) // 2, graph)
        prompt = run = None
    for b, n in decode_points:
        if skip("decode", b, n):
            continue
        cache = slot_cache(config.num_hidden_layers, b, heads, n, head_dim, dtype, device)
        ids = torch.randint(0, config.vocab_size, (b, 1), device=device)
        step = lambda: net(ids, past_key_values=cache, use_cache=True)
        t, graph = timer(step, tokens=b)
        yield (0, 0, b, b * n, t, 0, graph)
        cache = step = None  # freed before the next point's cache


@dataclass
class TorchNet:
    """A random-initialised model on a device, ready to time (see :func:`load`)."""

    name: str
    config: object
    net: torch.nn.Module
    dtype: torch.dtype
    hardware: str
    whisper: bool

    @property
    def max_length(self) -> int:
        """Longest sequence (decoder context) the model takes."""
        c = self.config
        return c.max_target_positions if self.whisper else c.max_position_embeddings


def load(model: str, device: str = "cpu", seed: int = 0) -> TorchNet:
    """``model`` (a bundled config) built with random weights on ``device``."""
    config = AutoConfig.from_pretrained(model_dir(model))
    torch.manual_seed(seed)
    dtype, hardware = device_setup(device)
    arch = model_arch(model)
    if torch.device(device).type == "cpu":  # random weights in the machine's memory
        check_allocation((arch.encoder_params + arch.decoder_params) * torch.finfo(dtype).bits // 8,
                         f"{model}'s random weights in {dtype} (--model)")
    if config.model_type == "whisper":
        net = _build(WhisperForConditionalGeneration._from_config, config, device, dtype)
    elif config.model_type in LLAMA_LIKE:
        net = _build(AutoModelForCausalLM.from_config, config, device, dtype)
    else:
        raise SchedlabError(f"{model}: model_type {config.model_type!r} cannot be timed")
    return TorchNet(model, config, net, dtype, hardware, config.model_type == "whisper")


def time_passes(
    loaded: TorchNet,
    *,
    encoder_batches: Iterable[int] = (),
    prefill_points: Iterable[tuple[int, int]] = (),
    decode_points: Iterable[tuple[int, int]] = (),
    repeats: int = 3,
    skip: Callable[[str, int, int], bool] = lambda phase, batch, length: False,
    timer: PassTimer | None = None,
) -> pd.DataFrame:
    """Profile table (``source="torch"``) of ``loaded``'s passes: Whisper encoder passes of
    ``b`` windows, prefill passes of ``b`` prompts of ``n`` tokens (decoder-only models), and
    decode steps of ``b`` sequences holding ``n`` tokens of context each. ``skip(phase, b, n)``
    may leave a point out (a memory or time limit)."""
    if repeats < 1:
        raise SchedlabError(f"repeats must be >= 1, got {repeats}")
    encoder_batches, prefill_points, decode_points = list(encoder_batches), list(prefill_points), list(decode_points)
    too_long = sorted({n for _, n in [*prefill_points, *decode_points] if not 0 < n < loaded.max_length})
    if too_long:
        raise SchedlabError(f"{loaded.name}: lengths must lie in 1..{loaded.max_length - 1}, got {too_long}")
    if loaded.whisper and prefill_points:
        raise SchedlabError(f"{loaded.name}: Whisper is profiled by encoder passes and decode steps, not prefills")
    if not loaded.whisper and encoder_batches:
        raise SchedlabError(f"{loaded.name}: a decoder-only model has no encoder")
    timer = timer or PassTimer(_device_of(loaded.net), repeats)
    points = len(encoder_batches) + len(prefill_points) + len(decode_points)
    with torch.inference_mode(), progress.stage(f"{loaded.name} on {loaded.hardware}", total=points,
                                                unit="points timed") as timed:
        if loaded.whisper:
            passes = _whisper_rows(loaded.net, loaded.config, timer, loaded.dtype, encoder_batches, decode_points, skip)
        else:
            passes = _decoder_rows(loaded.net, loaded.config, timer, loaded.dtype, prefill_points, decode_points, skip)
        rows = []
        for row in passes:
            rows.append(row)
            timed.advance()
    out = pd.DataFrame(rows, columns=[*PROFILE_COLUMNS[3:], PREFILL_PAIRS, CUDA_GRAPH])
    out.insert(0, "source", "torch")
    out.insert(1, "hardware", loaded.hardware)
    out.insert(2, "model", loaded.name)
    return out


def _device_of(net: torch.nn.Module) -> str:
    return str(next(net.parameters()).device)


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
    """Profile table of ``model`` on ``device``: decode steps at every batch size and context,
    with encoder passes (Whisper) or prefills of every batch size and context (a decoder-only
    model). See :func:`time_passes`."""
    with _threads(threads):
        loaded = load(model, device, seed)
        points = list(itertools.product(batch_sizes, contexts))
        if loaded.whisper:
            return time_passes(loaded, encoder_batches=encoder_batches, decode_points=points, repeats=repeats)
        return time_passes(loaded, prefill_points=points, decode_points=points, repeats=repeats)
