"""Primitive attributes (``dnnl::primitive_attr``) and post-ops (``dnnl::post_ops``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .constants import algorithm, arg_name, scratchpad_mode
from .error import invalid_arguments
from .memory.data_types import as_data_type, data_type


@dataclass(frozen=True)
class _sum_op:
    scale: float
    zero_point: int
    data_type: data_type


@dataclass(frozen=True)
class _eltwise_op:
    alg: algorithm
    alpha: float
    beta: float


@dataclass(frozen=True)
class _binary_op:
    alg: algorithm
    src1_desc: object  # a pydnnl.memory.desc


@dataclass(frozen=True)
class _prelu_op:
    mask: int


class post_ops:
    """An ordered list of operations applied to a primitive's result."""

    def __init__(self):
        self._ops: list = []

    def len(self) -> int:
        return len(self._ops)

    __len__ = len

    def kind(self, index: int) -> str:
        op = self._ops[index]
        return ("sum" if isinstance(op, _sum_op) else "binary" if isinstance(op, _binary_op)
                else "prelu" if isinstance(op, _prelu_op) else "eltwise")

    def append_sum(self, scale: float = 1.0, zero_point: int = 0,
                   data_type=data_type.undef) -> None:
        """dst = scale * (dst_before - zero_point) + result (``dnnl::post_ops::append_sum``)."""
        self._ops.append(_sum_op(float(scale), int(zero_point), as_data_type(data_type)))

    def append_eltwise(self, alg: algorithm, alpha: float = 0.0, beta: float = 0.0) -> None:
        try:
            alg = algorithm(alg)
        except ValueError:
            raise invalid_arguments(f"post_ops.append_eltwise: unknown algorithm {alg!r}") from None
        if not alg.name.startswith("eltwise_"):
            raise invalid_arguments(
                f"post_ops.append_eltwise: expected an eltwise_* algorithm, got {alg.name}")
        self._ops.append(_eltwise_op(alg, float(alpha), float(beta)))

    def append_binary(self, alg: algorithm, src1_desc) -> None:
        """dst = dst binary_op src1 (``dnnl::post_ops::append_binary``): src1 is passed at
        execute as ``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1``; each of its dims equals the
        destination's or is 1 (broadcast)."""
        from .memory.desc import MemoryDesc

        try:
            alg = algorithm(alg)
        except ValueError:
            raise invalid_arguments(f"post_ops.append_binary: unknown algorithm {alg!r}") from None
        if not alg.name.startswith("binary_"):
            raise invalid_arguments(
                f"post_ops.append_binary: expected a binary_* algorithm, got {alg.name}")
        if not isinstance(src1_desc, MemoryDesc) or src1_desc.is_zero():
            raise invalid_arguments(f"post_ops.append_binary: src1_desc must be a memory.desc, "
                                    f"got {src1_desc!r}")
        self._ops.append(_binary_op(alg, src1_desc))

    def append_prelu(self, mask: int) -> None:
        """dst = dst > 0 ? dst : weights * dst (``dnnl::post_ops::append_prelu``): the f32
        weights are passed at execute as ``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_WEIGHTS``, in a
        plain layout whose dim ``d`` is the destination's where bit ``d`` of ``mask`` is set
        and 1 (broadcast) elsewhere."""
        if isinstance(mask, bool) or not isinstance(mask, (int, np.integer)) or mask < 0:
            raise invalid_arguments(f"post_ops.append_prelu: mask must be a non-negative int, "
                                    f"got {mask!r}")
        self._ops.append(_prelu_op(int(mask)))

    def get_params_prelu(self, index: int) -> int:
        """The mask of prelu entry ``index``."""
        op = self._ops[index]
        if not isinstance(op, _prelu_op):
            raise invalid_arguments(f"post_ops.get_params_prelu: entry {index} is not a prelu")
        return op.mask

    def get_params_binary(self, index: int):
        """``(algorithm, src1_desc)`` of binary entry ``index``."""
        op = self._ops[index]
        if not isinstance(op, _binary_op):
            raise invalid_arguments(f"post_ops.get_params_binary: entry {index} is not a binary")
        return op.alg, op.src1_desc

    def get_params_sum(self, index: int) -> tuple[float, int, data_type]:
        op = self._ops[index]
        if not isinstance(op, _sum_op):
            raise invalid_arguments(f"post_ops.get_params_sum: entry {index} is not a sum")
        return op.scale, op.zero_point, op.data_type

    def get_params_eltwise(self, index: int) -> tuple[algorithm, float, float]:
        op = self._ops[index]
        if not isinstance(op, _eltwise_op):
            raise invalid_arguments(f"post_ops.get_params_eltwise: entry {index} is not an eltwise")
        return op.alg, op.alpha, op.beta

    @property
    def ops(self) -> tuple:
        return tuple(self._ops)

    def key(self) -> tuple:
        return tuple(self._ops)


