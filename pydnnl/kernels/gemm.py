"""The GEMM kernel family: ``C = alpha * op(A) @ op(B) + beta * C`` generated with loopy.

Every kernel is specialised to one :class:`GemmProblem` (sizes, leading dimensions, offsets,
batch strides, transposes, alpha and beta are compile-time constants, like a JIT) and one set
of tuning parameters. Buffers are flat 1-D ``__global`` arrays named ``a``, ``b`` and ``c``;
callers pass raw ``pyopencl.Buffer`` objects (the kernel has exactly these three arguments, in
that order, and no scalar arguments). All matrices are row-major: ``A`` is ``m x k`` (stored
``k x m`` when ``trans_a``), ``B`` is ``k x n`` (stored ``n x k`` when ``trans_b``), ``C`` is
``m x n``; element ``(r, s)`` of a stored matrix ``X`` of batch entry ``t`` lives at
``x_offset + t * stride_x + r * ldx + s``.

Two pipelines turn one base description into a kernel:

* **register tile** (``local_prefetch=False``, CPUs): each work-item owns a ``rows x cols``
  tile of ``C`` held in private ``float<vec>`` accumulators. Per ``k`` it loads ``cols``
  contiguous values of ``B`` into vectors, broadcasts one ``A`` value per row and does
  ``rows * cols / vec`` vector multiply-adds. No local memory, no barriers. ``B`` is read
  fastest when pre-packed in panels of ``cols`` contiguous columns (layout ``panel<cols>``,
  see :func:`pack_b`): every load is then one contiguous cache-line-sized block.
* **local tiles** (``local_prefetch=True``, GPUs): a work-group computes a
  ``(wg_m*rows) x (wg_n*cols)`` block of ``C``; per ``k_tile`` slice the work-group stages the
  ``A`` and ``B`` tiles into ``__local`` memory (``loopy.precompute``), then every work-item
  accumulates its strided ``rows x cols`` register tile (CLBlast's STRM = STRN = 1 layout).

Ragged sizes: tiles never need to divide ``m``, ``n`` or ``k``. Rows past ``m`` read a clamped
(valid) row of ``A`` and are never stored; columns past ``n`` read zero padding (packed ``B``),
the start of the next row of plain ``B`` (the last ``k`` steps, which could run past the end of
``B``, are peeled off and clamped), or a clamped column (transposed ``B``, local tiles). The
local-tile pipeline zero-fills the last ``k`` tile, so every loop has a uniform trip count.
Stores are guarded; ``beta == 0`` never reads ``C``. Nothing outside ``C``'s rows is written.

Measured choices (2-core AMD EPYC, Intel's CPU runtime and PoCL 3.0):

* B goes into vector registers one lane at a time (``bv[j].s3 = b[...]``) and the compilers
  merge the lanes into vector loads: PoCL ran 190 GFLOP/s that way and 45 with ``vload8``.
* Index arithmetic is 64-bit on CPUs: with loopy's default ``(int) get_group_id()`` both
  runtimes lost the contiguous B loads (60 instead of 175-190 GFLOP/s).
* One work-item per work-group: with ``get_local_id`` in the addresses PoCL dropped to 70.
* Register loops are ``#pragma unroll`` hints, not loopy unrolling, which cost ~5 ms of code
  generation per unrolled statement (1-4 s per kernel; now 0.2-0.5 s).
* 4 rows x 24 columns fill AVX2's 16 vector registers without spilling (8x16 spills). A
  6x16 tile ran 190 GFLOP/s at 960^3 but 105 at 1024^3 (150 with k = 1000: probably 4 KiB
  aliasing of the six A rows); 4x24 ran 175-185 on both.

Tuning parameters (``params`` dict; :func:`normalize_params` fills the defaults):

``rows``           rows of ``C`` per work-item (register tile height), >= 1
``cols``           columns of ``C`` per work-item (register tile width), a multiple of ``vec``
``vec``            OpenCL vector width along N (1, 2, 4, 8 or 16); 1 means scalar code
``wg``             work-group shape ``(wg_n, wg_m)``: work-items along N (axis 0) and M (axis 1)
``k_unroll``       unroll factor of the k loop (register-tile pipeline)
``local_prefetch`` stage A/B tiles through ``__local`` memory (GPU style; needs ``vec == 1``)
``k_tile``         k extent of one local-memory stage (``local_prefetch`` only)
``packed_b``       the kernel reads B pre-packed in ``panel<cols>`` layout (the problem's
                   ``b_layout`` must say so; build it with ``pack_b(problem, params).problem``)
``m_inner``        put the M tiles on grid axis 0 (consecutive work-groups share a B panel)
``m_loop``         register-tile pipeline: row tiles one work-item computes one after the other
                   (its B panel stays in L1 across them), >= 1
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..constants import algorithm as A_

__all__ = [
    "GemmProblem", "BPacking", "build_gemm", "pack_b", "params_fit",
    "normalize_params", "local_mem_bytes", "cache_key", "key_problem", "fits_int32", "flops",
    "panel_layout",
    "panel_width", "DEFAULT_CPU_PARAMS", "DEFAULT_GPU_PARAMS", "GENERATOR_VERSION",
    "SCALE_KINDS", "has_epilogue", "scale_name", "scale_names", "scale_product", "scale_result",
]

# Bump when the generated code changes for the same (problem, params).
GENERATOR_VERSION = "gemm-3"
_PANEL = "panel"
# How register-tile loops are unrolled: "unr" (by loopy: slow code generation, ~5 ms per
# unrolled statement) or "unr_hint" (#pragma unroll: the OpenCL compiler unrolls).
_UNROLL = "unr_hint"
_VEC_WIDTHS = (1, 2, 4, 8, 16)


def panel_layout(width: int) -> str:
    """Name of the packed-B layout with panels of ``width`` contiguous columns."""
    return f"{_PANEL}{int(width)}"


def panel_width(layout: str) -> int | None:
    """Panel width of a packed-B layout name, or None for ``"plain"``."""
    if layout == "plain":
        return None
    if (layout.startswith(_PANEL) and layout[len(_PANEL):].isdigit()
            and int(layout[len(_PANEL):]) > 0):
        return int(layout[len(_PANEL):])
    raise ValueError(f"GemmProblem: b_layout must be 'plain' or 'panel<width>', got {layout!r}")


# {{{ problem

# fields printed only when set: plain fixed-size GEMMs keep the keys perf databases know
_EPILOGUE_DEFAULTS = {"bias": None, "post_ops": (), "epi_batch": (), "epi_fixed": None,
                      "epi_swap": False, "scales": (), "runtime_m": None, "runtime_k": False,
                      "runtime_ldc": False, "runtime_n": False, "a_conv": None,
                      "c_rows": None}
#: the scale operands an epilogue may take, in argument order (see ``GemmProblem.scales``)
SCALE_KINDS = ("src", "wei", "dst")


@dataclass(frozen=True, repr=False)
class GemmProblem:
    """One (optionally batched, strided) GEMM, every size fixed.

    ``C[t] = alpha * op(A[t]) @ op(B[t]) + beta * C[t]`` for ``t < batch``, row-major, with
    ``op(A)`` of shape ``(m, k)`` and ``op(B)`` of shape ``(k, n)``. ``lda``/``ldb``/``ldc`` are
    leading dimensions (elements between consecutive stored rows) and default to dense;
    offsets and batch strides are in elements (stride defaults: dense; 0 broadcasts A or B).
    ``b_layout`` is ``"plain"`` or ``"panel<w>"``: B pre-packed in panels of ``w`` columns,
    element ``(kk, j)`` at ``b_offset + t*stride_b + (j//w)*k*w + kk*w + j%w``, ``n`` padded
    with zeros to a multiple of ``w`` (``ldb`` and ``trans_b`` are ignored then).
    ``dtype`` is the storage type of A, B and C; ``acc_dtype`` the accumulation type
    (float32 for float16/float32 storage, float64 for float64).
    """

    m: int
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False
    dtype: Any = np.float32
    alpha: float = 1.0
    beta: float = 0.0
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None
    a_offset: int = 0
    b_offset: int = 0
    c_offset: int = 0
    batch: int = 1
    stride_a: int | None = None
    stride_b: int | None = None
    stride_c: int | None = None
    b_layout: str = "plain"
    acc_dtype: Any = None
    #: the kernel takes ``a_off, b_off, c_off`` (int64, in elements) after its buffers, added to
    #: the offsets above at run time: one kernel serves many sub-matrices of big buffers
    runtime_offsets: bool = False
    #: a fused epilogue over the destination tensor C is part of (float32 only): ``bias`` is
    #: ``(layout, dims, nelems)`` of an operand added at each element's position (dims equal
    #: the destination's or 1: broadcast), ``post_ops`` a chain of
    #: :mod:`pydnnl.kernels.post_ops`. The position of C's element (t, i, j) is
    #: ``epi_fixed`` (or batch index t over ``epi_batch``) followed by (i, j), or (j, i) when
    #: ``epi_swap`` (C holds the destination transposed).
    bias: tuple | None = None
    post_ops: tuple = ()
    epi_batch: tuple = ()
    epi_fixed: tuple | None = None
    epi_swap: bool = False
    #: scales of the epilogue (oneDNN's quantization attributes): ``(which, dims)`` entries,
    #: ``which`` in :data:`SCALE_KINDS`, each read from the float32 kernel argument
    #: ``<which>_scale`` (:func:`scale_name`) at the destination position, row-major over
    #: ``dims`` (each the destination's or 1: broadcast; ``()``: one common value). The
    #: stored value is ``post_ops(src * wei * product + bias) * (1 / dst)`` (oneDNN v3's
    #: order: the dst scale divides after the post-ops); needs ``alpha == 1`` and
    #: ``beta == 0`` (the product alone is scaled).
    scales: tuple = ()
    #: the kernel takes ``m`` (int64) after the offsets: one program serves every number of
    #: rows (``m`` above is then a sample size; see :func:`cache_key`). ``"any"``: rows of the
    #: last tile past ``m`` read a clamped row; ``"tall"``: the caller guarantees ``m >= rows``
    #: (the tile height) and the last tile moves up to end at row ``m``, storing only its own
    #: rows, so every A row is addressed from one base (the per-row clamps cost 5% on
    #: AVX-512; register-tile pipeline only). A not transposed. Both loopy pipelines (the
    #: local-tile one: ``"any"``) take it with a batch (see :attr:`runtime_strides`) and an
    #: epilogue (whose operands' layouts stay baked: sizes they depend on key the kernel);
    #: the hand-written NVIDIA kernel (:mod:`pydnnl.kernels.gemm_nv`) for one batch entry
    #: without an epilogue.
    runtime_m: str | None = None
    #: the kernel takes ``ksize`` (int64, the reduction length) after the offsets (and m):
    #: one program serves every k (``k`` above is a sample). A dense A (not transposed,
    #: ``lda == k``) then has ``ksize`` as its leading dimension too. Register tiles: plain B
    #: whose ragged columns need at most one clamped k step (packing, :func:`pack_b`,
    #: supports it for B not transposed); local tiles: any k (the last k tile zero-filled);
    #: the NVIDIA kernel: k a multiple of its k slice, one batch entry, no epilogue.
    runtime_k: bool = False
    #: the kernel takes ``ldc`` (int64, C's leading dimension) after ``ksize`` (and m): one
    #: program serves every row stride of C (``ldc`` above is a sample): GRU's two recurrent
    #: GEMMs, whose C are 2 and 1 gates wide, share one kernel. One batch entry, run-time
    #: offsets.
    runtime_ldc: bool = False
    #: the column guard of a last column tile reaching past n compares with the kernel's
    #: ``ncols`` argument (int64, after ``ksize`` and ``ldc``): kernels whose n differ only
    #: there share one text (the launch grid still follows n): GRU's two recurrent weight
    #: gradients, 1024 and 512 columns in 48-column tiles. Register tiles over B packed in
    #: panels of the tile's width, one batch entry, run-time offsets.
    runtime_n: bool = False
    #: A is gathered from a channels-last image batch instead of read as a matrix (an
    #: implicit-GEMM convolution): ``(ih, iw, c, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw)``;
    #: row ``r`` is output point ``(n, y, x)`` of ``n * oh * ow + y * ow + x``, column ``k``
    #: is tap ``(ky, kx)`` and channel ``ch`` of ``(ky * kw + kx) * c + ch``, and the element
    #: is the input at ``(n, y * sh - ph + ky * dh, x * sw - pw + kx * dw, ch)`` (images
    #: ``ih * iw * c`` apart), 0 outside it. A not transposed, k = kh * kw * c. With
    #: ``trans_a`` the same patch matrix is A's storage (a weight gradient's ``patches^T @
    #: diff_dst``): k runs over the output points, m = kh * kw * c over the taps and channels,
    #: ``lda`` = m; batch entry ``t`` starts at point ``t * stride_a / lda`` (k slices of one
    #: product, A's pointer does not move). The hand-written NVIDIA kernel alone takes it
    #: (``gemm_nv.supports``)
    a_conv: tuple | None = None
    #: C's rows scattered over a strided grid instead of ``ldc`` apart (one phase of a
    #: strided convolution's backward data): ``(hp, wp, rn, ra, rb)``; row ``r`` of C is
    #: point ``(t, a, b)`` of ``r = (t * hp + a) * wp + b`` and lies at row ``t * rn + a *
    #: ra + b * rb`` of the ``ldc``-strided storage from C's offset. One batch entry, A not
    #: transposed, no epilogue; the hand-written NVIDIA kernel alone takes it
    c_rows: tuple | None = None

    def __post_init__(self):
        def setf(name, value):
            object.__setattr__(self, name, value)

        for name in ("m", "n", "k", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"GemmProblem: {name} must be a positive int, got {v!r}")
            setf(name, int(v))
        for name in ("a_offset", "b_offset", "c_offset"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"GemmProblem: {name} must be a non-negative int, got {v!r}")
            setf(name, int(v))
        setf("trans_a", bool(self.trans_a))
        setf("trans_b", bool(self.trans_b))
        dt = np.dtype(self.dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            # float16 storage with float32 accumulation fits the design (acc_dtype, the casts
            # in _Layout, the c_val staging in _store_insns) but loopy 2025.2 has no OpenCL
            # name for float16: it needs ushort storage plus vload_half/vstore_half helpers
            raise ValueError(f"GemmProblem: dtype must be float32 or float64, got {dt}")
        setf("dtype", dt)
        acc = np.dtype(self.acc_dtype) if self.acc_dtype is not None else (
            np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32))
        if acc not in (np.dtype(np.float32), np.dtype(np.float64)) or acc.itemsize < dt.itemsize:
            raise ValueError(f"GemmProblem: acc_dtype must be float32/float64 and at least as wide "
                             f"as dtype {dt}, got {acc}")
        setf("acc_dtype", acc)
        setf("scales", tuple((str(w), tuple(int(d) for d in dims)) for w, dims in self.scales))
        kinds = [w for w, _ in self.scales]
        if any(w not in SCALE_KINDS for w in kinds) or len(set(kinds)) != len(kinds) or \
                kinds != sorted(kinds, key=SCALE_KINDS.index):
            raise ValueError(f"GemmProblem: scales must name each of {SCALE_KINDS} at most "
                             f"once, in that order, got {kinds}")
        if self.scales and (self.alpha != 1.0 or self.beta != 0.0):
            raise ValueError(f"GemmProblem: scales need alpha == 1 and beta == 0, got alpha "
                             f"{self.alpha}, beta {self.beta}")
        if (self.bias is not None or self.post_ops or self.scales) and \
                dt != np.dtype(np.float32):
            raise ValueError(f"GemmProblem: a fused epilogue needs float32 storage, got {dt}")
        setf("alpha", float(self.alpha))
        setf("beta", float(self.beta))
        pw = panel_width(self.b_layout)

        a_cols = self.m if self.trans_a else self.k
        b_cols = self.k if self.trans_b else self.n
        for name, need in (("lda", a_cols), ("ldb", b_cols), ("ldc", self.n)):
            v = getattr(self, name)
            if name == "ldb" and pw is not None:
                setf(name, pw)
                continue
            if v is None:
                v = need
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < need:
                raise ValueError(f"GemmProblem: {name} must be an int >= {need}, got {v!r}")
            setf(name, int(v))
        for name in ("stride_a", "stride_b", "stride_c"):
            v = getattr(self, name)
            dense = {"stride_a": self._rows("a") * self.lda, "stride_b": self._b_dense_stride(),
                     "stride_c": self.m * self.ldc}[name]
            if v is None:
                v = dense
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"GemmProblem: {name} must be a non-negative int, got {v!r}")
            setf(name, int(v))
        if self.runtime_m not in (None, "any", "tall"):
            raise ValueError(f"GemmProblem: runtime_m must be None, 'any' or 'tall', got "
                             f"{self.runtime_m!r}")
        # (fixed offsets with a runtime size: the hand-written NVIDIA kernel's copies with
        # compiled-in offsets; the loopy pipelines take sizes with run-time offsets only)
        if self.runtime_m and self.trans_a:
            raise ValueError("GemmProblem: runtime_m needs A not transposed")
        setf("runtime_k", bool(self.runtime_k))
        setf("runtime_ldc", bool(self.runtime_ldc))
        setf("runtime_n", bool(self.runtime_n))
        if self.a_conv is not None:
            g = tuple(int(v) for v in self.a_conv)
            taps = self.m if self.trans_a else self.k
            if len(g) != 13 or g[2] * g[3] * g[4] != taps or (
                    self.trans_a and (self.lda != self.m or self.stride_a % self.m)):
                raise ValueError(f"GemmProblem: a_conv must be (ih, iw, c, kh, kw, oh, ow, sh, "
                                 f"sw, ph, pw, dh, dw) with {'m' if self.trans_a else 'k'} = "
                                 f"kh * kw * c (transposed: lda = m, stride_a a multiple of "
                                 f"it), got {self.a_conv!r} (m {self.m}, k {self.k}, lda "
                                 f"{self.lda}, stride_a {self.stride_a})")
            setf("a_conv", g)
        if self.c_rows is not None:
            g = tuple(int(v) for v in self.c_rows)
            if len(g) != 5 or min(g) < 1 or self.m % (g[0] * g[1]) or self.batch > 1 \
                    or self.trans_a or self.bias is not None or self.post_ops or self.scales:
                raise ValueError(f"GemmProblem: c_rows must be (hp, wp, rn, ra, rb), positive, "
                                 f"with m a multiple of hp * wp, one batch entry, A not "
                                 f"transposed and no epilogue, got {self.c_rows!r} (m {self.m}, "
                                 f"batch {self.batch})")
            setf("c_rows", g)
        for name in ("runtime_ldc", "runtime_n"):
            if getattr(self, name) and (self.batch > 1 or not self.runtime_offsets):
                raise ValueError(f"GemmProblem: {name} needs one batch entry and run-time "
                                 "offsets")
        if self.batch > 1 and self.stride_c < self.extent("c"):
            raise ValueError(f"GemmProblem: stride_c={self.stride_c} makes batch entries of C "
                             f"overlap (one entry spans {self.extent('c')} elements)")

    def __repr__(self) -> str:
        # epilogue fields only when set: plain GEMMs keep the keys perf databases know them by
        from dataclasses import fields

        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if f.name not in _EPILOGUE_DEFAULTS
                 or getattr(self, f.name) != _EPILOGUE_DEFAULTS[f.name]]
        return f"GemmProblem({', '.join(parts)})"

    def _rows(self, which: str) -> int:
        if which == "a":
            return self.k if self.trans_a else self.m
        if which == "b":
            return self.n if self.trans_b else self.k
        return self.m

    def _b_dense_stride(self) -> int:
        pw = panel_width(self.b_layout)
        if pw is not None:
            return -(-self.n // pw) * pw * self.k
        return self._rows("b") * self.ldb

    @property
    def panel_width(self) -> int | None:
        """Panel width of a packed B, None when B is plain."""
        return panel_width(self.b_layout)

    @property
    def runtime_strides(self) -> bool:
        """Whether the kernel takes its batch strides at run time: a batch with a run-time
        size (whose strides follow m or k, e.g. Winograd's tile products; the ``stride_*``
        fields are then samples too), as ``stride_a, stride_b, stride_c`` (int64, in
        elements) after the sizes."""
        return self.batch > 1 and bool(self.runtime_m or self.runtime_k)

    @property
    def runtime_batch(self) -> bool:
        """Whether the batch count is a kernel argument too (``nbatch``, after the strides):
        with run-time strides and no epilogue over batch dims (whose positions the batch
        count would fix), e.g. Winograd's products, whose count follows the tile count."""
        return self.runtime_strides and not self.epi_batch

    def extent(self, which: str) -> int:
        """Elements one batch entry of ``which`` ('a', 'b' or 'c') spans from its first one."""
        if which == "b" and self.panel_width is not None:
            return self._b_dense_stride()
        if which == "c" and self.c_rows is not None:  # the last point's row
            hp, wp, rn, ra, rb = self.c_rows
            last = (self.m // (hp * wp) - 1) * rn + (hp - 1) * ra + (wp - 1) * rb
            return last * self.ldc + self.n
        if which == "a" and self.a_conv is not None:  # the images the points reach
            ih, iw, c, _, _, oh, ow = self.a_conv[:7]
            points = self.k * self.batch if self.trans_a else self.m
            return -(-points // (oh * ow)) * ih * iw * c
        cols = {"a": self.m if self.trans_a else self.k,
                "b": self.k if self.trans_b else self.n, "c": self.n}[which]
        ld = {"a": self.lda, "b": self.ldb, "c": self.ldc}[which]
        return (self._rows(which) - 1) * ld + cols

    def size(self, which: str) -> int:
        """Elements the buffer ``which`` must hold (offset included)."""
        off = {"a": self.a_offset, "b": self.b_offset, "c": self.c_offset}[which]
        stride = {"a": self.stride_a, "b": self.stride_b, "c": self.stride_c}[which]
        if which == "a" and self.a_conv is not None and self.trans_a:
            return off + self.extent("a")  # (every entry's points: A does not move)
        return off + (self.batch - 1) * stride + self.extent(which)

# }}}


# {{{ parameters

DEFAULT_CPU_PARAMS: dict = {
    "rows": 4, "cols": 24, "vec": 8, "wg": (1, 1), "k_unroll": 1, "local_prefetch": False,
    "k_tile": 16, "packed_b": True, "m_inner": False, "m_loop": 1,
}
DEFAULT_GPU_PARAMS: dict = {
    "rows": 4, "cols": 4, "vec": 1, "wg": (16, 16), "k_unroll": 1, "local_prefetch": True,
    "k_tile": 16, "packed_b": False, "m_inner": False, "m_loop": 1,
}
_KEYS = tuple(DEFAULT_CPU_PARAMS)


def normalize_params(params: dict | None) -> dict:
    """``params`` completed with CPU defaults and checked; raises ValueError naming the key."""
    params = dict(params or {})
    unknown = set(params) - set(_KEYS)
    if unknown:
        raise ValueError(f"gemm params: unknown keys {sorted(unknown)}; known: {list(_KEYS)}")
    p = dict(DEFAULT_CPU_PARAMS)
    p.update(params)
    for key in ("rows", "cols", "k_unroll", "k_tile", "m_loop"):
        v = p[key]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"gemm params: {key} must be a positive int, got {v!r}")
        p[key] = int(v)
    if p["vec"] not in _VEC_WIDTHS:
        raise ValueError(f"gemm params: vec must be one of {_VEC_WIDTHS}, got {p['vec']!r}")
    p["vec"] = int(p["vec"])
    if p["cols"] % p["vec"]:
        raise ValueError(f"gemm params: cols ({p['cols']}) must be a multiple of vec ({p['vec']})")
    wg = p["wg"]
    if (not isinstance(wg, (tuple, list)) or len(wg) != 2
            or not all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) and w >= 1
                       for w in wg)):
        raise ValueError(
            f"gemm params: wg must be a pair (wg_n, wg_m) of positive ints, got {wg!r}")
    p["wg"] = (int(wg[0]), int(wg[1]))
    for key in ("local_prefetch", "packed_b", "m_inner"):
        p[key] = bool(p[key])
    if p["local_prefetch"] and p["vec"] != 1:
        raise ValueError("gemm params: local_prefetch needs vec == 1")
    if p["local_prefetch"] and p["packed_b"]:
        raise ValueError("gemm params: local_prefetch reads plain B; set packed_b=False")
    return p


