"""Test set-up: every test works in a private cache, so nothing touches the user's .cache/ or home,
and no setting of the user's reaches a test: `DLROSETTA_CHESTXRAY` pointing at real data, or
`DLROSETTA_CACHE` holding real CIFAR-10, would otherwise change what the tests read. One is kept:
`DLROSETTA_CPU_ISA` says what the hardware is (support/hardware.py), as oneDNN's ISA caps do, so that
`DLROSETTA_CPU_ISA=avx2 make test` (with the frameworks' caps, hardware.caps) shows what an AVX2 CPU's user
meets; the tests that depend on the hardware ask support.hardware what to expect."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Cleared at import, before any test module is collected (and so before the runner's subprocesses).
USER_SETTINGS = {
    name: os.environ.pop(name)
    for name in list(os.environ)
    if name.startswith("DLROSETTA_") and name != "DLROSETTA_CPU_ISA"
}


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("DLROSETTA_CACHE")
    os.environ["DLROSETTA_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("DLROSETTA_CACHE", None)
    else:
        os.environ["DLROSETTA_CACHE"] = old


@pytest.fixture
def no_network(monkeypatch):
    """Make every download fail as it does offline: tests never fetch datasets."""
    from support import data

    def offline(url, *args, **kwargs):
        raise OSError(f"network disabled in tests ({url})")

    monkeypatch.setattr(data, "download", offline)
