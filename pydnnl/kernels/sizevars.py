"""Sizes that a generated kernel takes at run time.

A kernel problem (a frozen dataclass, the key of the kernel cache) may hold, in place of an
int, a *size variable*: a pymbolic :class:`~pymbolic.primitives.Variable` named after the
kernel argument that carries the value. Generators build their index expressions from the
problem's fields as usual, so a variable flows into addresses, guards and launch sizes
unchanged; they then declare one integer argument per variable (:func:`value_args`) and write
loop bounds through :func:`ceil_range`, whose constraint stays affine for isl. The caller
passes the values by name when it binds the launch (:meth:`pydnnl.runtime.plan.Plan.kernel`).
One problem with variables, and so one compiled program, serves every value.

Everything here is pure: no device, no engine.
"""
from __future__ import annotations

import dataclasses

import numpy as np

# the integer type of size arguments: the kernels' 64-bit index type
SIZE_DTYPE = np.int64


def size_var(name: str):
    """The size variable carried by kernel argument ``name``."""
    from pymbolic import var

    return var(name)


def _expression_type():
    """pymbolic's expression base class: ``ExpressionNode`` (2024.2 on); the older name
    ``Expression`` warns on every access in those versions, which the kernel generators make
    hundreds of thousands of times in a test run."""
    import pymbolic.primitives as prim

    return getattr(prim, "ExpressionNode", None) or prim.Expression


def is_var(x) -> bool:
    """Whether ``x`` is an expression (a size variable or built from one) rather than an int."""
    return isinstance(x, _expression_type())


def free_vars(obj) -> list[str]:
    """Names of the size variables in ``obj`` (dataclasses, tuples, lists, dicts,
    expressions, nested), sorted."""
    from pymbolic.mapper.dependency import DependencyMapper

    names: set[str] = set()
    dep = DependencyMapper(composite_leaves=False)

    def walk(x):
        if is_var(x):
            names.update(v.name for v in dep(x))
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name))
        elif isinstance(x, (tuple, list)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)

    walk(obj)
    return sorted(names)


def value_args(obj) -> list:
    """One loopy integer argument per size variable of ``obj``."""
    import loopy as lp

    return [lp.ValueArg(n, SIZE_DTYPE) for n in free_vars(obj)]


def ceil_range(iname: str, total, per: int = 1) -> str:
    """The isl constraint ``0 <= iname < ceil(total / per)``; ``total`` an int or an affine
    expression of size variables (``per * iname <= total - 1`` then)."""
    if not is_var(total):
        return f"0 <= {iname} < {-(-int(total) // per)}"
    return f"0 <= {iname} and {per} * {iname} <= {total} - 1"


def symbolize(values: dict, keep: bool = False) -> tuple[dict, dict]:
    """``(fields, args)``: for each ``name -> int`` of ``values``, the size variable to put
    in the problem and the value to bind at launch; ``keep``: the ints themselves (a baked
    specialization) and no arguments."""
    if keep:
        return dict(values), {}
    return {k: size_var(k) for k in values}, {k: int(v) for k, v in values.items()}