def local_mem_bytes(problem: GemmProblem, params: dict) -> int:
    """``__local`` bytes one work-group of the local-tile pipeline uses (0 otherwise)."""
    p = normalize_params(params)
    if not p["local_prefetch"]:
        return 0
    wn, wm = p["wg"]
    return _k_tile(problem, p) * (wm * p["rows"] + wn * p["cols"]) * \
        problem.acc_dtype.itemsize


def _k_tile(problem: GemmProblem, p: dict) -> int:
    """k extent of one local-memory stage: ``k_tile``, or k where shorter (a fixed k)."""
    return p["k_tile"] if problem.runtime_k else min(p["k_tile"], problem.k)


def params_fit(problem: GemmProblem, params: dict) -> bool:
    """Whether ``params`` can generate a kernel for ``problem`` (device limits aside):
    they normalize, and a packed B's panel width is the tile's."""
    try:
        p = normalize_params(params)
    except ValueError:
        return False
    pw = problem.panel_width
    return pw is None or (p["packed_b"] and sub_panels_fit(pw, p))


def sub_panels_fit(pw: int, p: dict) -> bool:
    """Whether a register tile with (normalized) params ``p`` reads B packed in panels of
    ``pw`` columns: the tile's own width, or a whole number of narrower panels each a whole
    number of the tile's vectors (a tile then reads ``cols // pw`` panels side by side: B
    laid out in panels that never cross a boundary every ``pw`` columns, e.g. an RNN's gates,
    while the tile stays the fastest width)."""
    return pw == p["cols"] or (not p["local_prefetch"] and p["cols"] % pw == 0
                               and pw % p["vec"] == 0)


