"""Shared fixtures: every OpenCL device present (simulators excluded), one stream each."""
from __future__ import annotations

import os

import pytest

import pydnnl as dnnl


def _engines() -> list[dnnl.engine]:
    out = []
    for kind in (dnnl.engine.kind.cpu, dnnl.engine.kind.gpu):
        for i in range(dnnl.engine.get_count(kind)):
            out.append(dnnl.engine(kind, i))
    return out


ENGINES = _engines()
ENGINE_IDS = [f"{e.get_kind().name}{i}-{e.info.platform.split()[0]}" for i, e in enumerate(ENGINES)]


@pytest.fixture(scope="session", params=ENGINES, ids=ENGINE_IDS)
def engine(request) -> dnnl.engine:
    """Each device present, in turn."""
    return request.param


@pytest.fixture(scope="session")
def stream(engine) -> dnnl.stream:
    return dnnl.stream(engine)


@pytest.fixture(scope="session")
def cpu_engine() -> dnnl.engine:
    """The default CPU engine (index 0); tests using it skip where no CPU device exists."""
    if dnnl.engine.get_count(dnnl.engine.kind.cpu) == 0:
        pytest.skip("no CPU OpenCL device on this machine")
    return dnnl.engine(dnnl.engine.kind.cpu, 0)


def pytest_report_header(config):
    devs = "; ".join(f"{d.type}: {d.name} [{d.platform}]" for d in dnnl.engine.list_devices())
    return f"pydnnl devices: {devs}; kernel cache: {os.environ.get('PYDNNL_CACHE_DIR', 'per-user default')}"
