"""schedlab's step-time sources (:func:`schedlab.registry.register_source`): where ``schedlab
profile`` and ``schedlab steptime`` get a latency profile table. Three price a catalogue GPU
without one (the roofline, the passes measured on the shipped GPUs, a GPU profile shipped with
the package); two time this machine (torch forward passes, a real vLLM engine's steps). Each
takes the command's options as keywords and ignores those it has no use for."""

from __future__ import annotations

import pandas as pd

from schedlab.latency.catalogue import hardware as catalogue_hardware, model_arch
from schedlab.registry import register_source, source_entry


@register_source("roofline", summary="predicted from the GPU's peaks and the model's shapes")
def roofline(*, hardware: str, model: str, **_) -> pd.DataFrame:
    from schedlab.latency.roofline import profile

    return profile(catalogue_hardware(hardware), model_arch(model))


@register_source("measured", summary="the passes measured on the shipped GPUs, priced at this GPU's peaks")
def measured(*, hardware: str, model: str, **_) -> pd.DataFrame:
    from schedlab.fit.measured import profile

    return profile(catalogue_hardware(hardware), model_arch(model))


@register_source("shipped", summary="a GPU profile measured and shipped with the package")
def shipped(*, hardware: str, model: str, **_) -> pd.DataFrame:
    from schedlab.fit.shipped import read_shipped

    return read_shipped(hardware, model)


@register_source("torch", machine=True, summary="the model's forward passes timed in torch on this machine")
def torch(*, model: str, device: str = "cpu", repeats: int = 3, **_) -> pd.DataFrame:
    from schedlab.latency.torch_profile import profile

    model_arch(model)  # fail early on an unknown name
    return profile(model=model, repeats=repeats, device=device)


@register_source("vllm", machine=True, summary="a real vLLM engine's steps timed on this machine")
def vllm(*, engine, **_) -> pd.DataFrame:
    from schedlab.backends.vllm.profile import profile

    return profile(engine())


def source_table(name: str, **options) -> pd.DataFrame:
    """The table of the registered source ``name``, from a command's options, checked
    (:func:`schedlab.validation.check_profile`: one line naming the source when what it gives is
    not a profile table)."""
    from schedlab.validation import check_profile

    source = source_entry(name)
    return check_profile(source.profile(**options), source.describe())
