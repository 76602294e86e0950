"""Primitive attributes (``dnnl::primitive_attr``) and post-ops (``dnnl::post_ops``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .constants import ARG_SRC, ARG_WEIGHTS, algorithm, arg_name, scratchpad_mode
from .error import invalid_arguments, unimplemented
from .memory.data_types import as_data_type, data_type
from .memory.data_types import data_type as _dt


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
        # (data type, on the host) of each entry: host entries are one value passed as a
        # host-scalar memory (set_host_scale / set_host_zero_point)
        self._scale_types: dict[int, tuple[data_type, bool]] = {}
        self._zero_point_types: dict[int, tuple[data_type, bool]] = {}
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
        """Scales for ``arg``: mask 0 is one scale, bit d set means one scale per index of dim d;
        f32 values in a device memory passed at execute as ``ARG_ATTR_SCALES | arg``."""
        self.set_scales(arg, mask, [], data_type.f32, False, _what="set_scales_mask")

    def set_zero_points_mask(self, arg: int, mask: int) -> None:
        """Zero points for ``arg`` (mask as in :meth:`set_scales_mask`): s32 values in a device
        memory passed at execute as ``ARG_ATTR_ZERO_POINTS | arg``."""
        self.set_zero_points(arg, mask, [], data_type.s32, False, _what="set_zero_points_mask")

    def set_scales(self, arg: int, mask: int, groups=(), data_type=data_type.f32,
                   is_on_host: bool = False, *, _what: str = "set_scales") -> None:
        """``dnnl::primitive_attr::set_scales``: ``is_on_host`` makes the scale one value in
        a host-scalar memory of ``data_type`` (f32, bf16 or f16; ``mask`` 0, no groups), as
        :meth:`set_host_scale`. Scales in a device memory are f32 here; groups are not
        implemented."""
        arg, what = _check_arg(arg, _what), f"{_what}({arg_name(arg)})"
        mask = _check_mask(mask, what)
        dt = _quant_type(data_type, what, "scales", (_dt.f32, _dt.bf16, _dt.f16))
        self._check_groups(groups, what)
        host = _check_host(is_on_host, mask, what)
        if not host and dt != _dt.f32:
            raise unimplemented(f"{what}: scales of data type {dt.name} in a device memory are "
                                f"not implemented; expected f32 (or a host scalar)")
        self._scales[arg], self._scale_types[arg] = mask, (dt, host)

    def set_zero_points(self, arg: int, mask: int, groups=(), data_type=data_type.s32,
                        is_on_host: bool = False, *, _what: str = "set_zero_points") -> None:
        """``dnnl::primitive_attr::set_zero_points``: ``is_on_host`` makes the zero point
        one value in a host-scalar memory of ``data_type`` (s32; s8 or u8 for src and
        weights; ``mask`` 0, no groups), as :meth:`set_host_zero_point`. Zero points in a
        device memory are s32 here; groups are not implemented."""
        arg, what = _check_arg(arg, _what), f"{_what}({arg_name(arg)})"
        mask = _check_mask(mask, what)
        dt = _quant_type(data_type, what, "zero points", (_dt.s32, _dt.s8, _dt.u8))
        if dt != _dt.s32 and arg not in (ARG_SRC, ARG_WEIGHTS):
            raise invalid_arguments(f"{what}: zero points of {arg_name(arg)} are s32 (s8 and u8 "
                                    f"serve src and weights only), got {dt.name}")
        self._check_groups(groups, what)
        host = _check_host(is_on_host, mask, what)
        if not host and dt != _dt.s32:
            raise unimplemented(f"{what}: zero points of data type {dt.name} in a device memory "
                                f"are not implemented; expected s32 (or a host scalar)")
        self._zero_points[arg], self._zero_point_types[arg] = mask, (dt, host)

    def set_host_scale(self, arg: int, data_type=data_type.f32) -> None:
        """One scale for ``arg`` passed at execute as a host-scalar memory
        (``memory(memory.desc.host_scalar(data_type), value)``) under ``ARG_ATTR_SCALES |
        arg`` (``dnnl::primitive_attr::set_host_scale``; mask 0)."""
        self.set_scales(arg, 0, [], data_type, True, _what="set_host_scale")

    def set_host_zero_point(self, arg: int, data_type=data_type.s32) -> None:
        """One zero point for ``arg`` passed at execute as a host-scalar memory under
        ``ARG_ATTR_ZERO_POINTS | arg`` (``dnnl::primitive_attr::set_host_zero_point``;
        mask 0)."""
        self.set_zero_points(arg, 0, [], data_type, True, _what="set_host_zero_point")

    @staticmethod
    def _check_groups(groups, what: str) -> None:
        try:
            g = list(groups)
        except TypeError:
            raise invalid_arguments(f"{what}: groups must be a list of ints, got "
                                    f"{groups!r}") from None
        if g:
            raise unimplemented(f"{what}: groups {g} are not implemented; expected []")

    def get_scales_mask(self, arg: int) -> int | None:
        return self._scales.get(int(arg))

    def get_zero_points_mask(self, arg: int) -> int | None:
        return self._zero_points.get(int(arg))

    def get_scales(self, arg: int):
        """``(mask, groups, data_type, is_on_host)`` of ``arg``'s scales, as
        :meth:`set_scales` takes them; None where none were set."""
        if int(arg) not in self._scales:
            return None
        return (self._scales[int(arg)], [], *self._scale_types[int(arg)])

    def get_zero_points(self, arg: int):
        """``(mask, groups, data_type, is_on_host)`` of ``arg``'s zero points; None where none
        were set."""
        if int(arg) not in self._zero_points:
            return None
        return (self._zero_points[int(arg)], [], *self._zero_point_types[int(arg)])

    def scales_on_host(self, arg: int) -> bool:
        """Whether ``arg``'s scale is a host scalar (:meth:`set_host_scale`)."""
        return self._scale_types.get(int(arg), (None, False))[1]

    def zero_point_on_host(self, arg: int) -> bool:
        """Whether ``arg``'s zero point is a host scalar (:meth:`set_host_zero_point`)."""
        return self._zero_point_types.get(int(arg), (None, False))[1]

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
                tuple(sorted(self._zero_points.items())),
                tuple(sorted(self._scale_types.items())),
                tuple(sorted(self._zero_point_types.items())), self._post_ops.key(),
                self._rnn_data_qparams, self._rnn_weights_qparams,
                self._rnn_weights_projection_qparams, int(self._fpmath))


def _check_mask(mask, what: str) -> int:
    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        raise invalid_arguments(f"{what}: mask must be a non-negative int, got {mask!r}")
    return mask


def _check_arg(arg, what: str) -> int:
    if isinstance(arg, bool) or not isinstance(arg, (int, np.integer)) or arg < 0:
        raise invalid_arguments(f"{what}: arg must be a non-negative ARG_* number, got {arg!r}")
    return int(arg)


def _quant_type(dt, what: str, kind: str, allowed) -> data_type:
    dt = as_data_type(dt)
    if dt not in allowed:
        raise invalid_arguments(f"{what}: {kind} of data type {dt.name}; expected "
                                f"{', '.join(t.name for t in allowed)}")
    return dt


def _check_host(is_on_host, mask: int, what: str) -> bool:
    host = bool(is_on_host)
    if host and mask != 0:
        raise invalid_arguments(f"{what}: a host scalar is one value: expected mask 0, got {mask}")
    return host


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
