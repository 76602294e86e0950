"""The softmax primitives (``dnnl::softmax_forward``, ``dnnl::softmax_backward``): softmax
or log-softmax along one axis of a tensor of any rank, and their gradients from ``dst`` and
``diff_dst`` (oneDNN v3 API; f32, f16 or bf16 data, float computation).

The plan is one generated kernel (:mod:`pydnnl.kernels.softmax`): a work-group per softmax
row where the axis is innermost in memory, else a work-item per row walking the axis. Every
tensor is read and written through its own strides and inner blocks (plain, strided,
``nhwc``, blocked layouts), so nothing is copied; ``dst`` may be the ``src`` memory (and
``diff_src`` the ``diff_dst`` memory) when the descs agree.

Forward takes oneDNN v3's post-ops for softmax, eltwise and binary entries (an f32 operand
``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1`` whose dims equal dst's or are 1, folded with the
tensors), applied as each value is finally stored. oneDNN's src/dst scales apply to int8
softmax only, which is not implemented here; backward takes no attributes (as in oneDNN).
"""
from __future__ import annotations

from dataclasses import replace

from ..constants import (
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_SRC,
    algorithm,
    arg_name,
    prop_kind,
)
from ..error import invalid_arguments, unimplemented
from ..kernels import softmax as K
from ..kernels.binary import broadcast_layout
from ..kernels.post_ops import describe as describe_post_ops
from ..kernels.post_ops import src1_name
from ..kernels.reduction import fold_dims, min_stride
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import softmax as H
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, check_in_place, primitive, primitive_desc_base
from .post_ops import binary_arg
from .post_ops import resolve as resolve_post_ops
from .signature import Signature, bind

__all__ = ["softmax_forward", "softmax_backward"]

_PLAIN = "abcdefghijkl"
DATA_TYPES = (data_type.f32, data_type.f16, data_type.bf16)
_INT_MAX = 2**31 - 1


def follow(md: MemoryDesc, dims=None, dt=None) -> MemoryDesc:
    """A dense desc of ``dims`` (``md``'s by default) and data type ``dt`` (``md``'s by
    default) laid out like ``md``: the same storage order for plain layouts, the same tag for
    blocked ones, else row-major (how ``format_tag.any`` resolves after a concrete desc)."""
    dt = md.data_type if dt is None else dt
    dims = tuple(md.dims if dims is None else dims)
    if dims == tuple(md.dims) and md.is_dense() and md.offset0 == 0:
        return md if md.data_type == dt else md.with_data_type(dt)
    if md.is_plain():
        order = sorted(range(len(dims)), key=lambda d: (-md.strides[d], d))
        strides, run = [0] * len(dims), 1
        for d in reversed(order):
            strides[d] = run
            run *= dims[d]
        return MemoryDesc(dims, dt, tuple(strides))
    if md.tag is not None:
        return MemoryDesc(dims, dt, md.tag)
    return MemoryDesc(dims, dt, _PLAIN[:len(dims)])


def check_desc(kind: str, name: str, md, allow_any: bool = True) -> MemoryDesc:
    """``md`` as a usable f32, f16 or bf16 desc (``any`` allowed when ``allow_any``), else the
    error."""
    if not isinstance(md, MemoryDesc) or md.is_zero():
        raise invalid_arguments(f"{kind}: {name} must be a memory.desc, got {md!r}")
    if md.is_any() and not allow_any:
        raise invalid_arguments(f"{kind}: {name} must have a concrete layout (not "
                                f"format_tag.any), got {md!r}")
    if md.data_type not in DATA_TYPES:
        raise unimplemented(f"{kind}: {name} data type {md.data_type.name}; f32, f16 and bf16 "
                            f"are implemented")
    if not md.is_any() and md.nelems_physical() > _INT_MAX:
        raise unimplemented(f"{kind}: {name} spans {md.nelems_physical()} elements; at most "
                            f"{_INT_MAX} are implemented (32-bit offsets)")
    return md


