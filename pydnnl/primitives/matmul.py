"""The matmul primitive (``dnnl::matmul``): ``dst = src @ weights (+ bias)`` over the last two
dimensions, batch dimensions broadcast where src or weights has 1.

The plan is made of runtime GEMM steps: one batched GEMM when each tensor's batch dimensions
fold into one stride (0 where broadcast), else one GEMM per batch entry. The bias and the
post-ops (eltwise, sum, binary) run in the GEMM kernel's store: no pass of their own.

Scales (oneDNN v3's quantization attributes, ``set_scales_mask`` with ``ARG_SRC``,
``ARG_WEIGHTS``, ``ARG_DST``; values passed at execute as ``ARG_ATTR_SCALES | ARG_*`` f32
memories) run in the same store: ``dst = post_ops(src_scale * wei_scale * (src @ weights) +
bias) / dst_scale``, read from device memory at every execution. oneDNN's masks for
floating-point data: src and dst 0 (one common scale; per-K src scales need groups, per-N or
per-M dst scales are GPU-only in oneDNN), weights 0 or per column N (bit ``ndims - 1``).

int8 (src u8 or s8, weights s8, oneDNN's table): the integer GEMM of
:mod:`pydnnl.kernels.gemm_int8` (``Plan.gemm_int8``: weights packed into the scratchpad at every
execution, s32 accumulation) with dst f32, s32, s8, u8, bf16 or f16 and bias f32, s32, s8, u8,
bf16 or f16; zero points (``set_zero_points_mask``, s32 memories ``ARG_ATTR_ZERO_POINTS |
ARG_*``): src 0, weights and dst 0 or per column N, compensated in the store: ``dst =
post_ops(src_scale * wei_scale * sum_k (src - zp_src) * (wei - zp_wei) + bias) / dst_scale +
zp_dst``, rounded to nearest even and saturated into dst's type.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace

from ..constants import ARG_BIAS, ARG_DST, ARG_SRC, ARG_WEIGHTS
from ..error import invalid_arguments, unimplemented
from ..kernels import gemm_int8 as gi
from ..kernels.post_ops import describe as describe_post_ops
from ..kernels.post_ops import reads_prior
from ..kernels.reorder import ReorderProblem, layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.gemm import GemmShape, packed_panel
from ..runtime.plan import SCRATCH, Plan, Ref
from .base import ArgSpec, bias_queries, primitive, primitive_desc_base
from .post_ops import (
    WITH_PRELU,
    resolve_scales,
    resolve_zero_points,
    scale_operands,
    zero_point_operands,
)
from .post_ops import resolve as resolve_post_ops
from .signature import Signature, bind

_NAMES = {ARG_SRC: "src", ARG_WEIGHTS: "weights", ARG_BIAS: "bias", ARG_DST: "dst"}
# storage types: bf16/f16 operands are converted to f32 copies and computed in f32
_DATA_TYPES = (data_type.f32, data_type.bf16, data_type.f16, data_type.undef)


def _plain(md: MemoryDesc) -> MemoryDesc:
    """``format_tag.any`` resolved: row-major (``ab``, ``abc``, ...)."""
    return MemoryDesc(md.dims, md.data_type, "abcdefghijkl"[:len(md.dims)])


def _matrix(md: MemoryDesc, name: str) -> tuple[bool, int]:
    """(transposed, leading dimension) of the last two dims of a plain strided desc."""
    if md.inner_blks:
        raise unimplemented(f"matmul: {name} must have a plain (unblocked) layout, got "
                            f"{md.format_name()}")
    rs, cs = md.strides[-2], md.strides[-1]
    rows, cols = md.dims[-2], md.dims[-1]
    if cs == 1 or cols == 1:
        return False, max(rs, cols)
    if rs == 1 or rows == 1:
        return True, max(cs, rows)
    raise unimplemented(f"matmul: {name} needs unit stride along one of its last two "
                        f"dimensions, got strides {list(md.strides)}")


def _panel_tag(nd: int, w: int) -> str:
    """The blocked tag of weights ``[..., K, N]`` stored as the GEMM's packed B: panels of
    ``w`` columns of N, each K rows deep (``Ba16b`` for 2-D)."""
    L = "abcdefghijkl"
    return L[:nd - 2] + L[nd - 1].upper() + L[nd - 2] + f"{w}" + L[nd - 1]


def _panel_width(md: MemoryDesc) -> int | None:
    """``w`` when ``md`` is weights in :func:`_panel_tag`'s layout, else None."""
    if len(md.inner_blks) != 1 or md.offset0:
        return None
    w = int(md.inner_blks[0])
    same = MemoryDesc(md.dims, md.data_type, _panel_tag(len(md.dims), w))
    return w if md == same else None


