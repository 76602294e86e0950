"""Memory objects: a device buffer plus the descriptor that says how to read it."""
from __future__ import annotations

import numpy as np

from ..engine import _cl
from ..engine import engine as _engine
from ..error import invalid_arguments
from .data_types import data_type, from_storage, to_storage
from .desc import MemoryDesc, format_kind
from .format_tags import FormatTag, format_tag
from .pool import BufferPool

__all__ = ["memory", "MemoryDesc", "data_type", "format_tag", "format_kind", "FormatTag"]


class memory:
    """``memory(desc, engine)`` allocates; ``memory(desc, engine, array)`` also copies ``array``.

    ``array`` is a numpy array of shape ``desc.get_dims()``, laid out into whatever physical
    layout the desc has (plain, strided or blocked). A ``pyopencl.Buffer`` of at least
    ``desc.get_size()`` bytes may be passed instead to use it as the storage.
    """

    desc = MemoryDesc
    data_type = data_type
    format_tag = format_tag
    format_kind = format_kind

    def __init__(self, desc: MemoryDesc, engine: _engine, data=None):
        if not isinstance(desc, MemoryDesc):
            raise invalid_arguments(
                f"memory: desc must be a memory.desc, got {type(desc).__name__}")
        if not isinstance(engine, _engine):
            raise invalid_arguments(
                f"memory: engine must be a pydnnl.engine, got {type(engine).__name__}")
        desc._require_concrete("memory")
        cl = _cl()
        values = None
        if isinstance(data, cl.MemoryObjectHolder):
            if data.size < desc.get_size():
                raise invalid_arguments(
                    f"memory: the buffer holds {data.size} bytes, {desc!r} needs {desc.get_size()}")
            self._buffer, self._pooled = data, False
        else:
            if data is not None:
                values = _check_values(desc, data, "memory")
            self._buffer = BufferPool.of(engine).take(max(desc.get_size(), 1))
            self._pooled = True
        self._desc = desc
        self._engine = engine
        if values is not None:
            self._write_values(values)

    # -- oneDNN API ------------------------------------------------------------------------------
    def get_desc(self) -> MemoryDesc:
        return self._desc

    def get_engine(self) -> _engine:
        return self._engine

    def get_data_handle(self):
        """The ``pyopencl.Buffer`` holding the data."""
        return self._buffer

    def set_data_handle(self, buffer) -> None:
        """Use another ``pyopencl.Buffer`` (of at least ``get_desc().get_size()`` bytes)."""
        if not isinstance(buffer, _cl().MemoryObjectHolder):
            raise invalid_arguments(
                f"memory.set_data_handle: expected a pyopencl.Buffer, "
                f"got {type(buffer).__name__}")
        if buffer.size < self._desc.get_size():
            raise invalid_arguments(
                f"memory.set_data_handle: the buffer holds {buffer.size} bytes, {self._desc!r} "
                f"needs {self._desc.get_size()}")
        self._release()
        self._buffer, self._pooled = buffer, False

    @property
    def buffer(self):
        """The underlying ``pyopencl.Buffer``."""
        return self._buffer

    # -- host access ----------------------------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        """The logical array (shape ``dims``) read from the device, in any layout.

        bf16 values come back as float32; other types as their numpy type. Call
        ``stream.wait()`` first when kernels writing this memory may still run.
        """
        raw = self.read_raw()
        return from_storage(self._desc.unpack(raw), self._desc.data_type)

    def read_raw(self) -> np.ndarray:
        """The storage elements as laid out on the device (padding included)."""
        n = self._desc.nelems_physical()
        host = np.empty(n, dtype=self._desc.data_type.storage_dtype)
        if n:
            _cl().enqueue_copy(self._engine.default_queue, host, self._buffer, is_blocking=True)
        return host

    def write(self, array) -> None:
        """Copy a logical array (shape ``dims``) into the memory's layout."""
        self._write_values(_check_values(self._desc, array, "memory.write"))

    def _write_values(self, values: np.ndarray) -> None:
        d = self._desc
        if d.offset0 == 0 and d.is_dense():
            flat = d.pack(values)
        else:  # a view into a larger buffer (submemory, gaps): keep the bytes around it
            flat = self.read_raw()
            flat[d.element_offsets()] = values
        if flat.size:
            _cl().enqueue_copy(self._engine.default_queue, self._buffer, flat, is_blocking=True)

    def __array__(self, dtype=None, copy=None):
        a = self.to_numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        return f"memory({self._desc!r}, {self._engine!r})"

    # -- lifetime -------------------------------------------------------------------------------
    def _release(self) -> None:
        if getattr(self, "_pooled", False):
            BufferPool.of(self._engine).give(self._buffer)
            self._pooled = False

    def __del__(self):
        try:
            self._release()
        except Exception:  # interpreter shutdown
            pass


def _check_values(desc: MemoryDesc, data, what: str) -> np.ndarray:
    """Validate an array against a desc and convert it to the desc's storage type."""
    try:
        arr = np.asarray(data)
    except Exception:
        raise invalid_arguments(
            f"{what}: expected a numpy array, got {type(data).__name__}") from None
    if tuple(arr.shape) != tuple(desc.dims):
        raise invalid_arguments(
            f"{what}: array shape {list(arr.shape)} differs from the desc's dims {list(desc.dims)}")
    dt = desc.data_type
    if arr.dtype.kind not in "fiub" or arr.dtype.kind == "b":
        raise invalid_arguments(
            f"{what}: array dtype {arr.dtype} cannot be stored as {dt.name}; expected a real "
            f"numeric array")
    if not dt.is_float and arr.dtype.kind == "f":
        raise invalid_arguments(
            f"{what}: array dtype {arr.dtype} is floating point but the memory is {dt.name}; "
            f"convert it first or quantize with a reorder and scales")
    return to_storage(arr, dt)
