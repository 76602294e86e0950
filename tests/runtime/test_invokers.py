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
