"""The eltwise primitives (``dnnl::eltwise_forward``, ``dnnl::eltwise_backward``): one oneDNN
v3 elementwise algorithm (relu, tanh, elu, ..., and the ``*_use_dst_for_bwd`` variants)
applied to every element, with its alpha and beta.

The plan is one generated kernel: a flat 1-D kernel when every tensor is dense in one and the
same storage order (plain or blocked, no block padding), else a kernel that reads and writes
each tensor through its own strides and inner blocks. In-place use (the same memory for src and
dst, or for diff_dst and diff_src) works on both.

Forward takes oneDNN v3's attribute for eltwise: binary post-ops (any of the twelve
algorithms, an f32 operand ``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1`` whose dims equal dst's
or are 1), applied in the kernel's store. The flat kernel reads an operand at its own offset
plus the element index where every tensor is dense in one order, else (over a plain dst) at
the element's position, found by division by the baked inner dims; a blocked dst with other
operands takes the strided kernel. Backward takes no attributes (as in oneDNN).
"""
from __future__ import annotations

import math

from ..constants import (
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_SRC,
    algorithm,
    prop_kind,
)
from ..error import invalid_arguments, unimplemented
from ..kernels import eltwise as K
from ..kernels import eltwise_ops as ops
from ..kernels.binary import broadcast_layout, collapse
from ..kernels.binary import dense_layout as K_dense
from ..kernels.post_ops import describe as describe_post_ops
from ..kernels.post_ops import src1_name
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import eltwise as H
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, check_in_place, primitive, primitive_desc_base
from .post_ops import binary_arg
from .post_ops import resolve as resolve_post_ops
from .signature import NUMBER, Signature, bind

__all__ = ["eltwise_forward", "eltwise_backward"]

_PLAIN = "abcdefghijkl"


_TYPES = (data_type.f32, data_type.bf16, data_type.f16)


def _check_desc(kind: str, name: str, md) -> MemoryDesc:
    if not isinstance(md, MemoryDesc) or md.is_zero():
        raise invalid_arguments(f"{kind}: {name} must be a memory.desc, got {md!r}")
    if md.data_type not in _TYPES:
        raise unimplemented(f"{kind}: {name} data type {md.data_type.name}; f32, bf16 and f16 "
                            f"are implemented")
    return md


def _typed(md: MemoryDesc, like: MemoryDesc) -> MemoryDesc:
    """An ``any`` desc's data type, or ``like``'s where it leaves it undef."""
    return like.data_type if md.data_type == data_type.undef else md.data_type


def _check_alg(kind: str, alg, alpha: float, beta: float, backward: bool) -> algorithm:
    try:
        a = ops.normalize(alg)
    except invalid_arguments:
        raise invalid_arguments(f"{kind}: algorithm must be one of dnnl.algorithm.eltwise_*, "
                                f"got {alg!r}") from None
    if a in ops.NO_BACKWARD and backward:
        raise invalid_arguments(f"{kind}: algorithm {a.name} has no backward propagation "
                                f"(oneDNN defines it for forward_training and "
                                f"forward_inference only)")
    base = ops.base_algorithm(a)
    if base in (algorithm.eltwise_clip, algorithm.eltwise_clip_v2) and not beta >= alpha:
        raise invalid_arguments(f"{kind}: {a.name} needs beta >= alpha (the bounds [alpha, "
                                f"beta]), got alpha={alpha}, beta={beta}")
    if a in (algorithm.eltwise_relu_use_dst_for_bwd, algorithm.eltwise_elu_use_dst_for_bwd) \
            and not alpha >= 0:
        raise invalid_arguments(f"{kind}: {a.name} needs alpha >= 0 (dst must determine "
                                f"the derivative), got alpha={alpha}")
    return a


def _number(kind: str, name: str, v) -> float:
    if isinstance(v, bool) or not NUMBER.accepts(v):
        raise invalid_arguments(f"{kind}: {name} must be a number, got {v!r}")
    return float(v)


def _or0(v):
    return 0.0 if v is None else v


