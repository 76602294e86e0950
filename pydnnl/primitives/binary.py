"""The binary primitive (``dnnl::binary``): ``dst = src0 op src1`` for oneDNN's twelve binary
algorithms (add, mul, max, min, div, sub and the comparisons ge, gt, le, lt, eq, ne, which
write 1.0 or 0.0), either source broadcast along dims where it has 1, and oneDNN 3.7's ternary
``binary_select``: ``dst = src2 ? src0 : src1`` with an s8 condition ``src2`` of src0's dims
(given through the ``src2_desc`` overload); with oneDNN v3's attributes: common scales of
either source and post-ops (sum, eltwise, binary).

The plan is one generated kernel (:mod:`pydnnl.kernels.binary`): a flat 1-D kernel when every
tensor is dense in one storage order with no broadcast; otherwise a kernel over the collapsed
index space reading and writing each tensor through its own strides and inner blocks (plain,
strided, blocked, mixed layouts; block padding untouched). In-place use (the same memory for
src0 and dst) works on both.

Also the layout helpers the sum and concat primitives share.
"""
from __future__ import annotations

import math

from ..constants import (
    ARG_ATTR_SCALES,
    ARG_DST,
    ARG_SRC_0,
    ARG_SRC_1,
    ARG_SRC_2,
    algorithm,
    arg_name,
)
from ..error import invalid_arguments, unimplemented
from ..kernels import binary as K
from ..kernels.post_ops import describe as describe_post_ops
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import binary as H
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, primitive, primitive_desc_base
from .post_ops import resolve as resolve_post_ops
from .signature import Signature, bind

__all__ = ["binary"]

_PLAIN = "abcdefghijkl"
INT32_MAX = 2**31 - 1


# -- layout helpers shared by binary, sum and concat -------------------------------------------
TYPES = K.TYPES  # the data types the kernels read and write (f32, bf16, f16)


def check_desc(kind: str, name: str, md, allow_any: bool = True) -> MemoryDesc:
    """``md`` if it is a non-zero memory desc of f32, bf16 or f16 (``any`` only where allowed;
    an ``any`` desc may leave the type undef)."""
    if not isinstance(md, MemoryDesc) or md.is_zero():
        raise invalid_arguments(f"{kind}: {name} must be a memory.desc, got {md!r}")
    if md.is_any() and not allow_any:
        raise invalid_arguments(f"{kind}: {name} must have a concrete layout (not "
                                f"format_tag.any), got {md!r}")
    if md.data_type not in TYPES + (data_type.undef,) or (
            md.data_type == data_type.undef and not md.is_any()):
        raise unimplemented(f"{kind}: {name} data type {md.data_type.name}; f32, bf16 and f16 "
                            f"are implemented")
    return md


def typed(md: MemoryDesc, dt) -> MemoryDesc:
    """``md`` with data type ``dt`` where it leaves the type undef."""
    return md.with_data_type(dt) if md.data_type == data_type.undef else md


def plain(dims, dt=data_type.f32) -> MemoryDesc:
    """Dense row-major over ``dims``."""
    return MemoryDesc(tuple(dims), dt, _PLAIN[:len(dims)])


def like(md: MemoryDesc, dims, dt=None) -> MemoryDesc:
    """A dense desc over ``dims`` with ``md``'s storage order and inner blocks (how oneDNN
    initializes an ``any`` destination from a source's blocking), of type ``dt`` (default
    ``md``'s; f32 if that is undef)."""
    dims = tuple(int(v) for v in dims)
    if dt is None or dt == data_type.undef:
        dt = md.data_type if md.data_type != data_type.undef else data_type.f32
    return _like(md, dims).with_data_type(dt)


