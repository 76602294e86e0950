"""The inner product primitives (``dnnl::inner_product_forward``, ``_backward_data``,
``_backward_weights``): ``dst[n, oc] = sum over (ic, spatial) of src[n, ic, ...] *
weights[oc, ic, ...] + bias[oc]`` and its two gradients.

Each plan is runtime steps only. Tensors whose layout does not fold into a row-major matrix
(``[N, K]``, ``[OC, K]``, ``[N, OC]``) go through plain copies in the scratchpad. Then:
forward ``dst = src @ weights^T`` with the bias and the post-ops (eltwise, sum, binary) in the
GEMM kernel's store, backward data ``diff_src = diff_dst @ weights``, backward weights
``diff_weights = diff_dst^T @ src`` and ``diff_bias`` = the column sums of ``diff_dst``.

bf16 and f16 tensors are converted into f32 copies in the scratchpad (and outputs back, with
round-to-nearest-even), so every product accumulates in f32 as oneDNN's GPU engine does.

The forward takes scales (``set_scales_mask`` with ``ARG_SRC`` and ``ARG_DST`` mask 0,
``ARG_WEIGHTS`` 0 or 1: per output channel; values passed at execute as ``ARG_ATTR_SCALES |
ARG_*`` f32 memories) fused into the GEMM's store: ``dst = post_ops(src_scale * wei_scale *
(src . weights^T) + bias) / dst_scale``, oneDNN's int8 inner product's formula and masks.
oneDNN v3 takes scales on inner products with int8 src only; pydnnl takes them on f32, bf16
and f16 data too.

int8 forward (src u8 or s8, weights s8; dst and bias f32, s32, s8, u8 or bf16, oneDNN's
table): the integer GEMM of :mod:`pydnnl.kernels.gemm_int8` (weights packed into the
scratchpad at every execution, s32 accumulation, the epilogue in its store, rounded to nearest
even and saturated into dst's type). oneDNN's inner product takes no zero points, nor does
this one.
"""
from __future__ import annotations

import math

from ..constants import (
    ARG_BIAS,
    ARG_DIFF_BIAS,
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DIFF_WEIGHTS,
    ARG_DST,
    ARG_SRC,
    ARG_WEIGHTS,
    prop_kind,
)
from ..error import invalid_arguments, runtime_error, unimplemented
from ..kernels import gemm_int8 as gi
from ..kernels.post_ops import describe as describe_post_ops
from ..kernels.post_ops import reads_prior
from ..kernels.reductions import ColSum, build_colsum
from ..kernels.reorder import ReorderProblem, layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.gemm import GemmShape, get_gemm, packed_panel
from ..runtime.heuristics.reduction import colsum_row_lanes
from ..runtime.plan import SCRATCH, Plan, Ref
from .base import ArgSpec, bias_queries, primitive, primitive_desc_base
from .post_ops import WITH_PRELU, resolve_scales, scale_operands
from .post_ops import resolve as resolve_post_ops
from .signature import Signature, bind

_PLAIN = "abcdefghijkl"
# storage types: bf16/f16 tensors are converted to f32 copies and computed in f32
_DATA_TYPES = (data_type.f32, data_type.bf16, data_type.f16, data_type.undef)
# each argument's role: which of src (activations), weights, dst it is shaped like
_ROLE = {ARG_SRC: "src", ARG_DIFF_SRC: "src", ARG_WEIGHTS: "weights",
         ARG_DIFF_WEIGHTS: "weights", ARG_DST: "dst", ARG_DIFF_DST: "dst", ARG_BIAS: "bias",
         ARG_DIFF_BIAS: "bias"}
_NAMES = {ARG_SRC: "src_desc", ARG_DIFF_SRC: "diff_src_desc", ARG_WEIGHTS: "weights_desc",
          ARG_DIFF_WEIGHTS: "diff_weights_desc", ARG_DST: "dst_desc",
          ARG_DIFF_DST: "diff_dst_desc", ARG_BIAS: "bias_desc", ARG_DIFF_BIAS: "diff_bias_desc"}
_OUTPUTS = (ARG_DST, ARG_DIFF_SRC, ARG_DIFF_WEIGHTS, ARG_DIFF_BIAS)
# dst and bias data types of an int8 forward (oneDNN's table: no f16)
_INT8_OUT = tuple(t for t in gi.C_TYPES if t != data_type.f16)


