"""Where an RNN primitive keeps its intermediate values: workspace and scratchpad regions.

All regions hold f32 elements; offsets are in elements, each region starts on a 64-byte
boundary. The workspace (training) holds everything backward needs:

====== ============================== ============================================
region dims                           contents
====== ============================== ============================================
h0     [L, D, N, SIC]                 initial hidden state (src_iter, or zeros)
c0     [L, D, N, DHC]                 initial cell state (LSTM)
h      [L, D, T, N, DIC]              hidden state after each step (after projection)
c      [L, D, T, N, DHC]              cell state after each step (LSTM)
ht     [L, D, T, N, DHC]              hidden state before projection (LSTMP)
gates  [L, D, T, N, G, DHC]           activated gates of each step
gh     [L, D, T, N, G, DHC]           recurrent GEMM results (LBR kinds: ``U_o h + B_u'``)
xin    [L-1, D', T, N, W]             input of layers l >= 1 when it is not h itself:
                                      per-layer bidirectional stacks (D' = 1, W = 2 DIC,
                                      both directions side by side) and dropout (the
                                      dropped h; D' = D, W = DIC)
mask   [L-1, D, T, N, DIC] bytes      dropout keep mask of each layer's output
====== ============================== ============================================

In inference the same regions live in the scratchpad, with ``gates`` and ``gh`` holding one
step only. Time index t is the position in the sequence (not the processing order).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...constants import (
    ARG_AUGRU_ATTENTION,
    ARG_BIAS,
    ARG_DST_ITER,
    ARG_DST_ITER_C,
    ARG_DST_LAYER,
    ARG_SRC_ITER,
    ARG_SRC_ITER_C,
    ARG_SRC_LAYER,
    ARG_WEIGHTS_ITER,
    ARG_WEIGHTS_LAYER,
    ARG_WEIGHTS_PEEPHOLE,
    ARG_WEIGHTS_PROJECTION,
)
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from .problem import RnnShape

# desc name -> (execution argument, canonical tag, is output)
ARGS = {
    "src_layer_desc": (ARG_SRC_LAYER, "tnc", False),
    "src_iter_desc": (ARG_SRC_ITER, "ldnc", False),
    "src_iter_c_desc": (ARG_SRC_ITER_C, "ldnc", False),
    "attention_desc": (ARG_AUGRU_ATTENTION, "tnc", False),
    "weights_layer_desc": (ARG_WEIGHTS_LAYER, "ldigo", False),
    "weights_iter_desc": (ARG_WEIGHTS_ITER, "ldigo", False),
    "weights_peephole_desc": (ARG_WEIGHTS_PEEPHOLE, "ldgo", False),
    "weights_projection_desc": (ARG_WEIGHTS_PROJECTION, "ldio", False),
    "bias_desc": (ARG_BIAS, "ldgo", False),
    "dst_layer_desc": (ARG_DST_LAYER, "tnc", True),
    "dst_iter_desc": (ARG_DST_ITER, "ldnc", True),
    "dst_iter_c_desc": (ARG_DST_ITER_C, "ldnc", True),
}


def canonical_desc(name: str, md: MemoryDesc) -> MemoryDesc:
    """The plain layout pydnnl's RNN kernels read and write for this tensor (md's data type)."""
    tag = ARGS[name][1]
    if name in ("attention_desc", "src_layer_desc", "dst_layer_desc") and len(md.dims) == 2:
        tag = "ab"  # AUGRU attention [T, N]; packed sequences [rows, C]
    dt = md.data_type if md.data_type != data_type.undef else data_type.f32
    return MemoryDesc(md.dims, dt, tag)


def kernel_desc(name: str, md: MemoryDesc) -> MemoryDesc:
    """What the kernels read directly: the canonical layout in f32 (f16/bf16 are converted)."""
    return canonical_desc(name, md).with_data_type(data_type.f32)


_ALIGN = 16  # elements of f32: 64 bytes


@dataclass
class Regions:
    """A bump allocator of named regions inside one buffer (offsets and sizes in elements)."""

    offsets: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def add(self, name: str, nelems: int) -> int:
        off = (self.total + _ALIGN - 1) // _ALIGN * _ALIGN
        self.offsets[name] = off
        self.sizes[name] = nelems
        self.total = off + nelems
        return off

    def __getitem__(self, name: str) -> int:
        return self.offsets[name]

    def __contains__(self, name: str) -> bool:
        return name in self.offsets

    def nbytes(self) -> int:
        return self.total * 4


def lbr(shape: RnnShape) -> bool:
    return shape.spec.linear_before_reset


def state_regions(shape: RnnShape, training: bool) -> Regions:
    """The regions listed in the module docstring, for one problem."""
    s = shape
    r = Regions()
    r.add("h0", s.L * s.D * s.N * s.SIC)
    if s.spec.has_cell_state:
        r.add("c0", s.L * s.D * s.N * s.DHC)
    r.add("h", s.L * s.D * s.T * s.N * s.DIC)
    if s.spec.has_cell_state:
        r.add("c", s.L * s.D * s.T * s.N * s.DHC)
    if s.projection:
        r.add("ht", s.L * s.D * s.T * s.N * s.DHC)
    steps = s.T if training else 1
    per_step = s.N * s.G * s.DHC
    r.add("gates", (s.L * s.D * steps if training else 1) * per_step)
    if training and lbr(s):
        r.add("gh", s.L * s.D * steps * per_step)
    if has_xin(s, training):
        slots = s.L - 1 if training else 1
        r.add("xin", slots * s.T * s.N * s.layer_in * (1 if s.ext.layer_bidirectional else s.D))
    if dropout_active(s, training):
        r.add("mask", (dropout_masks(s) * s.T * s.N * s.DIC + 3) // 4)
    return r


def dropout_masks(shape: RnnShape) -> int:
    """Masks one execution draws: each layer's output but the top one's (unless
    ``dropout_output``), per direction."""
    return (shape.L - 1 + (1 if shape.ext.dropout_output else 0)) * shape.D


def dropout_active(shape: RnnShape, training: bool) -> bool:
    """Whether dropout masks are drawn (training, p > 0, a layer output to drop)."""
    return training and shape.ext.dropout > 0 and dropout_masks(shape) > 0


def has_xin(shape: RnnShape, training: bool) -> bool:
    """Whether layers l >= 1 read a separate input region instead of h of the layer below."""
    return shape.L > 1 and (shape.ext.layer_bidirectional or dropout_active(shape, training))


def xin_offset(shape: RnnShape, training: bool, base: int, l: int, d: int) -> tuple[int, int]:
    """(offset of the input rows of layer ``l`` >= 1 for direction ``d``, row stride), given
    the offset ``base`` of the xin region."""
    s = shape
    slot = (l - 1) if training else 0
    W = s.layer_in
    per_layer = s.T * s.N * W * (1 if s.ext.layer_bidirectional else s.D)
    off = base + slot * per_layer
    if not s.ext.layer_bidirectional:
        off += d * s.T * s.N * W
    return off, W


def region_desc(dims, offset: int, strides=None) -> MemoryDesc:
    """An f32 desc of a dense (or strided) region starting ``offset`` elements into a buffer."""
    if strides is None:
        strides, acc = [0] * len(dims), 1
        for i in range(len(dims) - 1, -1, -1):
            strides[i] = acc
            acc *= dims[i]
    md = MemoryDesc(list(dims), data_type.f32, list(strides))
    md.offset0 = offset
    return md


def workspace_md(nbytes: int) -> MemoryDesc:
    return MemoryDesc([max(nbytes, 1)], data_type.u8, "a")
