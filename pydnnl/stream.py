"""Streams: ordered execution on an engine (``dnnl::stream``), with optional kernel profiling."""
from __future__ import annotations

import enum

from .engine import _cl
from .engine import engine as _engine
from .error import invalid_arguments


class stream:
    """``stream(engine, flags=stream.flags.in_order)``.

    ``flags.out_of_order`` lets independent primitives overlap (the caller orders dependent
    ones with ``wait()``; kernels inside one primitive stay ordered). ``flags.profiling`` records
    every kernel's device time; read it with ``get_kernel_times()`` after ``wait()``.
    """

    class flags(enum.IntFlag):
        in_order = 0x1
        out_of_order = 0x2
        default_flags = 0x1
        profiling = 0x4

    def __init__(self, engine: _engine, flags: "stream.flags" = 0x1):
        if not isinstance(engine, _engine):
            raise invalid_arguments(
                f"stream: engine must be a pydnnl.engine, got {type(engine).__name__}")
        try:
            flags = stream.flags(int(flags))
            if int(flags) & ~0x7:  # IntFlag keeps unknown bits instead of rejecting them
                raise ValueError
        except (ValueError, TypeError):
            raise invalid_arguments(
                f"stream: flags must be stream.flags values, got {flags!r}") from None
        if flags & stream.flags.in_order and flags & stream.flags.out_of_order:
            raise invalid_arguments("stream: flags in_order and out_of_order exclude each other")
        cl = _cl()
        props = 0
        if flags & stream.flags.out_of_order:
            if (engine.device.queue_properties
                    & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE):
                props |= cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
        if flags & stream.flags.profiling:
            props |= cl.command_queue_properties.PROFILING_ENABLE
        self._engine = engine
        self._flags = flags
        self.queue = cl.CommandQueue(engine.context, engine.device, properties=props)
        from .memory.pool import register_stream

        register_stream(engine.context, self)
        self._out_of_order = bool(props & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)
        self._profiling = bool(flags & stream.flags.profiling)
        self._records: list[tuple] = []

    def get_engine(self) -> _engine:
        return self._engine

    def get_flags(self) -> "stream.flags":
        return self._flags

    @property
    def out_of_order(self) -> bool:
        return self._out_of_order

    def wait(self) -> "stream":
        """Block until everything submitted to the stream has finished."""
        self.queue.finish()
        return self

    # -- profiling ------------------------------------------------------------------------------
    def record(self, name: str, event, size=None) -> None:
        """Remember a kernel event for profiling (no-op unless the stream profiles);
        ``size``: the launch's global size, kept for :meth:`get_kernel_profile`."""
        if self._profiling:
            self._records.append((name, event, size))

    def get_kernel_times(self, reset: bool = True) -> list[tuple[str, float]]:
        """``[(kernel name, device time in ms), ...]`` of the kernels run since the last reset."""
        if not self._profiling:
            raise invalid_arguments(
                "stream.get_kernel_times: create the stream with flags.profiling")
        self.wait()
        out = [(n, (e.profile.end - e.profile.start) * 1e-6) for n, e, _ in self._records]
        if reset:
            self._records.clear()
        return out

    def get_kernel_profile(self, reset: bool = True) -> list[tuple[str, tuple | None, float]]:
        """``[(kernel name, global size, device time in ms), ...]`` in launch order."""
        if not self._profiling:
            raise invalid_arguments(
                "stream.get_kernel_profile: create the stream with flags.profiling")
        self.wait()
        out = [(n, sz, (e.profile.end - e.profile.start) * 1e-6) for n, e, sz in self._records]
        if reset:
            self._records.clear()
        return out

    def __repr__(self) -> str:
        return f"stream({self._engine!r}, flags={self._flags!r})"