def _plain(md: MemoryDesc) -> MemoryDesc:
    return MemoryDesc(md.dims, data_type.f32, _PLAIN[:len(md.dims)])


def _folds(md: MemoryDesc) -> bool:
    """Whether ``md`` is a row-major matrix [dims[0], rest] as it lies (any row stride)."""
    if md.inner_blks:
        return False
    run = 1
    for d in range(len(md.dims) - 1, 0, -1):
        if md.dims[d] > 1 and md.strides[d] != run:
            return False
        run *= md.dims[d]
    return True


def _weights_form(md: MemoryDesc) -> tuple | None:
    """How the forward GEMM reads weights ``[OC, rest...]`` without a copy: ``("rows",)``
    (row-major ``[OC, K]``: B transposed), ``("cols", ldb)`` (OC innermost, the rest
    row-major: plain B ``[K, OC]``) or ``("panel", w)`` (blocked ``A<rest><w>a``: B packed in
    panels of ``w`` columns, the GEMM's packed layout); None when it needs a copy."""
    if _folds(md):
        return ("rows",)
    n = len(md.dims)
    if md.inner_blks:
        if (len(md.inner_blks) == 1 and md.inner_idxs[0] == 0 and md.offset0 == 0
                and md == MemoryDesc(md.dims, md.data_type,
                                     "A" + _PLAIN[1:n] + f"{md.inner_blks[0]}a")):
            return ("panel", int(md.inner_blks[0]))
        return None
    if md.dims[0] > 1 and md.strides[0] != 1:
        return None
    run = md.strides[-1] if n > 1 else md.dims[0]
    if n > 1 and run < md.dims[0]:
        return None
    for d in range(n - 1, 0, -1):
        if md.dims[d] > 1 and md.strides[d] != run:
            return None
        run *= md.dims[d]
    return ("cols", int(md.strides[-1]) if n > 1 else int(md.dims[0]))


def _flat(off: int, md: MemoryDesc) -> tuple:
    """The reorder layout of ``md``'s dims row-major from element ``off``."""
    return (off, tuple((1, s, ()) for s in _plain(md).strides))