def check_attr(kind: str, attr) -> None:
    """Refuse any post-ops, scales or zero points (primitives that take no attributes)."""
    if len(attr.get_post_ops()) or attr.scales or attr.zero_points:
        raise unimplemented(f"{kind}: attr with post-ops, scales or zero points is not "
                            f"implemented (got {attr.key()!r})")


def _backward_attr(kind: str, attr) -> None:
    if len(attr.get_post_ops()) or attr.scales or attr.zero_points:
        raise unimplemented(f"{kind}: attr with post-ops, scales or zero points (got "
                            f"{attr.key()!r}); oneDNN defines none for backward propagation "
                            f"(softmax_forward takes post-ops)")


def _forward_attr(kind: str, attr, dst: MemoryDesc) -> tuple[tuple, dict]:
    """``(post-op chain, {arg: ArgSpec})`` of ``attr`` for a forward writing ``dst``. oneDNN
    v3's softmax forward takes eltwise and binary post-ops, and common (mask 0) src/dst
    scales for int8 (s8/u8) softmax only."""
    if attr.zero_points:
        raise unimplemented(f"{kind}: attr with zero points (got {attr.key()!r}); oneDNN's "
                            f"softmax takes none")
    if attr.scales:
        args = ", ".join(arg_name(a) for a in attr.scales)
        raise unimplemented(f"{kind}: scales for {args}; oneDNN's softmax takes common src/dst "
                            f"scales only for int8 (s8/u8) data, and s8/u8 softmax is not "
                            f"implemented (f32, f16 and bf16 are)")
    return resolve_post_ops(kind, attr, dst, allowed=("binary", "eltwise"))


def _alg(kind: str, alg) -> algorithm:
    try:
        a = algorithm(int(alg))
    except (TypeError, ValueError):
        a = None
    if a not in (algorithm.softmax_accurate, algorithm.softmax_log):
        raise invalid_arguments(f"{kind}: algorithm must be softmax_accurate or softmax_log, "
                                f"got {alg!r}")
    return a


def _axis(kind: str, axis, ndims: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int) and not hasattr(axis, "__index__"):
        raise invalid_arguments(f"{kind}: axis must be an int, got {axis!r}")
    axis = int(axis)
    if not 0 <= axis < ndims:
        raise invalid_arguments(f"{kind}: axis must be in [0, {ndims}) for {ndims}-D tensors, "
                                f"got {axis}")
    return axis


