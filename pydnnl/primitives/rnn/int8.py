"""Quantization parameters of an int8 RNN, read from the primitive attributes and checked
with oneDNN's rules (``src/common/rnn.cpp``, ``src/cpu/rnn/ref_rnn.cpp``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...error import invalid_arguments, unimplemented
from ...memory.data_types import data_type
from .problem import Int8Types, RnnShape

# oneDNN's weights scale masks: ldigo bits 3 (g) and 4 (o); ldio bit 3 (o)
WEIGHTS_MASKS = (0, (1 << 3) + (1 << 4))
PROJECTION_MASKS = (0, 1 << 3)


@dataclass(frozen=True)
class Int8Params:
    """What an int8 RNN computes with: the data types, the data scale and shift, and one
    weights scale per gate channel (``G * DHC``, the common scale repeated for mask 0) and per
    projection output channel (``DIC``)."""

    types: Int8Types
    data_scale: float
    data_shift: float
    weights_mask: int
    weights_scales: tuple[float, ...]
    projection_mask: int
    projection_scales: tuple[float, ...]

    @property
    def compensated(self) -> bool:
        """Whether the data shift needs the weights' column sums (u8 data, shift != 0)."""
        return self.data_shift != 0.0

    def dequant_factors(self) -> np.ndarray:
        """``1 / (weights_scale * data_scale)`` per gate channel, in f32 as oneDNN computes it
        (its ``dequantize_s32_f32``)."""
        ws = np.asarray(self.weights_scales, np.float32)
        return np.float32(1.0) / (ws * np.float32(self.data_scale))

    def weights_data_scales(self, projection: bool = False) -> np.ndarray:
        """``weights_scale * data_scale`` per channel (f32): the divisor of the compensation in
        the bias (gates) or of the projection's accumulator."""
        ws = np.asarray(self.projection_scales if projection else self.weights_scales,
                        np.float32)
        return ws * np.float32(self.data_scale)

    def describe(self) -> str:
        return (f"cfg:{self.types.cfg} scale:{self.data_scale:g} shift:{self.data_shift:g} "
                f"wei_mask:{self.weights_mask}"
                + (f" proj_mask:{self.projection_mask}" if self.projection_scales else ""))


def _expand(mask: int, scales: tuple[float, ...], n: int, allowed: tuple[int, ...], what: str,
            per: str, kind: str) -> tuple[float, ...]:
    if mask not in allowed:
        raise unimplemented(
            f"{kind}: {what} mask must be one of {', '.join(map(str, allowed))} (as in oneDNN), "
            f"got {mask}")
    want = 1 if mask == 0 else n
    if len(scales) != want:
        raise invalid_arguments(
            f"{kind}: {what} with mask {mask} needs {want} scale{'s' if want > 1 else ''}"
            f"{'' if mask == 0 else ' (' + per + ')'}, got {len(scales)}")
    for v in scales:
        if v == 0.0:
            raise invalid_arguments(f"{kind}: {what} scales must be non-zero, got {scales}")
    return tuple(scales) * (n if mask == 0 else 1)


def int8_params(shape: RnnShape, attr, kind: str) -> Int8Params:
    """The quantization parameters of an int8 problem; unset ones take oneDNN's defaults
    (data scale 1, shift 0; weights scale 1)."""
    types = shape.int8
    scale, shift = attr.get_rnn_data_qparams() or (1.0, 0.0)
    if scale == 0.0:
        raise invalid_arguments(f"{kind}: rnn data scale must be non-zero, got {scale}")
    if types.data == data_type.s8 and shift != 0.0:
        raise unimplemented(
            f"{kind}: s8 RNNs take no data shift (as in oneDNN), set_rnn_data_qparams gave "
            f"shift {shift}")
    wmask, wsc = attr.get_rnn_weights_qparams() or (0, (1.0,))
    G, DHC = shape.G, shape.DHC
    wsc = _expand(wmask, wsc, G * DHC, WEIGHTS_MASKS, "set_rnn_weights_qparams",
                  f"G * DHC = {G} * {DHC}", kind)
    pmask, psc = attr.get_rnn_weights_projection_qparams() or (0, (1.0,))
    if shape.projection:
        psc = _expand(pmask, psc, shape.DIC, PROJECTION_MASKS,
                      "set_rnn_weights_projection_qparams", f"DIC = {shape.DIC}", kind)
    else:
        psc = ()
    return Int8Params(types=types, data_scale=float(scale), data_shift=float(shift),
                      weights_mask=wmask, weights_scales=wsc, projection_mask=pmask,
                      projection_scales=psc)
