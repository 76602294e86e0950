"""What every MIOpen entry point shares: errors, handles, tensor descriptors, memory views.

Conventions (the translation of MIOpen's C calling convention):

* a function's arguments are MIOpen's, in MIOpen's order; ``NULL`` is ``None``; arrays are
  lists;
* pointer arguments MIOpen writes a scalar or struct through are dropped and returned (several
  as a tuple, in argument order); success returns ``None`` when nothing is returned;
* device memory is any :class:`pydnnl.memory` on the handle's engine: only its buffer and its
  size in bytes matter, the tensor descriptor says how the bytes are read;
* a failing call raises :class:`MIOpenError` with the ``miopenStatus_t`` MIOpen returns, before
  any output is written.
"""
from __future__ import annotations

import functools
import math
import os
from collections import OrderedDict

import numpy as np

from ...engine import engine as _engine
from ...error import error, invalid_arguments, out_of_memory, unimplemented
from ...memory import memory
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ...stream import stream as _stream
from ._enums import miopenDataType_t, miopenStatus_t

S = miopenStatus_t


class MIOpenError(error):
    """A MIOpen call failed; ``status`` is the ``miopenStatus_t`` MIOpen would return."""

    def __init__(self, status: miopenStatus_t, message: str):
        super().__init__(f"{message} [{miopenStatus_t(status).name}]")
        self.status = miopenStatus_t(status)


def fail(status: miopenStatus_t, message: str):
    raise MIOpenError(status, message)


def bad(message: str):
    raise MIOpenError(S.miopenStatusBadParm, message)


def api(fn):
    """Run a MIOpen entry point, turning pydnnl's errors into :class:`MIOpenError`."""

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        try:
            return fn(*args, **kw)
        except MIOpenError:
            raise
        except invalid_arguments as e:
            raise MIOpenError(S.miopenStatusBadParm, f"{fn.__name__}: {e}") from e
        except unimplemented as e:
            raise MIOpenError(S.miopenStatusNotImplemented, f"{fn.__name__}: {e}") from e
        except out_of_memory as e:
            raise MIOpenError(S.miopenStatusAllocFailed, f"{fn.__name__}: {e}") from e
        except error as e:
            raise MIOpenError(S.miopenStatusUnknownError, f"{fn.__name__}: {e}") from e

    return wrapper


@api
def miopenGetErrorString(error: miopenStatus_t) -> str:
    """The name of a status code."""
    try:
        return miopenStatus_t(error).name
    except ValueError:
        return "Unknown error"