def _follow(md: MemoryDesc, dt) -> MemoryDesc:
    """A dense desc of type ``dt`` with ``md``'s storage order (``format_tag.any`` resolved
    after a concrete desc, as oneDNN does)."""
    if md.is_dense() and md.offset0 == 0:
        return md.with_data_type(dt)
    if md.is_plain():  # dense strides in md's order (outermost: largest stride)
        order = sorted(range(len(md.dims)), key=lambda d: (-md.strides[d], d))
        strides, run = [0] * len(md.dims), 1
        for d in reversed(order):
            strides[d] = run
            run *= md.dims[d]
        return MemoryDesc(md.dims, dt, tuple(strides))
    return MemoryDesc(md.dims, dt, _PLAIN[:len(md.dims)])


def _storage_order(md: MemoryDesc) -> tuple:
    """What makes element ``i`` of one dense storage element ``i`` of another."""
    strides = tuple(s if p > 1 else 0 for s, p in zip(md.strides, md.padded_dims))
    return (md.dims, strides, md.inner_blks, md.inner_idxs, md.padded_dims)


def _flat_ok(mds) -> bool:
    first = mds[0]
    return all(md.is_dense() and tuple(md.padded_dims) == tuple(md.dims)
               and _storage_order(md) == _storage_order(first) for md in mds)


class _eltwise_pd(primitive_desc_base):
    """Queries shared by both directions."""

    _kind = "eltwise"

    def get_algorithm(self) -> algorithm:
        return self._alg

    def get_alpha(self) -> float:
        return self._alpha

    def get_beta(self) -> float:
        return self._beta

    def get_prop_kind(self) -> prop_kind:
        return self._prop

    def _check_attr(self, dst: MemoryDesc | None = None) -> dict:
        """The post-op operands' ``{arg: ArgSpec}`` (forward: ``dst`` given); sets
        ``self._post_ops``. oneDNN's eltwise forward takes binary post-ops and nothing else
        in its attributes; its backward no attributes at all."""
        at = self._attr
        kind = "eltwise_backward" if dst is None else "eltwise_forward"
        self._post_ops = ()
        if dst is None:
            if len(at.get_post_ops()) or at.scales or at.zero_points:
                raise unimplemented(f"{kind}: attr with post-ops, scales or zero points "
                                    f"(got {at.key()!r}); oneDNN defines none for backward "
                                    f"propagation (eltwise_forward takes binary post-ops)")
            return {}
        if at.scales or at.zero_points:
            raise unimplemented(f"{kind}: attr with scales or zero points (got "
                                f"{at.key()!r}); oneDNN's eltwise takes binary post-ops only")
        self._post_ops, args = resolve_post_ops(kind, at, dst, allowed=("binary",))
        return args

    def _finish(self, order: tuple[int, ...]) -> None:
        """Pick the kernel shape for the descs of arguments ``order`` (kernel order)."""
        mds = [self._args[a].md for a in order]
        self._order = order
        self._po_args = tuple(sorted(k for k in self._args if k not in order))
        po_mds = [self._args[a].md for a in self._po_args]
        dst = mds[-1]
        # the flat walk serves binary operands read at offset0 + i (every tensor dense in
        # one order) or, over a plain destination, at its position (collapsed dims)
        self._flat = _flat_ok(mds) and (not po_mds or _flat_ok(mds + po_mds)
                                         or not dst.inner_blks)
        self._impl = "ocl:eltwise:" + ("flat" if self._flat else "strided")
        dims = mds[0].dims
        self._info = (f"alg:{self._alg.name} alpha:{self._alpha:g} beta:{self._beta:g} "
                      f"{'x'.join(map(str, dims))}"
                      + (f" attr-post-ops:{describe_post_ops(self._post_ops)}"
                         if self._post_ops else ""))
        self._finish_scratchpad(0)

    def _flat_chain(self, mds, po_mds) -> tuple[tuple, tuple]:
        """``(post_ops, po_dims)`` of the flat kernel (see :class:`K.EltwiseFlat`)."""
        if not po_mds:
            return self._post_ops, (0,)
        dst = mds[-1]
        if _flat_ok(mds + po_mds):
            lays, dims = [K_dense(md.offset0) for md in po_mds], (0,)
        else:
            full = [layout_of(dst)] + [broadcast_layout(layout_of(md), md.dims, dst.dims)
                                       for md in po_mds]
            dims, lays, _ = collapse(dst.dims, full, order_by=0)
            lays, dims = list(lays[1:]), (0,) + tuple(dims[1:])
        chain, it = [], iter(lays)
        for op in self._post_ops:
            if op[0] == "binary":
                op = ("binary", op[1], next(it), dims, 0)
            chain.append(op)
        return tuple(chain), dims

    def _problem(self, eng):
        mds = [self._args[a].md for a in self._order]
        sizes = tuple(md.nelems_physical() for md in mds)
        common = dict(alg=int(self._alg), alpha=self._alpha, beta=self._beta,
                      backward=self._prop == prop_kind.backward_data,
                      dts=tuple(int(md.data_type) for md in mds))
        po_mds = [self._args[a].md for a in self._po_args]
        if self._flat:
            count = math.prod(mds[0].dims)
            wg, iters = H.flat_params(eng.info, count)
            chain, po_dims = self._flat_chain(mds, po_mds)
            p = K.EltwiseFlat(count=count, offsets=tuple(md.offset0 for md in mds),
                              sizes=sizes, wg=wg, iters=iters, post_ops=chain,
                              po_dims=po_dims, **common)
            if not H.runtime_count(eng.info, self._alg, K.whole_blocks(p)):
                return "eltwise_flat", K.build_flat, p, {}
            return ("eltwise_flat", K.build_flat) + K.flat_runtime(p)
        return "eltwise_strided", K.build_strided, K.EltwiseStrided(
            dims=tuple(mds[0].dims), layouts=tuple(layout_of(md) for md in mds), sizes=sizes,
            wg=H.strided_wg(eng.info), post_ops=self._post_ops, **common), {}


