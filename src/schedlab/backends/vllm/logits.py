"""A logits processor for ``vllm serve --logits-processors`` (kept free of heavy imports:
vLLM loads it in every worker)."""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor


class NoStopTokens(LogitsProcessor):
    """Masks the model's end-of-sequence ids in every row, so outputs run to ``max_tokens``:
    the ``ignore_eos`` that Whisper's transcription endpoint does not expose."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        eos = getattr(vllm_config.model_config.hf_config, "eos_token_id", None)
        ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
        self.ids = torch.tensor(sorted(set(ids)), dtype=torch.long, device=device)

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        pass

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.ids.numel():
            logits[:, self.ids] = float("-inf")
        return logits