class _softmax_pd(primitive_desc_base):
    """Queries and the kernel choice shared by both directions."""

    _kind = "softmax"

    def get_algorithm(self) -> algorithm:
        return self._alg

    def get_axis(self) -> int:
        return self._axis_v

    def get_prop_kind(self) -> prop_kind:
        return self._prop

    def _finish(self, order: tuple[int, ...]) -> None:
        """Fold the problem over the descs of arguments ``order`` (kernel order) and pick the
        kernel shape."""
        mds = [self._args[a].md for a in order]
        self._order = order
        dims = tuple(mds[0].dims)
        lays = tuple(layout_of(md) for md in mds)
        chain = getattr(self, "_post_ops", ())
        # binary operands fold with the tensors (a broadcast dim: a zero term)
        po_mds = [self._args[binary_arg(i)].md for i, op in enumerate(chain)
                  if op[0] == "binary"]
        po_lays = tuple(broadcast_layout(layout_of(md), md.dims, dims) for md in po_mds)
        roles = tuple("axis" if d == self._axis_v else "row" for d in range(len(dims)))
        fdims, flays, froles = fold_dims(dims, lays + po_lays, roles, keep=(self._axis_v,))
        flays, po_flays = flays[:len(lays)], iter(flays[len(lays):])
        chain = tuple(("binary", op[1], next(po_flays), (), 0) if op[0] == "binary" else op
                      for op in chain)
        axis = froles.index("axis")
        info = self.get_engine().info
        C = fdims[axis]
        # contiguous: the axis is the innermost dim in memory of the first tensor
        innermost = all(min_stride(flays[0], axis) <= min_stride(flays[0], d)
                        for d in range(len(fdims)) if d != axis)
        row = H.use_row_kernel(info, C, innermost and min_stride(flays[0], axis) == 1)
        backward = self._prop == prop_kind.backward_data
        vec = 1
        variant = "row" if row else "strided"
        if row and H.softmax_vrow_vec(info) and K.vrow_ok(fdims, axis, flays, chain):
            variant, vec, wg = "vrow", H.softmax_vrow_vec(info), H.SOFTMAX_VROW_WG
        elif row:
            wg = H.softmax_row_wg(info, C)
        else:  # post-ops apply per element: one position per work-item
            vec = next((v for v in H.softmax_strided_vecs(info)
                        if K.vec_ok(fdims, axis, flays, v)), 1) if not chain else 1
            wg = H.softmax_strided_wg(info, vec)
        self._problem = K.SoftmaxProblem(
            log=self._alg == algorithm.softmax_log, backward=backward,
            dims=fdims, axis=axis, layouts=flays, variant=variant, wg=wg,
            dts=tuple(md.data_type.name for md in mds),
            subgroup=variant == "row" and H.row_subgroup(info, wg),
            online=variant == "row" and not backward and H.softmax_online(info), vec=vec,
            post_ops=chain)
        if variant == "row" and not backward and not self._problem.subgroup:
            self._problem = replace(self._problem, cache=H.softmax_row_cache(info, C, wg))
        self._impl = f"ocl:softmax:{self._problem.variant}"
        self._info = (f"alg:{self._alg.name} axis:{self._axis_v} "
                      f"{'x'.join(map(str, dims))}"
                      + (f" attr-post-ops:{describe_post_ops(self._post_ops)}"
                         if chain else ""))
        self._finish_scratchpad(0)


class _softmax_primitive(primitive):
    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), pd._kind)
        names = K.arg_names(pd._problem.backward)
        # the outer count (minibatch), and the axis length where the device's rule says so,
        # kernel arguments: one program for every outer count (and axis length) of the class
        problem, sizes = K.runtime_form(
            pd._problem, axis=H.softmax_runtime_axis(pd.get_engine().info, pd._problem))
        operands = {src1_name(i): Ref(binary_arg(i)) for i, op in enumerate(problem.post_ops)
                    if op[0] == "binary"}
        plan.kernel("softmax", problem, K.build_softmax, **operands,
                    **{n: Ref(a) for n, a in zip(names, pd._order)}, **sizes)

    def _execute(self, s, args) -> None:
        pd = self._pd
        check_in_place(pd._kind, args, pd._order[:-1], pd._order[-1])
        self._plan.execute(s, args)


class softmax_forward(_softmax_primitive):
    """``dst = softmax(src)`` or ``log_softmax(src)`` along ``axis`` (f32, f16, bf16)."""

    class primitive_desc(_softmax_pd):
        """``softmax_forward.primitive_desc(engine, prop_kind, algorithm, src_desc, dst_desc,
        axis, attr=None)``."""

        _kind = "softmax_forward"
        signature = Signature(
            "softmax_forward.primitive_desc",
            head=("engine", "prop_kind", "algorithm", "src_desc", "dst_desc", "axis"),
            forms=((),), tail=("attr",),
            aliases={"aengine": "engine", "aprop_kind": "prop_kind", "aalgorithm": "algorithm"})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            kind = self._kind
            try:
                self._prop = prop_kind(int(a["prop_kind"]))
            except (TypeError, ValueError):
                self._prop = None
            if self._prop not in (prop_kind.forward_training, prop_kind.forward_inference):
                raise invalid_arguments(f"{kind}: prop_kind must be forward_training or "
                                        f"forward_inference, got {a['prop_kind']!r}")
            self._alg = _alg(kind, a["algorithm"])
            src = check_desc(kind, "src_desc", a["src_desc"], allow_any=False)
            dst = a["dst_desc"]
            if not isinstance(dst, MemoryDesc) or dst.is_zero():
                raise invalid_arguments(f"{kind}: dst_desc must be a memory.desc, got {dst!r}")
            if tuple(dst.dims) != tuple(src.dims):
                raise invalid_arguments(f"{kind}: dst_desc dims {list(dst.dims)} must equal "
                                        f"src_desc dims {list(src.dims)}")
            self._axis_v = _axis(kind, a["axis"], len(src.dims))
            if dst.is_any():
                dst = follow(src, dt=dst.data_type)
            check_desc(kind, "dst_desc", dst)
            self._post_ops, po_args = _forward_attr(kind, self._attr, dst)
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            self._args.update(po_args)
            self._finish((ARG_SRC, ARG_DST))