class _ip_pd_base(bias_queries, primitive_desc_base):
    """Validation shared by the three descriptors: ``descs`` maps argument numbers to descs
    (None for an absent bias)."""

    # every output element reads a whole row of src/weights: nothing may run in place
    _IN_PLACE: frozenset = frozenset()

    def _setup(self, descs: dict, hint=None) -> None:
        kind = self._kind
        for arg, md in descs.items():
            if md is None and _ROLE[arg] == "bias":
                continue
            if not isinstance(md, MemoryDesc) or md.is_zero():
                raise invalid_arguments(f"{kind}: {_NAMES[arg]} must be a memory.desc, got {md!r}")
        by_role = {_ROLE[a]: (a, md) for a, md in descs.items()}
        (sa, src), (wa, wei), (da, dst) = by_role["src"], by_role["weights"], by_role["dst"]
        ba, bias = by_role.get("bias", (None, None))
        if bias is not None and bias.is_zero():
            bias = descs[ba] = None
        if not 2 <= len(src.dims) <= 5:
            raise invalid_arguments(f"{kind}: {_NAMES[sa]} must have 2 to 5 dimensions [N, IC, "
                                    f"spatial...], got {list(src.dims)}")
        if len(wei.dims) != len(src.dims) or tuple(wei.dims[1:]) != tuple(src.dims[1:]):
            raise invalid_arguments(f"{kind}: {_NAMES[wa]} dims {list(wei.dims)} must be [OC] + "
                                    f"{_NAMES[sa]}'s {list(src.dims[1:])}")
        N, OC = src.dims[0], wei.dims[0]
        if tuple(dst.dims) != (N, OC):
            raise invalid_arguments(f"{kind}: {_NAMES[da]} dims {list(dst.dims)}, expected "
                                    f"[N, OC] = [{N}, {OC}]")
        if bias is not None and tuple(bias.dims) != (OC,):
            raise invalid_arguments(f"{kind}: {_NAMES[ba]} dims {list(bias.dims)}, expected "
                                    f"[OC] = [{OC}]")
        if ba == ARG_DIFF_BIAS and bias is not None and not bias.is_any() \
                and OC > 1 and bias.strides[0] != 1:
            raise unimplemented(f"{kind}: diff_bias_desc must be dense, got strides "
                                f"{list(bias.strides)}")
        self._int8 = da == ARG_DST and src.data_type in gi.A_TYPES
        if self._int8:
            self._setup_int8(descs)
            return
        for arg, md in descs.items():
            if md is not None and md.data_type not in _DATA_TYPES:
                raise unimplemented(f"{kind}: {_NAMES[arg]} data type {md.data_type.name}; f32, "
                                    f"bf16 and f16 are implemented" + (
                                        " (u8 and s8 src: forward only)"
                                        if md.data_type in gi.A_TYPES else ""))
        # bf16/f16 products only where every tensor of the three is that type (the one
        # written included: conservative, and the same test for every direction)
        self._gemm_input_dts = tuple(descs[a].data_type for a in (sa, wa, da)
                                     if descs.get(a) is not None)
        self._scales, scales_text = (), ""
        if da != ARG_DST and (self._attr.scales or self._attr.zero_points):
            raise unimplemented(f"{kind}: scales and zero points apply to forward propagation "
                                f"only (oneDNN's backward inner products take none)")
        if da == ARG_DST:  # src and dst common; weights common or per output channel (mask 1)
            self._scales, scales_text = resolve_scales(
                kind, self._attr, (N, OC), 1, 1,
                "this is no int8 inner product (its src is not u8 or s8)")
        self._post_ops, po_args = (), {}
        if len(self._attr.get_post_ops()):
            if da != ARG_DST:
                raise unimplemented(f"{kind}: post-ops apply to forward propagation only")
            self._post_ops, po_args = resolve_post_ops(kind, self._attr, dst, allowed=WITH_PRELU)
        self._staged: dict[int, int] = {}
        scratch = 0
        for arg, md in descs.items():
            if md is None:
                continue
            dt = md.data_type if md.data_type != data_type.undef else data_type.f32
            if md.is_any():  # the forward's choice where a hint has one, else row-major
                chosen = hint.query_md_for(_ROLE[arg]) if hint is not None else None
                if arg == ARG_WEIGHTS and hint is None and dt == data_type.f32:
                    chosen = self._fast_weights(md.dims, N, OC)
                md = chosen if chosen is not None and chosen.dims == md.dims else _plain(md)
                if md.data_type != dt:
                    md = md.with_data_type(dt)
            if md.data_type == data_type.undef:
                md = md.with_data_type(data_type.f32)
            self._args[arg] = ArgSpec(md, arg in _OUTPUTS)
            form = _weights_form(md) if arg in (ARG_WEIGHTS, ARG_DIFF_WEIGHTS) else None
            if da != ARG_DST and form is not None and form[0] != "cols":
                form = None  # the backward GEMMs take OC innermost as it lies, copy the rest
            # panels are read in place only in the width the tuned kernel reads
            direct = form is not None and (form[0] != "panel" or form[1] == self._panel_width(
                md.dims, N, OC))
            converted = md.data_type != data_type.f32  # bf16/f16: an f32 copy, computed in f32
            if converted or (_ROLE[arg] != "bias" and not _folds(md) and not direct):
                self._staged[arg] = scratch  # a plain f32 copy in the scratchpad
                scratch += -(-math.prod(md.dims) // 16) * 16
        self._args.update(po_args)
        self._add_runtime_attr_args()  # ARG_ATTR_SCALES | ARG_*: f32, one per mask index
        self._scratch_elems = scratch
        self._impl = "gemm:runtime" + (":staged" if self._staged else "")
        self._info = f"mb{N}ic{math.prod(src.dims[1:])}oc{OC}" + (
            f" attr-scales:{scales_text}" if self._scales else "") + (
            f" attr-post-ops:{describe_post_ops(self._post_ops)}" if self._post_ops else "")
        self._finish_scratchpad(scratch * 4)

    def _setup_int8(self, descs: dict) -> None:
        """u8/s8 src (forward): validated against oneDNN's int8 table, layouts resolved
        (plain; weights as ``[OC, K]`` rows or with OC innermost), scales read (oneDNN's
        inner product takes no zero points); the scratchpad sized by a dry plan."""
        kind = self._kind
        src, wei = descs[ARG_SRC], descs[ARG_WEIGHTS]
        dst, bias = descs[ARG_DST], descs.get(ARG_BIAS)
        if wei.data_type != data_type.s8:
            raise unimplemented(f"{kind}: weights_desc data type {wei.data_type.name} with "
                                f"src_desc data type {src.data_type.name}; int8 inner product "
                                f"takes s8 weights")
        for arg, md in ((ARG_DST, dst), (ARG_BIAS, bias)):
            if md is not None and md.data_type != data_type.undef \
                    and md.data_type not in _INT8_OUT:
                raise unimplemented(f"{kind}: {_NAMES[arg]} data type {md.data_type.name} with "
                                    f"int8 src; implemented: "
                                    f"{', '.join(t.name for t in _INT8_OUT)}")
        if self._attr.zero_points:
            raise unimplemented(f"{kind}: zero points; oneDNN's inner product takes none (a "
                                f"matmul over [N, K] x [K, OC] does)")
        N, OC = src.dims[0], wei.dims[0]
        self._scales, scales_text = resolve_scales(kind, self._attr, (N, OC), 1, 1, None)
        self._post_ops, po_args = (), {}
        if len(self._attr.get_post_ops()):
            self._post_ops, po_args = resolve_post_ops(kind, self._attr, dst, allowed=WITH_PRELU)
        self._staged = {}
        for arg, md in descs.items():
            if md is None:
                continue
            if md.data_type == data_type.undef:
                md = md.with_data_type(data_type.f32)
            if md.is_any():
                md = MemoryDesc(md.dims, md.data_type, _PLAIN[:len(md.dims)])
            form = _weights_form(md) if arg == ARG_WEIGHTS else None
            if (arg in (ARG_SRC, ARG_DST) and not _folds(md)) or (
                    arg == ARG_WEIGHTS and (form is None or form[0] == "panel")):
                raise unimplemented(f"{kind}: int8 {_NAMES[arg]} must be a plain row-major "
                                    f"matrix (weights: OC outermost or innermost), got "
                                    f"{md.format_name()}")
            self._args[arg] = ArgSpec(md, arg in _OUTPUTS)
        self._args.update(po_args)
        self._add_runtime_attr_args()  # ARG_ATTR_SCALES | ARG_*: f32, one per mask index
        dry = Plan(self._engine, kind, dry=True)
        _int8_steps(dry, self)
        self._scratch_elems = dry.scratch_elems
        self._impl = "gemm_int8:runtime"
        self._info = f"mb{N}ic{math.prod(src.dims[1:])}oc{OC}" + (
            f" attr-scales:{scales_text}" if self._scales else "") + (
            f" attr-post-ops:{describe_post_ops(self._post_ops)}" if self._post_ops else "")
        self._finish_scratchpad(self._scratch_elems * 4)

    def _panel_width(self, dims, N: int, OC: int) -> int | None:
        """Columns per panel of packed B the forward's tuned GEMM reads (None: plain B)."""
        K = math.prod(dims[1:])
        return packed_panel(self._engine, GemmShape(m=N, n=OC, k=K, lda=K, ldb=OC, ldc=OC,
                                                      math=self._gemm_math()), slices=True)

    def _fast_weights(self, dims, N: int, OC: int) -> MemoryDesc:
        """The weights layout the forward GEMM reads fastest on this engine: its packed panels
        (``A<rest><w>a``) where the tuned kernel reads packed B, else OC innermost (plain B)."""
        n, w = len(dims), self._panel_width(dims, N, OC)
        tag = "A" + _PLAIN[1:n] + f"{w}a" if w is not None else _PLAIN[1:n] + "a"
        return MemoryDesc(dims, data_type.f32, tag)

    def query_md_for(self, role: str) -> MemoryDesc | None:
        """The desc of this primitive's argument shaped like ``role`` (src/weights/dst)."""
        for arg, spec in self._args.items():
            if _ROLE.get(arg) == role:
                return spec.md
        return None

    def _check_hint(self, hint) -> None:
        if not isinstance(hint, inner_product_forward.primitive_desc):
            raise invalid_arguments(f"{self._kind}: hint_fwd_pd must be an "
                                    f"inner_product_forward.primitive_desc, got "
                                    f"{type(hint).__qualname__}")


class _ip_base(primitive):
    """Plan building shared by the three primitives."""

    def _matrix(self, plan: Plan, arg: int, output: bool = False) -> tuple[Ref, int, int]:
        """Where argument ``arg`` is read or written as a row-major matrix: ``(buffer,
        offset, leading dimension)``; inputs that do not fold are copied into the scratchpad
        first (outputs are copied out by :meth:`_unstage`)."""
        pd = self._pd
        md = pd._args[arg].md
        off = pd._staged.get(arg)
        width = math.prod(md.dims[1:])
        if off is None:  # a single row may have any stride
            return Ref(arg), md.offset0, max(md.strides[0], width)
        if not output:
            plan.reorder(ReorderProblem(tuple(md.dims), md.data_type, data_type.f32,
                                        layout_of(md), _flat(off, md), md.nelems_physical(),
                                        off + math.prod(md.dims)), Ref(arg), SCRATCH)
        return SCRATCH, off, width

    def _unstage(self, plan: Plan, arg: int) -> None:
        """Copy a staged output from the scratchpad into its own layout."""
        pd = self._pd
        off = pd._staged.get(arg)
        if off is not None:
            md = pd._args[arg].md
            plan.reorder(ReorderProblem(tuple(md.dims), data_type.f32, md.data_type,
                                        _flat(off, md), layout_of(md), off + math.prod(md.dims),
                                        md.nelems_physical()), SCRATCH, Ref(arg))

    def _new_plan(self) -> Plan:
        pd = self._pd
        return Plan(pd.get_engine(), pd._kind, scratch_elems=pd._scratch_elems)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


class inner_product_forward(_ip_base):
    """``dst = src . weights^T (+ bias)`` over each image's flattened input (f32)."""

    class primitive_desc(_ip_pd_base):
        """``inner_product_forward.primitive_desc(engine, prop_kind, src_desc, weights_desc,
        [bias_desc,] dst_desc, attr=None)``."""

        _kind = "inner_product_forward"
        signature = Signature(
            "inner_product_forward.primitive_desc", head=("engine", "aprop_kind"),
            forms=(("src_desc", "weights_desc", "dst_desc"),
                   ("src_desc", "weights_desc", "bias_desc", "dst_desc")),
            tail=("attr",), optional=frozenset({"bias_desc"}))

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            try:
                self._prop = prop_kind(a["aprop_kind"])
            except ValueError:
                raise invalid_arguments(f"inner_product_forward: aprop_kind must be a prop_kind, "
                                        f"got {a['aprop_kind']!r}") from None
            if self._prop not in (prop_kind.forward_training, prop_kind.forward_inference):
                raise invalid_arguments(f"inner_product_forward: aprop_kind must be "
                                        f"forward_training or forward_inference, got "
                                        f"{self._prop.name}")
            self._setup({ARG_SRC: a["src_desc"], ARG_WEIGHTS: a["weights_desc"],
                         ARG_BIAS: a.get("bias_desc"), ARG_DST: a["dst_desc"]})

        def get_prop_kind(self) -> prop_kind:
            return self._prop

    def _create(self) -> None:
        pd = self._pd
        if pd._int8:
            self._plan = Plan(pd.get_engine(), pd._kind)
            _int8_steps(self._plan, pd)
            return
        plan = self._plan = self._new_plan()
        src, wei = pd._args[ARG_SRC].md, pd._args[ARG_WEIGHTS].md
        N, OC, K = src.dims[0], wei.dims[0], math.prod(src.dims[1:])
        a_ref, a_off, lda = self._matrix(plan, ARG_SRC)
        wmd = pd._args[ARG_WEIGHTS].md
        form = _weights_form(wmd) if ARG_WEIGHTS not in pd._staged else None
        packed = form is not None and form[0] == "panel"
        if form is None or form[0] == "rows":
            b_ref, b_off, ldb = self._matrix(plan, ARG_WEIGHTS)
            trans_b = True
        else:  # plain B [K, OC] or its packed panels, read where it lies
            b_ref, b_off, trans_b = Ref(ARG_WEIGHTS), wmd.offset0, False
            ldb = form[1] if form[0] == "cols" else OC
        # a staged dst holds the prior content a sum post-op reads
        c_ref, c_off, ldc = self._matrix(plan, ARG_DST, output=not reads_prior(pd._post_ops))
        bias = pd._args.get(ARG_BIAS)
        epi, bias_ref = {}, None
        if bias is not None:  # bias[oc] at every dst position (n, oc)
            b = bias.md
            if ARG_BIAS in pd._staged:  # a bf16/f16 bias, converted into the scratchpad
                off = pd._staged[ARG_BIAS]
                plan.reorder(ReorderProblem(tuple(b.dims), b.data_type, data_type.f32,
                                            layout_of(b), (off, ((1, 1, ()),)),
                                            b.nelems_physical(), off + OC), Ref(ARG_BIAS),
                             SCRATCH)
                epi["bias"] = ((off, ((1, 0, ()), (1, 1, ()))), (1, OC), off + OC)
                bias_ref = SCRATCH
            else:
                epi["bias"] = ((b.offset0, ((1, 0, ()), (1, b.strides[0], ()))), (1, OC),
                               b.nelems_physical())
                bias_ref = Ref(ARG_BIAS)
        shape = GemmShape(m=N, n=OC, k=K, lda=lda, ldb=ldb, ldc=ldc, trans_b=trans_b,
                          post_ops=pd._post_ops, epi_batch=(), scales=pd._scales, **epi)
        if packed:  # the panels must be the ones the tuned kernel reads
            g = get_gemm(pd.get_engine(), shape, static_b=True, slices=True)
            if not g.packed or g.panel != form[1]:
                raise runtime_error(
                    f"inner_product_forward: weights in panels of {form[1]} columns, but the "
                    f"tuned GEMM reads {'panels of ' + str(g.panel) if g.packed else 'plain B'}"
                    f"; create the weights desc with format_tag.any again")
        plan.gemm(shape, a_ref, a_off, b_ref, b_off, c_ref, c_off, packed=packed, bias=bias_ref,
                  epilogue=scale_operands(pd._scales), slices=True)
        self._unstage(plan, ARG_DST)


class inner_product_backward_data(_ip_base):
    """``diff_src = diff_dst . weights`` (f32)."""

    class primitive_desc(_ip_pd_base):
        """``inner_product_backward_data.primitive_desc(engine, diff_src_desc, weights_desc,
        diff_dst_desc, hint_fwd_pd, attr=None)``."""

        _kind = "inner_product_backward_data"
        signature = Signature(
            "inner_product_backward_data.primitive_desc", head=("engine",),
            forms=(("diff_src_desc", "weights_desc", "diff_dst_desc", "hint_fwd_pd"),),
            tail=("attr",))

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            self._check_hint(a["hint_fwd_pd"])
            self._setup({ARG_DIFF_SRC: a["diff_src_desc"], ARG_WEIGHTS: a["weights_desc"],
                         ARG_DIFF_DST: a["diff_dst_desc"]}, a["hint_fwd_pd"])

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = self._new_plan()
        wei = pd._args[ARG_WEIGHTS].md
        N, OC, K = pd._args[ARG_DIFF_DST].md.dims[0], wei.dims[0], math.prod(wei.dims[1:])
        a_ref, a_off, lda = self._matrix(plan, ARG_DIFF_DST)
        c_ref, c_off, ldc = self._matrix(plan, ARG_DIFF_SRC, output=True)
        form = _weights_form(wei) if ARG_WEIGHTS not in pd._staged else None
        if form is not None and form[0] == "cols":  # OC innermost: B = weights^T as it lies
            b_ref, b_off, ldb, trans_b = Ref(ARG_WEIGHTS), wei.offset0, form[1], True
        else:
            (b_ref, b_off, ldb), trans_b = self._matrix(plan, ARG_WEIGHTS), False
        plan.gemm(GemmShape(m=N, n=K, k=OC, lda=lda, ldb=ldb, ldc=ldc, trans_b=trans_b), a_ref,
                  a_off, b_ref, b_off, c_ref, c_off, slices=True)
        self._unstage(plan, ARG_DIFF_SRC)


class inner_product_backward_weights(_ip_base):
    """``diff_weights = diff_dst^T . src`` and ``diff_bias`` = column sums of diff_dst (f32)."""

    class primitive_desc(_ip_pd_base):
        """``inner_product_backward_weights.primitive_desc(engine, src_desc,
        diff_weights_desc, [diff_bias_desc,] diff_dst_desc, hint_fwd_pd, attr=None)``."""

        _kind = "inner_product_backward_weights"
        signature = Signature(
            "inner_product_backward_weights.primitive_desc", head=("engine",),
            forms=(("src_desc", "diff_weights_desc", "diff_dst_desc", "hint_fwd_pd"),
                   ("src_desc", "diff_weights_desc", "diff_bias_desc", "diff_dst_desc",
                    "hint_fwd_pd")),
            tail=("attr",), optional=frozenset({"diff_bias_desc"}))

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            self._check_hint(a["hint_fwd_pd"])
            self._setup({ARG_SRC: a["src_desc"], ARG_DIFF_WEIGHTS: a["diff_weights_desc"],
                         ARG_DIFF_BIAS: a.get("diff_bias_desc"),
                         ARG_DIFF_DST: a["diff_dst_desc"]}, a["hint_fwd_pd"])

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = self._new_plan()
        src = pd._args[ARG_SRC].md
        N, K = src.dims[0], math.prod(src.dims[1:])
        OC = pd._args[ARG_DIFF_WEIGHTS].md.dims[0]
        a_ref, a_off, lda = self._matrix(plan, ARG_DIFF_DST)
        b_ref, b_off, ldb = self._matrix(plan, ARG_SRC)
        dw = pd._args[ARG_DIFF_WEIGHTS].md
        form = _weights_form(dw) if ARG_DIFF_WEIGHTS not in pd._staged else None
        if form is not None and form[0] == "cols":
            # OC innermost: diff_weights^T [K, OC] = src^T . diff_dst, written as it lies
            plan.gemm(GemmShape(m=K, n=OC, k=N, lda=ldb, ldb=lda, ldc=form[1], trans_a=True),
                      b_ref, b_off, a_ref, a_off, Ref(ARG_DIFF_WEIGHTS), dw.offset0,
                      slices=True)
        else:
            c_ref, c_off, ldc = self._matrix(plan, ARG_DIFF_WEIGHTS, output=True)
            plan.gemm(GemmShape(m=OC, n=K, k=N, lda=lda, ldb=ldb, ldc=ldc, trans_a=True),
                      a_ref, a_off, b_ref, b_off, c_ref, c_off, slices=True)
            self._unstage(plan, ARG_DIFF_WEIGHTS)
        bias = pd._args.get(ARG_DIFF_BIAS)
        if bias is not None:
            off = pd._staged.get(ARG_DIFF_BIAS)  # bf16/f16: summed in f32, then converted
            lanes = colsum_row_lanes(pd.get_engine().info)
            plan.kernel("colsum", ColSum(width=OC, ld=lda, accumulate=False, row_lanes=lanes),
                        build_colsum, out=Ref(ARG_DIFF_BIAS) if off is None else SCRATCH,
                        src=a_ref, o_off=bias.md.offset0 if off is None else off, i_off=a_off,
                        nrows=N)
            if off is not None:
                b = bias.md
                plan.reorder(ReorderProblem(tuple(b.dims), data_type.f32, b.data_type,
                                            (off, ((1, 1, ()),)), layout_of(b), off + OC,
                                            b.nelems_physical()), SCRATCH, Ref(ARG_DIFF_BIAS))


def _int8_steps(plan: Plan, pd) -> None:
    """The int8 forward's steps: the weights packed, one integer GEMM ``[N, K] x [K, OC]``."""
    src, wei, dst = (pd._args[a].md for a in (ARG_SRC, ARG_WEIGHTS, ARG_DST))
    N, OC, K = src.dims[0], wei.dims[0], math.prod(src.dims[1:])
    form = _weights_form(wei)
    trans_b = form[0] == "rows"
    ldb = max(wei.strides[0], K) if trans_b else form[1]
    operands, epi = dict(scale_operands(pd._scales)), {}
    bias = pd._args.get(ARG_BIAS)
    if bias is not None:
        b = bias.md
        epi = dict(bias=((b.offset0, ((1, 0, ()), (1, b.strides[0], ()))), (1, OC),
                         b.nelems_physical()), bias_dt=int(b.data_type))
        operands["bias"] = Ref(ARG_BIAS)
    pr = gi.Int8GemmProblem(m=N, n=OC, k=K, a_dt=int(src.data_type),
                            lda=max(src.strides[0], K), ldc=max(dst.strides[0], OC),
                            c_dt=int(dst.data_type), post_ops=pd._post_ops, scales=pd._scales,
                            **epi)
    plan.gemm_int8(pr, Ref(ARG_SRC), src.offset0, Ref(ARG_WEIGHTS), wei.offset0, Ref(ARG_DST),
                   dst.offset0, ldb=ldb, trans_b=trans_b, epilogue=operands, slot="int8_b")
