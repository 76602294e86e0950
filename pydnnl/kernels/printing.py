"""Helpers of the kernel sources written without loopy (``conv_winograd_source``,
``copy_source``): sizes and plain layouts as C."""
from __future__ import annotations

from .sizevars import is_var


def c_size(x) -> str:
    """A size (an int or a size variable) as C."""
    return str(x) if is_var(x) else str(int(x))


def plain_layout(layout) -> tuple | None:
    """``(offset0, strides)`` of a layout without blocks, else None."""
    if layout is None:
        return None
    off0, per = layout
    if any(blk != 1 or inner for blk, _, inner in per):
        return None
    return off0, tuple(st for _, st, _ in per)


def size_vars_of(*things) -> set:
    """Names of the size variables among ``things`` (ints, size variables, nested tuples)."""
    out = set()
    for x in things:
        if isinstance(x, (tuple, list)):
            out |= size_vars_of(*x)
        elif x is not None and is_var(x):
            from pymbolic.mapper.dependency import DependencyMapper

            out |= {v.name for v in DependencyMapper(composite_leaves=False)(x)}
    return out


def kernel_head(name: str, local: tuple, params: list[str]) -> str:
    """A kernel's signature line with its required work-group size, and its opening brace."""
    attr = ", ".join(str(x) for x in (tuple(local) + (1, 1, 1))[:3])
    return (f"__kernel void __attribute__ ((reqd_work_group_size({attr}))) {name}("
            + ", ".join(params) + ")\n{\n")


def float_ptr(name: str, const: bool) -> str:
    """A float buffer parameter (``const`` for inputs), restrict-qualified."""
    return f"__global float {'const ' if const else ''}*__restrict__ {name}"


def indent(text: str, by: str = "  ") -> str:
    """``text`` with every non-blank line indented ``by``."""
    return "".join(by + x if x.strip() else x for x in text.splitlines(True))


def peeled(body: str, total: int, width: int, guard: str = "") -> str:
    """C running ``body`` over ``total`` work-items along axis 0 in work-groups of
    ``width`` (loopy's peeled slab): the whole groups in one copy, the partial last group in a
    copy of its own guarded by the local id alone. ``guard``: a condition both copies also
    test. Unindented; ``body`` is indented into its braces."""
    g = f" && {guard}" if guard else ""
    full, tail = divmod(int(total), width)
    if tail:
        return (f"if (gid(0) < {full}{g})\n{{\n{indent(body)}}}\n"
                f"if (gid(0) == {full}{g} && lid(0) < {tail})\n{{\n{indent(body)}}}\n")
    return f"if ({guard})\n{{\n{indent(body)}}}\n" if guard else f"{{\n{indent(body)}}}\n"