def key_problem(problem: GemmProblem) -> GemmProblem:
    """``problem`` as kernel caches know it: a run-time ``m`` or ``k`` replaced by 1 (and
    what follows from it), so that every sample size shares one key."""
    rs = problem.runtime_strides
    if problem.runtime_m:  # (scattered rows: whole grids of them)
        m = problem.c_rows[0] * problem.c_rows[1] if problem.c_rows else 1
        problem = replace(problem, m=m, stride_a=None, stride_c=None)
    if problem.runtime_k:
        # lda == k stays so (A's leading dimension follows k); another lda is kept
        lda = 1 if not problem.trans_a and problem.lda == problem.k else problem.lda
        problem = replace(problem, k=1, lda=lda, stride_a=None, stride_b=None)
    if problem.runtime_ldc:  # C's row stride is an argument: keyed as a dense C
        problem = replace(problem, ldc=None, stride_c=None)
    if rs:  # batch strides are arguments too, and so is the count where it can be
        problem = replace(problem, stride_a=None, stride_b=None, stride_c=None,
                          batch=2 if problem.runtime_batch else problem.batch)
    return problem


def cache_key(problem: GemmProblem, params: dict | None) -> tuple:
    """Everything the generated kernel depends on (for kernel caches and perf databases);
    a problem with ``runtime_m`` (``runtime_k``) is keyed without its sample ``m`` (``k``):
    local tiles key a run-time k by whether it is a whole number of k tiles (see
    :func:`_build_local`)."""
    p = normalize_params(params)
    key = key_problem(problem)
    if problem.runtime_k and p["local_prefetch"] and problem.k % p["k_tile"] == 0:
        kt = p["k_tile"]
        key = replace(key, k=kt, lda=kt if key.lda == 1 and not key.trans_a else key.lda)
    return (GENERATOR_VERSION, key, tuple(sorted(p.items())))


def fits_int32(problem: GemmProblem) -> bool:
    """Whether every buffer ``problem`` addresses fits 32-bit indices (GPU kernels with a
    run-time size index in int32: the launcher takes them only for problems that fit)."""
    return max(problem.size("a"), problem.size("b"), problem.size("c")) < 2 ** 31 - 1


def flops(problem: GemmProblem) -> int:
    """Floating-point operations of the GEMM (2*m*n*k per batch entry)."""
    return 2 * problem.m * problem.n * problem.k * problem.batch

