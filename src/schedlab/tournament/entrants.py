"""Who plays on which workloads, and as which kind of scheduler.

Every entrant plays on the one engine (:mod:`schedlab.engine`): waiting-queue policies
(papers A, B, D) inside vLLM v1's continuous batching, batch builders (paper C) as its
siblings, with the same step-time model, KV capacity and preemption. ASR workloads (an encoder–decoder model with
4-token prompts) admit only the policies whose size signal exists there: paper A's, which
order by audio duration; the others order by prompt length, need an LLM latency predictor, or
compose prefill chunks that a Whisper request does not have. Paper ``A+`` marks schedlab's
extension of paper A (dynamic FCFS/SJF switching, :mod:`schedlab.policies.adaptive`).
"""

from __future__ import annotations

from dataclasses import dataclass

from schedlab.errors import SchedlabError

QUEUE, BATCH = "queue", "batch"
ASR, LLM = "asr", "llm"


@dataclass(frozen=True)
class Entrant:
    name: str
    paper: str
    kind: str
    modalities: tuple[str, ...] = (LLM,)


ENTRANTS = (
    Entrant("fcfs", "A", QUEUE, (ASR, LLM)),
    Entrant("sjf", "A", QUEUE, (ASR, LLM)),
    Entrant("hrrn", "A", QUEUE, (ASR, LLM)),
    Entrant("adaptive", "A+", QUEUE, (ASR, LLM)),
    Entrant("sjf-prompt", "B", QUEUE),
    Entrant("ewsjf", "B", QUEUE),
    Entrant("request-level", "C", BATCH),
    Entrant("prefill-priority", "C", BATCH),
    Entrant("sarathi-fcfs", "C", BATCH),
    Entrant("sarathi-spf", "C", BATCH),
    Entrant("rad", "C", BATCH),
    Entrant("slai-spf-dynamic", "C", BATCH),
    Entrant("slo-sa", "D", QUEUE),
)
BY_NAME = {e.name: e for e in ENTRANTS}


def entrant(name: str) -> Entrant:
    try:
        return BY_NAME[name]
    except KeyError:
        raise SchedlabError(f"unknown tournament entrant {name!r}; known: {', '.join(BY_NAME)}") from None


def lineup(names, modality: str) -> list[Entrant]:
    """The named entrants that have a meaning on a ``modality`` workload, in the given order."""
    return [e for e in map(entrant, names) if modality in e.modalities]
