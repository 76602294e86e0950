"""Dropout launchers: the Philox kernels of :mod:`pydnnl.kernels.dropout` compiled for an
engine, with every argument validated before a launch.

Plans add a launch with ``plan.launch(launcher.kernel, launcher.ordered(...))``; buffers may
then be placeholders resolved per execution.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..error import invalid_arguments
from ..kernels.dropout import BWD_ARGS, FWD_ARGS, WG, dropout_source
from ..philox import check_u64, dropout_scale, dropout_threshold
from .kernel_cache import get_kernel


def _check_dim(value, name: str, who: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise invalid_arguments(f"{who}: {name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _check_view(who: str, rows, cols, ld_a, ld_b, names: tuple[str, str]):
    rows = _check_dim(rows, "rows", who, 1)
    cols = _check_dim(cols, "cols", who, 1)
    ld_a = cols if ld_a is None else _check_dim(ld_a, names[0], who, cols)
    ld_b = cols if ld_b is None else _check_dim(ld_b, names[1], who, cols)
    return rows, cols, ld_a, ld_b


def _buffer(obj):
    """The OpenCL buffer behind ``obj`` (a buffer, a ``pydnnl.memory``, or a plan placeholder,
    which passes through)."""
    return obj.buffer if hasattr(obj, "get_data_handle") else obj


def _check_extent(who: str, name: str, off_name: str, buf, off, elems: int,
                  itemsize: int) -> np.int64:
    """``off`` as int64 after checking that ``buf`` holds ``off + elems`` items (buffers
    whose size is unknown here, such as plan placeholders, are not checked)."""
    off = _check_dim(off, off_name, who, 0)
    size = getattr(buf, "size", None)
    if isinstance(size, int) and (off + elems) * itemsize > size:
        raise invalid_arguments(
            f"{who}: {name} must hold {off + elems} elements of {itemsize} bytes ({off_name} = "
            f"{off} plus {elems}), got a buffer of {size} bytes")
    return np.int64(off)


class DropoutForward:
    """``y = keep ? x * scale : 0`` and ``mask = keep`` on a rows x cols view."""

    def __init__(self, engine, rows: int, cols: int, ld_x: int | None = None,
                 ld_y: int | None = None):
        self.rows, self.cols, self.ld_x, self.ld_y = _check_view(
            "get_dropout", rows, cols, ld_x, ld_y, ("ld_x", "ld_y"))
        # PoCL's compiler runs the Philox products faster as 64-bit multiplies than mul_hi
        wide = engine.info.runtime == "pocl"
        self.kernel = get_kernel(engine, "dropout_fwd", (self.rows, self.cols, wide, WG),
                                 lambda: dropout_source("fwd", self.rows, self.cols, wide))

    def ordered(self, x, x_off: int, y, y_off: int, mask, m_off: int, seed: int, offset: int,
                p: float) -> list:
        """The kernel's arguments, in its order, after validating every one of them."""
        who = "dropout forward"
        x, y, mask = _buffer(x), _buffer(y), _buffer(mask)
        span_x = (self.rows - 1) * self.ld_x + self.cols
        span_y = (self.rows - 1) * self.ld_y + self.cols
        vals = {"x": x, "y": y, "mask": mask,
                "x_off": _check_extent(who, "x", "x_off", x, x_off, span_x, 4),
                "y_off": _check_extent(who, "y", "y_off", y, y_off, span_y, 4),
                "m_off": _check_extent(who, "mask", "m_off", mask, m_off,
                                       self.rows * self.cols, 1)}
        seed, offset = check_u64(seed, "seed"), check_u64(offset, "offset")
        vals.update(seed_lo=np.uint32(seed & 0xFFFFFFFF), seed_hi=np.uint32(seed >> 32),
                    offset_lo=np.uint32(offset & 0xFFFFFFFF), offset_hi=np.uint32(offset >> 32),
                    threshold=np.uint32(dropout_threshold(p)), scale=dropout_scale(p),
                    rows=np.int64(self.rows), cols=np.int64(self.cols),
                    ld_x=np.int64(self.ld_x), ld_y=np.int64(self.ld_y))
        return [vals[n] for n in FWD_ARGS]

    def __call__(self, stream, x, x_off: int, y, y_off: int, mask, m_off: int, seed: int,
                 offset: int, p: float, wait_for=None):
        """Enqueue on ``stream``; returns the OpenCL event."""
        args = self.ordered(x, x_off, y, y_off, mask, m_off, seed, offset, p)
        return self.kernel(stream, *args, wait_for=wait_for)


class DropoutBackward:
    """``dx = mask ? dy * scale : 0`` on a rows x cols view, reading a stored mask."""

    def __init__(self, engine, rows: int, cols: int, ld_dy: int | None = None,
                 ld_dx: int | None = None):
        self.rows, self.cols, self.ld_dy, self.ld_dx = _check_view(
            "get_dropout_bwd", rows, cols, ld_dy, ld_dx, ("ld_dy", "ld_dx"))
        key = (self.rows, self.cols, WG)
        self.kernel = get_kernel(engine, "dropout_bwd", key,
                                 lambda: dropout_source("bwd", self.rows, self.cols, False))

    def ordered(self, dy, dy_off: int, dx, dx_off: int, mask, m_off: int, p: float) -> list:
        """The kernel's arguments, in its order, after validating every one of them."""
        who = "dropout backward"
        dy, dx, mask = _buffer(dy), _buffer(dx), _buffer(mask)
        span_dy = (self.rows - 1) * self.ld_dy + self.cols
        span_dx = (self.rows - 1) * self.ld_dx + self.cols
        vals = {"dy": dy, "dx": dx, "mask": mask,
                "dy_off": _check_extent(who, "dy", "dy_off", dy, dy_off, span_dy, 4),
                "dx_off": _check_extent(who, "dx", "dx_off", dx, dx_off, span_dx, 4),
                "m_off": _check_extent(who, "mask", "m_off", mask, m_off,
                                       self.rows * self.cols, 1),
                "scale": dropout_scale(p), "rows": np.int64(self.rows),
                "cols": np.int64(self.cols), "ld_dy": np.int64(self.ld_dy),
                "ld_dx": np.int64(self.ld_dx)}
        return [vals[n] for n in BWD_ARGS]

    def __call__(self, stream, dy, dy_off: int, dx, dx_off: int, mask, m_off: int, p: float,
                 wait_for=None):
        """Enqueue on ``stream``; returns the OpenCL event."""
        return self.kernel(stream, *self.ordered(dy, dy_off, dx, dx_off, mask, m_off, p),
                           wait_for=wait_for)


def get_dropout(engine, rows: int, cols: int, ld_x: int | None = None,
                ld_y: int | None = None) -> DropoutForward:
    """Forward dropout launcher for a rows x cols view (row strides default to ``cols``):
    ``launcher(stream, x, x_off, y, y_off, mask, m_off, seed, offset, p)``."""
    return DropoutForward(engine, rows, cols, ld_x, ld_y)


def get_dropout_bwd(engine, rows: int, cols: int, ld_dy: int | None = None,
                    ld_dx: int | None = None) -> DropoutBackward:
    """Backward dropout launcher for a rows x cols view (row strides default to ``cols``):
    ``launcher(stream, dy, dy_off, dx, dx_off, mask, m_off, p)``."""
    return DropoutBackward(engine, rows, cols, ld_dy, ld_dx)
