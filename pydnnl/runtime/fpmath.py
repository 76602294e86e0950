"""The floating-point math mode in force while a primitive builds its plan.

oneDNN's rule: a ``primitive_attr`` starts with the default mode (``set_default_fpmath_mode``,
or the ``PYDNNL_DEFAULT_FPMATH_MODE`` environment variable: ``strict``, ``tf32``, ``bf16``,
``f16``, ``any``), and ``set_fpmath_mode`` overrides it per primitive. Plans read the mode
once, when they are built, and pass it on to every GEMM they create (:func:`gemm_math`).
"""
from __future__ import annotations

import contextlib
import os
import threading

from ..constants import fpmath_mode
from ..error import invalid_arguments

_state = threading.local()
_default: fpmath_mode | None = None


def parse(mode, what: str) -> fpmath_mode:
    """An ``fpmath_mode`` from an enum value or its name."""
    if isinstance(mode, str):
        try:
            return fpmath_mode[mode.strip().lower()]
        except KeyError:
            pass
    else:
        try:
            return fpmath_mode(mode)
        except ValueError:
            pass
    raise invalid_arguments(f"{what}: fpmath mode must be one of "
                            f"{', '.join(m.name for m in fpmath_mode)}, got {mode!r}")


def get_default_fpmath_mode() -> fpmath_mode:
    """The mode new attributes (and primitives created without one) start with."""
    global _default
    if _default is None:
        env = os.environ.get("PYDNNL_DEFAULT_FPMATH_MODE")
        _default = parse(env, "PYDNNL_DEFAULT_FPMATH_MODE") if env else fpmath_mode.strict
    return _default


def set_default_fpmath_mode(mode) -> None:
    """oneDNN's ``dnnl::set_default_fpmath_mode``: the mode of attributes created afterwards
    and of primitives created without an attribute."""
    global _default
    _default = parse(mode, "set_default_fpmath_mode")


@contextlib.contextmanager
def scope(mode):
    """Plans built inside take ``mode`` (a primitive's attribute) instead of the default."""
    prev = getattr(_state, "mode", None)
    _state.mode = None if mode is None else parse(mode, "fpmath scope")
    try:
        yield
    finally:
        _state.mode = prev


def current() -> fpmath_mode:
    mode = getattr(_state, "mode", None)
    return get_default_fpmath_mode() if mode is None else mode


def gemm_math(mode: fpmath_mode | None = None) -> str:
    """What a GEMM may compute in: ``"tf32"`` where the mode allows TF32 (``tf32``, ``any``),
    ``"bf16"`` / ``"f16"`` for those modes (inputs rounded to 16 bits, f32 accumulation),
    else ``"strict"``. Devices without such tensor cores compute every mode as strict."""
    mode = current() if mode is None else mode
    if mode in (fpmath_mode.tf32, fpmath_mode.any):
        return "tf32"
    return {fpmath_mode.bf16: "bf16", fpmath_mode.f16: "f16"}.get(mode, "strict")
