"""A primitive's post-ops, checked against its destination and turned into the chain the
kernels fuse (:mod:`pydnnl.kernels.post_ops`), plus the execute arguments of binary entries
(``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1``); the scales a GEMM epilogue fuses
(:func:`resolve_scales`)."""
from __future__ import annotations

from ..attr import _binary_op, _prelu_op, _sum_op, primitive_attr
from ..constants import (
    ARG_ATTR_MULTIPLE_POST_OP,
    ARG_ATTR_SCALES,
    ARG_ATTR_ZERO_POINTS,
    ARG_DST,
    ARG_SRC,
    ARG_SRC_1,
    ARG_WEIGHTS,
    arg_name,
)
from ..error import invalid_arguments, unimplemented
from ..kernels import eltwise_ops
from ..kernels.gemm import scale_name
from ..kernels.post_ops import BINARY_ALGS, PRELU, SRC1_TYPES, binary_entry_alg
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.plan import Ref
from .base import ArgSpec


def binary_arg(i: int) -> int:
    """The execute argument of post-op ``i``'s binary operand."""
    return ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1


def prelu_arg(i: int) -> int:
    """The execute argument of prelu post-op ``i``'s weights (oneDNN's)."""
    return ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_WEIGHTS


def operand_arg(i: int, entry: tuple) -> int:
    """The execute argument of chain entry ``i``'s operand (binary or prelu)."""
    return prelu_arg(i) if entry[1] == PRELU else binary_arg(i)


_KINDS = ("sum", "eltwise", "binary")
#: the kinds of convolution, deconvolution, matmul and inner product (oneDNN's prelu post-op)
WITH_PRELU = _KINDS + ("prelu",)


def _entry_kind(op) -> str:
    return ("sum" if isinstance(op, _sum_op) else "binary" if isinstance(op, _binary_op)
            else "prelu" if isinstance(op, _prelu_op) else "eltwise")


def resolve(kind: str, attr: primitive_attr, dst: MemoryDesc,
            allowed: tuple[str, ...] = _KINDS) -> tuple[tuple, dict]:
    """``(chain, {arg: ArgSpec})`` of ``attr``'s post-ops for a primitive writing ``dst``
    (f32). A binary operand may have any data type of
    :data:`pydnnl.kernels.post_ops.SRC1_TYPES` (read as f32). ``allowed``: the entry kinds
    oneDNN defines for the primitive (others raise ``unimplemented``, as oneDNN does). Raises
    ``unimplemented`` for what the kernels cannot fuse, ``invalid_arguments`` for operands
    that do not fit ``dst``."""
    chain, args = [], {}
    for i, op in enumerate(attr.get_post_ops().ops):
        entry = _entry_kind(op)
        if entry not in allowed:
            raise unimplemented(f"{kind}: post-op {i} ({entry}): oneDNN's {kind} takes "
                                f"{' and '.join(allowed)} post-ops only")
        if isinstance(op, _sum_op):
            if op.data_type not in (data_type.undef, data_type.f32):
                raise unimplemented(f"{kind}: post-op {i} (sum) with data type "
                                    f"{op.data_type.name}; only f32 is implemented")
            chain.append(("sum", float(op.scale), int(op.zero_point)))
        elif isinstance(op, _prelu_op):
            if op.mask >> len(dst.dims):
                raise invalid_arguments(f"{kind}: post-op {i} (prelu): mask {op.mask} names a "
                                        f"dim past the destination's {len(dst.dims)}")
            dims = [d if op.mask >> k & 1 else 1 for k, d in enumerate(dst.dims)]
            md = MemoryDesc(dims, data_type.f32, "abcdefghijkl"[:len(dims)])
            chain.append(("binary", PRELU, layout_of(md), tuple(md.dims), md.nelems_physical()))
            args[prelu_arg(i)] = ArgSpec(md, False)
        elif isinstance(op, _binary_op):
            if op.alg not in BINARY_ALGS:
                raise unimplemented(f"{kind}: post-op {i}: binary {op.alg.name} is not "
                                    f"implemented")
            md = op.src1_desc
            if len(md.dims) != len(dst.dims) or any(
                    s not in (1, d) for s, d in zip(md.dims, dst.dims)):
                raise invalid_arguments(
                    f"{kind}: post-op {i} ({op.alg.name}): src1 dims {list(md.dims)} must have "
                    f"the destination's {len(dst.dims)} dims {list(dst.dims)}, each equal or 1")
            dt = data_type.f32 if md.data_type == data_type.undef else md.data_type
            if dt not in SRC1_TYPES:
                raise unimplemented(
                    f"{kind}: post-op {i} ({op.alg.name}): src1 data type {dt.name}; "
                    f"implemented: {', '.join(t.name for t in SRC1_TYPES)}")
            if md.is_any():
                md = MemoryDesc(md.dims, dt, "abcdefghijkl"[:len(md.dims)])
            elif md.data_type == data_type.undef:
                md = md.with_data_type(dt)
            # the operand is read as f32 where it is loaded (kernels.post_ops.src1_load)
            chain.append(("binary", binary_entry_alg(op.alg, dt), layout_of(md),
                          tuple(md.dims), md.nelems_physical()))
            args[binary_arg(i)] = ArgSpec(md, False)
        else:
            try:
                alg = eltwise_ops.normalize(op.alg)
            except invalid_arguments:
                raise unimplemented(f"{kind}: post-op {i}: eltwise {op.alg.name} is not "
                                    f"implemented") from None
            chain.append(("eltwise", int(alg), float(op.alpha), float(op.beta)))
    return tuple(chain), args


