"""A per-device pool of freed buffers, so repeated allocations (workspaces) are cheap.

A buffer returns to the pool when its memory object is garbage-collected. Python makes it easy
to drop a memory while a kernel that reads it is still queued, so before a freed buffer is
handed out again every live stream of the device is drained: reuse can never race with work
submitted earlier.
"""
from __future__ import annotations

import threading
import weakref
from collections import defaultdict

from ..error import out_of_memory

# context -> streams alive on it
_LIVE_STREAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def register_stream(context, stream) -> None:
    """Make the pool drain ``stream`` before reusing a freed buffer of ``context``."""
    with BufferPool._lock:
        ss = _LIVE_STREAMS.get(context)
        if ss is None:
            ss = _LIVE_STREAMS[context] = weakref.WeakSet()
        ss.add(stream)


class BufferPool:
    """Free buffers of one engine's context, by size in bytes."""

    _pools: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, context, max_bytes: int):
        self._context = context
        self._free: dict[int, list] = defaultdict(list)
        self._held = 0
        self._max = max_bytes
        self.hits = 0
        self.misses = 0

    @classmethod
    def of(cls, engine) -> "BufferPool":
        ctx = engine.context
        with cls._lock:
            pool = cls._pools.get(ctx)
            if pool is None:
                pool = cls(ctx, max(64 << 20, engine.info.global_mem_bytes // 8))
                cls._pools[ctx] = pool
            return pool

    def take(self, nbytes: int):
        from ..engine import _cl

        with self._lock:
            lst = self._free.get(nbytes)
            buf = lst.pop() if lst else None
            if buf is not None:
                self._held -= nbytes
                self.hits += 1
            else:
                self.misses += 1
        if buf is not None:
            self._drain()
            return buf
        cl = _cl()
        try:
            return cl.Buffer(self._context, cl.mem_flags.READ_WRITE, nbytes)
        except cl.Error as e:
            raise out_of_memory(
                f"memory: could not allocate {nbytes} bytes on the device: {e}") from None

    def _drain(self) -> None:
        """Finish every live stream of this context (see the module docstring)."""
        for st in list(_LIVE_STREAMS.get(self._context, ())):
            st.queue.finish()

    def give(self, buf) -> None:
        n = buf.size
        with self._lock:
            if self._held + n <= self._max:
                self._free[n].append(buf)
                self._held += n

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._held = 0