# }}}


# {{{ expression helpers

def _var(name):
    import pymbolic.primitives as prim

    return prim.Variable(name)


def _lt(a, b):
    import pymbolic.primitives as prim

    return prim.Comparison(a, "<", b)


def _ge(a, b):
    import pymbolic.primitives as prim

    return prim.Comparison(a, ">=", b)


def _clamp_hi(expr, limit):
    """``expr`` if ``expr < limit`` else ``limit - 1`` (a C conditional expression)."""
    import pymbolic.primitives as prim

    return prim.If(_lt(expr, limit), expr, limit - 1)


def _sub(name, *idx):
    import pymbolic.primitives as prim

    return prim.Subscript(_var(name), tuple(idx) if len(idx) > 1 else idx[0])


def _cast(dtype, expr, from_dtype):
    if np.dtype(dtype) == np.dtype(from_dtype):
        return expr
    from loopy.symbolic import TypeCast

    return TypeCast(np.dtype(dtype), expr)

# }}}


def _off(pr: GemmProblem, which: str):
    """Base offset of buffer ``which``: the constant, plus the run-time argument if any."""
    const = {"a": pr.a_offset, "b": pr.b_offset, "c": pr.c_offset}[which]
    if not pr.runtime_offsets:
        return const
    return _var(f"{which}_off") + const if const else _var(f"{which}_off")


@dataclass
class _Layout:
    """Index expressions of one kernel: how (row, col) of A, B, C map to flat offsets."""

    pr: GemmProblem
    bt: Any  # batch index expression (0 when batch == 1)
    mp: int  # padded M (rows computed)
    np_: int  # padded N (columns computed)

    @property
    def m(self):
        """Rows of C: the constant, or the kernel's ``m`` argument."""
        return _var("m") if self.pr.runtime_m else self.pr.m

    @property
    def k(self):
        """The reduction length: the constant, or the kernel's ``ksize`` argument."""
        return _var("ksize") if self.pr.runtime_k else self.pr.k

    @property
    def lda(self):
        """A's leading dimension: ``ksize`` for a dense A under a run-time k."""
        pr = self.pr
        if pr.runtime_k and not pr.trans_a and pr.lda == pr.k:
            return _var("ksize")
        return pr.lda

    @property
    def ldc(self):
        """C's leading dimension: the constant, or the kernel's ``ldc`` argument."""
        return _var("ldc") if self.pr.runtime_ldc else self.pr.ldc

    @property
    def ragged_m(self) -> bool:
        """Whether rows past ``m`` are computed (and so clamped on reads, never stored)."""
        return self.pr.runtime_m or self.mp > self.pr.m

    def stride(self, which: str):
        """Batch stride of ``which``: the constant, or the kernel's ``stride_<which>``."""
        if self.pr.runtime_strides:
            return _var(f"stride_{which}")
        return {"a": self.pr.stride_a, "b": self.pr.stride_b, "c": self.pr.stride_c}[which]

    def a(self, i, kk, clamped: bool = False):
        """A's element (i, kk); ``clamped``: ``i`` is already a valid row."""
        pr = self.pr
        if self.ragged_m and not clamped:
            i = _clamp_hi(i, self.m)
        base = _off(pr, "a") + self.bt * self.stride("a")
        idx = base + (kk * pr.lda + i if pr.trans_a else i * self.lda + kk)
        return _cast(pr.acc_dtype, _sub("a", idx), pr.dtype)

    def b_plain(self, kk, j, clamp: bool):
        pr = self.pr
        base = _off(pr, "b") + self.bt * self.stride("b")
        if pr.trans_b:
            if self.np_ > pr.n:
                j = _clamp_hi(j, pr.n)
            idx = base + j * pr.ldb + kk
        else:
            if clamp and self.np_ > pr.n:
                j = _clamp_hi(j, pr.n)
            idx = base + kk * pr.ldb + j
        return _cast(pr.acc_dtype, _sub("b", idx), pr.dtype)

    def b_panel(self, kk, panel, within):
        pr = self.pr
        w = pr.panel_width
        idx = _off(pr, "b") + self.bt * self.stride("b") + panel * (self.k * w) + kk * w + within
        return _cast(pr.acc_dtype, _sub("b", idx), pr.dtype)

    def c_index(self, i, j):
        pr = self.pr
        return _off(pr, "c") + self.bt * self.stride("c") + i * self.ldc + j

    def store(self, i, j, acc_expr, row_pred=None):
        """(assignee, value, predicates) of the C update for element (i, j); ``row_pred``
        replaces the ``i < m`` guard of ragged rows (``False``: no row guard)."""
        pr = self.pr
        acc_t = pr.acc_dtype.type
        value = acc_expr if pr.alpha == 1.0 else acc_t(pr.alpha) * acc_expr
        if pr.beta != 0.0:
            old = _cast(pr.acc_dtype, _sub("c", self.c_index(i, j)), pr.dtype)
            value = value + (old if pr.beta == 1.0 else acc_t(pr.beta) * old)
        preds = []
        if row_pred is not None:
            if row_pred is not False:
                preds.append(row_pred)
        elif self.ragged_m:
            preds.append(_lt(i, self.m))
        if self.np_ > pr.n:
            preds.append(_lt(j, _var("ncols") if pr.runtime_n else pr.n))
        if has_epilogue(pr):
            value = self._epilogue(i, j, value)
        # narrowing to a C narrower than acc_dtype happens in the assignment (see _store_insns)
        return _sub("c", self.c_index(i, j)), value, frozenset(preds)

    def _epilogue(self, i, j, value):
        """Bias and post-ops at C's element (i, j) (its destination position)."""
        from pymbolic.primitives import FloorDiv, Remainder

        from . import post_ops as po
        from .reorder import _offset_expr

        pr = self.pr
        if pr.epi_fixed is not None:
            pos = list(pr.epi_fixed)
        else:  # batch index over the destination's batch dims, last fastest
            pos, inner = [], 1
            for d in reversed(pr.epi_batch):
                e = self.bt if inner == 1 else FloorDiv(self.bt, inner)
                pos.append(Remainder(e, d) if d > 1 else 0)
                inner *= d
            pos.reverse()
        pos += [j, i] if pr.epi_swap else [i, j]
        value = scale_product(pr, value, pos)
        if pr.bias is not None:
            layout, dims, _ = pr.bias
            value = value + _var("bias")[_offset_expr(
                layout, [0 if d == 1 else e for d, e in zip(dims, pos)])]
        prior = _sub("c", self.c_index(i, j)) if po.reads_prior(pr.post_ops) else None
        return scale_result(pr, po.apply(value, pr.post_ops, prior, at=pos), pos)


def has_epilogue(pr: GemmProblem) -> bool:
    """Whether ``pr`` stores through a fused epilogue (bias, post-ops or scales)."""
    return pr.bias is not None or bool(pr.post_ops) or bool(pr.scales)


def scale_name(which: str) -> str:
    """The kernel argument holding scale ``which`` (``"src"``, ``"wei"``, ``"dst"``)."""
    return f"{which}_scale"


def scale_names(pr: GemmProblem) -> tuple[str, ...]:
    """The scale arguments ``pr``'s kernel takes, in :data:`SCALE_KINDS` order."""
    return tuple(scale_name(w) for w, _ in pr.scales)


def _scale_at(which: str, dims: tuple, pos):
    """Scale ``which``'s value at destination position ``pos`` (pymbolic)."""
    idx, stride = 0, 1
    for d, e in zip(reversed(dims), reversed(pos)):
        if d > 1:
            idx = idx + (e if stride == 1 else e * stride)
            stride *= d
    return _sub(scale_name(which), idx)


def scale_product(pr: GemmProblem, value, pos):
    """``value`` (the product at destination position ``pos``) times the src and weights
    scales, in that order (pymbolic)."""
    for which, dims in pr.scales:
        if which != "dst":
            value = value * _scale_at(which, dims, pos)
    return value


def scale_result(pr: GemmProblem, value, pos):
    """``value`` (after the post-ops) times the reciprocal of the dst scale (pymbolic)."""
    import pymbolic.primitives as prim

    for which, dims in pr.scales:
        if which == "dst":
            value = value * prim.Quotient(np.float32(1.0), _scale_at(which, dims, pos))
    return value


def _store_insns(lay: _Layout, i, j, acc_expr, within, deps, row_pred=None, sfx=""):
    """Instructions (and temporaries) writing ``alpha*acc + beta*C`` to C[i, j]; ``sfx``
    tells a second set of stores apart (ids ``store<sfx>``)."""
    import loopy as lp

    pr = lay.pr
    assignee, value, preds = lay.store(i, j, acc_expr, row_pred)
    if pr.dtype == pr.acc_dtype:
        return [lp.Assignment(assignee, value, id="store" + sfx, predicates=preds,
                              depends_on=frozenset(deps), within_inames=frozenset(within))], []
    if sfx:
        raise ValueError("_store_insns: a second set of stores needs C in acc_dtype")
    # C narrower than acc_dtype: compute in acc_dtype, then narrow in a plain assignment,
    # because loopy prints every constant of an expression in the assignee's type (and has
    # no OpenCL spelling of float16 constants)
    cv = _var("c_val")
    nosync = frozenset([("store", "any"), ("store_val", "any")])  # same work-item, same element
    return [lp.Assignment(cv, value, id="store_val", predicates=preds,
                          depends_on=frozenset(deps), within_inames=frozenset(within),
                          depends_on_is_final=True, no_sync_with=nosync),
            lp.Assignment(assignee, cv, id="store", predicates=preds,
                          depends_on=frozenset(["store_val"]), within_inames=frozenset(within),
                          depends_on_is_final=True, no_sync_with=nosync)], [
        lp.TemporaryVariable("c_val", pr.acc_dtype, shape=(),
                             address_space=lp.AddressSpace.PRIVATE)]


