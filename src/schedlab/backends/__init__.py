"""Backends beyond the built-in simulator: vLLM's real scheduler on a virtual clock
(``vllm-sim``) and a real vLLM engine (``vllm``), sharing schedlab's policies."""

import logging


def server_logger(name: str) -> logging.Logger:
    """The logger of a module that runs inside a vLLM server (scheduler classes, middleware),
    at INFO whatever level the server's process gives the root logger (its API server's is
    ERROR), so that its warnings reach the server's log."""
    logger = logging.getLogger(name)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    return logger


def placeholder_prompt(n: int) -> list[int]:
    """Token ids standing in for an ``n``-token prompt (only lengths matter to timing)."""
    return [100 + (k % 1000) for k in range(n)]
