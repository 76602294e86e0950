"""The integer GEMM family: ``C = epilogue(op(A) @ B)`` with A u8 or s8, B s8 and s32
accumulation, as OpenCL C text.

Two kernels make one product:

* **pack** (:func:`build_pack`): B (s8, ``K x N`` row-major or ``N x K`` when transposed, any
  leading dimension) into panels of ``P`` columns whose element ``(q, j)`` is one ``uint``
  holding B's four consecutive k ``4q .. 4q+3`` of column ``j`` (k past K and columns past N
  are zeros), plus each column's sum over k (``wsum``, int), which compensates a src zero
  point; with per-k weights (``PackProblem.kweights``: a src zero point that varies along k,
  such as a convolution's per-input-channel one) each column's sum of ``w[k] * B[k, j]``.
  Panel ``p`` of matrix ``t`` starts at ``t * packed_size + p * KQ * P`` (``KQ`` k quads):
  one lane reads one ``uint`` per k quad, the lanes of a work-group consecutive ones.
* **product** (:func:`build_gemm_int8`): one work-group of ``lanes`` work-items per panel
  (grid axis 0), each work-item ``rows`` rows of C (axis 1) by ``vecs`` columns ``lanes``
  apart, the batch on axis 2. Per k quad it reads four bytes of each of its A rows (one
  ``vload4``; transposed A: four loads) and one ``uint`` of B per column, and accumulates the
  four products in int32: with ``cl_khr_integer_dot_product``'s ``dot`` (``dot4``) or with
  plain multiply-adds of the bytes, which the compilers vectorize across the lanes.

The store (fused epilogue) follows oneDNN v3's quantization model, at destination position
``pos`` of C's element ``(i, j)``:

``acc - zp_src * wsum[j] - zp_wei * rowsum(A)[i] + K * zp_src * zp_wei`` (exact, int32; the
row sums are counted in the product's own loop, only when a weights zero point is set; with
a src zero point per k, ``acc - wsum[j]``, the sums weighted by it), then
``post_ops(src_scale * wei_scale * acc + bias) * (1 / dst_scale) + zp_dst``, rounded to nearest
even and saturated into C's data type. A s32 C with no scale, post-op or float bias is stored
as the exact integer (bias and dst zero point added in int32).

Sizes: ``m`` is a run-time argument (rows past it read a clamped row and are not stored), as
are the offsets of A, packed B, C and the column sums. Outside the tensor-core kernel so are
n, k, the leading dimensions, the batch strides, the batch count (:data:`RUNTIME_ARGS`,
values :func:`launch_values`) and the binary post-op operands' offsets (``po<i>_off``); the
last, partial k quad reads A with k clamped into the row (packed B holds zeros past k) and
masks the bytes past k to 0. The epilogue reads a per-column operand's extent as ``n``.
:func:`program_key` is the problem with all of that fixed, so one program serves every shape
of one data-type, scale, zero-point and post-op combination: oneDNN's CI convolution list
(the 6 shapes the tests run) builds 278 programs instead of 840, the deconvolution list 168
instead of 480. Still baked: the tile, transposition, the epilogue's operand strides other
than ``n`` (binary operands over spatial dims), a batch position taken apart over several
dims. The accumulators go into a private array after the k loop: the partial k quad and the
store (epilogue) are one copy each in a loop over the tile's rows, not one per row (a
program builds in 0.11 s instead of 0.15 s on Intel's CPU runtime). The tensor-core kernel
bakes n, k, leading dimensions and strides.
Pure: text only, no device.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..memory.data_types import data_type
from .clhelpers import batch_position
from .clhelpers import c_mapper as _c_mapper
from .source import KernelSource

GENERATOR_VERSION = "gemm_int8-7"
#: the data types of C (oneDNN's matmul table for u8/s8 src and s8 weights)
C_TYPES = (data_type.f32, data_type.s32, data_type.s8, data_type.u8, data_type.bf16,
           data_type.f16)
#: the data types of the bias (oneDNN's table)
BIAS_TYPES = (data_type.f32, data_type.s32, data_type.s8, data_type.u8, data_type.bf16,
              data_type.f16)
A_TYPES = (data_type.u8, data_type.s8)
ZP_KINDS = ("src", "wei", "dst")
_STORAGE = {data_type.f32: "float", data_type.s32: "int", data_type.s8: "char",
            data_type.u8: "uchar", data_type.bf16: "ushort", data_type.f16: "ushort"}
_INTEGER = (data_type.s32, data_type.s8, data_type.u8)


def kq(k: int) -> int:
    """k quads: four consecutive k per packed ``uint``."""
    return -(-k // 4)


@dataclass(frozen=True)
class Int8Params:
    """Tuning parameters: ``rows`` of C per work-item, ``vecs`` columns per work-item (``lanes``
    apart), ``lanes`` work-items per work-group along n (the panel is ``lanes * vecs``
    columns), ``dot4``: accumulate with ``cl_khr_integer_dot_product``'s ``dot``."""

    rows: int = 8
    vecs: int = 1
    lanes: int = 16
    dot4: bool = False
    #: NVIDIA tensor cores (inline-PTX ``mma.sync.m16n8k32``, :func:`mma_covers`): 64 x 64
    #: blocks of four warps, the panel (``lanes * vecs``) 64 columns
    mma: bool = False

    @property
    def panel(self) -> int:
        return self.lanes * self.vecs


