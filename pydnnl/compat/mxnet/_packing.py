"""MXNet's flat RNN ``parameters`` vector: its size (``GetRnnParamSize``) and where each block is.

The vector holds every weight matrix first, then every bias vector. Weights are ordered by
layer, then direction (forward, then reverse), then ``i2h`` [G*H, in_l], ``h2h`` [G*H, R] and,
with a projection, ``h2r`` [P, H]; biases by layer, direction, then ``i2h`` [G*H] and ``h2h``
[G*H]. Matrices are row-major. ``in_0`` is the input size, ``in_l = D*R`` above it, where R is
the recurrent size (P with a projection, else H). Gate blocks along G*H: LSTM i, f, g, o;
GRU r, z, n; vanilla RNN one block.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...error import invalid_arguments

#: MXNet mode -> gates per cell
GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
        raise invalid_arguments(f"mxnet.rnn: {name} must be a positive int, got {value!r}")
    v = int(value.__index__())
    if v <= 0:
        raise invalid_arguments(f"mxnet.rnn: {name} must be a positive int, got {v}")
    return v


@dataclass(frozen=True)
class RnnPacking:
    """Sizes of one MXNet RNN configuration and the offsets of its parameter blocks."""

    mode: str
    input_size: int
    state_size: int
    num_layers: int
    directions: int
    projection_size: int | None

    @classmethod
    def make(cls, mode, input_size, state_size, num_layers, bidirectional=False,
             projection_size=None) -> "RnnPacking":
        """Validate MXNet's configuration arguments (as ``npx.rnn`` checks them)."""
        if mode not in GATES:
            raise invalid_arguments(
                f"mxnet.rnn: mode must be one of {', '.join(repr(m) for m in GATES)}, got {mode!r}")
        I = _positive_int(input_size, "input size (data.shape[2])")
        H = _positive_int(state_size, "state_size")
        L = _positive_int(num_layers, "num_layers")
        if not isinstance(bidirectional, (bool, int)) or bidirectional not in (0, 1):
            raise invalid_arguments(
                f"mxnet.rnn: bidirectional must be a bool, got {bidirectional!r}")
        P = None
        if projection_size is not None:
            if mode != "lstm":
                raise invalid_arguments(
                    f"mxnet.rnn: projection_size is supported for mode 'lstm' only, "
                    f"got mode {mode!r}")
            P = _positive_int(projection_size, "projection_size")
            if P > H:
                raise invalid_arguments(
                    f"mxnet.rnn: projection_size must be <= state_size ({H}), got {P}")
        return cls(mode, I, H, L, 2 if bidirectional else 1, P)

    # -- sizes -----------------------------------------------------------------------------------
    @property
    def gates(self) -> int:
        return GATES[self.mode]

    @property
    def rec_size(self) -> int:
        """Size of the recurrent state h (and of each direction's output): P or H."""
        return self.projection_size or self.state_size

    def layer_input(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.directions * self.rec_size

    def _dir_weights(self, layer: int) -> int:
        """Weight elements of one direction of one layer (i2h, h2h, h2r)."""
        gh = self.gates * self.state_size
        proj = self.projection_size * self.state_size if self.projection_size else 0
        return gh * self.layer_input(layer) + gh * self.rec_size + proj

    def weights_size(self) -> int:
        return sum(self.directions * self._dir_weights(l) for l in range(self.num_layers))

    def size(self) -> int:
        """Elements of the whole vector (MXNet's ``GetRnnParamSize``)."""
        return (self.weights_size()
                + self.num_layers * self.directions * 2 * self.gates * self.state_size)

    # -- offsets ---------------------------------------------------------------------------------
    def weight_offset(self, layer: int, direction: int, which: str) -> int:
        """First element of matrix ``which`` ('i2h', 'h2h' or 'h2r') of (layer, direction)."""
        off = sum(self.directions * self._dir_weights(l) for l in range(layer))
        off += direction * self._dir_weights(layer)
        gh = self.gates * self.state_size
        if which == "i2h":
            return off
        off += gh * self.layer_input(layer)
        if which == "h2h":
            return off
        if which == "h2r" and self.projection_size:
            return off + gh * self.rec_size
        raise invalid_arguments(f"mxnet packing: no weight block {which!r} in this configuration")

    def bias_offset(self, layer: int, direction: int, which: str) -> int:
        """First element of bias ``which`` ('i2h' or 'h2h') of (layer, direction)."""
        if which not in ("i2h", "h2h"):
            raise invalid_arguments(f"mxnet packing: no bias block {which!r}")
        gh = self.gates * self.state_size
        return (self.weights_size() + ((layer * self.directions + direction) * 2
                                       + (which == "h2h")) * gh)

    def layer_stride(self, layer: int) -> int:
        """Elements between the same weight block of ``layer`` and ``layer + 1`` (equal for
        every pair of layers with the same input size)."""
        return self.directions * self._dir_weights(layer)

    def direction_stride(self, layer: int) -> int:
        """Elements between the same weight block of the two directions of ``layer``."""
        return self._dir_weights(layer)


def rnn_param_size(mode: str, input_size: int, state_size: int, num_layers: int,
                   bidirectional: bool = False, projection_size: int | None = None) -> int:
    """Length of MXNet's flat RNN ``parameters`` vector (``GetRnnParamSize``)."""
    return RnnPacking.make(mode, input_size, state_size, num_layers, bidirectional,
                           projection_size).size()