def _vector_stores(pr: GemmProblem, vw: int, np_: int) -> bool:
    """Whether the register tile stores C a vector at a time (``vstore<vw>``): a C in the
    accumulator's type without an epilogue, whose columns past ``n`` fill whole vectors.
    AVX-512 Xeon, 8x48 tiles, kernel time, medians of interleaved rounds (GFLOP/s, lane
    stores -> vector stores): Intel's runtime 64x2048x512 283-312 -> 313-330, 3200x2048x512
    288-308 -> 301-324; PoCL 155-183 -> 175-192 and 163-192 -> 173-194. benchdnn's --gemm
    timing of the two shapes on the shared machine: within noise (undisturbed rounds 301-319
    before, 291-321 after). Intel's build takes about half the time (1024^3 348 -> 155 ms
    on a loaded machine)."""
    ok_t = pr.dtype == pr.acc_dtype and pr.dtype.type in (np.float32, np.float64)
    scal = all(np.isfinite(x) for x in (pr.alpha, pr.beta))
    return (vw > 1 and ok_t and scal and (not has_epilogue(pr) or _vector_epilogue(pr))
            and (np_ == pr.n or pr.n % vw == 0))


# eltwise post-ops whose C formula (eltwise_ops.forward_expr) is valid on a float vector
_VECTOR_ELTWISE = frozenset({int(A_.eltwise_relu)})


def _vector_epilogue(pr: GemmProblem) -> bool:
    """Whether the vector stores take ``pr``'s epilogue: f32, C read (beta or a sum
    post-op), a bias over columns only (unit stride), post-ops sums and ReLUs, no scales.
    Lane stores that read C ran a 1x1 convolution with a sum post-op (ResNet-50's
    res4a_branch2c, im2col + GEMM, 196x1024x256, beta 1 + bias) at 1.13-1.14x the
    convolution alone on the AVX-512 Xeon (Intel's runtime). Epilogues that do not read C
    keep the lane stores (their code unchanged)."""
    from . import post_ops as po
    from .reorder import _offset_expr

    if pr.dtype.type != np.float32 or pr.scales or pr.epi_swap:
        return False
    if not (pr.beta != 0.0 or po.reads_prior(pr.post_ops)):
        return False
    if any(op[0] not in ("sum", "eltwise") or op[0] == "eltwise" and op[1] not in _VECTOR_ELTWISE
           for op in pr.post_ops):
        return False
    if pr.bias is not None:
        layout, dims, _ = pr.bias
        if len(dims) < 2 or dims[-2] != 1 or any(d != 1 for d in dims[:-2]):
            return False
        zero = [0] * len(dims)
        one = zero[:-1] + [1]
        try:
            if int(_offset_expr(layout, one)) - int(_offset_expr(layout, zero)) != 1:
                return False
        except TypeError:
            return False
    return True


def _c_literal(pr: GemmProblem, x: float) -> str:
    return repr(float(x)) + ("f" if pr.dtype.type == np.float32 else "")


def _vector_store_insns(lay: _Layout, i, j0, acc_at, vw: int, within, deps, row_pred=None,
                        sfx=""):
    """One C instruction writing ``alpha*acc + beta*C`` (then the epilogue
    :func:`_vector_epilogue` admits) to the ``vw`` columns of C from (i, j0): the
    accumulator vector ``acc[acc_at]`` in one ``vstore``. loopy writes a vector temporary's
    lanes one by one into a flat array; ``j0 < n`` guards the whole vector
    (``_vector_stores``: n is a multiple of ``vw`` where columns run past it). ``sfx``: the
    id's suffix of a second set of stores."""
    import loopy as lp

    pr = lay.pr
    _, _, preds = lay.store(i, j0, acc_at, row_pred)
    value = "acc[cacc]"
    if pr.alpha != 1.0:
        value = f"{_c_literal(pr, pr.alpha)} * {value}"
    reads = {"acc"}
    old = f"vload{vw}(0, c + cidx)"
    if pr.beta != 0.0:
        value += f" + {old}" if pr.beta == 1.0 else f" + {_c_literal(pr, pr.beta)} * {old}"
        reads.add("c")
    cidx = lay.c_index(i, j0)
    exprs = [("cidx", cidx), ("cacc", acc_at)]
    code = f"vstore{vw}({value}, 0, c + cidx);"
    if has_epilogue(pr):
        from . import post_ops as po
        from .eltwise_ops import forward_expr
        from .reorder import _offset_expr

        lines = [f"float{vw} pv = {value};"]
        if pr.bias is not None:
            layout, dims, _ = pr.bias
            exprs.append(("bidx", _offset_expr(layout, [0] * (len(dims) - 1) + [j0])))
            lines.append(f"pv += vload{vw}(0, bias + bidx);")
            reads.add("bias")
        for op in pr.post_ops:
            if op[0] == "sum":
                lines.append(f"pv = {po.apply_c('pv', (op,), None, prior=old)};")
                reads.add("c")
            else:
                _, alg, alpha, beta = op
                lines.append(f"pv = {forward_expr(alg, 'pv', alpha, beta)};")
        code = "{ " + " ".join(lines) + f" vstore{vw}(pv, 0, c + cidx); }}"
    from loopy.symbolic import get_dependencies

    reads |= {v for _, e in exprs for v in get_dependencies(e) if v not in within}
    return [lp.CInstruction(exprs, code, read_variables=frozenset(reads),
                            assignees=(_var("c"),), id="store" + sfx, predicates=preds,
                            depends_on=frozenset(deps), within_inames=frozenset(within))], []


def _gpu_index_dtype(pr: GemmProblem):
    """int32 indices where every buffer fits (cheaper on GPUs), else int64. CPU kernels always
    use int64: with int32 Intel's and PoCL's compilers lose the vector loads of B (3x slower).
    A run-time size decides by the problem its cache key names (so that every sample size
    generates the same code): int32, which callers check with :func:`fits_int32`."""
    return np.int32 if fits_int32(key_problem(pr)) else np.int64


def _args(pr: GemmProblem):
    import loopy as lp

    from . import post_ops as po

    epi = [lp.GlobalArg("bias", np.float32, shape=None)] if pr.bias is not None else []
    epi += po.loopy_args(pr.post_ops)
    epi += [lp.GlobalArg(n, np.float32, shape=None) for n in scale_names(pr)]
    reads_c = pr.beta != 0.0 or po.reads_prior(pr.post_ops)
    return _core_args(pr, reads_c) + epi


def _core_args(pr: GemmProblem, reads_c: bool):
    import loopy as lp

    if pr.runtime_offsets:  # sizes unknown at build time: the caller guarantees them
        # (build_gemm checks that run-time sizes come with run-time offsets)
        return [
            lp.GlobalArg("a", pr.dtype, shape=None, is_input=True, is_output=False),
            lp.GlobalArg("b", pr.dtype, shape=None, is_input=True, is_output=False),
            lp.GlobalArg("c", pr.dtype, shape=None, is_input=reads_c, is_output=True),
            lp.ValueArg("a_off", np.int64), lp.ValueArg("b_off", np.int64),
            lp.ValueArg("c_off", np.int64),
        ] + ([lp.ValueArg("m", np.int64)] if pr.runtime_m else []) + (
            [lp.ValueArg("ksize", np.int64)] if pr.runtime_k else []) + (
            [lp.ValueArg("ldc", np.int64)] if pr.runtime_ldc else []) + (
            [lp.ValueArg("ncols", np.int64)] if pr.runtime_n else []) + (
            [lp.ValueArg(f"stride_{w}", np.int64) for w in "abc"]
            if pr.runtime_strides else []) + (
            [lp.ValueArg("nbatch", np.int64)] if pr.runtime_batch else [])
    return [
        lp.GlobalArg("a", pr.dtype, shape=(pr.size("a"),), is_input=True, is_output=False),
        lp.GlobalArg("b", pr.dtype, shape=(pr.size("b"),), is_input=True, is_output=False),
        lp.GlobalArg("c", pr.dtype, shape=(pr.size("c"),), is_input=reads_c, is_output=True),
    ]


def _finish(knl, post_ops: tuple = ()):
    import loopy as lp

    from . import post_ops as po
    from .clhelpers import register_helpers

    knl = lp.set_options(knl, enforce_array_accesses_within_bounds="no_check",
                         enforce_variable_access_ordered="no_check")
    ep = knl.default_entrypoint
    knl = knl.with_kernel(ep.copy(silenced_warnings=list(ep.silenced_warnings) + [
        "v1_scheduler_fallback", "vectorize_failed", "unused_inames",
        "write_race(store)", "write_race(store_edge)"]))
    helpers = po.helpers(post_ops)
    return register_helpers(knl, helpers) if helpers else knl


def _tag_grid(knl, iname, size_inner, axis):
    """Split ``iname`` over work-groups (g.axis) and work-items (l.axis)."""
    import loopy as lp

    if size_inner == 1:
        return lp.tag_inames(knl, {iname: f"g.{axis}"})
    return lp.split_iname(knl, iname, size_inner, outer_tag=f"g.{axis}", inner_tag=f"l.{axis}")