@dataclass(frozen=True)
class Int8GemmProblem:
    """``C[t] = epilogue(op(A[t]) @ B[t])`` for ``t < batch``, row-major, ``op(A)`` ``m x k``
    (stored ``k x m`` when ``trans_a``), B packed (:func:`build_pack`), C ``m x n``.

    ``a_dt``/``c_dt`` are ``data_type`` values; ``stride_a``/``stride_c`` elements between
    batch entries (0 broadcasts A); ``b_batched``: each entry has its own packed B (else one
    B for all). Epilogue (float32 arithmetic as :mod:`pydnnl.kernels.gemm`'s): ``bias``
    ``(layout, dims, nelems)`` of data type ``bias_dt``, ``post_ops`` a chain of
    :mod:`pydnnl.kernels.post_ops`, ``scales`` ``(which, dims)`` entries (``src``, ``wei``,
    ``dst``; float32 operands ``<which>_scale``), ``zero_points`` ``(which, dims)`` entries
    (int32 operands ``<which>_zp``; dims broadcast over the destination as for scales; a src
    zero point must be common). ``src_zp_k``: a src zero point that varies along k instead
    (no ``src`` entry, no weights zero point): B is packed with its column sums weighted by
    it (:class:`PackProblem` ``kweights``) and the store subtracts them. The destination
    position of C's element (t, i, j) is ``epi_fixed`` (or t over ``epi_batch``) followed by
    (i, j)."""

    m: int
    n: int
    k: int
    a_dt: int = int(data_type.u8)
    trans_a: bool = False
    lda: int = 0
    ldc: int = 0
    c_dt: int = int(data_type.s32)
    batch: int = 1
    stride_a: int = 0
    stride_c: int = 0
    b_batched: bool = False
    bias: tuple | None = None
    bias_dt: int = int(data_type.f32)
    post_ops: tuple = ()
    scales: tuple = ()
    zero_points: tuple = ()
    epi_batch: tuple = ()
    epi_fixed: tuple | None = None
    src_zp_k: bool = False

    def __post_init__(self):
        def setf(name, value):
            object.__setattr__(self, name, value)

        for name in ("m", "n", "k", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"Int8GemmProblem: {name} must be a positive int, got {v!r}")
            setf(name, int(v))
        for name, allowed in (("a_dt", A_TYPES), ("c_dt", C_TYPES), ("bias_dt", BIAS_TYPES)):
            dt = data_type(getattr(self, name))
            if dt not in allowed:
                raise ValueError(f"Int8GemmProblem: {name} must be one of "
                                 f"{[t.name for t in allowed]}, got {dt.name}")
            setf(name, int(dt))
        need_a = self.m if self.trans_a else self.k
        setf("lda", int(self.lda or need_a))
        setf("ldc", int(self.ldc or self.n))
        if self.lda < need_a or self.ldc < self.n:
            raise ValueError(f"Int8GemmProblem: lda {self.lda} < {need_a} or ldc {self.ldc} "
                             f"< n {self.n}")
        for kind, entries in (("scales", self.scales), ("zero_points", self.zero_points)):
            kinds = [w for w, _ in entries]
            if any(w not in ZP_KINDS for w in kinds) or len(set(kinds)) != len(kinds):
                raise ValueError(f"Int8GemmProblem: {kind} name each of {ZP_KINDS} at most "
                                 f"once, got {kinds}")
            setf(kind, tuple(sorted(((str(w), tuple(int(d) for d in dims))
                                     for w, dims in entries), key=lambda e:
                                    ZP_KINDS.index(e[0]))))
        for w, dims in self.zero_points:
            if w == "src" and any(d != 1 for d in dims):
                raise ValueError(f"Int8GemmProblem: a src zero point must be common, got dims "
                                 f"{dims}")
        setf("src_zp_k", bool(self.src_zp_k))
        if self.src_zp_k and (self.zp("src") is not None or self.zp("wei") is not None):
            raise ValueError("Int8GemmProblem: src_zp_k (a src zero point per k) excludes a "
                             "common src zero point and a weights zero point")

    def zp(self, which: str) -> tuple | None:
        """The dims of zero point ``which``, or None when it has none."""
        return dict(self.zero_points).get(which)

    @property
    def compensated(self) -> bool:
        """Whether the store subtracts the packed column sums (a src zero point)."""
        return self.src_zp_k or self.zp("src") is not None

    @property
    def integer_store(self) -> bool:
        """Whether C is stored as the exact int32 result (s32 C, nothing in float)."""
        return (data_type(self.c_dt) == data_type.s32 and not self.scales and not self.post_ops
                and (self.bias is None or data_type(self.bias_dt) in _INTEGER))


