"""Dropout kernels: Philox4x32-10 keep masks drawn on the device, and their backward pass.

The mask convention (counter layout, threshold, scale) is the one of
:mod:`pydnnl.reference.philox`, whose numpy functions give the same mask bit for bit.

Both kernels work on a 2-D strided view, ``rows`` x ``cols`` with row strides ``ld`` (in
elements), because RNN layer outputs are [T*N, C] slices of wider buffers; the mask is dense,
element ``e = row * cols + col`` at ``mask[m_off + e]`` (uint8, 1 = kept). Sizes, strides,
offsets, seed and p are run-time arguments; the launch size depends on ``rows`` and ``cols``,
and two build options on whether ``cols`` is a multiple of 4 and on the device's compiler.

Plans bind a launch once with ``launcher.kernel.bound(launcher.ordered(...))``; buffers may
then be placeholders resolved per execution (see :class:`pydnnl.kernels.compiler.BoundKernel`).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..error import invalid_arguments
from ..reference.philox import (PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, check_u64,
                                dropout_scale, dropout_threshold)

# Work-items per work-group: a multiple of every GPU's SIMD width; CPUs run it fine too.
WG = 64

_SOURCE = f"""
#define PD_M0 0x{PHILOX_M0:08X}u
#define PD_M1 0x{PHILOX_M1:08X}u
#define PD_W0 0x{PHILOX_W0:08X}u
#define PD_W1 0x{PHILOX_W1:08X}u

/* hi and lo halves of the 64-bit product of two uints. Measured on the forward kernel: PoCL
   ran 3.5x faster with 64-bit products than with mul_hi, Intel's CPU runtime 3x slower. */
#ifdef PD_WIDE_MUL
#define PD_MULHILO(m, a, hi, lo) \\
    {{ const ulong p_ = (ulong)(m) * (a); hi = (uint)(p_ >> 32); lo = (uint)p_; }}
#else
#define PD_MULHILO(m, a, hi, lo) {{ hi = mul_hi((uint)(m), (a)); lo = (m) * (a); }}
#endif

