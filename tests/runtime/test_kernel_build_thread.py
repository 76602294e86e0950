"""Compilations on the kernel cache's build thread: a kernel asked for inside
``deferred_builds`` is built when the block is left and computes what numpy does; a build
that fails raises there (and, asked again, fails again rather than being served from the
cache); outside a block ``get_kernel`` returns while the kernel compiles, and the
kernel's first use or ``finish_pending`` (the end of a primitive's creation) waits for it
and raises its failure."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.error import runtime_error
from pydnnl.kernels.source import KernelSource
from pydnnl.runtime import kernel_cache


def _scale_source(name: str, factor: int) -> KernelSource:
    return KernelSource(name, f"__kernel void {name}(__global float *x) "
                              f"{{ x[get_global_id(0)] *= {factor}.0f; }}",
                        (8,), (1,), ("x",))


def _broken_source(name: str) -> KernelSource:
    return KernelSource(name, f"__kernel void {name}(__global float *x) {{ x[0] = y; }}",
                        (1,), (1,), ("x",))


@pytest.fixture()
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYDNNL_CACHE_DIR", str(tmp_path))
    return str(tmp_path)  # in every key: nothing comes from another test's memory cache


def _run(engine, kernel, x: np.ndarray) -> np.ndarray:
    import pyopencl as cl

    s = dnnl.stream(engine)
    buf = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                    hostbuf=x)
    kernel(s, buf)
    out = np.empty_like(x)
    cl.enqueue_copy(s.queue, out, buf)
    s.wait()
    return out


def test_deferred_builds_are_built_on_leaving(first_engine, fresh_cache):
    x = np.arange(8, dtype=np.float32)
    with kernel_cache.deferred_builds():
        k3 = kernel_cache.get_kernel(first_engine, "test_scale", (fresh_cache, 3),
                                     lambda: _scale_source("scale3", 3))
        k5 = kernel_cache.get_kernel(first_engine, "test_scale", (fresh_cache, 5),
                                     lambda: _scale_source("scale5", 5))
        # the same request inside the block gets the same (pending) kernel
        assert kernel_cache.get_kernel(first_engine, "test_scale", (fresh_cache, 3),
                                       lambda: _scale_source("scale3", 3)) is k3
    assert k3.built_from == k5.built_from == "source"
    np.testing.assert_array_equal(_run(first_engine, k3, x), 3 * x)
    np.testing.assert_array_equal(_run(first_engine, k5, x), 5 * x)


def test_failed_deferred_build_raises_on_leaving(first_engine, fresh_cache):
    key = (fresh_cache, "broken")
    with pytest.raises(runtime_error, match="broken_k: OpenCL build failed"):
        with kernel_cache.deferred_builds():
            kernel_cache.get_kernel(first_engine, "test_broken", key,
                                    lambda: _broken_source("broken_k"))
    # not served from the memory cache: compiled again, failing where it is waited for
    k = kernel_cache.get_kernel(first_engine, "test_broken", key,
                                lambda: _broken_source("broken_k"))
    with pytest.raises(runtime_error, match="broken_k: OpenCL build failed"):
        kernel_cache.finish_pending()
    with pytest.raises(runtime_error, match="broken_k: OpenCL build failed"):
        k.wait()
    kernel_cache.finish_pending()  # raised once: nothing left to wait for


def test_error_inside_the_block_wins(first_engine, fresh_cache):
    """An exception raised inside the block propagates; its builds are still waited for."""
    with pytest.raises(KeyError, match="mine"):
        with kernel_cache.deferred_builds():
            k = kernel_cache.get_kernel(first_engine, "test_scale", (fresh_cache, 7),
                                        lambda: _scale_source("scale7", 7))
            raise KeyError("mine")
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(_run(first_engine, k, x), 7 * x)


def test_builds_left_running_are_finished_later(first_engine, fresh_cache):
    """``wait=False``: the block hands its kernels over; ``finish_builds`` completes them."""
    with kernel_cache.deferred_builds(wait=False) as pending:
        k = kernel_cache.get_kernel(first_engine, "test_scale", (fresh_cache, 9),
                                    lambda: _scale_source("scale9", 9))
    assert pending == [k]
    kernel_cache.finish_builds(pending)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(_run(first_engine, k, x), 9 * x)


def test_get_kernel_returns_while_compiling_and_first_use_waits(first_engine, fresh_cache):
    k = kernel_cache.get_kernel(first_engine, "test_scale", (fresh_cache, 11),
                                lambda: _scale_source("scale11", 11))
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(_run(first_engine, k, x), 11 * x)  # waits for its build
    assert k.built
    kernel_cache.finish_pending()


def test_primitive_creation_returns_with_its_kernels_built(first_engine, fresh_cache):
    """The kernels a primitive's creation (and its descriptor's) asked for are compiled
    when the primitive's constructor returns."""
    from pydnnl.runtime.kernel_cache import _outstanding

    kernel_cache.finish_pending()
    md = dnnl.memory.desc([3, 5], dnnl.memory.data_type.f32, dnnl.memory.format_tag.ab)
    pd = dnnl.eltwise_forward.primitive_desc(first_engine, dnnl.prop_kind.forward_inference,
                                             dnnl.algorithm.eltwise_relu, md, md, 0.0, 0.0)
    dnnl.eltwise_forward(pd)
    assert not _outstanding()
    assert all(k.built for k in kernel_cache._mem_cache.values() if not k.failed)