class softmax_backward(_softmax_primitive):
    """``diff_src`` from ``dst`` and ``diff_dst`` (f32, f16, bf16): accurate ``dst * (diff_dst -
    sum(diff_dst * dst))``, log ``diff_dst - exp(dst) * sum(diff_dst)``."""

    class primitive_desc(_softmax_pd):
        """``softmax_backward.primitive_desc(engine, algorithm, diff_src_desc, diff_dst_desc,
        dst_desc, axis, hint_fwd_pd, attr=None)``."""

        _kind = "softmax_backward"
        signature = Signature(
            "softmax_backward.primitive_desc",
            head=("engine", "algorithm", "diff_src_desc", "diff_dst_desc", "dst_desc", "axis"),
            forms=(("hint_fwd_pd",),), tail=("attr",),
            aliases={"aengine": "engine", "aalgorithm": "algorithm"})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            kind = self._kind
            self._prop = prop_kind.backward_data
            self._alg = _alg(kind, a["algorithm"])
            hint = a["hint_fwd_pd"]
            if not isinstance(hint, softmax_forward.primitive_desc):
                raise invalid_arguments(f"{kind}: hint_fwd_pd must be a "
                                        f"softmax_forward.primitive_desc, got "
                                        f"{type(hint).__name__}")
            descs = {n: a[n] for n in ("diff_src_desc", "diff_dst_desc", "dst_desc")}
            for name, md in descs.items():
                if not isinstance(md, MemoryDesc) or md.is_zero():
                    raise invalid_arguments(f"{kind}: {name} must be a memory.desc, got {md!r}")
            dims = tuple(descs["dst_desc"].dims)
            for name in ("diff_src_desc", "diff_dst_desc"):
                if tuple(descs[name].dims) != dims:
                    raise invalid_arguments(f"{kind}: {name} dims {list(descs[name].dims)} "
                                            f"must equal dst_desc dims {list(dims)}")
            self._axis_v = _axis(kind, a["axis"], len(dims))
            if tuple(hint.dst_desc().dims) != dims or hint.get_axis() != self._axis_v:
                raise invalid_arguments(
                    f"{kind}: hint_fwd_pd is for dims {list(hint.dst_desc().dims)} and axis "
                    f"{hint.get_axis()}, this backward for dims {list(dims)} and axis "
                    f"{self._axis_v}")
            dst, ddst, dsrc = descs["dst_desc"], descs["diff_dst_desc"], descs["diff_src_desc"]
            if dst.is_any():
                h = hint.dst_desc()
                dst = h if h.data_type == dst.data_type else h.with_data_type(dst.data_type)
            if ddst.is_any():
                ddst = follow(dsrc if not dsrc.is_any() else dst, dt=ddst.data_type)
            if dsrc.is_any():
                dsrc = follow(ddst, dt=dsrc.data_type)
            for name, md in (("dst_desc", dst), ("diff_dst_desc", ddst),
                             ("diff_src_desc", dsrc)):
                check_desc(kind, name, md)
            _backward_attr(kind, self._attr)
            self._args[ARG_DST] = ArgSpec(dst, False)
            self._args[ARG_DIFF_DST] = ArgSpec(ddst, False)
            self._args[ARG_DIFF_SRC] = ArgSpec(dsrc, True)
            self._finish((ARG_DST, ARG_DIFF_DST, ARG_DIFF_SRC))


