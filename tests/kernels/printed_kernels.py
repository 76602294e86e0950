"""Running a printed (loopy-free) kernel source once, for the tests that compare it with
loopy's kernel."""
from __future__ import annotations

import functools
import re

import numpy as np
import pyopencl as cl

from pydnnl.kernels.source import (
    KernelSource,
    _signature_params,
    launch_size,
    local_launch_size,
    scalar_types,
)


def run_source(engine, src: KernelSource, bufs: dict, values: dict) -> dict:
    """Run ``src`` once over copies of ``bufs`` (name -> array) with the scalar ``values``
    (as the kernel declares them: int or long); the arrays after the run."""
    ctx = engine.context
    queue = cl.CommandQueue(ctx, engine.device)
    prg = cl.Program(ctx, src.source).build()
    knl = getattr(prg, src.name)
    mf = cl.mem_flags
    dev = {k: cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=v.copy())
           for k, v in bufs.items()}
    args = [dev[n] if n in dev else (typ or np.int64)(values[n])
            for n, typ in zip(src.arg_names, scalar_types(src))]
    knl(queue, launch_size(src, values), local_launch_size(src, values), *args)
    out = {}
    for k, v in dev.items():
        out[k] = np.empty_like(bufs[k])
        cl.enqueue_copy(queue, out[k], v)
    queue.finish()
    return out


def declared_types(src: KernelSource) -> tuple[str, ...]:
    """The parameter declarations of ``src`` without their names."""
    return tuple(re.sub(r"\s*\b\w+$", "", q) for q in _signature_params(src.source, src.name))


@functools.lru_cache(maxsize=None)
def same_loopy_version() -> bool:
    """Whether the installed loopy stack is the one the printers' texts were recorded
    against (``test_codegen_unchanged.VERSIONS``)."""
    from importlib.metadata import version

    from test_codegen_unchanged import VERSIONS

    return all(version(k) == v for k, v in VERSIONS.items())


def printed_and_loopy(p, printer, build, build_loopy) -> tuple[KernelSource, KernelSource]:
    """``(printed, loopy's)`` sources of problem ``p``: the printer must cover it, and the
    family's builder must hand out the printed one."""
    from pydnnl.kernels.source import source_from_loopy

    ours = printer(p)
    assert ours is not None
    assert build(p) == ours
    return ours, source_from_loopy(build_loopy(p))


def packer_case(case) -> tuple:
    """``(packer, panels, span of B)`` of a B-packer case ``(n, k, ldb, trans_b, count,
    stride_b, width)``: the family's ``BPacking`` of ``count`` float32 B with run-time
    offsets into panels of ``width`` columns, its panel count, and the elements its B span."""
    from pydnnl.kernels import gemm as fam

    n, k, ldb, tb, count, stride, width = case
    src = fam.GemmProblem(m=1, n=n, k=k, ldb=ldb, trans_b=tb, batch=count,
                          stride_b=None if count == 1 else stride, runtime_offsets=True)
    params = dict(fam.normalize_params(None), cols=width, packed_b=True)
    span = (count - 1) * stride + (n * ldb if tb else k * ldb)
    return fam.pack_b(src, params), -(-n // width), span