def build_gemm(problem: GemmProblem, params: dict | None = None):
    """A loopy TranslationUnit computing ``problem`` with tuning ``params`` (all sizes fixed).

    The kernel is named ``gemm`` and takes ``(a, b, c)``: flat ``__global`` buffers of
    ``problem.dtype`` holding at least ``problem.size('a'/'b'/'c')`` elements. Launch it with
    the grid loopy reports (``get_grid_size_upper_bounds_as_exprs``).
    """
    p = normalize_params(params)
    pr = problem
    pw = pr.panel_width
    if p["packed_b"] and pw is None:
        raise ValueError("build_gemm: params['packed_b'] is set but problem.b_layout is 'plain'; "
                         "pack B and build with pack_b(problem, params).problem")
    if pw is not None and not p["packed_b"]:
        raise ValueError(f"build_gemm: problem.b_layout is {pr.b_layout!r} but params['packed_b'] "
                         f"is False")
    if pw is not None and not sub_panels_fit(pw, p):
        raise ValueError(f"build_gemm: problem.b_layout {pr.b_layout!r} needs params['cols'] a "
                         f"multiple of {pw} (and {pw} a multiple of params['vec']), got cols "
                         f"{p['cols']}, vec {p['vec']}")
    if (pr.runtime_m or pr.runtime_k) and not pr.runtime_offsets:
        raise ValueError("build_gemm: runtime_m and runtime_k need runtime_offsets")
    if p["local_prefetch"]:
        if pr.runtime_m == "tall":
            raise ValueError("build_gemm: the local-tile pipeline takes runtime_m='any' "
                             "(rows clamped), not 'tall'")
        return _build_local(pr, p)
    return _build_register(pr, p)


# {{{ register-tile pipeline (CPUs)

def _box_domains(inames, bounds, m_loop, k_split, wn, wm) -> list[str]:
    """The register-tile kernel's box as one domain per iname (``bounds[i]`` bounds
    ``inames[i]`` alone). isl then works on the few dimensions each instruction uses, not on
    all of them: code generation took 25-40% less. The domains are ordered as loopy orders the
    dimensions of the single box after :func:`_build_register`'s splits (each appends its two
    inames at the end), since that order is the order of the terms in generated index
    expressions: the source stays byte for byte the single box's. A row iname split twice
    (``m_loop`` and a work-group), whose pieces would interleave with others', keeps the box.
    """
    if m_loop > 1 and wm > 1:
        return ["{[%s]: %s}" % (", ".join(inames), " and ".join(bounds))]
    split = ((["io"] if m_loop > 1 else []) + (["k"] if k_split else [])
             + (["jo"] if wn > 1 else []) + (["io"] if wm > 1 else []))
    order = [n for n in inames if n not in split] + split
    by_name = dict(zip(inames, bounds))
    return ["{[%s]: %s}" % (n, by_name[n]) for n in order]