class _eltwise_primitive(primitive):
    def _create(self) -> None:
        pd = self._pd
        family, build, problem, values = pd._problem(pd.get_engine())
        plan = self._plan = Plan(pd.get_engine(), "eltwise")
        names = K.arg_names(problem.backward)
        operands = {src1_name(i): Ref(binary_arg(i)) for i, op in enumerate(pd._post_ops)
                    if op[0] == "binary"}
        plan.kernel(family, problem, build, **values, **operands,
                    **{n: Ref(a) for n, a in zip(names, pd._order)})

    def _execute(self, s, args) -> None:
        pd = self._pd
        check_in_place(pd._kind, args, pd._order[:-1], pd._order[-1])
        self._plan.execute(s, args)


class eltwise_forward(_eltwise_primitive):
    """``dst = f(src)`` for one eltwise algorithm (oneDNN's eltwise_forward; f32, bf16 or f16
    tensors, computed in f32)."""

    class primitive_desc(_eltwise_pd):
        """``eltwise_forward.primitive_desc(engine, prop_kind, algorithm, src_desc, dst_desc,
        [alpha, [beta,]] attr=None)``."""

        signature = Signature(
            "eltwise_forward.primitive_desc",
            head=("engine", "prop_kind", "algorithm", "src_desc", "dst_desc"),
            forms=((), ("alpha",), ("alpha", "beta")), tail=("attr",),
            optional=frozenset({"alpha", "beta"}), aliases={"aengine": "engine",
                                                          "aprop_kind": "prop_kind",
                                                          "aalgorithm": "algorithm"},
            kinds={"alpha": NUMBER, "beta": NUMBER}, defaults={"alpha": 0.0, "beta": 0.0})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            kind = "eltwise_forward"
            try:
                self._prop = prop_kind(int(a["prop_kind"]))
            except (TypeError, ValueError):
                self._prop = None
            if self._prop not in (prop_kind.forward_training, prop_kind.forward_inference):
                raise invalid_arguments(f"{kind}: prop_kind must be forward_training or "
                                        f"forward_inference, got {a['prop_kind']!r}")
            self._alpha = _number(kind, "alpha", _or0(a.get("alpha")))
            self._beta = _number(kind, "beta", _or0(a.get("beta")))
            self._alg = _check_alg(kind, a["algorithm"], self._alpha, self._beta, False)
            src, dst = a["src_desc"], a["dst_desc"]
            if not isinstance(src, MemoryDesc) or src.is_zero() or src.is_any():
                raise invalid_arguments(f"{kind}: src_desc must be a memory.desc with a concrete "
                                        f"layout (not format_tag.any), got {src!r}")
            if not isinstance(dst, MemoryDesc) or dst.is_zero():
                raise invalid_arguments(f"{kind}: dst_desc must be a memory.desc, got {dst!r}")
            if tuple(dst.dims) != tuple(src.dims):
                raise invalid_arguments(f"{kind}: dst_desc dims {list(dst.dims)} must equal "
                                        f"src_desc dims {list(src.dims)}")
            _check_desc(kind, "src_desc", src)
            if dst.is_any():
                dst = _follow(src, _typed(dst, src))
            _check_desc(kind, "dst_desc", dst)
            po_args = self._check_attr(dst)
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            self._args.update(po_args)
            self._finish((ARG_SRC, ARG_DST))