def _batch_entries(batch) -> list[tuple[int, ...]]:
    """Every index over the batch dims ``batch``, the last fastest."""
    return list(itertools.product(*(range(d) for d in batch)))


def _entry_offset(x: MemoryDesc, idx) -> int:
    """Element offset of batch entry ``idx`` of ``x`` (its size-1 batch dims broadcast)."""
    return x.offset0 + sum((i if x.dims[j] > 1 else 0) * x.strides[j]
                           for j, i in enumerate(idx))


def _batch_stride(md: MemoryDesc, batch: tuple[int, ...]) -> int | None:
    """The one stride that walks ``md``'s batch entries in ``batch``'s row-major order (0
    where ``md`` broadcasts), or None when its batch dims fold into no single stride."""
    nb = len(batch)
    dims, strides = md.dims[:nb], md.strides[:nb]
    live = [(d, s) for d, s, full in zip(dims, strides, batch) if full > 1]
    if all(d == 1 for d, _ in live):
        return 0
    if any(d == 1 for d, _ in live):  # broadcast in some batch dims only
        return None
    step = live[-1][1]
    run = step
    for d, s in reversed(live):
        if s != run:
            return None
        run *= d
    return step


class matmul(primitive):
    """``dst = src @ weights (+ bias)`` (oneDNN's matmul, f32)."""

    class primitive_desc(bias_queries, primitive_desc_base):
        """``matmul.primitive_desc(engine, src_desc, weights_desc, dst_desc, attr=None)`` or
        ``(engine, src_desc, weights_desc, bias_desc, dst_desc, attr=None)``."""

        _kind = "matmul"
        # every output element reads a whole row and column: nothing may run in place
        _IN_PLACE: frozenset = frozenset()
        signature = Signature(
            "matmul.primitive_desc", head=("engine",),
            forms=(("src_desc", "weights_desc", "dst_desc"),
                   ("src_desc", "weights_desc", "bias_desc", "dst_desc")),
            tail=("attr",), optional=frozenset({"bias_desc"}))

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            descs = {ARG_SRC: a["src_desc"], ARG_WEIGHTS: a["weights_desc"],
                     ARG_BIAS: a.get("bias_desc"), ARG_DST: a["dst_desc"]}
            for arg, md in descs.items():
                if md is None and arg == ARG_BIAS:
                    continue
                if not isinstance(md, MemoryDesc) or md.is_zero():
                    raise invalid_arguments(f"matmul: {_NAMES[arg]}_desc must be a memory.desc, "
                                            f"got {md!r}")
            if descs[ARG_BIAS] is not None and descs[ARG_BIAS].is_zero():
                descs[ARG_BIAS] = None
            src, wei, dst = descs[ARG_SRC], descs[ARG_WEIGHTS], descs[ARG_DST]
            nd = len(dst.dims)
            for arg, md in descs.items():
                if md is not None and len(md.dims) != nd:
                    raise invalid_arguments(
                        f"matmul: {_NAMES[arg]}_desc has {len(md.dims)} dimensions, dst "
                        f"{nd}; every tensor must have as many (2 to 12)")
            if not 2 <= nd <= 12:
                raise invalid_arguments(f"matmul: tensors must have 2 to 12 dimensions, got {nd}")
            M, K, N = src.dims[-2], src.dims[-1], wei.dims[-1]
            if wei.dims[-2] != K:
                raise invalid_arguments(f"matmul: weights_desc has K = {wei.dims[-2]} rows, src "
                                        f"K = {K} columns; they must agree")
            if tuple(dst.dims[-2:]) != (M, N):
                raise invalid_arguments(f"matmul: dst_desc ends in {list(dst.dims[-2:])}, "
                                        f"expected [M, N] = [{M}, {N}]")
            for i in range(nd - 2):
                for arg in (ARG_SRC, ARG_WEIGHTS):
                    d = descs[arg].dims[i]
                    if d not in (1, dst.dims[i]):
                        raise invalid_arguments(
                            f"matmul: {_NAMES[arg]}_desc batch dimension {i} is {d}; it must "
                            f"be 1 or dst's {dst.dims[i]}")
            b = descs[ARG_BIAS]
            if b is not None and any(bd not in (1, dd) for bd, dd in zip(b.dims, dst.dims)):
                raise invalid_arguments(f"matmul: bias_desc dims {list(b.dims)} must be 1 or "
                                        f"dst's {list(dst.dims)} in every dimension")
            self._int8 = src.data_type in gi.A_TYPES
            if self._int8:
                self._init_int8(descs, nd)
                return
            for arg, md in descs.items():
                if md is not None and md.data_type not in _DATA_TYPES:
                    raise unimplemented(f"matmul: {_NAMES[arg]} data type "
                                        f"{md.data_type.name}; f32, bf16 and f16 are "
                                        f"implemented")
            # the scales: src and dst common; weights common or per column N (bit nd - 1)
            self._scales, scales_text = resolve_scales(
                "matmul", self._attr, tuple(dst.dims), 1 << (nd - 1), nd - 1,
                "this is no int8 matmul (its src is not u8 or s8)")
            self._post_ops, po_args = resolve_post_ops("matmul", self._attr, dst,
                                                       allowed=WITH_PRELU)
            self._gemm_input_dts = (src.data_type, wei.data_type)
            self._panel = self._tuned_panel(descs, M, K, N)
            self._convert: dict[int, int] = {}  # bf16/f16 argument -> its f32 copy's offset
            scratch = 0
            for arg, md in descs.items():
                if md is None:
                    continue
                dt = md.data_type if md.data_type != data_type.undef else data_type.f32
                if (md.is_any() and arg == ARG_WEIGHTS and self._panel is not None
                        and dt == data_type.f32):
                    md = MemoryDesc(md.dims, data_type.f32, _panel_tag(nd, self._panel))
                md = _plain(md).with_data_type(dt) if md.is_any() else md
                if md.data_type == data_type.undef:
                    md = md.with_data_type(data_type.f32)
                if not (arg == ARG_WEIGHTS and _panel_width(md) == self._panel is not None):
                    _matrix(md, _NAMES[arg])  # unimplemented layouts fail here
                if md.data_type != data_type.f32:  # computed on a row-major f32 copy
                    self._convert[arg] = scratch
                    scratch += -(-math.prod(md.dims) // 16) * 16
                self._args[arg] = ArgSpec(md, arg == ARG_DST)
            self._args.update(po_args)
            self._add_runtime_attr_args()  # ARG_ATTR_SCALES | ARG_*: f32, one per mask index
            self._scratch_elems = scratch
            self._impl = "gemm:runtime" + (":converted" if self._convert else "")
            self._info = f"{list(src.dims)}x{list(wei.dims)}" + (
                f" attr-scales:{scales_text}" if self._scales else "") + (
                f" attr-post-ops:{describe_post_ops(self._post_ops)}" if self._post_ops else "")
            self._finish_scratchpad(scratch * 4)

        def _init_int8(self, descs: dict, nd: int) -> None:
            """u8/s8 src: validated against oneDNN's int8 table, layouts resolved (plain),
            the quantization attributes read; the scratchpad sized by a dry plan."""
            wei = descs[ARG_WEIGHTS]
            if wei.data_type != data_type.s8:
                raise unimplemented(f"matmul: weights data type {wei.data_type.name} with src "
                                    f"data type {descs[ARG_SRC].data_type.name}; int8 matmul "
                                    f"takes s8 weights")
            allowed = {ARG_DST: gi.C_TYPES, ARG_BIAS: gi.BIAS_TYPES}
            for arg, md in descs.items():
                if arg in allowed and md is not None:
                    dt = md.data_type
                    if dt != data_type.undef and dt not in allowed[arg]:
                        raise unimplemented(
                            f"matmul: {_NAMES[arg]} data type {dt.name} with int8 src; "
                            f"implemented: {', '.join(t.name for t in allowed[arg])}")
            dst = descs[ARG_DST]
            ch = 1 << (nd - 1)  # per column N: the last dim of weights and dst
            self._scales, scales_text = resolve_scales("matmul", self._attr, tuple(dst.dims),
                                                       ch, nd - 1, None)
            self._zps, zp_text = resolve_zero_points(
                "matmul", self._attr, tuple(dst.dims), ch, nd - 1,
                {ARG_SRC: (0,), ARG_WEIGHTS: (0, ch), ARG_DST: (0, ch)})
            self._post_ops, po_args = resolve_post_ops("matmul", self._attr, dst,
                                                       allowed=WITH_PRELU)
            self._panel, self._convert = None, {}
            for arg, md in descs.items():
                if md is None:
                    continue
                if md.data_type == data_type.undef:
                    md = md.with_data_type(data_type.f32)
                md = _plain(md) if md.is_any() else md
                if arg != ARG_BIAS and _matrix(md, _NAMES[arg])[0] and arg == ARG_DST:
                    raise unimplemented("matmul: an int8 matmul's dst must have N innermost, "
                                        f"got strides {list(md.strides)}")
                self._args[arg] = ArgSpec(md, arg == ARG_DST)
            self._args.update(po_args)
            self._add_runtime_attr_args()  # scales f32, zero points s32, one per mask index
            dry = Plan(self._engine, "matmul", dry=True)
            _int8_steps(dry, self)
            self._scratch_elems = dry.scratch_elems
            self._impl = "gemm_int8:runtime"
            src = descs[ARG_SRC]
            self._info = f"{list(src.dims)}x{list(wei.dims)}" + (
                f" attr-scales:{scales_text}" if self._scales else "") + (
                f" attr-zero-points:{zp_text}" if self._zps else "") + (
                f" attr-post-ops:{describe_post_ops(self._post_ops)}" if self._post_ops else "")
            self._finish_scratchpad(self._scratch_elems * 4)

        def _tuned_panel(self, descs, M: int, K: int, N: int) -> int | None:
            """Columns per panel of the packed B this product's tuned GEMM reads, when B can
            be stored that way: one product (no batch) and a dst not transposed."""
            dst = descs[ARG_DST]
            if math.prod(dst.dims[:-2]) != 1 or math.prod(descs[ARG_WEIGHTS].dims[:-2]) != 1:
                return None
            if not dst.is_any() and (dst.inner_blks or _matrix(dst, "dst")[0]):
                return None
            return packed_panel(self._engine, GemmShape(m=M, n=N, k=K, lda=K, ldb=N, ldc=N,
                                                          math=self._gemm_math()), slices=True)

    def _create(self) -> None:
        pd = self._pd
        if pd._int8:
            self._plan = Plan(pd.get_engine(), "matmul")
            _int8_steps(self._plan, pd)
            return
        plan = self._plan = Plan(pd.get_engine(), "matmul", scratch_elems=pd._scratch_elems)
        # each operand as the GEMM reads it: (buffer, desc, extra offset); bf16/f16 ones are
        # row-major f32 copies in the scratchpad
        md, ref, base = {}, {}, {}
        for arg, spec in pd._args.items():
            if arg not in (ARG_SRC, ARG_WEIGHTS, ARG_BIAS, ARG_DST):
                continue
            md[arg], ref[arg], base[arg] = spec.md, Ref(arg), 0
            off = pd._convert.get(arg)
            if off is None:
                continue
            user, f32 = spec.md, _plain(spec.md).with_data_type(data_type.f32)
            md[arg], ref[arg], base[arg] = f32, SCRATCH, off
            n = math.prod(user.dims)
            if arg != ARG_DST or reads_prior(pd._post_ops):
                plan.reorder(ReorderProblem(tuple(user.dims), user.data_type, data_type.f32,
                                            layout_of(user), (off, layout_of(f32)[1]),
                                            user.nelems_physical(), off + n), Ref(arg), SCRATCH)
        src, wei, dst = md[ARG_SRC], md[ARG_WEIGHTS], md[ARG_DST]
        batch = tuple(dst.dims[:-2])
        M, K, N = src.dims[-2], src.dims[-1], wei.dims[-1]
        bias = md.get(ARG_BIAS)
        # the epilogue: bias (broadcast where its dims are 1) and post-ops at dst positions
        epi = {"post_ops": pd._post_ops, "epi_batch": batch, "scales": pd._scales}
        if bias is not None:
            lay = layout_of(bias)
            epi["bias"] = ((lay[0] + base[ARG_BIAS], lay[1]), tuple(bias.dims),
                           base[ARG_BIAS] + bias.nelems_physical())
        bias_ref = ref[ARG_BIAS] if bias is not None else None
        scales = scale_operands(pd._scales)  # the epilogue's other operands
        ta, lda = _matrix(src, "src")
        packed = pd._panel is not None and _panel_width(wei) == pd._panel
        tb, ldb = (False, N) if packed else _matrix(wei, "weights")
        tc, ldc = _matrix(dst, "dst")
        if tc:  # C^T = B^T A^T: a transposed dst is a row-major product with the roles swapped
            shape = GemmShape(m=N, n=M, k=K, lda=ldb, ldb=lda, ldc=ldc, trans_a=not tb,
                              trans_b=not ta, epi_swap=True, **epi)
            first, second = (ARG_WEIGHTS, wei), (ARG_SRC, src)
        else:
            shape = GemmShape(m=M, n=N, k=K, lda=lda, ldb=ldb, ldc=ldc, trans_a=ta, trans_b=tb,
                              **epi)
            first, second = (ARG_SRC, src), (ARG_WEIGHTS, wei)
        count = math.prod(batch)
        strides = [_batch_stride(x, batch) for x in (first[1], second[1], dst)]
        a0 = first[1].offset0 + base[first[0]]
        b0 = second[1].offset0 + base[second[0]]
        c0 = dst.offset0 + base[ARG_DST]
        a_ref, b_ref, c_ref = ref[first[0]], ref[second[0]], ref[ARG_DST]
        if count == 1 or None not in strides:
            if count == 1:
                plan.gemm(shape, a_ref, a0, b_ref, b0, c_ref, c0, bias=bias_ref, packed=packed,
                          epilogue=scales, slices=True)
            else:
                plan.gemm_batched(shape, count, *strides, a_ref, a0, b_ref, b0, c_ref, c0,
                                  bias=bias_ref, epilogue=scales)
            self._convert_out(plan, md)
            return
        needs_pos = bias is not None or any(op[0] == "binary" for op in pd._post_ops)
        for idx in _batch_entries(batch):  # batch dims that fold into no single stride
            def off(arg, x, idx=idx):
                return base[arg] + _entry_offset(x, idx)
            # an epilogue reading operands at positions is specialised to this batch entry
            sh = replace(shape, epi_fixed=tuple(idx)) if needs_pos else shape
            plan.gemm(sh, a_ref, off(first[0], first[1]), b_ref, off(second[0], second[1]),
                      c_ref, off(ARG_DST, dst), bias=bias_ref, epilogue=scales, slices=True)
        self._convert_out(plan, md)

    def _convert_out(self, plan: Plan, md: dict) -> None:
        """A bf16/f16 dst: its f32 copy converted into it (round to nearest even)."""
        off = self._pd._convert.get(ARG_DST)
        if off is not None:
            user = self._pd._args[ARG_DST].md
            plan.reorder(ReorderProblem(tuple(user.dims), data_type.f32, user.data_type,
                                        (off, layout_of(md[ARG_DST])[1]), layout_of(user),
                                        off + math.prod(user.dims), user.nelems_physical()),
                         SCRATCH, Ref(ARG_DST))

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


def _int8_steps(plan: Plan, pd) -> None:
    """The int8 product's steps: one integer GEMM over every batch entry where each tensor's
    batch dims fold into one stride, else one per entry (sharing one packing region)."""
    md = {arg: spec.md for arg, spec in pd._args.items()
          if arg in (ARG_SRC, ARG_WEIGHTS, ARG_BIAS, ARG_DST)}
    src, wei, dst = md[ARG_SRC], md[ARG_WEIGHTS], md[ARG_DST]
    batch = tuple(dst.dims[:-2])
    M, K, N = src.dims[-2], src.dims[-1], wei.dims[-1]
    ta, lda = _matrix(src, "src")
    tb, ldb = _matrix(wei, "weights")
    _, ldc = _matrix(dst, "dst")
    operands = {**scale_operands(pd._scales), **zero_point_operands(pd._zps)}
    epi = {}
    bias = md.get(ARG_BIAS)
    if bias is not None:
        epi = dict(bias=(layout_of(bias), tuple(bias.dims), bias.nelems_physical()),
                   bias_dt=int(bias.data_type))
        operands["bias"] = Ref(ARG_BIAS)
    base = gi.Int8GemmProblem(m=M, n=N, k=K, a_dt=int(src.data_type), trans_a=ta, lda=lda,
                              ldc=ldc, c_dt=int(dst.data_type), post_ops=pd._post_ops,
                              scales=pd._scales, zero_points=pd._zps, epi_batch=batch, **epi)
    count = math.prod(batch)
    strides = [_batch_stride(x, batch) for x in (src, wei, dst)]
    refs = (Ref(ARG_SRC), Ref(ARG_WEIGHTS), Ref(ARG_DST))
    if count == 1 or None not in strides:
        sa, sb, sc = (s or 0 for s in strides)
        pr = replace(base, batch=count, stride_a=sa, stride_c=sc, b_batched=count > 1 and sb > 0)
        plan.gemm_int8(pr, refs[0], src.offset0, refs[1], wei.offset0, refs[2], dst.offset0,
                       ldb=ldb, trans_b=tb, stride_b=sb, epilogue=operands, slot="int8_b")
        return
    for idx in _batch_entries(batch):  # batch dims that fold into no single stride
        off = [_entry_offset(x, idx) for x in (src, wei, dst)]
        pr = replace(base, epi_batch=(), epi_fixed=tuple(idx))
        plan.gemm_int8(pr, refs[0], off[0], refs[1], off[1], refs[2], off[2], ldb=ldb,
                       trans_b=tb, epilogue=operands, slot="int8_b")
