"""What a scheduler reads of an engine, shared by schedlab's engine and the view of vLLM's
scheduler state (:class:`schedlab.backends.vllm.plan.VllmView`).

A subclass holds, by request index: ``seq`` (known tokens), ``computed``, ``blocks``,
``prompt``; and ``running`` (admission order), ``free`` KV blocks, ``limits``
(:class:`~schedlab.engine.arena.EngineConfig`), ``enc_blocks``, ``busy`` and ``steps``. It
resets ``_run_arr`` whenever ``running`` changes. With a prefix cache (``prefix_caching``)
it answers :meth:`cached_prefix` and :meth:`exclusive_blocks` from its own block pool.
"""

from __future__ import annotations

import numpy as np

from schedlab.engine import kernels


class EngineView:
    _run_arr: np.ndarray | None = None
    #: Whether KV blocks are a prefix cache (then ``free`` counts evictable cached blocks).
    prefix_caching: bool = False

    def cached_prefix(self, i: int) -> tuple[int, int]:
        """Waiting request ``i``'s cached tokens (its longest cached prefix of full blocks, at
        most its known tokens less one) and how many of those blocks are free (evictable)."""
        raise NotImplementedError

    def exclusive_blocks(self, v: int) -> int:
        """Blocks of running request ``v`` that no other request holds (what preempting it frees)."""
        raise NotImplementedError

    def blocks_for(self, tokens):
        """KV blocks (cross-attention included) that hold ``tokens`` decoder tokens; vectorises."""
        return self.enc_blocks + -(-tokens // self.limits.block_size)

    def need(self, i: int) -> int:
        """Tokens request ``i`` computes before its next token."""
        return int(self.seq[i] - self.computed[i])

    def running_array(self) -> np.ndarray:
        if self._run_arr is None:
            self._run_arr = np.fromiter(self.running, np.int64, len(self.running))
        return self._run_arr

    def decoding(self) -> np.ndarray:
        """The running requests that decode next, in admission order."""
        return kernels.decoding(self.running_array(), self.seq, self.computed, self.prompt)

    def prefilling(self) -> list[int]:
        """The running requests in a prefill (or recompute), in admission order."""
        return kernels.decoding(self.running_array(), self.seq, self.computed, self.prompt, False).tolist()

    @property
    def kv_frac(self) -> float:
        return 1.0 - self.free / self.limits.kv_capacity_blocks

    @property
    def mean_step_s(self) -> float:
        """Running mean step time (0 before the first step)."""
        return self.busy / self.steps if self.steps else 0.0
