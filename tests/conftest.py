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
    config.addinivalue_line(
        "markers", "gpu_sweep: a case of a sweep that GPUs run and CPU devices leave out "
                   "(deselected there; kernels written for GPUs, whose indexing CPUs check on "
                   "the sweep's other cases)")


#: a sweep over the ``engine`` fixture runs one case in each run of this many on CPU devices
#: after the first (PoCL after Intel's runtime; the first CPU runs them all): the same
#: generated kernels, built by a second compiler. PoCL took 3735 of the suite's 7252
#: test-seconds on a 2-core EPYC, 2.3 times Intel's share, most of it reading program
#: binaries (no longer kept for PoCL: ``runtime/heuristics/program_binaries.py``); with half
#: its sweeps, 1815 of 5815 (1306 in sweeps, 509 in single cases). The kept
#: case moves along from one run to the next (case i of run r is kept where i = r mod n), so
#: each value of the fastest-varying parameter still runs there. A test function with a
#: single case there still runs it; ``sampled`` sweeps keep their own n; GPUs run every case.
LATER_CPU_EVERY = 4


def _kept(item, eng, n: int) -> bool:
    """Whether ``item``, the n-th case of its sweep on ``eng``, runs there."""
    if eng is None or eng is ENGINES[0]:
        return True
    mark = item.get_closest_marker("sampled")
    if mark is not None:
        return n % int(mark.kwargs.get("every", mark.args[0] if mark.args else 2)) == 0
    if eng.get_kind() != dnnl.engine.kind.cpu:
        return True
    every = LATER_CPU_EVERY
    return n % every == (n // every) % every


def pytest_collection_modifyitems(config, items):
    """Deselect (never skip) the cases a sweep leaves out on later devices (see
    ``LATER_CPU_EVERY`` and the ``sampled`` marker) and those only GPUs run (``gpu_sweep``)."""
    keep, drop, seen = [], [], {}
    for item in items:
        eng = getattr(getattr(item, "callspec", None), "params", {}).get("engine")
        if not isinstance(eng, dnnl.engine):  # (an empty parametrization's placeholder)
            eng = None
        if eng is not None and eng.get_kind() == dnnl.engine.kind.cpu \
                and item.get_closest_marker("gpu_sweep") is not None:
            drop.append(item)
            continue
        if eng is not None and eng is not ENGINES[0]:
            key = (item.nodeid.split("[")[0], id(eng))
            n = seen[key] = seen.get(key, -1) + 1
            if not _kept(item, eng, n):
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
