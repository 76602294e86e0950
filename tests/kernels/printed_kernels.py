"""Running a printed (loopy-free) kernel source once, for the tests that compare it with
loopy's kernel."""
from __future__ import annotations

import numpy as np
import pyopencl as cl

from pydnnl.kernels.source import KernelSource, launch_size


def run_source(engine, src: KernelSource, bufs: dict, values: dict) -> dict:
    """Run ``src`` once over copies of ``bufs`` (name -> array) with the scalar ``values``
    (int64); the arrays after the run."""
    ctx = engine.context
    queue = cl.CommandQueue(ctx, engine.device)
    prg = cl.Program(ctx, src.source).build()
    knl = getattr(prg, src.name)
    mf = cl.mem_flags
    dev = {k: cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=v.copy())
           for k, v in bufs.items()}
    args = [dev[n] if n in dev else np.int64(values[n]) for n in src.arg_names]
    knl(queue, launch_size(src, values), src.local_size, *args)
    out = {}
    for k, v in dev.items():
        out[k] = np.empty_like(bufs[k])
        cl.enqueue_copy(queue, out[k], v)
    queue.finish()
    return out
