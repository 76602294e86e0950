"""Post-ops fused into a producer kernel's store (convolution, GEMM, binary, eltwise,
softmax, pooling): the value a kernel is about to write goes through the chain before it is
stored, so no extra pass reads it again. Loopy kernels build it as pymbolic (:func:`apply`),
kernels written as OpenCL C text as C (:func:`apply_c`).

A chain is a tuple of hashable entries, in the order the user appended them:

- ``("sum", scale, zero_point)``: ``v = scale * (prior - zero_point) + v`` (``prior``: the
  destination's content before the primitive ran);
- ``("eltwise", alg, alpha, beta)``: ``v = eltwise(v)``, ``alg`` an ``algorithm`` value (the
  formulas of :mod:`pydnnl.kernels.eltwise_ops`);
- ``("binary", alg, layout, dims, nelems)``: ``v = v op src1[pos]``; ``src1`` is the kernel
  argument ``po<i>_src1`` (``i`` the entry's index) with the reorder-style ``layout`` over
  ``dims``, each dim equal to the destination's or 1 (read at index 0: broadcast).

Pure: pymbolic expressions and C text; no device.
"""
from __future__ import annotations

import numpy as np

from ..constants import algorithm
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


def src1_name(i: int) -> str:
    """The kernel argument holding entry ``i``'s binary operand."""
    return f"po{i}_src1"


def _eltwise_name(i: int) -> str:
    return f"pd_postop{i}"


def helpers(post_ops: tuple) -> list[tuple]:
    """C helpers (for :func:`pydnnl.kernels.clhelpers.register_helpers`) the chain calls."""
    out = []
    for i, op in enumerate(post_ops):
        if op[0] == "eltwise":
            _, alg, alpha, beta = op
            body = eltwise_ops.forward_expr(alg, "x", alpha, beta)
            name = _eltwise_name(i)
            out.append((name, f"static inline float {name}(float x) {{ return {body}; }}",
                        np.float32, np.float32))
        elif op[0] == "binary" and algorithm(op[1]) in _HELPER_C:
            alg = algorithm(op[1])
            name = f"pd_{alg.name}"
            out.append((name, f"static inline float {name}(float a, float b) "
                              f"{{ {_HELPER_C[alg]} }}", (np.float32, np.float32), np.float32))
    return out


def binary_value(alg, a, b):
    """``a op b`` for binary algorithm ``alg`` (pymbolic; comparisons give 1.0 / 0.0)."""
    from pymbolic import var

    alg = algorithm(alg)
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
            value = binary_value(op[1], value, var(src1_name(i))[src1_offset(op, at)])
    return value


def _c_float(x: float) -> str:
    return repr(float(np.float32(x))) + "f"


def apply_c(value: str, post_ops: tuple, src1, prior: str | None = None) -> str:
    """OpenCL C text of ``value`` (a C float expression) after the chain, for kernels written
    as C text (the helpers of :func:`helpers` must be in the source). ``src1(i, op)`` gives
    the C expression of binary entry ``i``'s operand element at the destination position;
    ``prior`` the destination's previous content (sum entries)."""
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
            alg, b = algorithm(op[1]), src1(i, op)
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
    """``(name, nelems, is_output, is_input)`` of the binary operands (the form of
    :func:`pydnnl.kernels.conv_common.make_args`). Unsized: a kernel's destination position
    may carry run-time offsets (image chunks) loopy's static bounds check cannot follow; the
    positions are the destination's, so the reads stay inside the operand (the Oclgrind
    tests check them)."""
    return [(src1_name(i), -1, False, True) for i, op in enumerate(post_ops)
            if op[0] == "binary"]


def loopy_args(post_ops: tuple) -> list:
    """loopy ``GlobalArg`` s of the binary operands."""
    import loopy as lp

    return [lp.GlobalArg(name, np.float32, shape=None) for name, _, _, _ in arg_specs(post_ops)]


def describe(post_ops: tuple) -> str:
    """oneDNN verbose's form: ``eltwise_relu:0:0+sum:1+binary_add:1x16x1x1``."""
    parts = []
    for op in post_ops:
        if op[0] == "sum":
            parts.append(f"sum:{op[1]:g}" + (f":{op[2]}" if op[2] else ""))
        elif op[0] == "eltwise":
            parts.append(f"{algorithm(op[1]).name}:{op[2]:g}:{op[3]:g}")
        else:
            parts.append(f"{algorithm(op[1]).name}:{'x'.join(map(str, op[3]))}")
    return "+".join(parts)
