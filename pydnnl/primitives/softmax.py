"""The softmax primitives (``dnnl::softmax_forward``, ``dnnl::softmax_backward``): softmax
or log-softmax along one axis of a tensor of any rank, and their gradients from ``dst`` and
``diff_dst`` (oneDNN v3 API; f32, f16 or bf16 data, float computation).

The plan is one generated kernel (:mod:`pydnnl.kernels.softmax`): a work-group per softmax
row where the axis is innermost in memory, else a work-item per row walking the axis. Every
tensor is read and written through its own strides and inner blocks (plain, strided,
``nhwc``, blocked layouts), so nothing is copied; ``dst`` may be the ``src`` memory (and
``diff_src`` the ``diff_dst`` memory) when the descs agree.
"""
from __future__ import annotations

from ..constants import ARG_DIFF_DST, ARG_DIFF_SRC, ARG_DST, ARG_SRC, algorithm, prop_kind
from ..error import invalid_arguments, unimplemented
from ..kernels import softmax as K
from ..kernels.reduction import fold_dims, min_stride
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import softmax as H
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, check_in_place, primitive, primitive_desc_base
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
    if len(attr.get_post_ops()) or attr.scales or attr.zero_points:
        raise unimplemented(f"{kind}: attr with post-ops, scales or zero points is not "
                            f"implemented (got {attr.key()!r})")


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
        roles = tuple("axis" if d == self._axis_v else "row" for d in range(len(dims)))
        fdims, flays, froles = fold_dims(dims, lays, roles, keep=(self._axis_v,))
        axis = froles.index("axis")
        info = self.get_engine().info
        C = fdims[axis]
        # contiguous: the axis is the innermost dim in memory of the first tensor
        innermost = all(min_stride(flays[0], axis) <= min_stride(flays[0], d)
                        for d in range(len(fdims)) if d != axis)
        row = H.use_row_kernel(info, C, innermost and min_stride(flays[0], axis) == 1)
        backward = self._prop == prop_kind.backward_data
        vec = 1
        if row:
            wg = H.softmax_row_wg(info, C)
        else:
            vec = next((v for v in H.softmax_strided_vecs(info)
                        if K.vec_ok(fdims, axis, flays, v)), 1)
            wg = H.softmax_strided_wg(info, vec)
        self._problem = K.SoftmaxProblem(
            log=self._alg == algorithm.softmax_log, backward=backward,
            dims=fdims, axis=axis, layouts=flays, variant="row" if row else "strided", wg=wg,
            dts=tuple(md.data_type.name for md in mds),
            subgroup=row and H.row_subgroup(info, wg),
            online=row and not backward and H.softmax_online(info), vec=vec)
        self._impl = f"ocl:softmax:{self._problem.variant}"
        self._info = (f"alg:{self._alg.name} axis:{self._axis_v} "
                      f"{'x'.join(map(str, dims))}")
        self._finish_scratchpad(0)


class _softmax_primitive(primitive):
    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), pd._kind)
        names = K.arg_names(pd._problem.backward)
        # the outer count (minibatch) a kernel argument: one program for every outer count
        problem, sizes = K.runtime_form(pd._problem)
        plan.kernel("softmax", problem, K.build_softmax,
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
            check_attr(kind, self._attr)
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
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
            check_attr(kind, self._attr)
            self._args[ARG_DST] = ArgSpec(dst, False)
            self._args[ARG_DIFF_DST] = ArgSpec(ddst, False)
            self._args[ARG_DIFF_SRC] = ArgSpec(dsrc, True)
            self._finish((ARG_DST, ARG_DIFF_DST, ARG_DIFF_SRC))