def test_equal_sources_share_one_compilation(first_engine, fresh_cache, monkeypatch):
    """Two keys whose generated sources are equal (here: launch sizes differ) compile once
    and share one binary in the cache; a third key of that text, asked for later, loads it
    instead of compiling."""
    from pathlib import Path

    from pydnnl.runtime.heuristics.program_binaries import keeps_program_binaries
    from pydnnl.runtime.kernel import build_costs

    monkeypatch.delenv("PYOPENCL_NO_CACHE", raising=False)
    monkeypatch.delenv("PYDNNL_NO_KERNEL_CACHE", raising=False)
    name = f"scale13_{abs(hash(fresh_cache)) % 10**8}"  # a source no other test compiled

    def src(n):
        s = _scale_source(name, 13)
        return KernelSource(s.name, s.source, (n,), (1,), s.arg_names)

    before = build_costs()["programs_built"]
    k8 = kernel_cache.get_kernel(first_engine, "test_share", (fresh_cache, 8), lambda: src(8))
    k4 = kernel_cache.get_kernel(first_engine, "test_share", (fresh_cache, 4), lambda: src(4))
    kernel_cache.finish_pending()
    assert build_costs()["programs_built"] == before + 1
    assert k8.program is k4.program
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(_run(first_engine, k8, x), 13 * x)
    y = _run(first_engine, k4, x)
    np.testing.assert_array_equal(y[:4], 13 * x[:4])
    np.testing.assert_array_equal(y[4:], x[4:])
    # (PoCL keeps no binaries, heuristics.program_binaries: its third key shares the
    # program this process compiled)
    keeps = keeps_program_binaries(first_engine.info)
    assert len(list(Path(fresh_cache).glob("test_share-*.bin"))) == int(keeps)
    k2 = kernel_cache.get_kernel(first_engine, "test_share", (fresh_cache, 2), lambda: src(2))
    kernel_cache.finish_pending()
    assert k2.built_from == ("binary" if keeps else "source")
    assert build_costs()["programs_built"] == before + 1
    z = _run(first_engine, k2, x)
    np.testing.assert_array_equal(z[:2], 13 * x[:2])
    np.testing.assert_array_equal(z[2:], x[2:])


def test_a_failure_raised_at_first_use_is_not_raised_again_by_a_creation(first_engine,
                                                                        fresh_cache):
    """A kernel whose failed build its first use has raised (a tuning candidate that does
    not compile) is no concern of the next primitive's creation."""
    k = kernel_cache.get_kernel(first_engine, "test_broken", (fresh_cache, "used"),
                                lambda: _broken_source("broken_used"))
    with pytest.raises(runtime_error, match="broken_used: OpenCL build failed"):
        k.wait()
    kernel_cache.finish_pending()  # nothing to raise: already reported
