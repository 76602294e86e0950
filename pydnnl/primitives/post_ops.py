"""A primitive's post-ops, checked against its destination and turned into the chain the
kernels fuse (:mod:`pydnnl.kernels.post_ops`), plus the execute arguments of binary entries
(``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1``)."""
from __future__ import annotations

from ..attr import _binary_op, _sum_op, primitive_attr
from ..constants import ARG_ATTR_MULTIPLE_POST_OP, ARG_SRC_1
from ..error import invalid_arguments, unimplemented
from ..kernels import eltwise_ops
from ..kernels.post_ops import BINARY_ALGS
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from .base import ArgSpec


def binary_arg(i: int) -> int:
    """The execute argument of post-op ``i``'s binary operand."""
    return ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1


_KINDS = ("sum", "eltwise", "binary")


def _entry_kind(op) -> str:
    return "sum" if isinstance(op, _sum_op) else "binary" if isinstance(op, _binary_op) \
        else "eltwise"


def resolve(kind: str, attr: primitive_attr, dst: MemoryDesc,
            allowed: tuple[str, ...] = _KINDS) -> tuple[tuple, dict]:
    """``(chain, {arg: ArgSpec})`` of ``attr``'s post-ops for a primitive writing ``dst``
    (f32). ``allowed``: the entry kinds oneDNN defines for the primitive (others raise
    ``unimplemented``, as oneDNN does). Raises ``unimplemented`` for what the kernels cannot
    fuse, ``invalid_arguments`` for operands that do not fit ``dst``."""
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
            if md.data_type not in (data_type.f32, data_type.undef):
                raise unimplemented(f"{kind}: post-op {i} ({op.alg.name}): src1 data type "
                                    f"{md.data_type.name}; only f32 is implemented")
            if md.is_any():
                md = MemoryDesc(md.dims, data_type.f32, "abcdefghijkl"[:len(md.dims)])
            elif md.data_type == data_type.undef:
                md = md.with_data_type(data_type.f32)
            chain.append(("binary", int(op.alg), layout_of(md), tuple(md.dims),
                          md.nelems_physical()))
            args[binary_arg(i)] = ArgSpec(md, False)
        else:
            try:
                alg = eltwise_ops.normalize(op.alg)
            except invalid_arguments:
                raise unimplemented(f"{kind}: post-op {i}: eltwise {op.alg.name} is not "
                                    f"implemented") from None
            chain.append(("eltwise", int(alg), float(op.alpha), float(op.beta)))
    return tuple(chain), args
