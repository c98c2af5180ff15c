"""The ``vllm-sim`` backend: vLLM's real v1 scheduler on a virtual clock."""