@dataclass(frozen=True)
class PackProblem:
    """``count`` B matrices (s8, ``k x n``, or ``n x k`` when ``trans_b``, leading dimension
    ``ldb``, ``stride_b`` elements apart) into panels of ``panel`` columns, with column sums."""

    n: int
    k: int
    ldb: int
    trans_b: bool = False
    panel: int = 16
    count: int = 1
    stride_b: int = 0
    #: work-items per column, each packing every ``ksplit``-th k quad, their column sums
    #: combined in local memory (GPUs: one work-item walking a whole column is latency-bound)
    ksplit: int = 1
    #: ``(div, mod, t_stride)``: the column sums weight B's row ``kk`` of matrix ``t`` by
    #: ``kw[t * t_stride + (kk / div) % mod]`` (an int buffer argument ``kw``); None: plain
    #: sums
    kweights: tuple | None = None

    @property
    def np_(self) -> int:
        return -(-self.n // self.panel) * self.panel

    @property
    def packed_size(self) -> int:
        """``uint`` elements of one packed matrix."""
        return self.np_ * kq(self.k)


def _c(expr) -> str:
    return _c_mapper()(expr) if not isinstance(expr, (int, np.integer)) else str(int(expr))


def _positions(pr: Int8GemmProblem) -> list:
    """The destination position of C's element (``pd_t``, ``pd_i``, ``pd_j``) (pymbolic);
    ``epi_batch`` ``(-1,)``: one batch dim, the batch itself (:func:`program_key`)."""
    from pymbolic import var

    if pr.epi_fixed is None and pr.epi_batch == (-1,):
        return [var("pd_t"), var("pd_i"), var("pd_j")]
    return batch_position(pr.epi_fixed, pr.epi_batch, "pd_t") + [var("pd_i"), var("pd_j")]


def _bcast_index(dims: tuple, pos: list) -> str:
    """C index of an operand with ``dims`` (each the destination's or 1; -1: the argument
    ``n``), row-major, at ``pos``; ``()``: one common value."""
    from pymbolic import var

    idx, stride = 0, 1
    for d, e in zip(reversed(dims), reversed(pos)):
        if d != 1:
            idx = idx + (e if isinstance(stride, int) and stride == 1 else e * stride)
            ext = var("n") if d == -1 else d
            stride = ext if isinstance(stride, int) and stride == 1 else stride * ext
    return _c(idx)


def operand_names(pr: Int8GemmProblem) -> tuple[str, ...]:
    """The epilogue's operand arguments (after ``a, bp, c``): ``wsum`` (a src zero point),
    ``bias``, ``po<i>_src1``, the scales, the zero points."""
    from .post_ops import arg_specs

    return ((("wsum",) if pr.compensated else ())
            + (("bias",) if pr.bias is not None else ())
            + tuple(spec[0] for spec in arg_specs(pr.post_ops))
            + tuple(f"{w}_scale" for w, _ in pr.scales)
            + tuple(f"{w}_zp" for w, _ in pr.zero_points))


def _operand_ctype(pr: Int8GemmProblem, name: str) -> str:
    from .post_ops import src1_c_type, src1_name

    if name in ("wsum",) or name.endswith("_zp"):
        return "int"
    if name == "bias":
        return _STORAGE[data_type(pr.bias_dt)]
    for i, op in enumerate(pr.post_ops):
        if op[0] == "binary" and src1_name(i) == name:
            return src1_c_type(op)
    return "float"


#: the sizes the product kernel takes as arguments outside the tensor-core kernel, after ``m``
#: (``stride_bp``: ``uint`` elements between the batch entries' packed B, 0 for one B;
#: ``nbatch``: the batch count, grid axis 2)
RUNTIME_ARGS = ("n", "k", "lda", "ldc", "stride_a", "stride_bp", "stride_c", "nbatch")


def _binary_offsets(pr: Int8GemmProblem) -> tuple[str, ...]:
    """The arguments carrying the binary post-op operands' offsets (``po<i>_off``, elements),
    outside the tensor-core kernel."""
    return tuple(f"po{i}_off" for i, op in enumerate(pr.post_ops) if op[0] == "binary")


def arg_names(pr: Int8GemmProblem, p: Int8Params | None = None) -> tuple[str, ...]:
    """Every argument of the product kernel with ``p``, in order (``p`` None: the
    tensor-core kernel's)."""
    rt = p is not None and not mma_covers(pr, p)
    return (("a", "bp", "c") + operand_names(pr) + ("a_off", "bp_off", "c_off")
            + (("ws_off",) if pr.compensated else ()) + ("m",)
            + ((RUNTIME_ARGS + _binary_offsets(pr)) if rt else ()))


def launch_values(pr: Int8GemmProblem, p: Int8Params) -> dict:
    """The values of :data:`RUNTIME_ARGS` and the binary post-op operands' offsets
    (``po<i>_off``) for ``pr``'s launch with ``p`` (none for the tensor-core kernel)."""
    if mma_covers(pr, p):
        return {}
    packed = -(-pr.n // p.panel) * p.panel * kq(pr.k)
    return {"n": pr.n, "k": pr.k, "lda": pr.lda, "ldc": pr.ldc, "stride_a": pr.stride_a,
            "stride_bp": packed if pr.b_batched else 0, "stride_c": pr.stride_c,
            "nbatch": pr.batch, **{f"po{i}_off": op[2][0] for i, op in enumerate(pr.post_ops)
                                   if op[0] == "binary"}}


def _canon_dims(dims: tuple, n: int) -> tuple:
    """Broadcast dims (scales, zero points) as the run-time kernel reads them: a last dim
    equal to n (the columns) becomes -1 (the argument ``n``), the outermost dim other than 1
    2 (its extent is never read)."""
    out = list(dims)
    if out and out[-1] == n and n != 1:
        out[-1] = -1
    for i, d in enumerate(out):
        if d != 1:
            if d != -1:
                out[i] = 2
            break
    return tuple(out)


def _canon_operand(layout: tuple, dims: tuple, off0=None) -> tuple:
    """An operand's (layout, dims) with what the store never reads made fixed: dims only
    count as 1 or not, and a dim of extent 1 (index 0) has no stride; ``off0`` None: the
    offset too (an argument)."""
    off0, per = layout[0] if off0 is None else off0, layout[1]
    per = tuple((1, 0, ()) if d == 1 else e for d, e in zip(dims, per))
    return (off0, per), tuple(1 if d == 1 else 2 for d in dims)


def program_key(pr: Int8GemmProblem, p: Int8Params) -> Int8GemmProblem:
    """``pr`` with every field the program of ``p`` does not bake set to a fixed value, so
    that problems that differ only there share one compiled program: ``m`` always; outside
    the tensor-core kernel also :data:`RUNTIME_ARGS`, the binary post-op operands' offsets
    (``po<i>_off``: a convolution's per-image launches), and in the epilogue what the sizes'
    values only size (operands' extents, a batch position that is the batch index itself)."""
    if mma_covers(pr, p):
        return replace(pr, m=1)
    ch = {"m": 1, "n": 1, "k": 1, "lda": 1, "ldc": 1, "batch": 1, "stride_a": 0,
          "stride_c": 0, "b_batched": False}
    if pr.epi_fixed is None and len(pr.epi_batch) == 1 and pr.epi_batch[0] == pr.batch:
        ch["epi_batch"] = (-1,)
    ch["scales"] = tuple((w, _canon_dims(d, pr.n)) for w, d in pr.scales)
    ch["zero_points"] = tuple((w, _canon_dims(d, pr.n) if w != "src" else d)
                              for w, d in pr.zero_points)
    if pr.bias is not None:
        ch["bias"] = _canon_operand(pr.bias[0], pr.bias[1]) + (0,)
    ch["post_ops"] = tuple(op if op[0] != "binary" else
                           (op[0], op[1]) + _canon_operand(op[2], op[3], 0) + tuple(op[4:])
                           for op in pr.post_ops)
    return replace(pr, **ch)


def _helpers(pr: Int8GemmProblem) -> list[str]:
    from .clhelpers import load_helper, store_helper
    from .post_ops import helpers

    out = [h[1] for h in helpers(pr.post_ops)]
    c = data_type(pr.c_dt)
    out.append(store_helper(c)[1])
    out.append(load_helper(c)[1])
    if pr.bias is not None:
        out.append(load_helper(data_type(pr.bias_dt))[1])
    return list(dict.fromkeys(out))


def _store_value(pr: Int8GemmProblem, k: str | None = None) -> list[str]:
    """C statements storing int ``pd_acc`` (and ``pd_asum``) at C's element (pd_t, pd_i,
    pd_j) of ``C`` (pointer to this batch entry) at index ``pd_ci``; ``k``: C text of k
    (default the baked ``pr.k``)."""
    from pymbolic import var

    from . import post_ops as po
    from .clhelpers import load_helper, store_helper
    from .reorder import _offset_expr

    pos = _positions(pr)
    lines = ["int pd_v = pd_acc;"]
    zs, zw, zd = pr.zp("src"), pr.zp("wei"), pr.zp("dst")
    if zs is not None:
        lines.append("pd_v -= pd_zs * WS[pd_j];")
    elif pr.src_zp_k:
        lines.append("pd_v -= WS[pd_j];")
    if zw is not None:
        lines.append(f"const int pd_zw = wei_zp[{_bcast_index(zw, pos)}];")
        lines.append("pd_v -= pd_zw * pd_asum;")
        if zs is not None:
            lines.append(f"pd_v += {pr.k if k is None else k} * pd_zs * pd_zw;")
    bias_at = None
    if pr.bias is not None:
        layout, dims, _ = pr.bias
        bias_at = "bias[" + _c(_offset_expr(layout, [0 if d == 1 else e
                                                     for d, e in zip(dims, pos)])) + "]"
    c_dt = data_type(pr.c_dt)
    if pr.integer_store:
        if bias_at is not None:
            lines.append(f"pd_v += (int){bias_at};")
        if zd is not None:
            lines.append(f"pd_v += dst_zp[{_bcast_index(zd, pos)}];")
        lines.append("C[pd_ci] = pd_v;")
        return lines
    value = var("pd_f")
    lines.append("float pd_f = (float)pd_v;")
    for w, dims in pr.scales:
        if w != "dst":
            value = value * var(f"pd_{w}_sc")
            lines.append(f"const float pd_{w}_sc = {w}_scale[{_bcast_index(dims, pos)}];")
    if bias_at is not None:
        bload = load_helper(data_type(pr.bias_dt))[0]
        value = value + var("pd_b")
        lines.append(f"const float pd_b = {bload}({bias_at});")
    expr = _c(value)
    prior = None
    if po.reads_prior(pr.post_ops):
        prior = f"{load_helper(c_dt)[0]}(C[pd_ci])"

    def src1(i, op):
        return f"{po.src1_name(i)}[{_c(po.src1_offset(op, pos))}]"
    expr = po.apply_c(expr, pr.post_ops, src1, prior)
    for w, dims in pr.scales:
        if w == "dst":
            expr = f"({expr}) * (1.0f / dst_scale[{_bcast_index(dims, pos)}])"
    if zd is not None:
        expr = f"({expr}) + (float)dst_zp[{_bcast_index(zd, pos)}]"
    lines.append(f"C[pd_ci] = {store_helper(c_dt)[0]}({expr});")
    return lines


def _dot(signed_a: bool, av: str, bv: str) -> str:
    """C expression of the four products of packed ``av`` (A) and ``bv`` (B) summed."""
    at = "char4" if signed_a else "uchar4"
    return f"dot(as_{at}({av}), as_char4({bv}))"


def _product_params(pr: Int8GemmProblem) -> list[str]:
    """The product kernels' parameter declarations, in :func:`arg_names` order."""
    at = "char" if data_type(pr.a_dt) == data_type.s8 else "uchar"
    ct = _STORAGE[data_type(pr.c_dt)]
    args = [f"__global const {at}* restrict a", "__global const uint* restrict bp",
            f"__global {ct}* restrict c"]
    args += [f"__global const {_operand_ctype(pr, n)}* restrict {n}" for n in operand_names(pr)]
    args += ["long a_off", "long bp_off", "long c_off"]
    return args + (["long ws_off"] if pr.compensated else []) + ["long m"]


MMA_BLOCK = 64  # C block (rows and columns) of the tensor-core kernel: 2 x 2 warps of 32 x 32
MMA_BLOCKS = (64, 128)  # the blocks it is generated for (the panel is one block wide)


def mma_covers(pr: Int8GemmProblem, p: Int8Params) -> bool:
    """Whether the tensor-core kernel computes ``pr``: k a multiple of 32 (whole mma steps: A
    is never read past a row), A not transposed, no weights zero point (its row sums are
    counted by the other kernel's loop), the panel one block wide."""
    return (p.mma and p.panel in MMA_BLOCKS and pr.k % 32 == 0 and not pr.trans_a
            and pr.zp("wei") is None)


def _build_mma(pr: Int8GemmProblem, block: int) -> KernelSource:
    """The tensor-core product: one work-group of four warps per ``block`` x ``block`` piece
    of C (64: each warp 32 x 32 as 2 x 4 m16n8 accumulators of ``mma.sync.aligned.m16n8k32``,
    s32; 128: 64 x 64, 4 x 8). Per 32-deep k step the group stages A's block x 32 bytes and
    B's 8 x block packed words in shared memory (each work-item block / 64 16-byte pieces of
    each, loaded from global memory into
    registers while the previous step is multiplied; two buffers, one barrier per step).
    Lane ``g = lane / 4, q = lane % 4`` reads its A registers (rows g (+8), k 4q..4q+3 (+16))
    and B registers (k quad q (+4), column g) as single words: rows of 8 + 4 and 64 + 8
    words put each warp's reads in 32 banks; accumulators rows g (+8), columns 2q, 2q + 1."""
    B_ = block
    per = B_ // 64  # 16-byte pieces of A and of B per work-item and step
    KQ, K, N = kq(pr.k), pr.k, pr.n
    signed = data_type(pr.a_dt) == data_type.s8
    at = "char" if signed else "uchar"
    ptx_a = "s8" if signed else "u8"
    ct = _STORAGE[data_type(pr.c_dt)]
    zs = pr.compensated
    args = _product_params(pr)
    packed = -(-N // B_) * B_ * KQ
    mt, nt = B_ // 32, B_ // 16
    ra, rb = 8 + 4, B_ + 8  # shared row lengths in words (A: 8 k quads; B: block columns)
    sza, szb = B_ * ra, 8 * rb
    w = [f"__kernel void __attribute__((reqd_work_group_size({4 * 32}, 1, 1)))",
         f"gemm_int8({', '.join(args)})", "{",
         f"    __local uint As[{2 * sza}] __attribute__((aligned(16)));",
         f"    __local uint Bs[{2 * szb}] __attribute__((aligned(16)));",
         "    const int tid = get_local_id(0), lane = tid & 31, wid = tid >> 5;",
         "    const int g = lane >> 2, q = lane & 3;",
         "    const long pn = get_group_id(0);",
         f"    const long mb = get_group_id(1) * {B_};",
         f"    const int wm0 = (wid >> 1) * {B_ // 2}, wn0 = (wid & 1) * {B_ // 2};",
         "    const long m0 = mb + wm0;",
         "    const long pd_t = " + ("get_group_id(2);" if pr.batch > 1 else "0;"),
         "    const long M = m;",
         f"    __global const {at}* A = a + a_off + pd_t * {pr.stride_a}L;",
         f"    __global const uint* B = bp + bp_off + pd_t * {packed if pr.b_batched else 0}L"
         f" + pn * {KQ * B_}L;",
         f"    __global {ct}* C = c + c_off + pd_t * {pr.stride_c}L;"]
    if zs:
        w.append(f"    __global const int* WS = wsum + ws_off + pd_t * "
                 f"{-(-N // B_) * B_ if pr.b_batched else 0}L;")
        if not pr.src_zp_k:
            w.append("    const int pd_zs = src_zp[0];")
    # this work-item's pieces c = tid + 128 i: A row c / 2 (clamped into [0, m): rows past m
    # are computed, not stored), bytes 16 (c % 2) ..; B k quad c / (block / 4), columns
    # 4 (c % (block / 4)) ..
    q4 = B_ // 4
    w += [f"    const bool avec = {'1' if pr.lda % 16 == 0 and pr.stride_a % 16 == 0 else '0'}"
          " && ((a_off & 15) == 0);",  # 16-byte loads where every piece is aligned
          "    const bool bvec = (bp_off & 3) == 0;"]
    for i in range(per):
        c = f"(tid + {128 * i})"
        w += [f"    __global const {at}* ag{i} = A + min(mb + ({c} >> 1), M - 1) * "
              f"{pr.lda}L + ({c} & 1) * 16;",
              f"    __global const uint* bg{i} = B + ({c} / {q4}) * {B_} + ({c} % {q4}) * 4;",
              f"    const int as_at{i} = ({c} >> 1) * {ra} + ({c} & 1) * 4;",
              f"    const int bs_at{i} = ({c} / {q4}) * {rb} + ({c} % {q4}) * 4;",
              f"    uint4 pa{i} = avec ? *(__global const uint4*)ag{i} : "
              f"as_uint4(vload16(0, ag{i}));",
              f"    uint4 pb{i} = bvec ? *(__global const uint4*)bg{i} : vload4(0, bg{i});",
              f"    *(__local uint4*)&As[as_at{i}] = pa{i};",
              f"    *(__local uint4*)&Bs[bs_at{i}] = pb{i};"]
    w += ["    barrier(CLK_LOCAL_MEM_FENCE);",
          f"    int acc[{mt}][{nt}][4];",
          "#pragma unroll",
          f"    for (int i = 0; i < {mt}; ++i)",
          "#pragma unroll",
          f"        for (int j = 0; j < {nt}; ++j)",
          "            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0;",
          f"    for (int st = 0; st < {K // 32}; ++st) {{",
          "        const int cur = st & 1;",
          f"        if (st + 1 < {K // 32}) {{"]
    for i in range(per):  # the next step's pieces, while this one is multiplied
        w += [f"            pa{i} = avec ? *(__global const uint4*)(ag{i} + (st + 1) * 32)"
              f" : as_uint4(vload16(0, ag{i} + (st + 1) * 32));",
              f"            pb{i} = bvec ? *(__global const uint4*)(bg{i} + (st + 1) * "
              f"{8 * B_}) : vload4(0, bg{i} + (st + 1) * {8 * B_});"]
    w += ["        }",
          f"        __local const uint* as = As + cur * {sza} + (wm0 + g) * {ra} + q;",
          f"        __local const uint* bs = Bs + cur * {szb} + q * {rb} + wn0 + g;"]
    for i in range(mt):
        for r, (h, dq) in enumerate(((0, 0), (1, 0), (0, 4), (1, 4))):
            w.append(f"        const uint a{i}_{r} = as[{(16 * i + 8 * h) * ra + dq}];")
    for j in range(nt):
        for r, dq in enumerate((0, 4)):
            w.append(f"        const uint b{j}_{r} = bs[{dq * rb + 8 * j}];")
    for i in range(mt):
        for j in range(nt):
            c = [f"acc[{i}][{j}][{e}]" for e in range(4)]
            w.append(f'        asm("mma.sync.aligned.m16n8k32.row.col.s32.{ptx_a}.s8.s32 "')
            w.append('            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, '
                     '{%10, %11, %12, %13};"')
            w.append(f'            : "=r"({c[0]}), "=r"({c[1]}), "=r"({c[2]}), "=r"({c[3]})')
            w.append(f'            : "r"(a{i}_0), "r"(a{i}_1), "r"(a{i}_2), "r"(a{i}_3), '
                     f'"r"(b{j}_0), "r"(b{j}_1),')
            w.append(f'              "r"({c[0]}), "r"({c[1]}), "r"({c[2]}), "r"({c[3]}));')
    w.append(f"        if (st + 1 < {K // 32}) {{")
    for i in range(per):
        w += [f"            *(__local uint4*)&As[(cur ^ 1) * {sza} + as_at{i}] = pa{i};",
              f"            *(__local uint4*)&Bs[(cur ^ 1) * {szb} + bs_at{i}] = pb{i};"]
    w += ["        }", "        barrier(CLK_LOCAL_MEM_FENCE);", "    }"]
    for i in range(mt):
        for j in range(nt):
            for e in range(4):
                w.append("    {")
                w.append(f"        const long pd_i = m0 + {16 * i + 8 * (e // 2)} + g;")
                w.append(f"        const long pd_j = pn * {B_} + wn0 + {8 * j} + 2 * q + {e % 2};")
                w.append(f"        if (pd_i < M && pd_j < {N}) {{")
                w.append(f"            const int pd_acc = acc[{i}][{j}][{e}];")
                w.append(f"            const long pd_ci = pd_i * {pr.ldc}L + pd_j;")
                w += ["            " + ln for ln in _store_value(pr)]
                w.append("        }")
                w.append("    }")
    w.append("}")
    source = "\n".join(_helpers(pr) + w) + "\n"
    grid = (str(-(-N // B_) * 128), f"((m + {B_ - 1}) // {B_})") + (
        (str(pr.batch),) if pr.batch > 1 else ())
    lsize = (128, 1) + ((1,) if pr.batch > 1 else ())
    return KernelSource("gemm_int8", source, None, lsize, arg_names(pr), (), grid=grid)


def build_gemm_int8(pr: Int8GemmProblem, p: Int8Params) -> KernelSource:
    """The product kernel of ``pr`` with ``p`` (see the module docstring); arguments
    :func:`arg_names`; offsets in elements of each buffer's type (``bp_off``/``ws_off`` in
    ``uint``/``int``). Outside the tensor-core kernel, n, k, the leading dimensions, the batch
    strides and the batch count are arguments (:data:`RUNTIME_ARGS`, values
    :func:`launch_values`): ``pr``'s own values of them are never read."""
    if mma_covers(pr, p):
        return _build_mma(pr, p.panel)
    R, V, L = p.rows, p.vecs, p.lanes
    P = p.panel
    signed = data_type(pr.a_dt) == data_type.s8
    at = "char" if signed else "uchar"
    ct = _STORAGE[data_type(pr.c_dt)]
    zs, zw = pr.compensated, pr.zp("wei") is not None
    args = _product_params(pr) + [f"long {n}" for n in RUNTIME_ARGS + _binary_offsets(pr)]
    w = []
    w.append(f"__kernel void __attribute__((reqd_work_group_size({L}, 1, 1)))")
    w.append(f"gemm_int8({', '.join(args)})")
    w.append("{")
    w.append("    const int lane = get_local_id(0);")
    w.append("    const long pn = get_group_id(0);")
    w.append(f"    const long i0 = get_group_id(1) * {R};")
    w.append("    const long pd_t = get_group_id(2);")
    w.append("    const long M = m;")
    w.append(f"    __global const {at}* A = a + a_off + pd_t * stride_a;")
    w.append(f"    __global const uint* B = bp + bp_off + pd_t * stride_bp + pn * ((k + 3) >> 2)"
             f" * {P} + lane;")
    w.append(f"    __global {ct}* C = c + c_off + pd_t * stride_c;")
    if zs:
        # one column sum per padded column of each batch entry's B (one B: stride_bp 0)
        w.append(f"    __global const int* WS = wsum + ws_off + (stride_bp ? pd_t * ((n + {P - 1})"
                 f" / {P} * {P}) : 0);")
        if not pr.src_zp_k:
            w.append("    const int pd_zs = src_zp[0];")
    # each row's A address, clamped into [0, m): rows past m compute but are not stored
    for r in range(R):
        w.append(f"    const long ar{r} = min(i0 + {r}, M - 1)"
                 + (" * lda;" if not pr.trans_a else ";"))
    for r in range(R):
        for v in range(V):
            w.append(f"    int acc{r}_{v} = 0;")
        if zw:
            w.append(f"    int asum{r} = 0;")

    def b_words(q: str, ind: str) -> list[str]:
        """B's words of k quad ``q`` (and their bytes, sign-extended, without ``dot4``)."""
        out = []
        for v in range(V):
            out.append(f"{ind}const uint b{v} = B[{q} * {P} + {v * L}];")
            if not p.dot4:
                for e in range(4):
                    out.append(f"{ind}const int b{v}_{e} = ((int)(b{v} << {24 - 8 * e})) >> 24;")
        return out

    def madd(a: str, accs: list[str], asum: str | None, ind: str) -> list[str]:
        """Four products of A's bytes ``a`` with each column's B word into ``accs``."""
        out = [f"{ind}{asum} += (int){a}.x + (int){a}.y + (int){a}.z + (int){a}.w;"] if asum \
            else []
        for v, acc in enumerate(accs):
            if p.dot4:
                out.append(f"{ind}{acc} += {_dot(signed, a, f'b{v}')};")
            else:
                terms = " + ".join(f"(int){a}.{c} * b{v}_{e}" for e, c in enumerate("xyzw"))
                out.append(f"{ind}{acc} += {terms};")
        return out

    w.append("    const int kf = (int)(k >> 2);  // k quads whose four k all exist")
    w.append("    for (int q = 0; q < kf; q++) {")
    w += b_words("q", "        ")
    for r in range(R):
        if not pr.trans_a:
            w.append(f"        const {at}4 a{r} = vload4(q, A + ar{r});")
        else:
            es = [f"A[(q * 4 + {e}) * lda + ar{r}]" for e in range(4)]
            w.append(f"        const {at}4 a{r} = ({at}4)({', '.join(es)});")
        w += madd(f"a{r}", [f"acc{r}_{v}" for v in range(V)], f"asum{r}" if zw else None,
                  "        ")
    w.append("    }")
    # the accumulators into a private array: the last, partial k quad and the store are one
    # copy each in a loop over the tile's rows (a copy per row multiplied the build time)
    w.append(f"    int accs[{R * V}];")
    w += [f"    accs[{r * V + v}] = acc{r}_{v};" for r in range(R) for v in range(V)]
    if zw:
        w.append(f"    int asums[{R}];")
        w += [f"    asums[{r}] = asum{r};" for r in range(R)]
    # the last k quad where k % 4 != 0: k clamped into the row (k past it meets B's zeros),
    # the bytes past k masked to 0 (the row sums)
    w.append("    const int kt = (int)(k & 3);")
    w.append("    if (kt) {")
    w.append("        const uint kmask = 0xffffffffu >> (32 - 8 * kt);  // the kt bytes in k")
    w += [f"        const long kc{e} = min(kf * 4L + {e}, k - 1);" for e in range(4)]
    w += b_words("kf", "        ")
    w.append("#pragma unroll 1")  # (unrolled, it built 0.02-0.03 s slower)
    w.append(f"        for (int r = 0; r < {R}; r++) {{")
    w.append("            const long ar = min(i0 + r, M - 1)" + (" * lda;" if not pr.trans_a
                                                                  else ";"))
    es = [f"A[kc{e} * lda + ar]" if pr.trans_a else f"A[ar + kc{e}]" for e in range(4)]
    w.append(f"            const {at}4 at = as_{at}4(as_uint(({at}4)({', '.join(es)})) & kmask);")
    w += madd("at", [f"accs[r * {V} + {v}]" for v in range(V)], "asums[r]" if zw else None,
              "            ")
    w.append("        }")
    w.append("    }")
    # the store
    w.append(f"    const int rows = (int)min((long){R}, M - i0);")
    w.append("    for (int r = 0; r < rows; r++) {")
    w.append("        const long pd_i = i0 + r;")
    ind = "        "
    if V > 1:
        w.append(f"        for (int v = 0; v < {V}; v++) {{")
        ind += "    "
        w.append(f"{ind}const long pd_j = pn * {P} + v * {L} + lane;")
        acc = f"accs[r * {V} + v]"
    else:
        w.append(f"{ind}const long pd_j = pn * {P} + lane;")
        acc = "accs[r]"
    w.append(f"{ind}if (pd_j < n) {{")
    w.append(f"{ind}    const int pd_acc = {acc};")
    if zw:
        w.append(f"{ind}    const int pd_asum = asums[r];")
    w.append(f"{ind}    const long pd_ci = pd_i * ldc + pd_j;")
    from pymbolic import var

    # binary post-op operands at offsets given as arguments
    at_args = replace(pr, post_ops=tuple(
        op if op[0] != "binary" else (op[0], op[1], (var(f"po{i}_off"), op[2][1])) + op[3:]
        for i, op in enumerate(pr.post_ops)))
    w += [f"{ind}    " + ln for ln in _store_value(at_args, "(int)k")]
    w.append(f"{ind}}}")
    if V > 1:
        w.append("        }")
    w.append("    }")
    w.append("}")
    pre = []
    if p.dot4:
        pre.append("#pragma OPENCL EXTENSION cl_khr_integer_dot_product : enable")
    source = "\n".join(pre + _helpers(pr) + w) + "\n"
    grid = (f"((n + {P - 1}) // {P}) * {L}", f"((m + {R - 1}) // {R})", "nbatch")
    opts = ("-cl-std=CL3.0",) if p.dot4 else ()
    return KernelSource("gemm_int8", source, None, (L, 1, 1), arg_names(pr, p), opts,
                        grid=grid)


def build_pack(pk: PackProblem) -> KernelSource:
    """The packing kernel of ``pk``: arguments ``b, bp, wsum, b_off, bp_off, ws_off`` (and
    ``kw`` with ``kweights``); one work-item per (padded) column and matrix (grid
    ``(np_, count)``; ``panel`` must be a multiple of 64 or divide it), or ``ksplit`` of them
    (grid ``(np_, ksplit, count)``)."""
    KQ, K, N, P = kq(pk.k), pk.k, pk.n, pk.panel
    S = pk.ksplit
    t_id = "get_global_id(2)" if S > 1 else "get_global_id(1)"
    kw_arg = ", __global const int* restrict kw" if pk.kweights is not None else ""
    names = ("b", "bp", "wsum", "b_off", "bp_off", "ws_off") + (
        ("kw",) if pk.kweights is not None else ())
    if pk.kweights is None:
        add = "sum += v;"
    else:
        div, mod, ts = (int(v) for v in pk.kweights)
        idx = "kk" if div == 1 else f"kk / {div}"
        add = f"if (kk < {K}) sum += v * kw[t * {ts}L + ({idx}) % {mod}];"
    head = f"""__kernel void gemm_int8_pack(__global const char* restrict b,
    __global uint* restrict bp, __global int* restrict wsum, long b_off, long bp_off,
    long ws_off{kw_arg})
{{
    const long j = get_global_id(0);
    const long t = {t_id};
    const long pn = j / {P}, jj = j % {P};
    __global const char* Bt = b + b_off + t * {pk.stride_b}L;
    __global uint* out = bp + bp_off + t * {pk.packed_size}L + pn * {KQ * P}L + jj;
    const int live = j < {N};
    int sum = 0;
"""
    q0, qstep = ("(int)get_local_id(1)", S) if S > 1 else ("0", 1)
    body = f"""    for (int q = {q0}; q < {KQ}; q += {qstep}) {{
        uint u = 0;
        for (int e = 0; e < 4; e++) {{
            const int kk = q * 4 + e;
            const int v = (live && kk < {K}) ? (int)Bt[{'j * %dL + kk' % pk.ldb if pk.trans_b
                                                     else 'kk * %dL + j' % pk.ldb}] : 0;
            {add}
            u |= ((uint)(v & 255)) << (8 * e);
        }}
        out[q * {P}] = u;
    }}
"""
    if S == 1:
        tail = "    wsum[ws_off + t * %dL + j] = sum;\n}\n" % pk.np_
        # a work-group of a panel's columns: the compilers vectorize the byte loads across them
        return KernelSource("gemm_int8_pack", head + body + tail, (pk.np_, pk.count),
                            (min(P, 64), 1), names)
    W = min(P, 64)
    tail = f"""    __local int part[{S}][{W}];
    const int lx = get_local_id(0), ly = get_local_id(1);
    part[ly][lx] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ly == 0) {{
        for (int r = 1; r < {S}; r++) sum += part[r][lx];
        wsum[ws_off + t * {pk.np_}L + j] = sum;
    }}
}}
"""
    return KernelSource("gemm_int8_pack", head + body + tail, (pk.np_, S, pk.count),
                        (W, S, 1), names)
