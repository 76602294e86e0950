"""Memory objects: a device buffer plus the descriptor that says how to read it."""
from __future__ import annotations

import numpy as np

from ..engine import _cl
from ..engine import engine as _engine
from ..error import invalid_arguments
from .data_types import _INT_RANGE, data_type, from_storage, to_storage
from .desc import MemoryDesc, format_kind
from .format_tags import FormatTag, format_tag
from .pool import BufferPool

__all__ = ["memory", "MemoryDesc", "data_type", "format_tag", "format_kind", "FormatTag"]


class memory:
    """``memory(desc, engine)`` allocates; ``memory(desc, engine, array)`` also copies ``array``.

    ``array`` is a numpy array of shape ``desc.get_dims()``, laid out into whatever physical
    layout the desc has (plain, strided or blocked). A ``pyopencl.Buffer`` of at least
    ``desc.get_size()`` bytes may be passed instead to use it as the storage.

    ``memory(memory.desc.host_scalar(dt), value)`` holds one number on the host (oneDNN's
    host-scalar memory): no engine, no buffer; ``get_host_scalar_value()`` and
    ``set_host_scalar_value(v)`` read and replace it. It is passed at execute as a scale or
    zero point the attribute declared with ``set_host_scale`` / ``set_host_zero_point``.
    """

    desc = MemoryDesc
    data_type = data_type
    format_tag = format_tag
    format_kind = format_kind
    # how many times set_data_handle replaced the buffer: a primitive's validated-arguments
    # memo (primitives.base) compares it, since a new buffer may alias another argument
    _handle_gen = 0

    def __init__(self, desc: MemoryDesc, engine: _engine, data=None):
        if not isinstance(desc, MemoryDesc):
            raise invalid_arguments(
                f"memory: desc must be a memory.desc, got {type(desc).__name__}")
        if desc.is_host_scalar():
            if isinstance(engine, _engine) or data is not None:
                raise invalid_arguments(
                    f"memory: {desc!r} is a host scalar: expected memory(desc, value) with no "
                    f"engine, got {type(engine).__name__}"
                    + ("" if data is None else f" and {type(data).__name__}"))
            self._desc, self._engine = desc, None
            self._buffer, self._pooled = None, False
            self._value = _scalar_storage(desc.data_type, engine, "memory")
            return
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

    def get_engine(self) -> _engine | None:
        """The engine the buffer lives on; None for a host scalar."""
        return self._engine

    def is_host_scalar(self) -> bool:
        """Whether this memory holds a host scalar (``memory(desc.host_scalar(dt), value)``)."""
        return self._desc.is_host_scalar()

    def get_host_scalar_value(self):
        """The value of a host-scalar memory, as a numpy scalar of its type (bf16 as
        float32)."""
        self._need_host_scalar("get_host_scalar_value")
        return from_storage(self._value, self._desc.data_type)[0]

    def set_host_scalar_value(self, value) -> None:
        """Replace the value of a host-scalar memory (checked as at creation)."""
        self._need_host_scalar("set_host_scalar_value")
        self._value = _scalar_storage(self._desc.data_type, value,
                                      "memory.set_host_scalar_value")

    def _need_host_scalar(self, what: str) -> None:
        if not self._desc.is_host_scalar():
            raise invalid_arguments(f"memory.{what}: expected a host-scalar memory, got one of "
                                    f"{self._desc!r}")

    def _no_buffer(self, what: str) -> None:
        if self._desc.is_host_scalar():
            raise invalid_arguments(
                f"memory.{what}: {self._desc!r} lives on the host and has no device buffer; "
                f"use get_host_scalar_value() / set_host_scalar_value()")

    def get_data_handle(self):
        """The ``pyopencl.Buffer`` holding the data."""
        self._no_buffer("get_data_handle")
        return self._buffer

    def set_data_handle(self, buffer) -> None:
        """Use another ``pyopencl.Buffer`` (of at least ``get_desc().get_size()`` bytes)."""
        self._no_buffer("set_data_handle")
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
        self._handle_gen += 1

    @property
    def buffer(self):
        """The underlying ``pyopencl.Buffer``."""
        self._no_buffer("buffer")
        return self._buffer

    # -- host access ----------------------------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        """The logical array (shape ``dims``) read from the device, in any layout.

        bf16 values come back as float32; other types as their numpy type. Call
        ``stream.wait()`` first when kernels writing this memory may still run.
        """
        raw = self.read_raw()
        if self._desc.is_host_scalar():
            return from_storage(raw, self._desc.data_type)
        return from_storage(self._desc.unpack(raw), self._desc.data_type)

    def read_raw(self) -> np.ndarray:
        """The storage elements as laid out on the device (padding included)."""
        if self._desc.is_host_scalar():
            return self._value.copy()
        n = self._desc.nelems_physical()
        host = np.empty(n, dtype=self._desc.data_type.storage_dtype)
        if n:
            _cl().enqueue_copy(self._engine.default_queue, host, self._buffer, is_blocking=True)
        return host

    def write(self, array) -> None:
        """Copy a logical array (shape ``dims``) into the memory's layout."""
        if self._desc.is_host_scalar():
            arr = np.asarray(array)
            if arr.size != 1:
                raise invalid_arguments(f"memory.write: a host scalar takes one value, got an "
                                        f"array of shape {list(arr.shape)}")
            self.set_host_scalar_value(arr.reshape(-1)[0])
            return
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
        if self._desc.is_host_scalar():
            return f"memory({self._desc!r}, {self.get_host_scalar_value().item()!r})"
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


def _scalar_storage(dt: data_type, value, what: str) -> np.ndarray:
    """A host scalar's value checked against ``dt`` and stored as one element of its storage
    type: a real number; for an integer type, a whole number inside the type's range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise invalid_arguments(
            f"{what}: a host scalar of {dt.name} takes a real number, got {value!r} "
            f"({type(value).__name__})")
    if not dt.is_float:
        lo, hi = _INT_RANGE[dt]
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise invalid_arguments(
                f"{what}: a host scalar of {dt.name} takes a whole number, got {value!r}")
        if not lo <= int(value) <= hi:
            raise invalid_arguments(
                f"{what}: a host scalar of {dt.name} takes a value in [{lo}, {hi}], got {value!r}")
        return np.array([int(value)], dt.storage_dtype)
    return to_storage(np.array([value], np.float64 if dt == data_type.f64 else np.float32), dt)


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