class primitive_attr:
    """Attributes that modify a primitive: scratchpad mode, scales, zero points, post-ops, RNN
    quantization parameters. Scales and zero points are runtime arguments, passed at execute as
    ``ARG_ATTR_SCALES | ARG_x`` / ``ARG_ATTR_ZERO_POINTS | ARG_x`` (oneDNN v3)."""

    def __init__(self):
        self._scratchpad_mode = scratchpad_mode.library
        self._scales: dict[int, int] = {}
        self._zero_points: dict[int, int] = {}
        self._post_ops = post_ops()
        self._rnn_data_qparams: tuple[float, float] | None = None
        self._rnn_weights_qparams: tuple[int, tuple[float, ...]] | None = None
        self._rnn_weights_projection_qparams: tuple[int, tuple[float, ...]] | None = None
        from .runtime.fpmath import get_default_fpmath_mode

        self._fpmath = get_default_fpmath_mode()
        self._fpmath_apply_to_int = False

    def set_scratchpad_mode(self, mode: scratchpad_mode) -> None:
        try:
            self._scratchpad_mode = scratchpad_mode(mode)
        except ValueError:
            raise invalid_arguments(
                f"primitive_attr.set_scratchpad_mode: unknown mode {mode!r}") from None

    def get_scratchpad_mode(self) -> scratchpad_mode:
        return self._scratchpad_mode

    def set_fpmath_mode(self, mode, apply_to_int: bool = False) -> None:
        """oneDNN's ``fpmath_mode``: ``tf32`` (or ``any``) lets f32 GEMMs, convolutions and RNN
        cells run on TF32 tensor cores where the device has them (NVIDIA: inline-PTX
        ``mma.sync``); elsewhere, and for ``bf16``/``f16``, the primitive computes in f32."""
        from .runtime.fpmath import parse

        self._fpmath = parse(mode, "primitive_attr.set_fpmath_mode")
        self._fpmath_apply_to_int = bool(apply_to_int)

    def get_fpmath_mode(self):
        """The mode (oneDNN's C++ ``get_fpmath_mode`` returns it; ``apply_to_int`` is
        :meth:`get_fpmath_apply_to_int`)."""
        return self._fpmath

    def get_fpmath_apply_to_int(self) -> bool:
        return self._fpmath_apply_to_int

    def set_scales_mask(self, arg: int, mask: int) -> None:
        """Scales for ``arg``: mask 0 is one scale, bit d set means one scale per index of dim d."""
        self._scales[int(arg)] = _check_mask(mask, f"set_scales_mask({arg_name(arg)})")

    def set_zero_points_mask(self, arg: int, mask: int) -> None:
        self._zero_points[int(arg)] = _check_mask(mask, f"set_zero_points_mask({arg_name(arg)})")

    def get_scales_mask(self, arg: int) -> int | None:
        return self._scales.get(int(arg))

    def get_zero_points_mask(self, arg: int) -> int | None:
        return self._zero_points.get(int(arg))

    @property
    def scales(self) -> dict[int, int]:
        return dict(self._scales)

    @property
    def zero_points(self) -> dict[int, int]:
        return dict(self._zero_points)

    def set_post_ops(self, ops: post_ops) -> None:
        if not isinstance(ops, post_ops):
            raise invalid_arguments(
                f"primitive_attr.set_post_ops: expected post_ops, got {type(ops).__name__}")
        self._post_ops = ops

    def get_post_ops(self) -> post_ops:
        return self._post_ops

    def set_rnn_data_qparams(self, scale: float, shift: float) -> None:
        """int8 RNNs: data (states) are quantized as ``saturate(round(x * scale + shift))``;
        oneDNN's default is scale 1, shift 0."""
        self._rnn_data_qparams = (_finite(scale, "set_rnn_data_qparams: scale"),
                                  _finite(shift, "set_rnn_data_qparams: shift"))

    def set_rnn_weights_qparams(self, mask: int, scales) -> None:
        """int8 RNNs: the s8 weights are ``round(w * scale)``; mask 0 (one scale) or 24 (bits
        3 and 4 of ldigo: one scale per gate and output channel, G * DHC of them)."""
        self._rnn_weights_qparams = (_check_mask(mask, "set_rnn_weights_qparams"),
                                     _scales(scales, "set_rnn_weights_qparams"))

    def set_rnn_weights_projection_qparams(self, mask: int, scales) -> None:
        """int8 LSTMP: the projection weights' scales; mask 0 or 8 (bit 3 of ldio: per DIC)."""
        self._rnn_weights_projection_qparams = (
            _check_mask(mask, "set_rnn_weights_projection_qparams"),
            _scales(scales, "set_rnn_weights_projection_qparams"))

    def get_rnn_data_qparams(self):
        """``(scale, shift)``, or None when not set (oneDNN's default (1, 0) applies)."""
        return self._rnn_data_qparams

    def get_rnn_weights_qparams(self):
        """``(mask, scales)``, or None when not set (oneDNN's default (0, [1]) applies)."""
        return self._rnn_weights_qparams

    def get_rnn_weights_projection_qparams(self):
        """``(mask, scales)``, or None when not set (oneDNN's default (0, [1]) applies)."""
        return self._rnn_weights_projection_qparams

    def has_rnn_qparams(self) -> bool:
        """Whether any RNN quantization parameter was set."""
        return (self._rnn_data_qparams is not None or self._rnn_weights_qparams is not None
                or self._rnn_weights_projection_qparams is not None)

    def is_default(self) -> bool:
        return (not self._scales and not self._zero_points and not len(self._post_ops)
                and not self.has_rnn_qparams()
                and self._scratchpad_mode == scratchpad_mode.library)
        # (the fpmath mode only permits: every primitive honours any mode)

    def key(self) -> tuple:
        return (int(self._scratchpad_mode), tuple(sorted(self._scales.items())),
                tuple(sorted(self._zero_points.items())), self._post_ops.key(),
                self._rnn_data_qparams, self._rnn_weights_qparams,
                self._rnn_weights_projection_qparams, int(self._fpmath))


def _check_mask(mask, what: str) -> int:
    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        raise invalid_arguments(f"{what}: mask must be a non-negative int, got {mask!r}")
    return mask


def _finite(v, what: str) -> float:
    import math

    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
            or not math.isfinite(float(v)):
        raise invalid_arguments(f"{what} must be a finite number, got {v!r}")
    return float(v)


def _scales(scales, what: str) -> tuple[float, ...]:
    try:
        vals = tuple(scales)
    except TypeError:
        raise invalid_arguments(f"{what}: scales must be a sequence of numbers, got "
                                f"{type(scales).__name__}") from None
    if not vals:
        raise invalid_arguments(f"{what}: scales must hold at least one value (oneDNN: count > 0)")
    return tuple(_finite(v, f"{what}: scales[{i}]") for i, v in enumerate(vals))