def _like(md: MemoryDesc, dims) -> MemoryDesc:
    if md.tag is not None and md.tag.name not in ("any", "undef") \
            and md.tag.canonical is not None:
        return MemoryDesc(dims, data_type.f32, md.tag)
    nd = len(dims)
    blk = md.block_sizes()
    padded = tuple(-(-v // b) * b for v, b in zip(dims, blk))
    # outermost first: largest stride; dims of size 1 keep their place among equals
    order = sorted(range(nd), key=lambda d: (-md.strides[d], d))
    strides, run = [0] * nd, math.prod(md.inner_blks) if md.inner_blks else 1
    for d in reversed(order):
        strides[d] = run
        run *= padded[d] // blk[d]
    if not md.inner_blks:
        return MemoryDesc(dims, data_type.f32, tuple(strides))
    return MemoryDesc._make(dims, data_type.f32, strides, md.inner_blks, md.inner_idxs, padded,
                            0, None)


def _storage_order(md: MemoryDesc) -> tuple:
    strides = tuple(s if p > 1 else 0 for s, p in zip(md.strides, md.padded_dims))
    return (md.dims, strides, md.inner_blks, md.inner_idxs, md.padded_dims)


def same_dense(mds) -> bool:
    """Whether storage element ``i`` of every desc is the same logical element (dense, no
    block padding, one storage order): a flat 1-D kernel serves them."""
    first = mds[0]
    return all(md.is_dense() and tuple(md.padded_dims) == tuple(md.dims)
               and _storage_order(md) == _storage_order(first) for md in mds)


def check_index_range(kind: str, mds) -> None:
    for md in mds:
        if md.nelems_physical() > INT32_MAX or md.nelems() > INT32_MAX:
            raise unimplemented(f"{kind}: tensors of more than 2^31 - 1 elements are not "
                                f"implemented (got {md!r})")


def check_inplace(kind: str, args, inputs, out_arg) -> None:
    """The same buffer as an input and the output is in-place use: the descs must agree."""
    out = args[out_arg]
    for a in inputs:
        m = args.get(a)
        if m is not None and m.buffer is out.buffer and m.get_desc() != out.get_desc():
            raise invalid_arguments(
                f"{kind}.execute: {arg_name(a)} and {arg_name(out_arg)} share one buffer with "
                f"different descs ({m.get_desc()!r} vs {out.get_desc()!r}); in-place use needs "
                f"the same desc")


def _alg(kind: str, alg) -> algorithm:
    try:
        a = algorithm(int(alg))
    except (TypeError, ValueError):
        a = None
    if a not in K.BINARY_ALGS:
        raise invalid_arguments(f"{kind}: algorithm must be one of dnnl.algorithm.binary_add, "
                                f"_mul, _max, _min, _div, _sub, _ge, _gt, _le, _lt, _eq, _ne, "
                                f"_select; got {alg!r}")
    return a


def _check_src2(kind: str, alg: algorithm, md, src0: MemoryDesc) -> MemoryDesc | None:
    """oneDNN's checks of the condition tensor: required by ``binary_select``; wherever it is
    given, an s8 desc of src0's dims (no broadcast of its own). Other algorithms check and then
    ignore it, as oneDNN's does (``src_desc(2)`` is then a zero desc)."""
    if md is None or (isinstance(md, MemoryDesc) and md.is_zero()):
        if alg == K.SELECT:
            raise invalid_arguments(
                f"{kind}: algorithm binary_select needs src2_desc (the s8 condition, dims "
                f"{list(src0.dims)} as src0's), got {md!r}; use primitive_desc(engine, "
                f"algorithm, src0_desc, src1_desc, src2_desc, dst_desc[, attr])")
        return None
    if not isinstance(md, MemoryDesc):
        raise invalid_arguments(f"{kind}: src2_desc must be a memory.desc or None, got {md!r}")
    if md.data_type != data_type.s8:
        raise invalid_arguments(f"{kind}: src2_desc data type must be s8 (oneDNN's condition "
                                f"type), got {md.data_type.name}")
    if tuple(md.dims) != tuple(src0.dims):
        raise invalid_arguments(f"{kind}: src2_desc dims must be src0_desc's "
                                f"{list(src0.dims)} (src2 is not broadcast on its own), got "
                                f"{list(md.dims)}")
    return md if alg == K.SELECT else None


class binary(primitive):
    """``dst = src0 op src1`` (oneDNN's binary; f32, bf16 or f16 tensors, computed in f32), or
    ``dst = src2 ? src0 : src1`` (``binary_select``, src2 s8)."""

    class primitive_desc(primitive_desc_base):
        """``binary.primitive_desc(engine, algorithm, src0_desc, src1_desc, dst_desc,
        attr=None)`` or, oneDNN 3.7's ternary form, ``(engine, algorithm, src0_desc, src1_desc,
        src2_desc, dst_desc, attr=None)``."""

        _kind = "binary"
        signature = Signature(
            "binary.primitive_desc",
            head=("engine", "algorithm", "src0_desc", "src1_desc"),
            forms=(("dst_desc",), ("src2_desc", "dst_desc")), tail=("attr",),
            aliases={"aengine": "engine", "aalgorithm": "algorithm", "src0": "src0_desc",
                     "src1": "src1_desc", "src2": "src2_desc", "dst": "dst_desc"})
        # ARG_SRC_1 and ARG_SRC_2 are also the RNN numbers ARG_SRC_ITER(_C): name them as binary
        _ARG_LABELS = {ARG_SRC_0: "ARG_SRC_0", ARG_SRC_1: "ARG_SRC_1", ARG_SRC_2: "ARG_SRC_2"}

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            kind = "binary"
            self._alg = _alg(kind, a["algorithm"])
            src0 = check_desc(kind, "src0_desc", a["src0_desc"], allow_any=False)
            src1 = check_desc(kind, "src1_desc", a["src1_desc"])
            dst = check_desc(kind, "dst_desc", a["dst_desc"])
            src2 = _check_src2(kind, self._alg, a.get("src2_desc"), src0)
            nd = len(dst.dims)
            for name, md in (("src0_desc", src0), ("src1_desc", src1)):
                if len(md.dims) != nd:
                    raise invalid_arguments(f"{kind}: {name} has {len(md.dims)} dims "
                                            f"{list(md.dims)}, dst_desc {nd} {list(dst.dims)}; "
                                            f"every tensor must have as many")
            for d in range(nd):
                s0, s1, dd = src0.dims[d], src1.dims[d], dst.dims[d]
                if s0 not in (1, dd) or s1 not in (1, dd) or dd not in (s0, s1):
                    raise invalid_arguments(
                        f"{kind}: dimension {d}: src0 {s0}, src1 {s1}, dst {dd}; each source "
                        f"must have dst's size or 1 (broadcast) and dst the larger "
                        f"(src0 {list(src0.dims)}, src1 {list(src1.dims)}, dst "
                        f"{list(dst.dims)})")
            # an ``any`` desc keeps its data type, undef follows src0's
            if src1.is_any():
                src1 = like(src0, src1.dims, src1.data_type)
            if dst.is_any():
                dst = like(src0, dst.dims, dst.data_type)
            if src2 is not None and src2.is_any():
                src2 = like(src0, src2.dims, data_type.s8)
            check_index_range(kind, (src0, src1, dst) + ((src2,) if src2 is not None else ()))
            self._scales = {}
            for arg, mask in self._attr.scales.items():
                if arg not in (ARG_SRC_0, ARG_SRC_1):
                    raise invalid_arguments(f"{kind}: scales may be set for ARG_SRC_0 and "
                                            f"ARG_SRC_1 only, got {arg_name(arg)}")
                if mask != 0:
                    raise unimplemented(f"{kind}: scales mask {mask} for {arg_name(arg)}; "
                                        f"oneDNN's binary takes one common scale (mask 0)")
                self._scales[arg] = True
            if self._attr.zero_points:
                raise unimplemented(f"{kind}: zero points are not implemented")
            self._post_ops, po_args = resolve_post_ops(kind, self._attr, dst)
            self._args[ARG_SRC_0] = ArgSpec(src0, False)
            self._args[ARG_SRC_1] = ArgSpec(src1, False)
            if src2 is not None:
                self._args[ARG_SRC_2] = ArgSpec(src2, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            self._args.update(po_args)
            self._add_runtime_attr_args()
            self._po_mds = [self._args[k].md for k in sorted(po_args)]
            self._plan_layout()
            shapes = (src0, src1) + ((src2,) if src2 is not None else ()) + (dst,)
            self._info = (f"alg:{self._alg.name} "
                          + ":".join("x".join(map(str, md.dims)) for md in shapes)
                          + (f" attr-post-ops:{describe_post_ops(self._post_ops)}"
                             if self._post_ops else "")
                          + (" attr-scales:" + "+".join(self._arg_label(s)[4:].lower()
                                                        for s in self._scales)
                             if self._scales else ""))
            self._finish_scratchpad(0)

        def _tensors(self) -> tuple[int, ...]:
            """The kernel's tensors in :class:`~pydnnl.kernels.binary.BinaryProblem` order:
            src0, src1, dst, and src2 for ``binary_select``."""
            return (ARG_SRC_0, ARG_SRC_1, ARG_DST) + ((ARG_SRC_2,) if ARG_SRC_2 in self._args
                                                      else ())

        def _plan_layout(self) -> None:
            """The kernel's index space: flat, or collapsed with broadcast terms."""
            src0, src1, dst = (self._args[a].md for a in (ARG_SRC_0, ARG_SRC_1, ARG_DST))
            mds = [self._args[a].md for a in self._tensors()] + self._po_mds
            flat = (tuple(src0.dims) == tuple(dst.dims) == tuple(src1.dims)
                    and all(tuple(md.dims) == tuple(dst.dims) for md in self._po_mds)
                    and same_dense(mds))
            if flat:
                self._dims = (dst.nelems(),)
                self._layouts = tuple(K.dense_layout(md.offset0) for md in mds)
                self._impl = "ocl:binary:flat"
                self._rt = (0,)
                return
            layouts = [K.broadcast_layout(layout_of(md), md.dims, dst.dims) for md in mds]
            self._dims, self._layouts, pos = K.collapse(dst.dims, layouts, order_by=2)
            # the collapsed dims that hold the minibatch or a spatial dim (all but the channels
            # of a tensor of 2 or more dims) change with the shape: run-time sizes
            nd = len(dst.dims)
            self._rt = tuple(sorted({pos[d] for d in range(nd)
                                     if pos[d] is not None and (d != 1 or nd == 1)}))
            self._impl = "ocl:binary:strided"

        def get_algorithm(self) -> algorithm:
            return self._alg

        def _problem(self, eng) -> tuple[K.BinaryProblem, dict]:
            """The kernel problem in its run-time-size form where one applies
            (:func:`pydnnl.kernels.binary.runtime_form`) and the sizes to bind."""
            return K.runtime_form(self._baked_problem(eng), self._rt)

        def _vec_problem(self, eng) -> K.BinaryVecProblem | None:
            """The CPU vector-row form (``H.vec_rows``) where it covers the problem
            (:func:`pydnnl.kernels.binary.vec_form_ok`), else None."""
            vec, rows = H.vec_rows(eng.info, self._dims)
            tensors = self._tensors()
            dts = tuple(int(self._args[a].md.data_type) for a in (ARG_SRC_0, ARG_SRC_1, ARG_DST))
            if not vec or len(tensors) != 3 or not K.vec_form_ok(
                    self._alg, self._dims, self._layouts, self._post_ops, dts):
                return None
            return K.BinaryVecProblem(
                # the outermost dim only counts rows (``bouter``, an argument): one program
                # serves every minibatch
                alg=int(self._alg), dims=(-1,) + tuple(self._dims[1:]),
                layouts=tuple(self._layouts),
                vec=vec, rows_per_item=rows,
                scales=tuple(a in self._scales for a in (ARG_SRC_0, ARG_SRC_1)), dts=dts)

        def _baked_problem(self, eng) -> K.BinaryProblem:
            wg, rows = H.launch(eng.info, self._dims)
            tensors = self._tensors()
            chain = []
            lay = iter(self._layouts[len(tensors):])
            for op in self._post_ops:
                if op[0] == "binary":  # operand read through its collapsed layout
                    _, alg, _, _, n = op
                    op = ("binary", alg, next(lay), self._dims, n)
                chain.append(op)
            return K.BinaryProblem(
                alg=int(self._alg), dims=self._dims, layouts=self._layouts[:len(tensors)],
                sizes=tuple(self._args[a].md.nelems_physical() for a in tensors),
                wg=wg, rows=rows, iters=H.items(eng.info), post_ops=tuple(chain),
                scales=tuple(a in self._scales for a in (ARG_SRC_0, ARG_SRC_1)),
                dts=tuple(int(self._args[a].md.data_type)
                          for a in (ARG_SRC_0, ARG_SRC_1, ARG_DST)))

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), "binary")
        problem, sizes = pd._problem(pd.get_engine())
        named = {**sizes, "src0": Ref(ARG_SRC_0), "src1": Ref(ARG_SRC_1), "dst": Ref(ARG_DST)}
        if len(problem.layouts) == 4:
            named["src2"] = Ref(ARG_SRC_2)
        if problem.scales[0]:
            named["scale0"] = Ref(ARG_ATTR_SCALES | ARG_SRC_0)
        if problem.scales[1]:
            named["scale1"] = Ref(ARG_ATTR_SCALES | ARG_SRC_1)
        vec = pd._vec_problem(pd.get_engine())
        if vec is not None:
            named = {k: v for k, v in named.items() if not k.startswith(("bd", "bs", "bouter"))}
            named["bouter"] = math.prod(pd._dims[:-1])
            plan.kernel("binary_vec", vec, K.build_binary_vec, **named)
            return
        plan.kernel("binary", problem, K.build_binary, **named)

    def _execute(self, s, args) -> None:
        check_inplace("binary", args, (ARG_SRC_0, ARG_SRC_1), ARG_DST)
        cond = args.get(ARG_SRC_2)
        if cond is not None and cond.buffer is args[ARG_DST].buffer:
            raise invalid_arguments(
                f"binary.execute: ARG_SRC_2 (s8 condition) and ARG_DST share one buffer; "
                f"expected separate storage (dst is {args[ARG_DST].get_desc()!r}, src2 "
                f"{cond.get_desc()!r})")
        self._plan.execute(s, args)