# -- argument checks -----------------------------------------------------------------------------
def check_int(where: str, name: str, v, lo: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        bad(f"{where}: {name} must be an int, got {v!r}")
    v = int(v)
    if lo is not None and v < lo:
        bad(f"{where}: {name} must be >= {lo}, got {v}")
    return v


def check_ints(where: str, name: str, vals, n: int | None = None,
               lo: int | None = None) -> tuple[int, ...]:
    if not isinstance(vals, (list, tuple, np.ndarray)):
        bad(f"{where}: {name} must be a list of ints, got {vals!r}")
    out = tuple(check_int(where, f"{name}[{i}]", v, lo) for i, v in enumerate(vals))
    if n is not None and len(out) != n:
        bad(f"{where}: {name} must have {n} entries, got {len(out)} ({list(out)})")
    return out


def check_enum(where: str, name: str, cls, v):
    if isinstance(v, bool):
        bad(f"{where}: {name} must be a {cls.__name__}, got {v!r}")
    try:
        return cls(v)
    except (ValueError, TypeError):
        bad(f"{where}: {name} must be a {cls.__name__} "
            f"({', '.join(f'{m.name}={m.value}' for m in cls)}), got {v!r}")


def check_scalar(where: str, name: str, v) -> float:
    """A host scaling factor (MIOpen reads a float through the pointer)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        bad(f"{where}: {name} must be a number, got {v!r}")
    v = float(np.float32(v))
    if not math.isfinite(v):
        bad(f"{where}: {name} must be finite, got {v}")
    return v


# -- handles -------------------------------------------------------------------------------------
class Handle:
    """``miopenHandle_t``: a device (``engine``) and the stream MIOpen calls enqueue on.

    It also keeps what repeated calls reuse: primitives built for a problem, scratch tensors,
    constant tensors, and the solver parameters Find measured.
    """

    _CAPACITY = 128

    def __init__(self, s: _stream):
        self._stream = s
        self._destroyed = False
        self._reset()

    def _reset(self) -> None:
        self._prims: OrderedDict = OrderedDict()
        self._temps: dict = {}
        self.find_params: dict = {}

    @property
    def engine(self) -> _engine:
        return self._stream.get_engine()

    @property
    def stream(self) -> _stream:
        return self._stream

    def cached(self, key, make):
        """``make()`` once per ``key`` (primitives and their descriptors)."""
        hit = self._prims.get(key)
        if hit is None:
            hit = make()
            self._prims[key] = hit
            if len(self._prims) > self._CAPACITY:
                self._prims.popitem(last=False)
        else:
            self._prims.move_to_end(key)
        return hit

    def forget(self, prefix) -> None:
        """Drop cached primitives whose key starts with ``prefix`` (Find changed their choice)."""
        for k in [k for k in self._prims if k[:len(prefix)] == prefix]:
            del self._prims[k]

    def temp(self, key, md: MemoryDesc, values: np.ndarray | None = None) -> memory:
        """A memory kept for the handle's lifetime: work reading it stays ordered on the
        handle's stream, so reusing it in a later call is safe. ``values`` are written once."""
        m = self._temps.get(key)
        if m is None:
            m = memory(md, self.engine, values)
            self._temps[key] = m
        return m

    def __repr__(self) -> str:
        return f"miopenHandle({self.engine!r}{', destroyed' if self._destroyed else ''})"


miopenHandle_t = Handle


def check_handle(where: str, handle) -> Handle:
    if not isinstance(handle, Handle):
        bad(f"{where}: handle must be a miopenHandle_t from miopenCreate, got {handle!r}")
    if handle._destroyed:
        bad(f"{where}: the handle was destroyed (miopenDestroy)")
    return handle


def _check_stream(where: str, s) -> _stream:
    if not isinstance(s, _stream):
        bad(f"{where}: stream must be a pydnnl.stream, got {s!r}")
    if s.out_of_order:
        # one MIOpen call may run several primitives that must follow each other
        bad(f"{where}: the stream must be in-order (MIOpen streams are); got an out-of-order "
            f"stream")
    return s


def _default_engine() -> _engine:
    """The first GPU when there is one (MIOpen is a GPU library), else the default CPU;
    ``PYDNNL_DEVICE`` decides when set."""
    if os.environ.get("PYDNNL_DEVICE", "").strip():
        return _engine(_engine.kind.any, 0)
    if _engine.get_count(_engine.kind.gpu):
        return _engine(_engine.kind.gpu, 0)
    return _engine(_engine.kind.cpu, 0)


@api
def miopenCreate() -> Handle:
    """A handle on the default device with a new in-order stream."""
    return Handle(_stream(_default_engine()))


@api
def miopenCreateWithStream(stream: _stream) -> Handle:
    """A handle enqueueing on ``stream`` (a :class:`pydnnl.stream`, in-order)."""
    return Handle(_check_stream("miopenCreateWithStream", stream))


@api
def miopenDestroy(handle: Handle) -> None:
    check_handle("miopenDestroy", handle)
    handle._reset()
    handle._destroyed = True


@api
def miopenGetStream(handle: Handle) -> _stream:
    return check_handle("miopenGetStream", handle).stream


@api
def miopenSetStream(handle: Handle, streamID: _stream) -> None:
    """Enqueue later calls on ``streamID``; a stream of another device moves the handle there."""
    h = check_handle("miopenSetStream", handle)
    s = _check_stream("miopenSetStream", streamID)
    if s.get_engine() != h.engine:
        h._reset()
    h._stream = s


# -- tensor descriptors --------------------------------------------------------------------------
_DT = {miopenDataType_t.miopenHalf: data_type.f16, miopenDataType_t.miopenFloat: data_type.f32,
       miopenDataType_t.miopenInt32: data_type.s32, miopenDataType_t.miopenInt8: data_type.s8,
       miopenDataType_t.miopenBFloat16: data_type.bf16,
       miopenDataType_t.miopenDouble: data_type.f64}
_ITEMSIZE = {miopenDataType_t.miopenHalf: 2, miopenDataType_t.miopenFloat: 4,
             miopenDataType_t.miopenInt32: 4, miopenDataType_t.miopenInt8: 1,
             miopenDataType_t.miopenBFloat16: 2, miopenDataType_t.miopenDouble: 8,
             miopenDataType_t.miopenFloat8: 1, miopenDataType_t.miopenBFloat8: 1,
             miopenDataType_t.miopenInt64: 8}


def packed_strides(dims) -> tuple[int, ...]:
    out, s = [], 1
    for d in reversed(dims):
        out.append(s)
        s *= d
    return tuple(reversed(out))


class TensorDescriptor:
    """``miopenTensorDescriptor_t``: element type, lengths and strides (in elements)."""

    def __init__(self):
        self.data_type: miopenDataType_t | None = None
        self.dims: tuple[int, ...] = ()
        self.strides: tuple[int, ...] = ()
        self._destroyed = False

    @property
    def is_set(self) -> bool:
        return self.data_type is not None

    def element_space(self) -> int:
        """Elements from the first to one past the last (MIOpen's ``GetElementSpace``)."""
        return sum((d - 1) * s for d, s in zip(self.dims, self.strides)) + 1

    def num_bytes(self) -> int:
        return self.element_space() * _ITEMSIZE[self.data_type]

    def _set(self, dt, dims, strides) -> None:
        self.data_type, self.dims, self.strides = dt, tuple(dims), tuple(strides)

    def __repr__(self) -> str:
        if not self.is_set:
            return "miopenTensorDescriptor(unset)"
        return (f"miopenTensorDescriptor({self.data_type.name}, dims={list(self.dims)}, "
                f"strides={list(self.strides)})")


miopenTensorDescriptor_t = TensorDescriptor


def check_tensor(where: str, name: str, desc) -> TensorDescriptor:
    if not isinstance(desc, TensorDescriptor):
        bad(f"{where}: {name} must be a miopenTensorDescriptor_t, got {desc!r}")
    if desc._destroyed:
        bad(f"{where}: {name} was destroyed")
    if not desc.is_set:
        bad(f"{where}: {name} is not set (call miopenSet4dTensorDescriptor or "
            f"miopenSetTensorDescriptor first)")
    return desc


def _check_desc_arg(where: str, desc) -> TensorDescriptor:
    if not isinstance(desc, TensorDescriptor):
        bad(f"{where}: tensorDesc must be a miopenTensorDescriptor_t, got {desc!r}")
    if desc._destroyed:
        bad(f"{where}: tensorDesc was destroyed")
    return desc


@api
def miopenCreateTensorDescriptor() -> TensorDescriptor:
    return TensorDescriptor()


@api
def miopenSet4dTensorDescriptor(tensorDesc: TensorDescriptor, dataType: miopenDataType_t,
                                n: int, c: int, h: int, w: int) -> None:
    """A packed NCHW tensor."""
    where = "miopenSet4dTensorDescriptor"
    d = _check_desc_arg(where, tensorDesc)
    dt = check_enum(where, "dataType", miopenDataType_t, dataType)
    dims = tuple(check_int(where, k, v, 1) for k, v in zip("nchw", (n, c, h, w)))
    d._set(dt, dims, packed_strides(dims))


@api
def miopenSetTensorDescriptor(tensorDesc: TensorDescriptor, dataType: miopenDataType_t,
                              nbDims: int, dimsA, stridesA=None) -> None:
    """A tensor of ``nbDims`` lengths; ``stridesA`` ``None`` means packed (row-major)."""
    where = "miopenSetTensorDescriptor"
    d = _check_desc_arg(where, tensorDesc)
    dt = check_enum(where, "dataType", miopenDataType_t, dataType)
    nb = check_int(where, "nbDims", nbDims, 1)
    dims = check_ints(where, "dimsA", dimsA, nb, 1)
    strides = packed_strides(dims) if stridesA is None else check_ints(where, "stridesA",
                                                                       stridesA, nb, 1)
    d._set(dt, dims, strides)


@api
def miopenGet4dTensorDescriptor(tensorDesc: TensorDescriptor) -> tuple:
    """``(dataType, n, c, h, w, nStride, cStride, hStride, wStride)``."""
    where = "miopenGet4dTensorDescriptor"
    d = check_tensor(where, "tensorDesc", tensorDesc)
    if len(d.dims) != 4:
        bad(f"{where}: tensorDesc has {len(d.dims)} dims {list(d.dims)}, expected 4")
    return (d.data_type, *d.dims, *d.strides)


@api
def miopenGetTensorDescriptorSize(tensorDesc: TensorDescriptor) -> int:
    """The number of dimensions."""
    return len(check_tensor("miopenGetTensorDescriptorSize", "tensorDesc", tensorDesc).dims)


@api
def miopenGetTensorDescriptor(tensorDesc: TensorDescriptor) -> tuple:
    """``(dataType, dimsA, stridesA)``."""
    d = check_tensor("miopenGetTensorDescriptor", "tensorDesc", tensorDesc)
    return d.data_type, list(d.dims), list(d.strides)


@api
def miopenGetTensorNumBytes(tensorDesc: TensorDescriptor) -> int:
    """Bytes a memory must hold for the tensor (strides included)."""
    return check_tensor("miopenGetTensorNumBytes", "tensorDesc", tensorDesc).num_bytes()


@api
def miopenDestroyTensorDescriptor(tensorDesc: TensorDescriptor) -> None:
    _check_desc_arg("miopenDestroyTensorDescriptor", tensorDesc)._destroyed = True


# -- device memory -------------------------------------------------------------------------------
def memory_bytes(mem: memory) -> int:
    """The bytes a user memory provides (its descriptor's size)."""
    return mem.get_desc().get_size()


def check_memory(where: str, name: str, handle: Handle, mem, required: bool = True):
    """A user memory argument: ``None`` (``NULL``) only where allowed, on the handle's device,
    not itself a view with an offset (its bytes start at the buffer's start)."""
    if mem is None:
        if required:
            bad(f"{where}: {name} is NULL")
        return None
    if not isinstance(mem, memory):
        bad(f"{where}: {name} must be a pydnnl.memory, got {type(mem).__name__}")
    if mem.get_engine() != handle.engine:
        bad(f"{where}: {name} lives on {mem.get_engine()!r}, the handle on {handle.engine!r}")
    if mem.get_desc().offset0 != 0:
        bad(f"{where}: {name} is a view with an offset; pass a memory whose bytes start at its "
            f"buffer's start")
    return mem


def pydnnl_type(where: str, name: str, dt: miopenDataType_t) -> data_type:
    t = _DT.get(dt)
    if t is None:
        fail(S.miopenStatusNotImplemented, f"{where}: {name} has type {dt.name}, which pydnnl "
                                           f"does not implement")
    return t


def view(where: str, name: str, handle: Handle, md: MemoryDesc, mem: memory) -> memory:
    """``mem``'s bytes read through ``md`` (a pydnnl memory sharing the buffer)."""
    need, have = md.get_size(), memory_bytes(mem)
    if have < need:
        bad(f"{where}: {name} holds {have} bytes, its descriptor {list(md.dims)} with strides "
            f"{list(md.strides)} needs {need}")
    return memory(md, handle.engine, mem.buffer)


def tensor_md(where: str, name: str, desc: TensorDescriptor, dims=None,
              strides=None) -> MemoryDesc:
    """A pydnnl memory desc of a MIOpen tensor (optionally relabelled ``dims``/``strides``)."""
    dt = pydnnl_type(where, name, desc.data_type)
    return MemoryDesc(desc.dims if dims is None else dims, dt,
                      desc.strides if strides is None else strides)


__all__ = ["MIOpenError", "miopenHandle_t", "miopenTensorDescriptor_t", "miopenGetErrorString",
           "miopenCreate", "miopenCreateWithStream", "miopenDestroy", "miopenGetStream",
           "miopenSetStream", "miopenCreateTensorDescriptor", "miopenSet4dTensorDescriptor",
           "miopenSetTensorDescriptor", "miopenGet4dTensorDescriptor",
           "miopenGetTensorDescriptorSize", "miopenGetTensorDescriptor",
           "miopenGetTensorNumBytes", "miopenDestroyTensorDescriptor"]
