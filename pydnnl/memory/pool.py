"""A per-device pool of freed buffers, so repeated allocations (workspaces) are cheap.

A buffer returns to the pool when its memory object is garbage-collected, as in oneDNN the
caller keeps a memory alive while kernels that use it may still run.
"""
from __future__ import annotations

import threading
import weakref
from collections import defaultdict

from ..error import out_of_memory


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
            if lst:
                self._held -= nbytes
                self.hits += 1
                return lst.pop()
            self.misses += 1
        cl = _cl()
        try:
            return cl.Buffer(self._context, cl.mem_flags.READ_WRITE, nbytes)
        except cl.Error as e:
            raise out_of_memory(f"memory: could not allocate {nbytes} bytes on the device: {e}") from None

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
