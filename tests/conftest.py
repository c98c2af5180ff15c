"""Shared fixtures."""

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
#: The SLURM configuration the tests run with, bar the SLURM test (see the file).
UNREACHABLE_SLURM = Path(__file__).resolve().parent / "slurm-unreachable.conf"


#: Where the machine's own SLURM configuration is kept for the SLURM test: in the environment,
#: as pytest-xdist's workers start from the main process's, after its pytest_configure ran.
MACHINE_SLURM = "SCHEDLAB_TESTS_MACHINE_SLURM_CONF"


def pytest_configure(config):
    """Every `snakemake` a test starts asks SLURM for its configuration (the SLURM executor's
    plug-in does, when loaded); with no controller up it gets an answer at once instead of
    after 9 s of retries. The SLURM test takes the machine's own back (:func:`machine_slurm`)."""
    os.environ.setdefault(MACHINE_SLURM, os.environ.get("SLURM_CONF", ""))
    os.environ["SLURM_CONF"] = str(UNREACHABLE_SLURM)
    # Commands the tests run show no progress (their stderr is their one error line), whatever
    # the shell that started the tests asks for; the progress tests set it themselves.
    os.environ.pop("SCHEDLAB_PROGRESS", None)


@pytest.fixture(scope="module")
def machine_slurm():
    """The machine's own SLURM configuration, for the module's tests and what they start."""
    if os.environ[MACHINE_SLURM]:
        os.environ["SLURM_CONF"] = os.environ[MACHINE_SLURM]
    else:
        os.environ.pop("SLURM_CONF", None)
    yield
    os.environ["SLURM_CONF"] = str(UNREACHABLE_SLURM)


def pytest_collection_modifyitems(items):
    """The slow tests first (in file order): under pytest-xdist (``--dist loadgroup``) the tiny
    pipeline, the longest, then starts within the run's first minutes while the other workers
    run the rest, instead of the run ending on it."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def shared_data() -> Path:
    """The offline data mirror beside the checkout (``../shared/data``); skips when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"offline data mirror not present: {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def data_cache(tmp_path, monkeypatch) -> Path:
    """An empty data cache in tmp_path, and no mirror."""
    cache = tmp_path / "data-cache"
    monkeypatch.setenv("SCHEDLAB_DATA_CACHE", str(cache))
    monkeypatch.delenv("SCHEDLAB_DATA_MIRROR", raising=False)
    return cache


@pytest.fixture
def mirror(shared_data, data_cache, monkeypatch) -> Path:
    """SCHEDLAB_DATA_MIRROR pointing at the offline mirror, with an empty cache."""
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(shared_data))
    return shared_data
