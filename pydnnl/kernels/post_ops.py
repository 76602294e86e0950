"""Post-ops fused into a producer kernel's store (convolution, GEMM, binary, eltwise,
softmax, pooling): the value a kernel is about to write goes through the chain before it is
stored, so no extra pass reads it again. Loopy kernels build it as pymbolic (:func:`apply`),
kernels written as OpenCL C text as C (:func:`apply_c`).

A chain is a tuple of hashable entries, in the order the user appended them:

- ``("sum", scale, zero_point)``: ``v = scale * (prior - zero_point) + v`` (``prior``: the
  destination's content before the primitive ran);
- ``("eltwise", alg, alpha, beta)``: ``v = eltwise(v)``, ``alg`` an ``algorithm`` value (the
  formulas of :mod:`pydnnl.kernels.eltwise_ops`);
- ``("binary", alg, layout, dims, nelems)``: ``v = v op src1[pos]`` (``alg`` :data:`PRELU`:
  a prelu entry, ``v = v > 0 ? v : src1[pos] * v``, its f32 weights the operand); ``src1``
  is the kernel argument ``po<i>_src1`` (``i`` the entry's index) with the reorder-style
  ``layout`` over ``dims``, each dim equal to the destination's or 1 (read at index 0:
  broadcast). ``alg`` is
  the ``algorithm`` value for an f32 operand, or ``(alg, dt)`` for an operand of another
  :data:`SRC1_TYPES` data type ``dt`` (``data_type`` value): the type rides with the algorithm,
  the one field every primitive keeps when it re-lays an operand out, so an f32 entry (and its
  kernels' cache keys and sources) stays what it was. The element is converted to f32 as it is
  loaded (:func:`src1_load`, the loaders of :mod:`pydnnl.kernels.clhelpers`), and the
  operation runs in f32 (:func:`binary_alg`, :func:`src1_dt` read the two back).

Pure: pymbolic expressions and C text; no device.
"""
from __future__ import annotations

import numpy as np

from ..constants import algorithm
from ..memory.data_types import data_type
from . import eltwise_ops

A = algorithm

_ARITH = {A.binary_add: "+", A.binary_sub: "-", A.binary_mul: "*", A.binary_div: "/"}
_HELPER_C = {
    A.binary_max: "return fmax(a, b);",
    A.binary_min: "return fmin(a, b);",
    A.binary_ge: "return a >= b ? 1.0f : 0.0f;",
    A.binary_gt: "return a > b ? 1.0f : 0.0f;",
    A.binary_le: "return a <= b ? 1.0f : 0.0f;",
    A.binary_lt: "return a < b ? 1.0f : 0.0f;",
    A.binary_eq: "return a == b ? 1.0f : 0.0f;",
    A.binary_ne: "return a != b ? 1.0f : 0.0f;",
}
BINARY_ALGS = frozenset(_ARITH) | frozenset(_HELPER_C)


class _Prelu:
    """The ``alg`` of a prelu entry (oneDNN's ``append_prelu``): a binary entry whose f32
    operand holds the weights, ``v = v > 0 ? v : w * v``."""

    name = "prelu"

    def __repr__(self):
        return "PRELU"


#: the ``alg`` field of a prelu entry in a chain (a string: chains are cache keys)
PRELU = "prelu"
_PRELU_ALG = _Prelu()
_HELPER_C[_PRELU_ALG] = "return a > 0.0f ? a : a * b;"
#: data types a binary entry's operand may have (oneDNN's: read as f32, the op in f32)
SRC1_TYPES = (data_type.f32, data_type.bf16, data_type.f16, data_type.s8, data_type.u8,
              data_type.s32)
# OpenCL C type of one stored operand element (the loaders' argument types)
_C_TYPE = {np.float32: "float", np.uint16: "ushort", np.int8: "char", np.uint8: "uchar",
           np.int32: "int"}


