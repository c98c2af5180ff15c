"""Profile tables measured on real GPUs and shipped with the package: ``assets/profiles/
<hardware>/<model>.parquet`` (timed torch passes; see :mod:`schedlab.latency.suite`), each
folder with the ``provenance.json`` of the run that measured it. The catalogue lists them
(:func:`schedlab.latency.catalogue.shipped_hardware`, ``shipped_models``); here they are found,
described and read."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.latency.catalogue import PROFILES, shipped_hardware, shipped_models


def shipped_path(hardware: str, model: str) -> Path:
    """The shipped profile of ``model`` on ``hardware``."""
    if hardware not in shipped_hardware():
        raise SchedlabError(f"no shipped profiles for hardware {hardware!r}; shipped: {', '.join(shipped_hardware())}")
    if model not in shipped_models(hardware):
        raise SchedlabError(
            f"no shipped profile of {model!r} on {hardware}; shipped: {', '.join(shipped_models(hardware))}"
        )
    return PROFILES / hardware / f"{model}.parquet"


def provenance(hardware: str) -> dict:
    """How ``hardware``'s shipped profiles were measured (GPU, driver, clocks, versions, grid)."""
    shipped_path(hardware, shipped_models(hardware)[0])
    return json.loads((PROFILES / hardware / "provenance.json").read_text())


def read_shipped(hardware: str, model: str) -> pd.DataFrame:
    """The shipped profile of ``model`` on ``hardware``, checked against the profile schema."""
    from schedlab.validation import read_profile

    return read_profile(shipped_path(hardware, model))
