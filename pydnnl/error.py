"""Exceptions raised by pydnnl.

Every bad argument raises a subclass of :class:`error`. Messages name the argument, what was
expected and what came. Subclasses also derive from the matching builtin so that code written
for plain Python exceptions keeps working.
"""
from __future__ import annotations


class error(Exception):
    """Base class of every pydnnl exception (oneDNN's ``dnnl::error``)."""

    status = "runtime_error"


class invalid_arguments(error, ValueError):
    """An argument has a wrong value, shape, type or layout (``dnnl_invalid_arguments``)."""

    status = "invalid_arguments"


class unimplemented(error, NotImplementedError):
    """The combination is valid but no implementation exists (``dnnl_unimplemented``)."""

    status = "unimplemented"


class runtime_error(error, RuntimeError):
    """A device, driver or compiler failed (``dnnl_runtime_error``)."""

    status = "runtime_error"


class out_of_memory(error, MemoryError):
    """The device could not allocate a buffer (``dnnl_out_of_memory``)."""

    status = "out_of_memory"


def check(cond: bool, msg: str, kind: type[error] = invalid_arguments) -> None:
    """Raise ``kind(msg)`` unless ``cond``."""
    if not cond:
        raise kind(msg)