# the GEMM epilogue's name of each argument's scale (kernels.gemm.SCALE_KINDS)
_SCALE_KIND = {ARG_SRC: "src", ARG_WEIGHTS: "wei", ARG_DST: "dst"}


def resolve_scales(kind: str, attr: primitive_attr, dst_dims: tuple, per_channel: int,
                   channel_dim: int, int8: str | None) -> tuple[tuple, str]:
    """``(GemmShape.scales, verbose text)`` of ``attr``'s scales for a GEMM primitive with
    destination dims ``dst_dims``: src and dst take mask 0, weights 0 or ``per_channel`` (one
    scale per index of the destination's dim ``channel_dim``). Zero points raise
    ``unimplemented`` unless ``int8`` is None (integer data, whose zero points
    :func:`resolve_zero_points` reads; else ``int8`` says why they do not apply)."""
    if attr.zero_points and int8 is not None:
        args = ", ".join(arg_name(a) for a in attr.zero_points)
        raise unimplemented(f"{kind}: zero points ({args}) apply to integer (int8) data, and "
                            f"{int8}")
    entries, masks = {}, {}
    for arg, mask in attr.scales.items():
        if arg not in _SCALE_KIND:
            raise unimplemented(f"{kind}: scales for {arg_name(arg)}; oneDNN's {kind} takes "
                                f"scales for ARG_SRC, ARG_WEIGHTS and ARG_DST only")
        allowed = (0, per_channel) if arg == ARG_WEIGHTS else (0,)
        if mask not in allowed:
            raise unimplemented(
                f"{kind}: scales mask {mask} for {arg_name(arg)}; implemented: "
                + (f"0 (common) or {per_channel} (per output channel)" if arg == ARG_WEIGHTS
                   else "0 (one common scale)"))
        dims = ()
        if mask:
            dims = tuple(d if i == channel_dim else 1 for i, d in enumerate(dst_dims))
        entries[_SCALE_KIND[arg]], masks[_SCALE_KIND[arg]] = dims, mask
    order = [w for w in ("src", "wei", "dst") if w in entries]
    return (tuple((w, entries[w]) for w in order),
            "+".join(f"{w}:{masks[w]}" for w in order))


def scale_operands(scales: tuple) -> dict:
    """The GEMM epilogue's operands of ``scales`` (``GemmShape.scales``, from
    :func:`resolve_scales`) for ``Plan.gemm``'s ``epilogue``: each kernel argument
    ``<which>_scale`` bound to its execute argument ``ARG_ATTR_SCALES | ARG_*``."""
    arg_of = {kind: arg for arg, kind in _SCALE_KIND.items()}
    return {scale_name(w): Ref(ARG_ATTR_SCALES | arg_of[w]) for w, _ in scales}


def resolve_zero_points(kind: str, attr: primitive_attr, dst_dims: tuple, per_channel: int,
                        channel_dim: int, allowed: dict) -> tuple[tuple, str]:
    """``(Int8GemmProblem.zero_points, verbose text)`` of ``attr``'s zero points for an int8
    GEMM primitive with destination dims ``dst_dims``: ``allowed`` maps each argument that
    takes zero points to the masks it takes, among 0 (common) and ``per_channel`` (one value
    per index of the destination's dim ``channel_dim``); anything else raises
    ``unimplemented`` naming the argument."""
    entries, texts = {}, {}
    for arg, mask in attr.zero_points.items():
        masks = allowed.get(arg)
        if masks is None:
            names = ", ".join(arg_name(a) for a in allowed) or "no argument"
            raise unimplemented(f"{kind}: zero points for {arg_name(arg)}; implemented for "
                                f"{names}")
        if mask not in masks:
            said = " or ".join("0 (common)" if m == 0 else f"{m} (per output channel)"
                               for m in masks)
            raise unimplemented(f"{kind}: zero points mask {mask} for {arg_name(arg)}; "
                                f"implemented: {said}")
        dims = ()
        if mask:
            dims = tuple(d if i == channel_dim else 1 for i, d in enumerate(dst_dims))
        entries[_SCALE_KIND[arg]], texts[_SCALE_KIND[arg]] = dims, mask
    order = [w for w in ("src", "wei", "dst") if w in entries]
    return (tuple((w, entries[w]) for w in order),
            "+".join(f"{w}:{texts[w]}" for w in order))


def zero_point_operands(zero_points: tuple) -> dict:
    """The integer GEMM epilogue's operands of ``zero_points`` (from
    :func:`resolve_zero_points`): each kernel argument ``<which>_zp`` bound to its execute
    argument ``ARG_ATTR_ZERO_POINTS | ARG_*``."""
    arg_of = {kind: arg for arg, kind in _SCALE_KIND.items()}
    return {f"{w}_zp": Ref(ARG_ATTR_ZERO_POINTS | arg_of[w]) for w, _ in zero_points}