def _build_register(pr: GemmProblem, p: dict):
    import loopy as lp

    rm, nr, vw = p["rows"], p["cols"], p["vec"]
    nv = nr // vw
    wn, wm = p["wg"]
    mt = -(-pr.m // rm)
    nt = -(-pr.n // nr)
    mp, np_ = mt * rm, nt * nr
    batched = pr.batch > 1
    V = _var
    bt = V("bt") if batched else 0
    lay = _Layout(pr, bt, mp, np_)
    m = lay.m
    packed = pr.panel_width is not None

    # plain, non-transposed B with a ragged N: columns past n read into the next row of B,
    # which is only safe while that stays inside B; the last n_peel k steps clamp instead.
    n_peel = 0
    if not packed and not pr.trans_b and np_ > pr.n:
        n_peel = -(-(np_ - pr.n) // pr.ldb)
        if pr.runtime_k and n_peel > 1:
            raise ValueError(f"build_gemm: runtime_k with {n_peel} clamped k steps (plain B "
                             f"{pr.n} columns wide in {nr}-column tiles); at most 1")
        n_peel = n_peel if pr.runtime_k else min(pr.k, n_peel)
    rk = pr.runtime_k
    # k steps of the main loop: a constant, or "ksize - n_peel" (a domain bound)
    k_main = f"ksize - {n_peel}" if rk else pr.k - n_peel
    k_end = "ksize" if rk else pr.k
    has_main = rk or k_main > 0

    outer = ["io", "jo"] + (["bt"] if batched else [])
    small = {"ii": rm, "jj": nv, "jv": vw, "iz": rm, "jz": nv, "vz": vw, "jb": nv, "vb": vw,
             "is": rm, "js": nv, "vs": vw}
    # a ragged M clamps the rows of the last tile: once per row before the k loop, into
    # private row indices (a clamp inside the loop cost 25-35% on AVX-512: 49x2048x512 ran
    # 189 GFLOP/s in 8-row tiles, which clamp, against 281 in 7-row ones, which do not;
    # 260 in 8-row tiles with the clamp hoisted)
    # "tall" runtime m (m >= rm): the last tile starts at m - rm instead, every row is valid
    tall = pr.runtime_m == "tall"
    ragged_m = lay.ragged_m and not tall
    from . import post_ops as po

    reads_c = pr.beta != 0.0 or po.reads_prior(pr.post_ops)
    # a moved last tile that reads C stores its own rows only, in a loop nest of its own
    # (inames ie, je, ve): the other tiles store as a baked kernel does
    edge = tall and reads_c and pr.dtype == pr.acc_dtype
    if edge:
        small.update({"ie": rm, "je": nv, "ve": vw})
    if ragged_m:
        small["ia"] = rm
    # with a runtime m the row tiles are those that start before m
    io_bound = f"0 <= io and {rm} * io <= m - 1" if pr.runtime_m else f"0 <= io < {mt}"
    nb = "nbatch" if pr.runtime_batch else pr.batch
    bounds = [io_bound, f"0 <= jo < {nt}"] + ([f"0 <= bt < {nb}"] if batched else [])
    bounds += [f"0 <= {n} < {s}" for n, s in small.items()]
    inames = outer + list(small)
    k_domains = []
    if has_main and rk:
        # its own domain: an empty main loop (k <= n_peel) must not empty the whole kernel
        k_domains.append(f"{{[k]: 0 <= k < {k_main}}}")
    elif has_main:
        inames.append("k")
        bounds.append(f"0 <= k < {k_main}")
    if n_peel:
        inames += ["kp", "jbp", "vbp", "ip", "jp", "vp"]
        bounds += [f"{k_main} <= kp < {k_end}", f"0 <= jbp < {nv}", f"0 <= vbp < {vw}",
                   f"0 <= ip < {rm}", f"0 <= jp < {nv}", f"0 <= vp < {vw}"]
    ml = p["m_loop"] if pr.runtime_m else min(p["m_loop"], mt)
    ku = p["k_unroll"]
    k_split = ku > 1 and (rk or (k_main > 0 and k_main >= ku))
    domain = _box_domains(inames, bounds, ml, k_split and not rk, wn, wm) + k_domains

    def row(ii):
        return V("io") * rm + ii

    def col(jj, jv):
        return V("jo") * nr + jj * vw + jv

    def bload(kk, jj, jv, clamp):
        if packed and pr.panel_width != nr:
            # panels narrower than the tile: vector jj of tile jo lies in panel jo * nr / pw
            # + jj // q (q vectors per panel); a last tile reaching past n reads the last
            # panel again for its columns past n (never stored)
            pw = pr.panel_width
            q = pw // vw
            panel = V("jo") * (nr // pw) + (jj // q if q > 1 else jj)
            npan = -(-pr.n // pw)
            if nt * (nr // pw) > npan:
                panel = _clamp_hi(panel, npan)
            return lay.b_panel(kk, panel, ((jj % q) * vw if q > 1 else 0) + jv)
        if packed:
            return lay.b_panel(kk, V("jo"), jj * vw + jv)
        return lay.b_plain(kk, col(jj, jv), clamp)

    base = frozenset(outer)
    acc = lambda i, j, v: _sub("acc", V(i), V(j), V(v))  # noqa: E731
    insns = [lp.Assignment(acc("iz", "jz", "vz"), 0, id="zero",
                           within_inames=base | {"iz", "jz", "vz"})]
    if ragged_m:
        insns.append(lp.Assignment(_sub("arow", V("ia")), _clamp_hi(row(V("ia")), m),
                                   id="arow", within_inames=base | {"ia"}))
    if tall:
        import pymbolic.primitives as prim

        insns.append(lp.Assignment(V("r0"), prim.If(
            prim.Comparison(row(0) + rm, "<=", m), row(0), m - rm), id="arow",
            within_inames=base))

    def a_of(ii, kk):
        if ragged_m:
            return lay.a(_sub("arow", V(ii)), V(kk), clamped=True)
        if tall:
            return lay.a(V("r0") + V(ii), V(kk), clamped=True)
        return lay.a(row(V(ii)), V(kk))

    fma_ids = []
    last = "zero"
    steps = []
    if has_main:
        steps.append(("k", "jb", "vb", "ii", "jj", "jv", False, ""))
    if n_peel:
        steps.append(("kp", "jbp", "vbp", "ip", "jp", "vp", True, "_peel"))
    for kk, jb, vb, ii, jj, jv, clamp, sfx in steps:
        insns.append(lp.Assignment(
            _sub("bv", V(jb), V(vb)), bload(V(kk), V(jb), V(vb), clamp), id="ldb" + sfx,
            depends_on=frozenset([last]), within_inames=base | {kk, jb, vb}))
        insns.append(lp.Assignment(
            acc(ii, jj, jv), acc(ii, jj, jv) + a_of(ii, kk) * _sub("bv", V(jj), V(jv)),
            id="fma" + sfx, depends_on=frozenset(["ldb" + sfx, "zero"]
                                                 + (["arow"] if ragged_m or tall else [])),
            within_inames=base | {kk, ii, jj, jv}))
        last = "fma" + sfx
        fma_ids.append(last)
    # a moved last tile recomputes rows of the tile before it, bit for bit (same loads, same
    # order): with beta == 0 it stores them again, the same values, unguarded; a per-row
    # guard splits the vector stores into scalar ones (5% on AVX-512 at 64x2048x512). With
    # beta != 0 or a sum post-op (C read) it stores only its own rows: the moved tile in
    # its own loop nest behind one test, its rows guarded (a guard on every row of every
    # tile cost 10-40% on AVX-512 at 784x256x64 with beta = 1, 121 -> 170 us)
    st_row = V("r0") + V("is") if tall else row(V("is"))
    guard = (_ge(st_row, row(0)) if reads_c else False) if tall else None
    st_within = base | {"is", "js", "vs"}
    st_col = col(V("js"), V("vs"))
    if edge and _vector_stores(pr, vw, np_):
        # also without an epilogue (an RNN's accumulated weight gradients, beta = 1): lane
        # stores took Intel's compiler 1.05-1.15 s for the 8x48 tile (vector stores 0.17-0.21
        # s; PoCL 0.94 -> 0.19 s) and ran at the same speed where the moved tile stores
        # nothing (512x2048x3200, in-process interleaved min ms: Intel 22.2 / 22.6, PoCL
        # 21.8 / 21.1) and slower where it does (780x256x64: Intel 0.134 -> 0.094, PoCL
        # 0.129 -> 0.105)
        import pymbolic.primitives as prim

        st_insns, st_temps = _vector_store_insns(
            lay, st_row, col(V("js"), 0), V("is") * nv + V("js"), vw, base | {"is", "js"},
            fma_ids or ["zero"], prim.Comparison(V("r0"), "==", row(0)))
        e_row = V("r0") + V("ie")
        st_insns += _vector_store_insns(
            lay, e_row, col(V("je"), 0), V("ie") * nv + V("je"), vw, base | {"ie", "je"},
            fma_ids or ["zero"], prim.LogicalAnd((prim.Comparison(V("r0"), "!=", row(0)),
                                                  _ge(e_row, row(0)))), "_edge")[0]
    elif edge:
        import pymbolic.primitives as prim

        st_insns, st_temps = _store_insns(lay, st_row, st_col, acc("is", "js", "vs"),
                                          st_within, fma_ids or ["zero"],
                                          prim.Comparison(V("r0"), "==", row(0)))
        e_row = V("r0") + V("ie")
        e_insns, _ = _store_insns(lay, e_row, col(V("je"), V("ve")), acc("ie", "je", "ve"),
                                  base | {"ie", "je", "ve"}, fma_ids or ["zero"],
                                  prim.LogicalAnd((prim.Comparison(V("r0"), "!=", row(0)),
                                                   _ge(e_row, row(0)))), "_edge")
        st_insns += e_insns
    elif _vector_stores(pr, vw, np_):
        st_insns, st_temps = _vector_store_insns(lay, st_row, col(V("js"), 0),
                                                 V("is") * nv + V("js"), vw,
                                                 base | {"is", "js"}, fma_ids or ["zero"],
                                                 guard)
    else:
        st_insns, st_temps = _store_insns(lay, st_row, st_col, acc("is", "js", "vs"),
                                          st_within, fma_ids or ["zero"], guard)
    insns += st_insns

    temps = st_temps + [lp.TemporaryVariable("acc", pr.acc_dtype, shape=(rm, nv, vw),
                                  address_space=lp.AddressSpace.PRIVATE),
             lp.TemporaryVariable("bv", pr.acc_dtype, shape=(nv, vw),
                                  address_space=lp.AddressSpace.PRIVATE)]
    if ragged_m:
        temps.append(lp.TemporaryVariable("arow", np.int64, shape=(rm,),
                                          address_space=lp.AddressSpace.PRIVATE))
    if tall:
        temps.append(lp.TemporaryVariable("r0", np.int64, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
    knl = lp.make_kernel(domain, insns, _args(pr) + temps, target=lp.OpenCLTarget(),
                         name="gemm", lang_version=(2018, 2), index_dtype=np.int64)
    if vw > 1:
        knl = lp.tag_array_axes(knl, "acc", "c,c,vec")
        knl = lp.tag_array_axes(knl, "bv", "c,vec")
    vec = "vec" if vw > 1 else "unr"
    u = _UNROLL
    tags = {"ii": u, "jj": u, "jv": vec, "iz": u, "jz": u, "vz": vec,
            "jb": u, "vb": "unr", "is": u, "js": u, "vs": "unr"}
    if ragged_m:
        tags["ia"] = u
    if n_peel:
        tags.update({"jbp": u, "vbp": "unr", "ip": u, "jp": u, "vp": vec})
    knl = lp.tag_inames(knl, tags)
    if edge:
        knl = lp.tag_inames(knl, {"ie": u, "je": u, "ve": "unr"})
        # the row guard outermost, the lanes innermost: the compiler merges one row's guarded
        # lane stores into vector stores again
        knl = lp.prioritize_loops(knl, "ie,je,ve")
    if has_main:
        knl = lp.prioritize_loops(knl, "k,ii,jj,jv")
        knl = lp.prioritize_loops(knl, "k,jb,vb")
    if n_peel:
        knl = lp.prioritize_loops(knl, "kp,ip,jp,vp")
        knl = lp.prioritize_loops(knl, "kp,jbp,vbp")
    grid_io = "io"
    if ml > 1:
        knl = lp.split_iname(knl, "io", ml)
        grid_io = "io_outer"
        for kname in (["k"] if has_main else []) + (["kp"] if n_peel else []):
            knl = lp.prioritize_loops(knl, f"io_inner,{kname}")
    if rk and ku > 1:  # a run-time k: the remainder slab always
        knl = lp.split_iname(knl, "k", ku, inner_tag=_UNROLL, slabs=(0, 1))
    elif not rk and k_main > 0 and ku > 1 and k_main >= ku:
        knl = lp.split_iname(knl, "k", ku, inner_tag=_UNROLL,
                             slabs=(0, 1) if k_main % ku else (0, 0))
    ax_n, ax_m = (1, 0) if p["m_inner"] else (0, 1)
    knl = _tag_grid(knl, "jo", wn, ax_n)
    knl = _tag_grid(knl, grid_io, wm, ax_m)
    if batched:
        knl = lp.tag_inames(knl, {"bt": "g.2"})
    return _finish(knl, pr.post_ops)

# }}}


# {{{ local-memory pipeline (GPUs)

def _build_local(pr: GemmProblem, p: dict):
    import loopy as lp
    import pymbolic.primitives as prim

    rm, nr = p["rows"], p["cols"]
    wn, wm = p["wg"]
    kt = _k_tile(pr, p)
    tm, tn = wm * rm, wn * nr  # work-group tile
    mt, nt = -(-pr.m // tm), -(-pr.n // tn)
    batched = pr.batch > 1
    V = _var
    bt = V("bt") if batched else 0
    # rows/columns past the edges read clamped (valid) elements and are never stored (a
    # run-time m: the row tiles that start before m, every A row read clamped)
    lay = _Layout(pr, bt, mt * tm, nt * tn)
    kot = -(-pr.k // kt)
    rk = pr.runtime_k
    gi_bound = f"0 <= gi and {tm} * gi <= m - 1" if pr.runtime_m else f"0 <= gi < {mt}"
    # a run-time k: the k tiles that start before ksize, the last one zero-filled past it;
    # a sample k of whole k tiles makes a kernel for such k only, without the fill (which
    # cost the H100 13-21%: 64x512x512 18.8 -> 22.3 us, 64x512x2048 58.5 -> 70.7)
    ko_bound = f"0 <= ko and {kt} * ko <= ksize - 1" if rk else f"0 <= ko < {kot}"

    outer = ["gi", "gj"] + (["bt"] if batched else [])
    bounds = [gi_bound, f"0 <= gj < {nt}", f"0 <= li < {wm}", f"0 <= lj < {wn}",
              f"0 <= ii < {rm}", f"0 <= jj < {nr}", f"0 <= iz < {rm}", f"0 <= jz < {nr}",
              f"0 <= is < {rm}", f"0 <= js < {nr}", ko_bound, f"0 <= ki < {kt}"]
    if batched:
        bounds.append(f"0 <= bt < {'nbatch' if pr.runtime_batch else pr.batch}")
    inames = outer + ["li", "lj", "ii", "jj", "iz", "jz", "is", "js", "ko", "ki"]
    domain = "{[%s]: %s}" % (", ".join(inames), " and ".join(bounds))

    def row(ii):
        return V("gi") * tm + ii * wm + V("li")

    def col(jj):
        return V("gj") * tn + jj * wn + V("lj")

    # the last k tile is zero-filled past k: every loop keeps a uniform trip count
    a_val, b_val = lay.a(V("ri"), V("rk")), lay.b_plain(V("rk"), V("rj"), True)
    if pr.k % kt:
        zero = pr.acc_dtype.type(0)
        a_val = prim.If(_lt(V("rk"), lay.k), a_val, zero)
        b_val = prim.If(_lt(V("rk"), lay.k), b_val, zero)
    rules = [
        lp.SubstitutionRule("a_tile", ("ri", "rk"), a_val),
        lp.SubstitutionRule("b_tile", ("rk", "rj"), b_val),
    ]
    base = frozenset(outer + ["li", "lj"])
    acc = lambda i, j: _sub("acc", V(i), V(j))  # noqa: E731
    kk = V("ko") * kt + V("ki")
    insns = rules + [
        lp.Assignment(acc("iz", "jz"), 0, id="zero", within_inames=base | {"iz", "jz"}),
        lp.Assignment(acc("ii", "jj"),
                      acc("ii", "jj")
                      + prim.Call(V("a_tile"), (row(V("ii")), kk))
                      * prim.Call(V("b_tile"), (kk, col(V("jj")))),
                      id="fma", depends_on=frozenset(["zero"]),
                      within_inames=base | {"ko", "ki", "ii", "jj"}),
    ]
    st_insns, st_temps = _store_insns(lay, row(V("is")), col(V("js")), acc("is", "js"),
                                      base | {"is", "js"}, ["fma"])
    insns += st_insns
    temps = st_temps + [lp.TemporaryVariable("acc", pr.acc_dtype, shape=(rm, nr),
                                  address_space=lp.AddressSpace.PRIVATE)]
    knl = lp.make_kernel(domain, insns, _args(pr) + temps, target=lp.OpenCLTarget(),
                         name="gemm", lang_version=(2018, 2), index_dtype=_gpu_index_dtype(pr))
    # run-time sizes are at least 1: no test of them around the whole kernel (which holds
    # the barriers; PoCL 3.0 stored rows past m from such a kernel)
    assumed = [f"{v} >= 1" for v, on in (("m", pr.runtime_m), ("ksize", rk),
                                         ("nbatch", pr.runtime_batch)) if on]
    if assumed:
        knl = lp.assume(knl, " and ".join(assumed))
    u = _UNROLL
    knl = lp.tag_inames(knl, {"gi": "g.1", "gj": "g.0", "li": "l.1", "lj": "l.0",
                              "ii": u, "jj": u, "iz": u, "jz": u, "is": u, "js": u})
    if batched:
        knl = lp.tag_inames(knl, {"bt": "g.2"})
    knl = lp.prioritize_loops(knl, "ko,ki,ii,jj")
    # fetch loops: the axis contiguous in global memory goes to local axis 0 (coalescing)
    a_axes = ("ar", "ak") if not pr.trans_a else ("ak", "ar")  # (slow, fast) in memory
    b_axes = ("bk", "bc") if not pr.trans_b else ("bc", "bk")
    if kt == 1:
        # k == 1 (an outer product, e.g. a weight gradient over one image): nothing to share
        # through local memory; the tiles are read where they are used
        return _finish(knl, pr.post_ops)
    for rule, sweep, name, pinames, axes in (
            ("a_tile", ["li", "ii", "ki"], "a_loc", ["ar", "ak"], a_axes),
            ("b_tile", ["lj", "jj", "ki"], "b_loc", ["bk", "bc"], b_axes)):
        knl = lp.precompute(knl, rule, sweep_inames=sweep,
                            precompute_outer_inames=frozenset(outer + ["ko"]),
                            precompute_inames=pinames,
                            temporary_address_space=lp.AddressSpace.LOCAL,
                            temporary_name=name, compute_insn_id="fetch_" + name[0])
        slow, fast = axes
        knl = lp.split_iname(knl, fast, wn, inner_tag="l.0")
        knl = lp.split_iname(knl, slow, wm, inner_tag="l.1")
    return _finish(knl, pr.post_ops)

# }}}


# {{{ packing B

@dataclass(frozen=True)
class BPacking:
    """How to turn ``source`` (a problem with plain B) into the packed B ``problem`` reads.

    ``problem`` is the same GEMM with ``b_layout == panel<width>``, ``b_offset == 0`` and a
    dense ``stride_b``; ``size`` is the packed buffer's element count. :meth:`pack` packs a
    numpy array on the host; :meth:`build` makes a loopy kernel ``pack_b(b, bp)`` doing the
    same on the device (``b``: the source buffer as the source problem describes it).
    """

    source: GemmProblem
    problem: GemmProblem
    width: int

    @property
    def size(self) -> int:
        """Elements of the packed buffer."""
        return self.problem.size("b")

    @property
    def count(self) -> int:
        """Number of B matrices packed (1 when the batch shares B via ``stride_b == 0``)."""
        return 1 if self.source.stride_b == 0 else self.source.batch

    def pack(self, b: np.ndarray) -> np.ndarray:
        """Packed flat array from ``b``: the flat source buffer (as the source problem
        addresses it), or the logical ``op(B)`` as a ``(k, n)`` / ``(batch, k, n)`` array."""
        src, w, cnt = self.source, self.width, self.count
        b = np.asarray(b)
        if b.ndim >= 2:
            logical = b.reshape((-1, src.k, src.n))
            if logical.shape[0] not in (1, cnt):
                raise ValueError(f"BPacking.pack: expected {cnt} matrices of shape "
                                 f"({src.k}, {src.n}), got array of shape {b.shape}")
            logical = np.broadcast_to(logical, (cnt, src.k, src.n))
        else:
            if b.size < src.size("b"):
                raise ValueError(f"BPacking.pack: flat source holds {b.size} elements, the "
                                 f"problem addresses {src.size('b')}")
            mats = []
            for t in range(cnt):
                start = src.b_offset + t * src.stride_b
                rows = src.n if src.trans_b else src.k
                cols = src.k if src.trans_b else src.n
                view = np.lib.stride_tricks.as_strided(
                    b[start:], shape=(rows, cols), strides=(src.ldb * b.itemsize, b.itemsize))
                mats.append(view.T if src.trans_b else view)
            logical = np.stack(mats)
        npad = -(-src.n // w) * w
        padded = np.zeros((cnt, src.k, npad), dtype=src.dtype)
        padded[:, :, :src.n] = logical
        out = padded.reshape(cnt, src.k, npad // w, w).transpose(0, 2, 1, 3)
        return np.ascontiguousarray(out).reshape(-1)

    def build(self, dst_offset: int = 0):
        """loopy TranslationUnit ``pack_b(b, bp)`` packing on the device, writing the packed
        matrices from element ``dst_offset`` of ``bp`` on. With a source problem of
        ``runtime_offsets`` the kernel takes ``b_off`` and ``bp_off`` (int64) instead: where
        B starts in ``b`` and where the panels go in ``bp`` (``dst_offset`` is ignored)."""
        import loopy as lp
        import pymbolic.primitives as prim

        src, dst, w = self.source, self.problem, self.width
        npan = -(-src.n // w)
        batched = self.count > 1
        V = _var
        bt = V("bt") if batched else 0
        lay = _Layout(src, bt, src.m, npan * w)
        rk = src.runtime_k
        if rk and (src.trans_b or batched):
            raise ValueError("pack_b: a run-time k packs one B, not transposed")
        inames = ["p", "kk", "r"] + (["bt"] if batched else [])
        bounds = [f"0 <= p < {npan}", f"0 <= kk < {'ksize' if rk else src.k}",
                  f"0 <= r < {w}"] + ([f"0 <= bt < {self.count}"] if batched else [])
        domain = "{[%s]: %s}" % (", ".join(inames), " and ".join(bounds))
        j = V("p") * w + V("r")
        value = lay.b_plain(V("kk"), j, False)
        if src.n % w:
            value = prim.If(_lt(j, src.n), value, 0)
        value = _cast(src.dtype, value, src.acc_dtype)
        rt = src.runtime_offsets
        base = V("bp_off") if rt else dst_offset
        idx = base + bt * dst.stride_b + V("p") * (lay.k * w) + V("kk") * w + V("r")
        insn = lp.Assignment(_sub("bp", idx), value, id="pack",
                             within_inames=frozenset(inames))
        if rt:
            args = [lp.GlobalArg("b", src.dtype, shape=None, is_input=True, is_output=False),
                    lp.GlobalArg("bp", src.dtype, shape=None, is_input=False, is_output=True),
                    lp.ValueArg("b_off", np.int64), lp.ValueArg("bp_off", np.int64)] + (
                [lp.ValueArg("ksize", np.int64)] if rk else [])
        else:
            args = [lp.GlobalArg("b", src.dtype, shape=(src.size("b"),), is_input=True,
                                 is_output=False),
                    lp.GlobalArg("bp", src.dtype, shape=(dst_offset + dst.size("b"),),
                                 is_input=False, is_output=True)]
        knl = lp.make_kernel(domain, [insn], args, target=lp.OpenCLTarget(), name="pack_b",
                             lang_version=(2018, 2), index_dtype=np.int64)
        knl = lp.split_iname(knl, "kk", 16, outer_tag="g.0", inner_tag=_UNROLL)
        knl = lp.tag_inames(knl, {"p": "g.1", "r": "l.0"})
        if batched:
            knl = lp.tag_inames(knl, {"bt": "g.2"})
        return _finish(knl)


def pack_b(problem: GemmProblem, params: dict | None = None) -> BPacking:
    """The packing that makes ``problem``'s B readable by a kernel built with ``params``.

    Panels are ``params['cols']`` columns wide (one work-item's columns), so every B load of
    the register-tile kernel is contiguous. Weights are static: pack once at primitive creation.
    """
    p = normalize_params(params)
    if problem.panel_width is not None:
        raise ValueError(f"pack_b: B is already packed ({problem.b_layout})")
    w = p["cols"]
    shared = problem.batch > 1 and problem.stride_b == 0  # one B for every batch entry
    packed = replace(problem, b_layout=panel_layout(w), b_offset=0, ldb=None,
                     stride_b=0 if shared else None, trans_b=False)
    return BPacking(source=problem, problem=packed, width=w)

# }}}
