"""Small OpenCL C helper functions that loopy kernels call: element-type conversions.

loopy does not know f16/bf16 storage, saturating conversions, or rounding modes; a kernel
declares the helpers it needs with :func:`register_helpers`, which adds their definitions as a
preamble and registers each name as a typed scalar callable.
"""
from __future__ import annotations

import numpy as np

from ..memory.data_types import data_type

# OpenCL C: storage type -> compute type and back, with oneDNN's rounding and saturation.
# Compute is float, or double when both ends are f32/f64.
_LOAD = {
    (data_type.f32, "float"): ("float", "return x;"),
    (data_type.f64, "float"): ("double", "return (float)x;"),
    (data_type.f16, "float"): ("ushort", "return vload_half(0, (const half *)&x);"),
    (data_type.bf16, "float"): ("ushort", "return as_float(((uint)x) << 16);"),
    (data_type.s8, "float"): ("char", "return (float)x;"),
    (data_type.u8, "float"): ("uchar", "return (float)x;"),
    (data_type.s32, "float"): ("int", "return (float)x;"),
    (data_type.f32, "double"): ("float", "return (double)x;"),
    (data_type.f64, "double"): ("double", "return x;"),
}
_STORE = {
    (data_type.f32, "float"): ("float", "return x;"),
    (data_type.f64, "float"): ("double", "return (double)x;"),
    (data_type.f16, "float"): ("ushort", "ushort r; vstore_half_rte(x, 0, (half *)&r); return r;"),
    (data_type.bf16, "float"): ("ushort",
                                "uint u = as_uint(x); "
                                "if (isnan(x)) return (ushort)((u >> 16) | 0x40u);"
                                " u += 0x7FFFu + ((u >> 16) & 1u); return (ushort)(u >> 16);"),
    (data_type.s8, "float"): ("char", "return convert_char_sat_rte(x);"),
    (data_type.u8, "float"): ("uchar", "return convert_uchar_sat_rte(x);"),
    (data_type.s32, "float"): ("int", "return convert_int_sat_rte(x);"),
    (data_type.f32, "double"): ("float", "return (float)x;"),
    (data_type.f64, "double"): ("double", "return x;"),
}
_NP = {"float": np.float32, "double": np.float64, "ushort": np.uint16, "char": np.int8,
       "uchar": np.uint8, "int": np.int32}


def compute_type(*dts: data_type) -> str:
    """``double`` when every type is f32/f64 and one is f64, else ``float``."""
    if (any(d == data_type.f64 for d in dts)
            and all(d in (data_type.f32, data_type.f64) for d in dts)):
        return "double"
    return "float"


def load_helper(dt: data_type, compute: str = "float") -> tuple[str, str, type, type]:
    """(name, C definition, arg numpy type, result numpy type) of the loader from ``dt``."""
    arg, body = _LOAD[(dt, compute)]
    name = f"pd_load_{dt.name}_{compute}"
    return name, f"static inline {compute} {name}({arg} x) {{ {body} }}", _NP[arg], _NP[compute]


def store_helper(dt: data_type, compute: str = "float") -> tuple[str, str, type, type]:
    """(name, C definition, arg numpy type, result numpy type) of the storer into ``dt``."""
    res, body = _STORE[(dt, compute)]
    name = f"pd_store_{dt.name}_{compute}"
    return name, f"static inline {res} {name}({compute} x) {{ {body} }}", _NP[compute], _NP[res]


def _typed_callable_class():
    """A scalar callable with fixed argument/result types (module level: loopy pickles it)."""
    global _Typed
    if _Typed is None:
        from loopy.kernel.function_interface import ScalarCallable

        class TypedHelper(ScalarCallable):
            def with_types(self, arg_id_to_dtype, clbl_inf_ctx):
                return self.copy(name_in_target=self.name), clbl_inf_ctx

            def with_descrs(self, arg_id_to_descr, clbl_inf_ctx):
                from constantdict import constantdict

                return self.copy(arg_id_to_descr=constantdict(arg_id_to_descr)), clbl_inf_ctx

        TypedHelper.__qualname__ = "TypedHelper"
        globals()["TypedHelper"] = TypedHelper
        _Typed = TypedHelper
    return _Typed


_Typed = None


def register_helpers(tu, helpers):
    """Add helper definitions to ``tu`` and make their names callable with fixed types:
    ``helpers`` holds ``(name, C definition, argument type or tuple of types, result type)``."""
    import loopy as lp
    from constantdict import constantdict
    from loopy.types import NumpyType

    preamble = []
    for name, code, argt, rest in helpers:
        argts = argt if isinstance(argt, tuple) else (argt,)  # one type per argument
        types = {i: NumpyType(np.dtype(t)) for i, t in enumerate(argts)}
        clbl = _typed_callable_class()(name, arg_id_to_dtype=constantdict(
            {**types, -1: NumpyType(np.dtype(rest))}))
        tu = lp.register_callable(tu, name, clbl)
        preamble.append(code)
    text = "\n".join(dict.fromkeys(preamble))
    knl = tu.default_entrypoint
    knl = knl.copy(preambles=tuple(knl.preambles) + (("50_pydnnl_helpers", text),))
    return tu.with_kernel(knl)


def c_mapper():
    """pymbolic -> OpenCL C for the hand-written kernel families: float constants as float
    literals (no double arithmetic), integer division and remainder as C's ``/`` and ``%``
    (operands known non-negative)."""
    from pymbolic.mapper.c_code import CCodeMapper

    class _M(CCodeMapper):
        def map_constant(self, x, enclosing_prec):
            if isinstance(x, (float, np.floating)):
                return repr(float(np.float32(x))) + "f"
            return super().map_constant(x, enclosing_prec)

        def map_floor_div(self, expr, enclosing_prec):
            return f"(({self.rec(expr.numerator, 0)}) / ({self.rec(expr.denominator, 0)}))"

        def map_remainder(self, expr, enclosing_prec):
            return f"(({self.rec(expr.numerator, 0)}) % ({self.rec(expr.denominator, 0)}))"

    return _M()


def batch_position(epi_fixed, epi_batch, t: str) -> list:
    """The destination position's leading (batch) entries of a batched GEMM's element, as
    pymbolic: ``epi_fixed`` when given, else the batch index ``t`` (a variable name) taken
    apart over the destination's batch dims ``epi_batch``, last fastest."""
    from pymbolic import var
    from pymbolic.primitives import FloorDiv, Remainder

    if epi_fixed is not None:
        return list(epi_fixed)
    pos, inner = [], 1
    for d in reversed(epi_batch):
        e = var(t) if inner == 1 else FloorDiv(var(t), inner)
        pos.append(Remainder(e, d) if d > 1 else 0)
        inner *= d
    pos.reverse()
    return pos


def lane_reduce(v: str, width: int, op: str = "add") -> str:
    """C expression combining the ``width`` lanes of vector ``v`` pairwise (a tree, so the
    adds do not wait on each other): ``op`` "add" or "max"."""
    lanes = [f"{v}.s{i:x}" for i in range(width)]
    while len(lanes) > 1:
        lanes = [f"fmax({a}, {b})" if op == "max" else f"({a} + {b})"
                 for a, b in zip(lanes[::2], lanes[1::2])]
    return lanes[0]
