"""The files an engine is built from, read into the objects it takes: a step-time model
(:func:`read_steptime`, and :func:`write_steptime` for the fit stage's output), a kappa fit
(:func:`~schedlab.validation.documents.read_kappa`) and an engine spec naming both
(:func:`read_arena`). Each file is checked as it is read (:mod:`schedlab.validation.documents`),
and a step-time model as it is written, so no file is written that cannot be read back."""

from __future__ import annotations

import os
from dataclasses import asdict, replace

from schedlab.engine.arena import SPEC_LIMITS, Arena
from schedlab.engine.steptime import StepTimeModel
from schedlab.io import read_json, write_json
from schedlab.latency.catalogue import model_arch
from schedlab.validation.documents import ArenaSpec, check_steptime, parse, read_kappa


def read_steptime(path: str | os.PathLike) -> StepTimeModel:
    """A step-time model file, checked (finite, non-negative terms: see
    :class:`~schedlab.validation.documents.StepTimeTerms`)."""
    return StepTimeModel(**check_steptime(read_json(path), path))


def write_steptime(model: StepTimeModel, path: str | os.PathLike) -> None:
    """``model`` written to ``path``, checked as :func:`read_steptime` reads it (a fit with an
    infinite term is refused and nothing is written)."""
    write_json(check_steptime(asdict(model), f"{path} (not written)"), path)


def check_arena_spec(spec, source: str) -> ArenaSpec:
    """The spec's keys and values, and the files it names (step-time model, kappa)."""
    checked = parse(ArenaSpec, spec, source)
    read_steptime(checked.steptime)
    if checked.kappa is not None:
        read_kappa(checked.kappa)
    return checked


def read_arena(spec, modality: str, source: str) -> Arena:
    """The arena of an engine spec (the tournament's and extensions' config, checked by
    :func:`check_arena_spec`): its step-time model, ``hardware``, ``model``, engine limits and,
    for ASR, its kappa fit; an LLM arena (``modality`` ``"llm"``) rejects requests longer than
    the model's context."""
    checked = parse(ArenaSpec, spec, source)
    step_time = read_steptime(checked.steptime)
    kappa = read_kappa(checked.kappa) if checked.kappa is not None else {}
    limits = {k: spec[k] for k in SPEC_LIMITS if k in spec}
    context = model_arch(checked.model).max_target_positions if modality == "llm" else None
    arena = Arena.build(step_time, checked.hardware, checked.model, kappa=kappa, **limits)
    return replace(arena, max_tokens=context)