class eltwise_backward(_eltwise_primitive):
    """``diff_src = f'(src or dst) * diff_dst`` (oneDNN's eltwise_backward; f32, bf16 or f16); the
    ``*_use_dst_for_bwd`` algorithms read ``ARG_DST``, the others ``ARG_SRC``."""

    class primitive_desc(_eltwise_pd):
        """``eltwise_backward.primitive_desc(engine, algorithm, diff_src_desc, diff_dst_desc,
        data_desc, [alpha, [beta,]] hint_fwd_pd=None, attr=None)``."""

        signature = Signature(
            "eltwise_backward.primitive_desc",
            head=("engine", "algorithm", "diff_src_desc", "diff_dst_desc", "data_desc"),
            forms=((), ("hint_fwd_pd",), ("alpha",), ("alpha", "hint_fwd_pd"),
                   ("alpha", "beta"), ("alpha", "beta", "hint_fwd_pd")),
            tail=("attr",), optional=frozenset({"alpha", "beta", "hint_fwd_pd"}),
            aliases={"aengine": "engine", "aalgorithm": "algorithm", "src_desc": "data_desc"},
            kinds={"alpha": NUMBER, "beta": NUMBER}, defaults={"alpha": 0.0, "beta": 0.0})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            kind = "eltwise_backward"
            self._prop = prop_kind.backward_data
            self._alpha = _number(kind, "alpha", _or0(a.get("alpha")))
            self._beta = _number(kind, "beta", _or0(a.get("beta")))
            self._alg = _check_alg(kind, a["algorithm"], self._alpha, self._beta, True)
            hint = a.get("hint_fwd_pd")
            if hint is not None and not isinstance(hint, eltwise_forward.primitive_desc):
                raise invalid_arguments(f"{kind}: hint_fwd_pd must be an "
                                        f"eltwise_forward.primitive_desc or None, got "
                                        f"{type(hint).__name__}")
            use_dst = ops.uses_dst(self._alg)
            data_arg = ARG_DST if use_dst else ARG_SRC
            descs = {"diff_src_desc": a["diff_src_desc"], "diff_dst_desc": a["diff_dst_desc"],
                     "data_desc": a["data_desc"]}
            for name, md in descs.items():
                if not isinstance(md, MemoryDesc) or md.is_zero():
                    raise invalid_arguments(f"{kind}: {name} must be a memory.desc, got {md!r}")
            dims = tuple(descs["data_desc"].dims)
            for name in ("diff_src_desc", "diff_dst_desc"):
                if tuple(descs[name].dims) != dims:
                    raise invalid_arguments(f"{kind}: {name} dims {list(descs[name].dims)} "
                                            f"must equal data_desc dims {list(dims)}")
            data, ddst, dsrc = descs["data_desc"], descs["diff_dst_desc"], descs["diff_src_desc"]
            if data.is_any():  # the forward's choice, else diff_dst's layout, else plain
                if hint is not None:
                    data = hint.dst_desc() if use_dst else hint.src_desc()
                elif not ddst.is_any():
                    data = _follow(ddst, _typed(data, ddst))
                elif not dsrc.is_any():
                    data = _follow(dsrc, _typed(data, dsrc))
                else:
                    dt = data.data_type if data.data_type != data_type.undef else data_type.f32
                    data = MemoryDesc(dims, dt, _PLAIN[:len(dims)])
            if ddst.is_any():
                ddst = _follow(data, _typed(ddst, data))
            if dsrc.is_any():
                dsrc = _follow(ddst, _typed(dsrc, ddst))
            for name, md in (("data_desc", data), ("diff_dst_desc", ddst),
                             ("diff_src_desc", dsrc)):
                _check_desc(kind, name, md)
            self._check_attr()
            self._args[data_arg] = ArgSpec(data, False)
            self._args[ARG_DIFF_DST] = ArgSpec(ddst, False)
            self._args[ARG_DIFF_SRC] = ArgSpec(dsrc, True)
            self._finish((data_arg, ARG_DIFF_DST, ARG_DIFF_SRC))
