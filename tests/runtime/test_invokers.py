"""pyopencl's kernel invokers are looked up once per process (``runtime/invokers.py``): a
second ``cl.Kernel`` of one signature does not read pyopencl's disk cache again, and kernels
still launch through pyopencl's invoker with the right results."""
from __future__ import annotations

import numpy as np
import pyopencl as cl
from pyopencl import invoker

from pydnnl.runtime.invokers import memoize


class _Spy(dict):
    """pyopencl's invoker cache, counting the lookups (always a miss: generated anew)."""

    lookups = 0

    def __getitem__(self, key):
        _Spy.lookups += 1
        raise KeyError(key)

    def store_if_not_present(self, key, value):
        pass


def test_second_kernel_reads_no_cache(first_engine, monkeypatch):
    memoize()
    monkeypatch.setattr(invoker, "invoker_cache", _Spy())
    name = f"pd_invoker_probe_{id(monkeypatch) % 10**8}"  # a signature no test made before
    src = (f"__kernel void {name}(__global float *a, __global const float *b, long n, "
           "float s) { a[get_global_id(0)] = s * b[get_global_id(0)] + n; }")
    prg = cl.Program(first_engine.context, src).build()
    before = _Spy.lookups
    cl.Kernel(prg, name)
    k = cl.Kernel(prg, name)
    assert _Spy.lookups - before == 1
    ctx, q = first_engine.context, cl.CommandQueue(first_engine.context, first_engine.device)
    b = np.arange(4, dtype=np.float32)
    mf = cl.mem_flags
    a_buf = cl.Buffer(ctx, mf.READ_WRITE, b.nbytes)
    b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    k.set_scalar_arg_dtypes([None, None, np.int64, np.float32])
    k(q, (4,), None, a_buf, b_buf, 3, 0.5)
    out = np.empty_like(b)
    cl.enqueue_copy(q, out, a_buf)
    q.finish()
    np.testing.assert_array_equal(out, 0.5 * b + 3)


def test_kernel_of_a_binary_program_asks_no_other_kernel(first_engine, tmp_path, monkeypatch):
    """A program read from a binary has no ``_source``; pyopencl's ``Kernel`` reads it, and
    without it ``Program.__getattr__`` would try (and fail) to create a kernel named
    ``_source`` each time (``runtime/kernel.py``: ``_no_source``)."""
    from pydnnl.kernels.source import KernelSource
    from pydnnl.runtime.kernel import Kernel

    name = f"pd_binary_probe_{id(tmp_path) % 10**8}"
    src = KernelSource(name, f"__kernel void {name}(__global float *a) {{ a[0] = 2.0f; }}",
                       (1,), None, ("a",))
    path = tmp_path / "probe.bin"
    ctx, dev = first_engine.context, first_engine.device
    Kernel(ctx, dev, src, binary_path=path).wait()  # compiles and keeps the binary
    if not path.exists():
        import pytest
        pytest.skip("this runtime gives no program binaries")
    loaded = Kernel(ctx, dev, src, binary_path=path)
    assert loaded.built_from == "binary"
    asked = []
    real = cl.Program.__getattr__
    monkeypatch.setattr(cl.Program, "__getattr__",
                        lambda self, attr: asked.append(attr) or real(self, attr))
    k = cl.Kernel(loaded.program, name)
    assert asked == []
    q = cl.CommandQueue(ctx, dev)
    a = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4)
    k.set_arg(0, a)
    cl.enqueue_nd_range_kernel(q, k, (1,), None)
    out = np.zeros(1, np.float32)
    cl.enqueue_copy(q, out, a)
    q.finish()
    assert out[0] == 2.0
