"""Backends beyond the built-in simulator: vLLM's real scheduler on a virtual clock
(``vllm-sim``) and a real vLLM engine (``vllm``), sharing schedlab's policies."""

def placeholder_prompt(n: int) -> list[int]:
    """Token ids standing in for an ``n``-token prompt (only lengths matter to timing)."""
    return [100 + (k % 1000) for k in range(n)]
