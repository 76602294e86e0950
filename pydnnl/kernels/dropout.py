"""Dropout kernels: Philox4x32-10 keep masks drawn on the device, and their backward pass.

The mask convention (counter layout, threshold, scale) is the one of :mod:`pydnnl.philox`
(documented in :mod:`pydnnl.reference.philox`, whose numpy functions give the same mask bit
for bit).

Both kernels work on a 2-D strided view, ``rows`` x ``cols`` with row strides ``ld`` (in
elements), because RNN layer outputs are [T*N, C] slices of wider buffers; the mask is dense,
element ``e = row * cols + col`` at ``mask[m_off + e]`` (uint8, 1 = kept). Sizes, strides,
offsets, seed and p are run-time arguments; the launch size depends on ``rows`` and ``cols``,
and two build options on whether ``cols`` is a multiple of 4 and on the device's compiler.

The launchers that validate arguments and run these kernels are in :mod:`pydnnl.runtime.dropout`.
"""
from __future__ import annotations

from ..philox import PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1
from .source import KernelSource

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


def dropout_source(kind: str, rows: int, cols: int, wide_mul: bool) -> KernelSource:
    """The ``fwd`` or ``bwd`` kernel for a ``rows`` x ``cols`` view; ``wide_mul``: compute
    the Philox products in 64 bits (faster than ``mul_hi`` on some compilers)."""
    opts = (("-DPD_COLS4",) if cols % 4 == 0 else ()) + (("-DPD_WIDE_MUL",) if wide_mul
                                                            else ())
    args = FWD_ARGS if kind == "fwd" else BWD_ARGS
    gsize, lsize = _launch(rows, (cols + 3) // 4)
    return KernelSource(f"pydnnl_dropout_{kind}", _SOURCE, gsize, lsize, args, opts)
