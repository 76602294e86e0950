"""Host-scalar scales and zero points as the kernels read them: one-element device buffers.

oneDNN lets a scale or zero point be a value on the host (``memory.desc.host_scalar``). The
kernels here read every scale and zero point from a buffer (``float *src_scale``, ``int
*src_zp``), so a host value is given to them as an immutable one-element buffer holding it in
the kernels' type (scales f32, zero points s32). The buffer is made with the value copied in
at creation (``COPY_HOST_PTR``): no command is queued and nothing waits, and since it is never
written again no later execution can race with a kernel still reading it. One buffer serves
each distinct (argument, value); the most recent ones are kept, so a value that stays the
same from one execution to the next costs a dictionary look-up.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..constants import ARG_ATTR_ZERO_POINTS
from ..engine import _cl

#: distinct (argument, value) buffers a stage keeps
KEEP = 32


class HostScalarStage:
    """Device copies of the host-scalar arguments of one primitive's executions."""

    def __init__(self, keep: int = KEEP):
        self._keep = int(keep)
        self._bufs: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def device_args(self, args: dict, keys, engine_of) -> dict:
        """``args`` with the host-scalar memories under ``keys`` replaced by device memories
        holding their values: s32 under an ``ARG_ATTR_ZERO_POINTS`` key, f32 otherwise
        (scales); ``engine_of(arg)`` is the engine the argument's kernels run on."""
        out = dict(args)
        for a in keys:
            m = args.get(a)
            if m is not None:
                out[a] = self._device_memory(a, m.get_host_scalar_value(), engine_of(a))
        return out

    def _device_memory(self, arg: int, value, engine):
        from ..memory import memory
        from ..memory.data_types import data_type
        from ..memory.desc import MemoryDesc

        dt = data_type.s32 if arg & ARG_ATTR_ZERO_POINTS else data_type.f32
        host = np.array([value], dt.storage_dtype)
        key = (arg, engine, host.tobytes())
        with self._lock:
            m = self._bufs.get(key)
            if m is not None:
                self._bufs.move_to_end(key)
                return m
        cl = _cl()
        buf = cl.Buffer(engine.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                        hostbuf=host)
        m = memory(MemoryDesc([1], dt, "a"), engine, buf)
        with self._lock:
            self._bufs[key] = m
            while len(self._bufs) > self._keep:
                # a dropped buffer lives on in OpenCL until the commands using it finish
                self._bufs.popitem(last=False)
        return m
