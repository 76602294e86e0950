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
def first_device(engine) -> bool:
    """Whether ``engine`` is the first device present (the one that runs every sweep whole;
    see the ``sampled`` marker)."""
    return engine is ENGINES[0]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sampled(every): on devices after the first, run every n-th case of this "
                   "device-parametrized sweep (the first device runs all of them; the kernels "
                   "come from the same generators, and CI time is finite); pick n coprime with "
                   "the counts of the fastest-varying parameters (the last id fields), so "
                   "that every value of each still runs on every device")


def pytest_collection_modifyitems(config, items):
    """Deselect (never skip) the cases a ``sampled`` sweep leaves out on later devices."""
    keep, drop, seen = [], [], {}
    for item in items:
        mark = item.get_closest_marker("sampled")
        eng = getattr(getattr(item, "callspec", None), "params", {}).get("engine")
        if mark is not None and eng is not None and eng is not ENGINES[0]:
            every = int(mark.kwargs.get("every", mark.args[0] if mark.args else 2))
            key = (item.nodeid.split("[")[0], id(eng))
            n = seen[key] = seen.get(key, -1) + 1
            if n % every:
                drop.append(item)
                continue
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def cpu_engine() -> dnnl.engine:
    """The default CPU engine (index 0); tests using it skip where no CPU device exists."""
    if dnnl.engine.get_count(dnnl.engine.kind.cpu) == 0:
        pytest.skip("no CPU OpenCL device on this machine")
    return dnnl.engine(dnnl.engine.kind.cpu, 0)


@pytest.fixture(scope="session")
def first_engine() -> dnnl.engine:
    """The first device present (the CPU where there is one, else a GPU): for tests that run
    on one device, of whatever kind, rather than on each in turn."""
    if not ENGINES:
        pytest.skip("no OpenCL device on this machine")
    return ENGINES[0]


@pytest.fixture(scope="session")
def benchdnn_engine() -> str:
    """``--engine=`` naming the first device's kind, for benchdnn command lines: the CLI's
    default engine is the CPU, which a GPU-only machine lacks."""
    return f"--engine={ENGINES[0].get_kind().name}" if ENGINES else "--engine=cpu"


def pytest_report_header(config):
    devs = "; ".join(f"{d.type}: {d.name} [{d.platform}]" for d in dnnl.engine.list_devices())
    return (f"pydnnl devices: {devs}; "
            f"kernel cache: {os.environ.get('PYDNNL_CACHE_DIR', 'per-user default')}")


@pytest.fixture()
def spy_kernels(monkeypatch):
    """``start(families=None)``: from then on, the (family, key) of every kernel asked of the
    kernel cache (of ``families`` only, when given) lands in the list it returns; the tests
    of sizes taken at run time check that a new shape asks for no key the first did not."""
    import pydnnl.runtime.dropout as dropout_mod
    import pydnnl.runtime.gemm as gemm_mod
    import pydnnl.runtime.plan as plan_mod
    from pydnnl.runtime import kernel_cache

    def start(families=None) -> list:
        seen = []
        orig = kernel_cache.get_kernel

        def spy(engine, family, key, build):
            if families is None or family in families:
                seen.append((family, repr(key)))
            return orig(engine, family, key, build)

        for mod in (kernel_cache, gemm_mod, plan_mod, dropout_mod):
            monkeypatch.setattr(mod, "get_kernel", spy)
        return seen

    return start


@pytest.fixture()
def requested(spy_kernels) -> list:
    """The (family, key) of every kernel asked of the kernel cache while the test runs."""
    return spy_kernels()


@pytest.fixture()
def forced_k_shares(monkeypatch):
    """The runtime's rule that shares a block's k among the work-groups of one launch
    (NVIDIA's, ``heuristics/gemm_slices.py``) forced to 4 shares on whatever device runs the
    test (the kernel runs on any OpenCL device), for every caller that opts in."""
    from pydnnl.kernels.gemm_nv import NvTile, supports
    from pydnnl.runtime import gemm as rg

    orig = rg._nv_tile

    def forced(info, prob, math, slices=False):
        if slices and prob.batch == 1:
            t = NvTile(16 if prob.m < 32 else 32, 64, 16, 4, 4, kslices=4)
            if supports(prob, t):
                return t
        return orig(info, prob, math, slices)

    monkeypatch.setattr(rg, "_nv_tile", forced)
    monkeypatch.setattr(rg, "_cache", {})