def binary_entry_alg(alg, dt) -> object:
    """The ``alg`` field of a binary entry with an operand of data type ``dt``: the algorithm
    value for f32, else ``(alg, dt)``."""
    dt = data_type(dt)
    if dt not in SRC1_TYPES:
        raise ValueError(f"post-op binary operand of data type {dt.name}: "
                         f"{', '.join(t.name for t in SRC1_TYPES)} only")
    return int(alg) if dt == data_type.f32 else (int(alg), int(dt))


def binary_alg(op: tuple) -> algorithm:
    """The algorithm of binary entry ``op`` (a prelu entry's: an object named ``prelu``)."""
    if op[1] == PRELU:
        return _PRELU_ALG
    return algorithm(op[1][0] if isinstance(op[1], tuple) else op[1])


def src1_dt(op: tuple) -> data_type:
    """The data type of binary entry ``op``'s operand."""
    return data_type(op[1][1]) if isinstance(op[1], tuple) else data_type.f32


def src1_storage(op: tuple):
    """numpy type of one stored element of binary entry ``op``'s operand (bf16 and f16: raw
    ``ushort``)."""
    from .clhelpers import load_helper

    dt = src1_dt(op)
    return np.float32 if dt == data_type.f32 else load_helper(dt)[2]


def src1_c_type(op: tuple) -> str:
    """The OpenCL C type of one stored element of binary entry ``op``'s operand."""
    return _C_TYPE[src1_storage(op)]


def src1_c_arg(i: int, op: tuple) -> str:
    """The OpenCL C kernel argument of binary entry ``i``'s operand (C-text kernels)."""
    return f"__global const {src1_c_type(op)} *restrict {src1_name(i)}"


def src1_load(op: tuple, element):
    """The f32 value of an operand element (pymbolic ``element``; C text if a string), as
    :func:`pydnnl.kernels.binary.load` reads a buffer of the operand's type."""
    from .binary import load

    dt = src1_dt(op)
    if dt == data_type.f32:
        return element
    if isinstance(element, str):
        from .clhelpers import load_helper

        return f"{load_helper(dt)[0]}({element})"
    return load(int(dt), element)


def src1_name(i: int) -> str:
    """The kernel argument holding entry ``i``'s binary operand."""
    return f"po{i}_src1"


def _eltwise_name(i: int) -> str:
    return f"pd_postop{i}"


def helpers(post_ops: tuple) -> list[tuple]:
    """C helpers (for :func:`pydnnl.kernels.clhelpers.register_helpers`) the chain calls: the
    eltwise formulas, the binary comparisons and the loaders of operands other than f32."""
    from .binary import type_helpers

    out = []
    for i, op in enumerate(post_ops):
        if op[0] == "eltwise":
            _, alg, alpha, beta = op
            body = eltwise_ops.forward_expr(alg, "x", alpha, beta)
            name = _eltwise_name(i)
            out.append((name, f"static inline float {name}(float x) {{ return {body}; }}",
                        np.float32, np.float32))
        elif op[0] == "binary" and binary_alg(op) in _HELPER_C:
            alg = binary_alg(op)
            name = f"pd_{alg.name}"
            out.append((name, f"static inline float {name}(float a, float b) "
                              f"{{ {_HELPER_C[alg]} }}", (np.float32, np.float32), np.float32))
    loads = [int(src1_dt(op)) for op in post_ops if op[0] == "binary"]
    # each helper once (C text kernels paste the definitions)
    return list({h[0]: h for h in out + type_helpers(loads=loads)}.values())


def binary_value(alg, a, b):
    """``a op b`` for binary algorithm ``alg`` (pymbolic; comparisons give 1.0 / 0.0)."""
    from pymbolic import var

    alg = alg if alg is _PRELU_ALG else algorithm(alg)
    op = _ARITH.get(alg)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    return var(f"pd_{alg.name}")(a, b)


def src1_offset(op: tuple, at):
    """The storage offset of a binary entry's operand at destination position ``at`` (one
    index expression per destination dim)."""
    from .reorder import _offset_expr

    _, _, layout, dims, _ = op
    idx = [0 if d == 1 else e for d, e in zip(dims, at)]
    return _offset_expr(layout, idx)


