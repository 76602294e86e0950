"""Tensors between nodes: device memories in plain (row-major) f32 layouts, with their ONNX
shape and element type; views share the producer's buffer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from onnx import TensorProto

from .. import memory
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc

F32 = data_type.f32
FLOAT = TensorProto.FLOAT
BOOL = TensorProto.BOOL


def plain_strides(dims: Sequence[int]) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(dims):
        out.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(out))


def plain_md(shape: Sequence[int]) -> MemoryDesc:
    """Row-major f32 desc of an ONNX shape; a scalar (shape ``()``) is stored as ``[1]``."""
    dims = [int(d) for d in shape] or [1]
    return MemoryDesc(dims, F32, plain_strides(dims))


@dataclass
class Value:
    """One ONNX tensor on the device. ``base`` keeps the memory that owns a view's buffer."""

    mem: memory
    shape: tuple[int, ...]
    elem_type: int = FLOAT
    base: "Value | None" = None

    @property
    def md(self) -> MemoryDesc:
        return self.mem.get_desc()

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def view(self, shape: Sequence[int], md: MemoryDesc | None = None,
             elem_type: int | None = None) -> "Value":
        """The same bytes seen with another shape (row-major unless ``md`` is given)."""
        shape = tuple(int(d) for d in shape)
        md = plain_md(shape) if md is None else md
        mem = memory(md, self.mem.get_engine(), self.mem.get_data_handle())
        return Value(mem, shape, self.elem_type if elem_type is None else elem_type,
                     self.base or self)

    def ranked(self, rank: int) -> "Value":
        """A view with leading 1s up to ``rank`` dims (numpy broadcasting's alignment)."""
        if len(self.shape) == rank:
            return self
        return self.view((1,) * (rank - len(self.shape)) + self.shape)


def to_numpy(value: Value) -> np.ndarray:
    """The ONNX array of a device value (bool for comparisons)."""
    arr = value.mem.to_numpy().reshape(value.shape)
    if value.elem_type == BOOL:
        return arr != 0
    return arr
