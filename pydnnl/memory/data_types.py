"""Data types (``dnnl_data_type_t``) and their host-side numpy storage."""
from __future__ import annotations

import enum

import numpy as np


class data_type(enum.IntEnum):
    """Element type of a memory (oneDNN's values)."""

    undef = 0
    f16 = 1
    bf16 = 2
    f32 = 3
    s32 = 4
    s8 = 5
    u8 = 6
    f64 = 7

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def storage_dtype(self) -> np.dtype:
        """numpy dtype of the raw storage (bf16 is stored as uint16 bit patterns)."""
        return np.dtype(_STORAGE[self])

    @property
    def value_dtype(self) -> np.dtype:
        """numpy dtype ``memory.to_numpy()`` returns (bf16 values come back as float32)."""
        return np.dtype(_VALUE[self])

    @property
    def is_float(self) -> bool:
        return self in (data_type.f16, data_type.bf16, data_type.f32, data_type.f64)

    @property
    def cl_storage_type(self) -> str:
        """OpenCL C type of one stored element (f16 and bf16 are raw ``ushort``)."""
        return _CL[self]


_ITEMSIZE = {data_type.undef: 0, data_type.f16: 2, data_type.bf16: 2, data_type.f32: 4,
             data_type.s32: 4, data_type.s8: 1, data_type.u8: 1, data_type.f64: 8}
_STORAGE = {data_type.f16: np.float16, data_type.bf16: np.uint16, data_type.f32: np.float32,
            data_type.s32: np.int32, data_type.s8: np.int8, data_type.u8: np.uint8,
            data_type.f64: np.float64, data_type.undef: np.uint8}
_VALUE = {**_STORAGE, data_type.bf16: np.float32}
_CL = {data_type.f16: "ushort", data_type.bf16: "ushort", data_type.f32: "float",
       data_type.s32: "int", data_type.s8: "char", data_type.u8: "uchar", data_type.f64: "double",
       data_type.undef: "uchar"}

_INT_RANGE = {data_type.s8: (-128, 127), data_type.u8: (0, 255),
              data_type.s32: (-2147483648, 2147483647)}


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (round to nearest even), returned as uint16 bit patterns."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + (((u >> 16) & 1) + 0x7FFF)) >> 16
    nan = np.isnan(x)
    out = rounded.astype(np.uint16)
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # keep NaN a quiet NaN
    return out


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 exactly."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_storage(values: np.ndarray, dt: data_type) -> np.ndarray:
    """Convert logical values to dt's storage: round floats, saturate and round integers."""
    if dt == data_type.bf16:
        return f32_to_bf16_bits(np.asarray(values, dtype=np.float32))
    if dt in _INT_RANGE:
        v = np.asarray(values)
        if v.dtype.kind == "f":
            lo, hi = _INT_RANGE[dt]
            v = np.clip(np.rint(v), lo, hi)
        return v.astype(dt.storage_dtype)
    return np.asarray(values).astype(dt.storage_dtype)


def from_storage(raw: np.ndarray, dt: data_type) -> np.ndarray:
    """Convert dt's storage back to values (bf16 widens to float32)."""
    if dt == data_type.bf16:
        return bf16_bits_to_f32(raw)
    return raw


def as_data_type(x) -> data_type:
    """Accept a ``data_type``, its name, or a numpy dtype; raise ``invalid_arguments`` otherwise."""
    from ..error import invalid_arguments

    if isinstance(x, data_type):
        return x
    if isinstance(x, str) and x in data_type.__members__:
        return data_type[x]
    if isinstance(x, int) and not isinstance(x, bool):
        try:
            return data_type(x)
        except ValueError:
            pass
    try:
        npdt = np.dtype(x)
    except TypeError:
        npdt = None
    by_np = {np.dtype(np.float32): data_type.f32, np.dtype(np.float16): data_type.f16,
             np.dtype(np.int32): data_type.s32, np.dtype(np.int8): data_type.s8,
             np.dtype(np.uint8): data_type.u8, np.dtype(np.float64): data_type.f64}
    if npdt is not None and npdt in by_np:
        return by_np[npdt]
    raise invalid_arguments(
        "data_type: expected one of "
        f"{', '.join(m for m in data_type.__members__ if m != 'undef')}, "
        f"got {x!r}")
