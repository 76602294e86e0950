"""pydnnl's extensions of the RNN primitives: the features MIOpen, cuDNN, MXNet and PyTorch
have and oneDNN lacks. Passed as ``extensions=rnn_extensions(...)`` to a forward primitive
descriptor; its backward takes them from ``hint_fwd_pd``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...error import invalid_arguments


@dataclass(frozen=True)
class rnn_extensions:
    """Optional RNN features beyond oneDNN's model (all off by default).

    ``seq_lengths``
        per-sequence lengths (N integers in [1, T], any order): sequence n uses steps
        t < len[n] only. ``dst_layer`` is zero at t >= len[n]; ``dst_iter``/``dst_iter_c`` hold
        each sequence's state at its last valid step (right-to-left directions start at
        t = len[n] - 1); backward ignores ``diff_dst_layer`` at padded positions, takes
        ``diff_dst_iter`` at each sequence's last valid step and returns zeros in
        ``diff_src_layer`` there. The work follows the real lengths: the layer GEMMs run over
        the valid rows only.
    ``packed``
        with ``seq_lengths`` in non-increasing order: src_layer and dst_layer (and their
        gradients) are packed, [sum(seq_lengths), C], time-major with ``batch_t`` rows at step t
        (PyTorch ``PackedSequence.data``, MIOpen's and cuDNN's per-step descriptors).
    ``layer_bidirectional``
        per-layer bidirectional stacks (MIOpen, cuDNN, PyTorch, MXNet): with
        ``bidirectional_concat``, layer l+1 of both directions reads the concatenation of both
        directions of layer l. With L > 1 this needs SLC == 2 DIC.
    ``dropout``, ``dropout_seed``
        in forward_training, each layer's output except the top one is multiplied by a
        Bernoulli(1 - p) mask scaled by 1/(1 - p) where the next layer reads it (not where it is
        carried as the recurrent state nor in ``dst_iter``). Execution k draws the mask of
        layer l, direction d from Philox4x32-10 keyed by ``dropout_seed`` at counter block
        ``k M + l D + d`` with M = (L - 1) D masks per execution
        (:mod:`pydnnl.reference.philox` gives the same masks);
        ``primitive.dropout_offset`` is k and may be set. The masks are kept in the workspace
        for backward. Ignored in forward_inference. With ``seq_lengths`` the mask rows follow
        the primitive's sorted-by-length order.
    ``dropout_output``
        dropout on ``dst_layer`` too (layer L-1's mask, M = L D): for stacks that span several
        primitives, where the top layer of one is not the top of the network.
    ``skip_input``
        layer 0 has no input matrix: the input (SLC == DHC) is added to every gate's
        pre-activation (MIOpen ``miopenRNNskip``, cuDNN ``CUDNN_SKIP_INPUT``). Layer 0's part
        of ``weights_layer`` is not read; its gradient is not touched.
    ``no_bias``
        no bias tensor at all: ``bias_desc`` (and ``diff_bias_desc``) must be None.
    ``cell_clip``, ``cell_clip_nan``
        LSTM only: the new cell state is clamped into ``[min, max]`` at every step before h is
        computed (cuDNN ``cudnnRNNSetClip``, MXNet ``lstm_state_clip_*``); with
        ``cell_clip_nan`` a NaN becomes ``min`` instead of propagating. Backward passes no
        gradient through a clamped value (one that is not strictly inside the range).
    """

    layer_bidirectional: bool = False
    seq_lengths: tuple[int, ...] | None = None
    packed: bool = False
    dropout: float = 0.0
    dropout_seed: int = 0
    dropout_output: bool = False
    skip_input: bool = False
    no_bias: bool = False
    cell_clip: tuple[float, float] | None = None
    cell_clip_nan: bool = False

    def __post_init__(self):
        if self.seq_lengths is not None:
            try:
                lens = tuple(int(v) for v in self.seq_lengths)
            except (TypeError, ValueError):
                raise invalid_arguments(
                    f"rnn_extensions: seq_lengths must be a sequence of integers, got "
                    f"{self.seq_lengths!r}") from None
            if any(int(v) != v for v in self.seq_lengths) or not lens or min(lens) < 1:
                raise invalid_arguments(
                    f"rnn_extensions: seq_lengths must be positive integers, "
                    f"got {list(self.seq_lengths)}")
            object.__setattr__(self, "seq_lengths", lens)
            if self.packed and any(a < b for a, b in zip(lens, lens[1:])):
                raise invalid_arguments(
                    f"rnn_extensions: packed sequences must be sorted by non-increasing length, "
                    f"got seq_lengths {list(lens)}")
        elif self.packed:
            raise invalid_arguments("rnn_extensions: packed needs seq_lengths")
        p = self.dropout
        if not isinstance(p, (int, float)) or not (0.0 <= p < 1.0) or math.isnan(p):
            raise invalid_arguments(f"rnn_extensions: dropout must be in [0, 1), got {p!r}")
        if not isinstance(self.dropout_seed, int) or not 0 <= self.dropout_seed < 2 ** 64:
            raise invalid_arguments(
                f"rnn_extensions: dropout_seed must be an integer in [0, 2**64), "
                f"got {self.dropout_seed!r}")
        if self.cell_clip is not None:
            try:
                lo, hi = (float(v) for v in self.cell_clip)
            except (TypeError, ValueError):
                raise invalid_arguments(
                    f"rnn_extensions: cell_clip must be (min, max), "
                    f"got {self.cell_clip!r}") from None
            if not lo <= hi:
                raise invalid_arguments(
                    f"rnn_extensions: cell_clip min must be <= max, got min {lo} > max {hi}")
            object.__setattr__(self, "cell_clip", (lo, hi))
        elif self.cell_clip_nan:
            raise invalid_arguments("rnn_extensions: cell_clip_nan needs cell_clip (min, max)")
        if self.dropout_output and not self.dropout:
            raise invalid_arguments("rnn_extensions: dropout_output needs dropout > 0")

    @property
    def any(self) -> bool:
        return self != rnn_extensions()

    def describe(self) -> str:
        """A short string for verbose output and impl info."""
        parts = []
        if self.layer_bidirectional:
            parts.append("layer_bidirectional")
        if self.seq_lengths is not None:
            parts.append(f"seq_lengths:{min(self.seq_lengths)}..{max(self.seq_lengths)}"
                         + (":packed" if self.packed else ""))
        if self.dropout:
            parts.append(f"dropout:{self.dropout:g}" + (":output" if self.dropout_output else ""))
        if self.skip_input:
            parts.append("skip_input")
        if self.no_bias:
            parts.append("no_bias")
        if self.cell_clip is not None:
            parts.append(f"clip:{self.cell_clip[0]:g}:{self.cell_clip[1]:g}"
                         + (":nan" if self.cell_clip_nan else ""))
        return " ".join(parts)


def as_extensions(value, kind: str) -> rnn_extensions:
    if value is None:
        return rnn_extensions()
    if not isinstance(value, rnn_extensions):
        raise invalid_arguments(
            f"{kind}: extensions must be a pydnnl.rnn_extensions or None, "
            f"got {type(value).__name__}")
    return value