def apply(value, post_ops: tuple, prior=None, skip: int = 0, at=None):
    """``value`` after the chain (its first ``skip`` entries left out). ``prior`` reads the
    destination's previous content (sum entries); ``at`` is the destination position (binary
    entries)."""
    from pymbolic import var

    for i, op in enumerate(post_ops):
        if i < skip:
            continue
        if op[0] == "sum":
            _, scale, zp = op
            p = prior if zp == 0 else prior - np.float32(zp)
            value = (p if scale == 1.0 else np.float32(scale) * p) + value
        elif op[0] == "eltwise":
            value = var(_eltwise_name(i))(value)
        else:
            if at is None:
                raise ValueError("post_ops.apply: a binary post-op needs the destination "
                                 "position (at=)")
            value = binary_value(binary_alg(op), value,
                                 src1_load(op, var(src1_name(i))[src1_offset(op, at)]))
    return value


def _c_float(x: float) -> str:
    return repr(float(np.float32(x))) + "f"


def apply_c(value: str, post_ops: tuple, src1, prior: str | None = None) -> str:
    """OpenCL C text of ``value`` (a C float expression) after the chain, for kernels written
    as C text (the helpers of :func:`helpers` must be in the source). ``src1(i, op)`` gives
    the C expression of binary entry ``i``'s operand element at the destination position (the
    stored element, declared by :func:`src1_c_arg`; converted to f32 here); ``prior`` the
    destination's previous content (sum entries)."""
    for i, op in enumerate(post_ops):
        if op[0] == "sum":
            if prior is None:
                raise ValueError("post_ops.apply_c: a sum post-op needs the destination's "
                                 "previous content (prior=)")
            _, scale, zp = op
            p = f"({prior})" if zp == 0 else f"(({prior}) - {_c_float(zp)})"
            value = f"({p if scale == 1.0 else f'{_c_float(scale)} * {p}'} + ({value}))"
        elif op[0] == "eltwise":
            value = f"{_eltwise_name(i)}({value})"
        else:
            alg, b = binary_alg(op), src1_load(op, src1(i, op))
            sign = _ARITH.get(alg)
            value = (f"(({value}) {sign} ({b}))" if sign is not None
                     else f"pd_{alg.name}({value}, {b})")
    return value


def reads_prior(post_ops: tuple, skip: int = 0) -> bool:
    """Whether the chain reads the destination's previous content."""
    return any(op[0] == "sum" for op in post_ops[skip:])


def has_binary(post_ops: tuple) -> bool:
    return any(op[0] == "binary" for op in post_ops)


def arg_specs(post_ops: tuple) -> list[tuple]:
    """``(name, nelems, is_output, is_input, storage)`` of the binary operands (the form of
    :func:`pydnnl.kernels.conv_common.make_args`; ``storage`` the numpy type of a stored
    element, :func:`src1_storage`). Unsized: a kernel's destination position may carry
    run-time offsets (image chunks) loopy's static bounds check cannot follow; the positions
    are the destination's, so the reads stay inside the operand (the Oclgrind tests check
    them)."""
    return [(src1_name(i), -1, False, True, src1_storage(op)) for i, op in enumerate(post_ops)
            if op[0] == "binary"]


def loopy_args(post_ops: tuple) -> list:
    """loopy ``GlobalArg`` s of the binary operands."""
    import loopy as lp

    return [lp.GlobalArg(spec[0], spec[4], shape=None) for spec in arg_specs(post_ops)]


def describe(post_ops: tuple) -> str:
    """oneDNN verbose's form: ``eltwise_relu:0:0+sum:1+binary_add:1x16x1x1``."""
    parts = []
    for op in post_ops:
        if op[0] == "sum":
            parts.append(f"sum:{op[1]:g}" + (f":{op[2]}" if op[2] else ""))
        elif op[0] == "eltwise":
            parts.append(f"{algorithm(op[1]).name}:{op[2]:g}:{op[3]:g}")
        else:
            dt = src1_dt(op)
            parts.append(f"{binary_alg(op).name}:"
                         + ("" if dt == data_type.f32 else f"{dt.name}:")
                         + "x".join(map(str, op[3])))
    return "+".join(parts)