/* Philox4x32-10: ten rounds, the key advanced between them. */
static inline uint4 pd_philox4x32_10(uint4 ctr, uint2 key)
{{
    uint c0 = ctr.x, c1 = ctr.y, c2 = ctr.z, c3 = ctr.w, k0 = key.x, k1 = key.y;
    for (int r = 0; r < 10; ++r) {{
        uint hi0, lo0, hi1, lo1;
        PD_MULHILO(PD_M0, c0, hi0, lo0);
        PD_MULHILO(PD_M1, c2, hi1, lo1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PD_W0; /* the bump after the last round goes unused */
        k1 += PD_W1;
    }}
    return (uint4)(c0, c1, c2, c3);
}}

static inline uint4 pd_block(ulong g, uint offset_lo, uint offset_hi, uint2 key)
{{
    return pd_philox4x32_10((uint4)((uint)g, (uint)(g >> 32), offset_lo, offset_hi), key);
}}

/* Work-item (j, r) handles columns 4j .. 4j+3 of row r (fewer at the row's end). Their mask
   elements e0 .. e0+3 start at word s = e0 % 4 of Philox block e0 / 4 and reach into the next
   block when s > 0. PD_COLS4 (cols a multiple of 4) drops both the second block and the row's
   tail: CPU compilers vectorize across work-items and would otherwise run every branch.
   x and y may be the same buffer and offset (in-place dropout). */
__kernel void pydnnl_dropout_fwd(
    __global const float *x, long x_off, __global float *y, long y_off,
    __global uchar *mask, long m_off,
    uint seed_lo, uint seed_hi, uint offset_lo, uint offset_hi, uint threshold, float scale,
    long rows, long cols, long ld_x, long ld_y)
{{
    const long c = 4 * (long)get_global_id(0), r = get_global_id(1);
    if (c >= cols || r >= rows)
        return;
    const ulong e0 = (ulong)r * (ulong)cols + (ulong)c;
    const uint2 key = (uint2)(seed_lo, seed_hi);
    uint4 w = pd_block(e0 >> 2, offset_lo, offset_hi, key);
#ifndef PD_COLS4
    const uint s = (uint)e0 & 3u;
    if (s != 0) {{
        const uint4 next = pd_block((e0 >> 2) + 1, offset_lo, offset_hi, key);
        w = shuffle2(w, next, (uint4)(s, s + 1, s + 2, s + 3));
    }}
#endif
    const int4 keep = w >= (uint4)(threshold); /* -1 where kept, 0 where dropped */
    __global const float *xp = x + x_off + r * ld_x + c;
    __global float *yp = y + y_off + r * ld_y + c;
    __global uchar *mp = mask + m_off + (long)e0;
#ifndef PD_COLS4
    const long left = cols - c;
    if (left < 4) {{
        yp[0] = keep.s0 ? xp[0] * scale : 0.0f;
        mp[0] = (uchar)(keep.s0 & 1);
        if (left > 1) {{
            yp[1] = keep.s1 ? xp[1] * scale : 0.0f;
            mp[1] = (uchar)(keep.s1 & 1);
        }}
        if (left > 2) {{
            yp[2] = keep.s2 ? xp[2] * scale : 0.0f;
            mp[2] = (uchar)(keep.s2 & 1);
        }}
        return;
    }}
#endif
    vstore4(select((float4)(0.0f), vload4(0, xp) * scale, keep), 0, yp);
    /* masking after the conversion: Oclgrind 21.10 gets "keep & 1" wrong on int4 */
    vstore4(convert_uchar4(keep) & (uchar4)(1), 0, mp);
}}

/* Work-item (j, r) handles columns 4j .. 4j+3 of row r, as in the forward kernel. dy and dx
   may be the same buffer and offset. */
__kernel void pydnnl_dropout_bwd(
    __global const float *dy, long dy_off, __global float *dx, long dx_off,
    __global const uchar *mask, long m_off, float scale,
    long rows, long cols, long ld_dy, long ld_dx)
{{
    const long c = 4 * (long)get_global_id(0), r = get_global_id(1);
    if (c >= cols || r >= rows)
        return;
    __global const float *dyp = dy + dy_off + r * ld_dy + c;
    __global float *dxp = dx + dx_off + r * ld_dx + c;
    __global const uchar *mp = mask + m_off + r * cols + c;
#ifndef PD_COLS4
    const long left = cols - c;
    if (left < 4) {{
        for (long k = 0; k < left; ++k)
            dxp[k] = mp[k] != 0 ? dyp[k] * scale : 0.0f;
        return;
    }}
#endif
    const int4 keep = convert_int4(vload4(0, mp)) != (int4)(0);
    vstore4(select((float4)(0.0f), vload4(0, dyp) * scale, keep), 0, dxp);
}}
"""

FWD_ARGS = ("x", "x_off", "y", "y_off", "mask", "m_off", "seed_lo", "seed_hi", "offset_lo",
            "offset_hi", "threshold", "scale", "rows", "cols", "ld_x", "ld_y")
BWD_ARGS = ("dy", "dy_off", "dx", "dx_off", "mask", "m_off", "scale", "rows", "cols", "ld_dy",
            "ld_dx")


def _round_up(a: int, b: int) -> int:
    return (a + b - 1) // b * b


def _launch(rows: int, width: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Global and local sizes of ``width`` work-items per row, one row per work-group (so
    the row-dependent branches of the forward kernel never diverge inside a group)."""
    wg0 = min(WG, _round_up(width, 8))
    return (_round_up(width, wg0), rows), (wg0, 1)


def _wide_mul(engine) -> bool:
    """Whether the device's compiler runs 64-bit products faster than ``mul_hi`` (PoCL)."""
    p = engine.info.platform.lower()
    return "portable computing language" in p or "pocl" in p


def _source(kind: str, rows: int, cols: int, wide_mul: bool):
    from .compiler import KernelSource

    opts = (("-DPD_COLS4",) if cols % 4 == 0 else ()) + (("-DPD_WIDE_MUL",) if wide_mul
                                                            else ())
    args = FWD_ARGS if kind == "fwd" else BWD_ARGS
    gsize, lsize = _launch(rows, (cols + 3) // 4)
    return KernelSource(f"pydnnl_dropout_{kind}", _SOURCE, gsize, lsize, args, opts)


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
        from .compiler import get_kernel

        self.rows, self.cols, self.ld_x, self.ld_y = _check_view(
            "get_dropout", rows, cols, ld_x, ld_y, ("ld_x", "ld_y"))
        wide = _wide_mul(engine)
        self.kernel = get_kernel(engine, "dropout_fwd", (self.rows, self.cols, wide, WG),
                                 lambda: _source("fwd", self.rows, self.cols, wide))

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
        from .compiler import get_kernel

        self.rows, self.cols, self.ld_dy, self.ld_dx = _check_view(
            "get_dropout_bwd", rows, cols, ld_dy, ld_dx, ("ld_dy", "ld_dx"))
        key = (self.rows, self.cols, WG)
        self.kernel = get_kernel(engine, "dropout_bwd", key,
                                 lambda: _source("bwd", self.rows, self.cols, False))

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
