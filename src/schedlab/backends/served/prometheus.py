"""A ``vllm serve``'s ``/metrics`` read: Prometheus's text format parsed for the few samples
schedlab reads, the prefix-cache counters (:func:`prefix_cache_counters`) and the KV cache's
gauge and configuration (:func:`kv_metrics`)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from schedlab.errors import SchedlabError

#: The server's prefix-cache counters (vLLM's Prometheus names; a counter is exposed with
#: ``_total``), the gauge of the share of KV blocks in use, and the gauge whose labels carry the
#: cache's configuration.
PREFIX_COUNTERS = {"queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total"}
KV_USAGE = "vllm:kv_cache_usage_perc"
CACHE_CONFIG = "vllm:cache_config_info"

#: A sample of the Prometheus text format: name, labels, value, optional timestamp.
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*")
_LABEL = re.compile(r'(?:^|,)\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _samples(text: str, names: set[str]) -> Iterator[tuple[str, dict[str, str], float]]:
    """The samples of the metrics ``names`` in a Prometheus text exposition: name, labels, value
    (other lines are not read)."""
    for line in text.splitlines():
        match = _SAMPLE.fullmatch(line) if line.split("{", 1)[0].split(" ", 1)[0] in names else None
        try:
            value = float(match[3]) if match is not None else None
        except ValueError:
            continue
        if value is not None:
            yield match[1], dict(_LABEL.findall(match[2] or "")), value


def prefix_cache_counters(url: str) -> dict:
    """The server's prefix-cache counters from its ``/metrics`` (summed over its engines):
    ``queries`` and ``hits`` (tokens of first admissions, as vLLM counts them), and
    ``num_gpu_blocks`` (its KV blocks, vLLM's null block included) from its cache config."""
    import httpx

    out = {key: 0 for key in PREFIX_COUNTERS}
    metric_keys = {metric: key for key, metric in PREFIX_COUNTERS.items()}
    for name, labels, value in _samples(httpx.get(f"{url}/metrics", timeout=30.0).text, {*metric_keys, CACHE_CONFIG}):
        if name in metric_keys:
            if not 0 <= value < 2**63:
                raise SchedlabError(f"{url}/metrics: {name} is {value}, not a count")
            out[metric_keys[name]] += int(value)
        elif "num_gpu_blocks" in labels:
            out["num_gpu_blocks"] = _label_count(labels, "num_gpu_blocks", f"{url}/metrics")
    return out


def _label_count(labels: dict[str, str], key: str, source: str) -> int:
    """A label of the cache config that counts something (blocks, tokens): a whole number >= 1."""
    text = labels[key]
    if not text.isdigit() or not 1 <= int(text) < 2**63:
        raise SchedlabError(f"{source}: {CACHE_CONFIG}'s {key} is {text[:30]!r}, not a count")
    return int(text)


def kv_metrics(text: str, source: str = "the server") -> dict:
    """From a server's ``/metrics`` text (``source``: its URL, for errors): ``usage``, the share
    of its KV blocks in use as of its last engine step (vLLM's gauge: blocks neither free nor
    cached and evictable, over all but its null block; the mean over its engines), ``blocks``,
    that many blocks (one engine's), and ``block_size``, their tokens; each ``None`` where the
    server does not report it. A usage that is not a number in 0..1, or a count that is not a
    whole number of at least 1 (2 blocks: the null block and one), fails."""
    usage, blocks, block_size = [], None, None
    for name, labels, value in _samples(text, {KV_USAGE, CACHE_CONFIG}):
        if name == KV_USAGE:
            if not 0.0 <= value <= 1.0:
                raise SchedlabError(f"{source}'s {KV_USAGE} is {value}, not a share in 0..1")
            usage.append(value)
        elif "num_gpu_blocks" in labels:
            blocks = _label_count(labels, "num_gpu_blocks", source) - 1
            if blocks < 1:
                raise SchedlabError(f"{source}: {CACHE_CONFIG} gives no KV block beside vLLM's null block")
            block_size = _label_count(labels, "block_size", source) if "block_size" in labels else None
    return {"usage": sum(usage) / len(usage) if usage else None, "blocks": blocks, "block_size": block_size}
