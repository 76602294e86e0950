"""The inner product forward primitive (``dnnl::inner_product_forward``): ``dst[n, oc] =
sum over (ic, spatial) of src[n, ic, ...] * weights[oc, ic, ...] + bias[oc]``.

The plan is runtime steps only: inputs whose layout does not fold into a row-major ``[N, K]``
/ ``[OC, K]`` matrix are first reordered into the scratchpad, a bias is broadcast into dst by a
reorder from a stride-0 view, then one GEMM ``src @ weights^T`` adds onto it.
"""
from __future__ import annotations

import math

from ..constants import ARG_BIAS, ARG_DST, ARG_SRC, ARG_WEIGHTS, prop_kind
from ..error import invalid_arguments, unimplemented
from ..kernels.reorder import ReorderProblem, layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.gemm import GemmShape
from ..runtime.plan import SCRATCH, Plan, Ref
from .base import ArgSpec, primitive, primitive_desc_base
from .signature import Signature, bind

_PLAIN = "abcdefghijkl"


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


class inner_product_forward(primitive):
    """``dst = src . weights^T (+ bias)`` over each image's flattened input (f32)."""

    class primitive_desc(primitive_desc_base):
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
            descs = {ARG_SRC: a["src_desc"], ARG_WEIGHTS: a["weights_desc"],
                     ARG_BIAS: a.get("bias_desc"), ARG_DST: a["dst_desc"]}
            names = {ARG_SRC: "src_desc", ARG_WEIGHTS: "weights_desc", ARG_BIAS: "bias_desc",
                     ARG_DST: "dst_desc"}
            for arg, md in descs.items():
                if md is None and arg == ARG_BIAS:
                    continue
                if not isinstance(md, MemoryDesc) or md.is_zero():
                    raise invalid_arguments(f"inner_product_forward: {names[arg]} must be a "
                                            f"memory.desc, got {md!r}")
            if descs[ARG_BIAS] is not None and descs[ARG_BIAS].is_zero():
                descs[ARG_BIAS] = None
            src, wei, dst, bias = (descs[k] for k in (ARG_SRC, ARG_WEIGHTS, ARG_DST, ARG_BIAS))
            if not 2 <= len(src.dims) <= 5:
                raise invalid_arguments(f"inner_product_forward: src_desc must have 2 to 5 "
                                        f"dimensions [N, IC, spatial...], got {list(src.dims)}")
            if len(wei.dims) != len(src.dims) or tuple(wei.dims[1:]) != tuple(src.dims[1:]):
                raise invalid_arguments(
                    f"inner_product_forward: weights_desc dims {list(wei.dims)} must be [OC] + "
                    f"src's {list(src.dims[1:])}")
            N, OC = src.dims[0], wei.dims[0]
            if tuple(dst.dims) != (N, OC):
                raise invalid_arguments(f"inner_product_forward: dst_desc dims "
                                        f"{list(dst.dims)}, expected [N, OC] = [{N}, {OC}]")
            if bias is not None and tuple(bias.dims) != (OC,):
                raise invalid_arguments(f"inner_product_forward: bias_desc dims "
                                        f"{list(bias.dims)}, expected [OC] = [{OC}]")
            for arg, md in descs.items():
                if md is not None and md.data_type not in (data_type.f32, data_type.undef):
                    raise unimplemented(f"inner_product_forward: {names[arg]} data type "
                                        f"{md.data_type.name}; only f32 is implemented")
            if len(self._attr.get_post_ops()) or self._attr.scales or self._attr.zero_points:
                raise unimplemented("inner_product_forward: post-ops, scales and zero points "
                                    "are not implemented yet")
            self._staged = {}
            scratch = 0
            for arg, md in descs.items():
                if md is None:
                    continue
                if md.is_any():
                    md = _plain(md)
                if md.data_type == data_type.undef:
                    md = md.with_data_type(data_type.f32)
                self._args[arg] = ArgSpec(md, arg == ARG_DST)
                if arg in (ARG_SRC, ARG_WEIGHTS, ARG_DST) and not _folds(md):
                    self._staged[arg] = scratch  # a plain copy in the scratchpad
                    scratch += -(-math.prod(md.dims) // 16) * 16
            self._scratch_elems = scratch
            self._impl = "gemm:runtime" + (":staged" if self._staged else "")
            self._info = f"mb{N}ic{math.prod(src.dims[1:])}oc{OC}"
            self._finish_scratchpad(scratch * 4)

        def get_prop_kind(self) -> prop_kind:
            return self._prop

    def _create(self) -> None:
        pd = self._pd
        md = {arg: spec.md for arg, spec in pd._args.items()}
        src, wei, dst = md[ARG_SRC], md[ARG_WEIGHTS], md[ARG_DST]
        N, OC, K = src.dims[0], wei.dims[0], math.prod(src.dims[1:])
        plan = self._plan = Plan(pd.get_engine(), "inner_product", scratch_elems=pd._scratch_elems)
        where = {}
        for arg in (ARG_SRC, ARG_WEIGHTS, ARG_DST):
            off = pd._staged.get(arg)
            if off is None:
                width = math.prod(md[arg].dims[1:])  # a single row may have any stride
                where[arg] = (Ref(arg), md[arg].offset0, max(md[arg].strides[0], width))
                continue
            plain = MemoryDesc(md[arg].dims, data_type.f32, _PLAIN[:len(md[arg].dims)])
            flat = (off, tuple((1, s, ()) for s in plain.strides))
            if arg != ARG_DST:
                plan.reorder(ReorderProblem.f32(md[arg].dims, layout_of(md[arg]),
                                                md[arg].nelems_physical(), flat,
                                                off + math.prod(plain.dims)), Ref(arg), SCRATCH)
            where[arg] = (SCRATCH, off, plain.strides[0])
        bias = md.get(ARG_BIAS)
        c_ref, c_off, ldc = where[ARG_DST]
        if bias is not None:  # dst = bias broadcast over the images (a stride-0 view)
            view = (bias.offset0, ((1, 0, ()), (1, bias.strides[0], ())))
            dlay = ((c_off, ((1, ldc, ()), (1, 1, ()))) if c_ref is SCRATCH
                    else layout_of(dst))
            plan.reorder(ReorderProblem.f32([N, OC], view, bias.nelems_physical(), dlay,
                                            c_off + N * ldc if c_ref is SCRATCH
                                            else dst.nelems_physical()), Ref(ARG_BIAS), c_ref)
        (a_ref, a_off, lda), (b_ref, b_off, ldb) = where[ARG_SRC], where[ARG_WEIGHTS]
        plan.gemm(GemmShape(m=N, n=OC, k=K, lda=lda, ldb=ldb, ldc=ldc, trans_b=True,
                            beta=1.0 if bias is not None else 0.0),
                  a_ref, a_off, b_ref, b_off, c_ref, c_off)
        if c_ref is SCRATCH:  # back into dst's own layout
            plain = MemoryDesc(dst.dims, data_type.f32, "ab")
            flat = (c_off, tuple((1, s, ()) for s in plain.strides))
            plan.reorder(ReorderProblem.f32(dst.dims, flat, c_off + N * OC, layout_of(dst),
                                            dst.nelems_physical()), SCRATCH, Ref(ARG_DST))

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)
