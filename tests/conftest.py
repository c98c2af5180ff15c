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


@pytest.fixture(scope="module")
def machine_slurm():
    """The machine's own SLURM configuration, for the module's tests and what they start."""
    if os.environ[MACHINE_SLURM]:
        os.environ["SLURM_CONF"] = os.environ[MACHINE_SLURM]
    else:
        os.environ.pop("SLURM_CONF", None)
    yield
    os.environ["SLURM_CONF"] = str(UNREACHABLE_SLURM)


#: The two longest tests, started first under pytest-xdist, each on a worker of its own.
LONGEST = ("tests/test_pipeline.py::test_snakemake_pipeline_renders_notebooks",
           "tests/test_slurm.py::test_the_tiny_chain_runs_through_slurm")


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(items):
    """The tiny pipeline and the SLURM chain first, then the other slow tests: under
    pytest-xdist (``--dist loadgroup``) the two longest then start at once, each on a worker of
    its own, while the others run the rest, instead of the run ending on them. The SLURM chain
    mostly waits on its cluster: started last (as the slow tests' file order had it), it left
    the machine idle for the last two minutes of the run.

    pytest-xdist starts each worker on two tests (one each in worker order, then a second each),
    so the second tests of the first two workers wait for the longest two to end: two quick tests
    take those places, fourth and fifth."""
    rank = {nodeid: k for k, nodeid in enumerate(LONGEST)}
    items.sort(key=lambda item: (rank.get(item.nodeid, len(LONGEST)), item.get_closest_marker("slow") is None))
    if sum(item.nodeid in rank for item in items[:2]) == 2:
        quick = [item for item in items if item.get_closest_marker("slow") is None][:2]
        for item in quick:
            items.remove(item)
        items[3:3] = quick


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
